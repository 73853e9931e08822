#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# gpu-check.sh - everything kt's GPU part needs checked on a machine with
# a GPU, in one run (under 8 minutes on a fresh H200 box): the machine,
# the build (nvcc fatbin), the GPU selftests (stand-in and real device),
# and a short `kt bench --gpu`. Prints all a closing note needs.
# Usage: scripts/gpu-check.sh [-j N] [--prebuilt DIR] [--baseline DIR]
# (run from anywhere)
# --prebuilt DIR: run what scripts/gpu-pack.sh put in DIR instead of
# building (for a GPU box with no package access or no liburing).
# --baseline DIR: the same kt bench --gpu with DIR/kt (gpu-pack.sh --base)
# right after, on the same machine.
set -u
cd "$(dirname "$0")/.." || exit 1
jobs=$(nproc 2>/dev/null || echo 4)
pre="" base=""
while [ $# -gt 0 ]; do
	case $1 in
	-j) jobs=$2; shift 2 ;;
	--prebuilt) pre=${2%/}; shift 2 ;;
	--baseline) base=${2%/}; shift 2 ;;
	*) echo "usage: $0 [-j N] [--prebuilt DIR] [--baseline DIR]" >&2; exit 2 ;;
	esac
done
t0=$(date +%s)
status=0
step() { echo; echo "== $* ($(($(date +%s) - t0)) s)"; }

step "machine"
uname -srm
grep -m1 'model name' /proc/cpuinfo
nproc
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
[ -n "$nvcc" ] && "$nvcc" --version | tail -2 || echo "nvcc: not found (the build will have no kernels)"
git log -1 --oneline 2>/dev/null

# every selftest of the two GPU folders, by its source's name
tests=$(ls selftests/gpu-device/*.c selftests/gpu/*.c selftests/gpu/*.cc |
	sed 's/\.cc\?$//')
if [ -n "$pre" ]; then
	step "prebuilt: $pre"
	export LD_LIBRARY_PATH="$pre/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	kt=$pre/kt bins=$(printf "$pre/%s " $tests) fatbin=$pre/gpu/ffn.fatbin
	ls -l "$kt" $bins || exit 1
else
	step "build dependencies"
	need=""
	for h in liburing.h numa.h jansson.h; do
		echo "#include <$h>" | cc -E -x c - >/dev/null 2>&1 || need="$need $h"
	done
	if [ -n "$need" ]; then
		echo "missing headers:$need; trying apt-get (liburing-dev libnuma-dev libjansson-dev)"
		sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
		timeout 120 $sudo apt-get install -y -q liburing-dev libnuma-dev \
			libjansson-dev >/dev/null 2>&1 ||
			timeout 120 scripts/install-deps.sh ||
			{ echo "cannot install build dependencies"; exit 1; }
	fi

	step "build (nvcc: ${nvcc:-none})"
	time make -j"$jobs" NVCC="$nvcc" build/kt $(printf "build/%s " $tests) || exit 1
	kt=build/kt bins=$(printf "build/%s " $tests) fatbin=build/gpu/ffn.fatbin
fi
ls -l "$fatbin" 2>/dev/null && command -v cuobjdump >/dev/null &&
	cuobjdump --list-elf --list-ptx "$fatbin" 2>/dev/null | head

step "kt info"
"$kt" info

step "GPU selftests"
KT_SELFTEST_TIMEOUT=240 scripts/run-selftests.sh --kt "$kt" $bins || status=1

step "kt bench --gpu (qwen3-30b-a3b shapes)"
timeout 330 "$kt" bench --gpu -p qwen3-30b-a3b -T 1,32,512 --min-ms 200 ||
	status=1

if [ -n "$base" ]; then
	step "baseline $base/kt bench --gpu (same arguments)"
	timeout 330 "$base/kt" bench --gpu -p qwen3-30b-a3b -T 1,32,512 \
		--min-ms 200 || status=1
fi

# the op times above include the host and the copies; the kernels alone,
# where Nsight Compute is installed (bf16, the first 40 expert kernels)
if command -v ncu >/dev/null; then
	step "ncu: expert kernels alone (bf16, T = 1, 32, 512)"
	timeout 120 ncu --clock-control none -k regex:'kt_(gu|down)_' \
		--launch-count 40 --section SpeedOfLight --csv \
		"$kt" bench --gpu -m bf16 -T 1,32,512 --min-ms 1 2>/dev/null |
		awk -F'","' '$13 ~ /^(Duration|DRAM Throughput|Compute \(SM\) Throughput)$/ {
			gsub(/"/, "", $15)
			printf "%-22s grid %-14s %-28s %s %s\n", $5, $9, $13, $15, $14 }'
fi

step "done: status $status"
exit $status
