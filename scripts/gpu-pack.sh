#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# gpu-pack.sh - build kt and the GPU selftests here and put them, stripped,
# with the shared libraries they need beyond glibc, into one folder that
# travels to a GPU box which cannot install packages or build kt itself:
# there, `scripts/gpu-check.sh --prebuilt DIR` runs them.
# Usage: scripts/gpu-pack.sh [--base REF DIR] [DIR]   (default build/gpu-pack)
# --base REF DIR: also build git revision REF (a clean worktree) and put
# its kt alone into DIR, for `gpu-check.sh --baseline DIR` (an A/B of the
# kernels on one machine, e.g. against tag gpu-kernels-h100).
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--base" ]; then
	ref=$2 bdir=$3
	shift 3
	wt=$(mktemp -d /tmp/kt-base.XXXXXX)
	# a bad REF or a failed build leaves no worktree behind
	trap 'git worktree remove --force "$wt" 2>/dev/null || true; rm -rf "$wt"' EXIT
	git worktree add -q --detach "$wt" "$ref"
	make -C "$wt" -j"$(nproc)" build/kt >/dev/null
	rm -rf "$bdir"
	mkdir -p "$bdir"
	strip -o "$bdir/kt" "$wt/build/kt"
	echo "baseline $ref: $bdir/kt"
fi
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
