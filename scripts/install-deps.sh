#!/bin/sh
# SPDX-License-Identifier: MIT
# install-deps.sh - install the Debian packages kt builds, tests and
# benchmarks with, when they are missing. Safe to run again; quiet when
# nothing is missing. Needs root (or sudo) only when it installs.
set -eu

pkgs="gcc g++ make libc6-dev pkg-config liburing-dev libnuma-dev libjansson-dev
numactl fio libhugetlbfs-bin"
# clang and its runtime (libFuzzer, ASan, UBSan) build `make fuzz`; the
# runtime is only recommended by clang, and Debian 12 ships clang 14
pkgs="$pkgs clang libclang-rt-14-dev"
# the Python package's tests and the roofline picture
pkgs="$pkgs python3-numpy python3-torch python3-setuptools python3-venv
gnuplot-nox"

missing=""
for p in $pkgs; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
	     grep -q 'install ok installed'; then
		missing="$missing $p"
	fi
done
# llama.cpp's ggml libraries for the ggml cross-check (selftests/ggml),
# from the npm registry: best effort, the install never fails on them
# (the test skips without them)
fetch_ggml() {
	sh "$(dirname "$0")/fetch-ggml.sh" >/dev/null 2>&1 ||
		echo "install-deps: ggml libraries not fetched (no registry?):" \
			"selftests/ggml will skip; scripts/fetch-ggml.sh retries"
}

if [ -z "$missing" ]; then
	fetch_ggml
	exit 0
fi

echo "install-deps: installing:$missing"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || {
		echo "install-deps: need root to install:$missing" >&2
		exit 1
	}
	sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
fetch_ggml
echo "install-deps: done"
