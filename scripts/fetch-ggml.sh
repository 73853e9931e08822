#!/bin/sh
# SPDX-License-Identifier: MIT
# fetch-ggml.sh - fetch llama.cpp's prebuilt ggml/llama shared libraries
# (npm package @node-llama-cpp/linux-x64, pinned below) for the ggml
# cross-check test and benchmark (Documentation/formats.md, "ggml").
# Usage: scripts/fetch-ggml.sh [DIR]   (default build/ggml)
# Verifies the tarball against the pinned sha512, unpacks only the
# libraries, and does nothing when DIR already holds the verified set.
set -eu

# Pinned: selftests/ggml/ggml-dl.h declares ggml's API (and two enums and
# struct layouts) as this build has them: ggml 0.25.1, commit 0ad4a86.
PKG=@node-llama-cpp/linux-x64
VER=3.22.1
INTEGRITY=sha512-5uCCDNqWCNfaAm8aR/Uzxbo4HBpKgNF91kCHPepKhgMgV2OAmatoefbOlMihsqCiH2Od35E/eUHQCFbfRBJuOg==
REGISTRY=${npm_config_registry:-https://registry.npmjs.org}
REGISTRY=${REGISTRY%/}
TARBALL_URL=$REGISTRY/$PKG/-/linux-x64-$VER.tgz

cd "$(dirname "$0")/.."
dir=${1:-build/ggml}
stamp=$dir/.fetch-ggml

say() { echo "fetch-ggml: $*"; }
die() { echo "fetch-ggml: $*" >&2; exit 1; }

for tool in tar sha512sum sha256sum base64 od; do
	command -v "$tool" >/dev/null 2>&1 || die "needs $tool"
done

# present and intact: the stamp names this version, every file matches
if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$PKG@$VER" ] &&
   (cd "$dir" && tail -n +2 .fetch-ggml | sha256sum -c --quiet - \
	>/dev/null 2>&1); then
	say "$PKG@$VER already in $dir"
	exit 0
fi

want=$(printf '%s' "${INTEGRITY#sha512-}" | base64 -d | od -An -v -tx1 |
	tr -d ' \n')
[ ${#want} -eq 128 ] || die "bad pinned integrity"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tgz=$tmp/pkg.tgz

# npm pack honours the user's npm configuration (registry, proxy, cache);
# curl of the registry's tarball is the fallback
if command -v npm >/dev/null 2>&1 &&
   (cd "$tmp" && npm pack --silent "$PKG@$VER" >npm.out 2>npm.err); then
	mv "$tmp/$(tail -n1 "$tmp/npm.out")" "$tgz"
elif command -v curl >/dev/null 2>&1 &&
     curl -fsSL --retry 2 -o "$tgz" "$TARBALL_URL"; then
	:
else
	[ -s "$tmp/npm.err" ] && sed 's/^/fetch-ggml: npm: /' "$tmp/npm.err" >&2
	die "could not download $PKG@$VER ($TARBALL_URL)"
fi

got=$(sha512sum "$tgz" | cut -d' ' -f1)
[ "$got" = "$want" ] || die "$PKG@$VER: sha512 mismatch (got $got)"

mkdir -p "$tmp/x"
tar -xzf "$tgz" -C "$tmp/x" --wildcards \
	'package/bins/linux-x64/libggml*.so' \
	'package/bins/linux-x64/libllama.*.so' ||
	die "unpacking $tgz failed"
mkdir -p "$dir"
libs=$(cd "$tmp/x/package/bins/linux-x64" && ls)
[ -n "$libs" ] || die "no libraries in $PKG@$VER"
for f in $libs; do
	cp "$tmp/x/package/bins/linux-x64/$f" "$dir/$f.tmp"
	mv "$dir/$f.tmp" "$dir/$f"
done
{
	echo "$PKG@$VER"
	(cd "$dir" && sha256sum $libs)
} >"$stamp.tmp"
mv "$stamp.tmp" "$stamp"
say "$PKG@$VER (sha512 verified): $(echo "$libs" | wc -l) libraries in $dir"
