#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# gpu-pack.sh - build kt and the GPU selftests here and put them, stripped,
# with the shared libraries they need beyond glibc, into one folder that
# travels to a GPU box which cannot install packages or build kt itself:
# there, `scripts/gpu-check.sh --prebuilt DIR` runs them.
# Usage: scripts/gpu-pack.sh [DIR]   (default build/gpu-pack)
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build/gpu-pack}
# every selftest of the two GPU folders, by its source's name
tests=$(ls selftests/gpu/*.c selftests/gpu/*.cc selftests/gpu-device/*.c |
	sed 's/\.cc\?$//')
make -j"$(nproc)" build/kt $(printf 'build/%s ' $tests) >/dev/null
rm -rf "$dir"
mkdir -p "$dir/lib" "$dir/gpu"
strip -o "$dir/kt" build/kt
for t in $tests; do
	mkdir -p "$dir/$(dirname "$t")"
	strip -o "$dir/$t" "build/$t"
done
cp build/selftests/gpu/libcuda-stub*.so "$dir/selftests/gpu/"
[ -f build/gpu/ffn.fatbin ] && cp build/gpu/ffn.fatbin "$dir/gpu/"
# everything ldd resolves outside glibc's own libraries
ldd build/kt $(printf 'build/%s ' $tests) | awk '$3 ~ /^\// { print $3 }' |
	sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
	while read -r so; do cp -L "$so" "$dir/lib/"; done
du -sh "$dir"
