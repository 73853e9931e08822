#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# amx-check.sh - everything the AMX variant needs checked on a CPU with
# AMX, in one run: the machine, the tile kernels against the oracle on
# real tiles (selftests/simd/variants), the switch points of every
# quantization with tiles (scripts/amx-cross.sh: where KERN_AMX_MIN_M_*
# in kernels/simd.h come from) and the kt bench table the
# AMX issue asks for (amx, avx512, auto at T = 1 .. 4096). Prints all a
# closing note needs; about 30 minutes on 2 cores, -q for the switch
# points alone (about 10).
# Usage: scripts/amx-check.sh [-q] [-j N]   (run from anywhere)
set -u
cd "$(dirname "$0")/.." || exit 1
jobs=$(nproc 2>/dev/null || echo 2)
quick=0
while [ $# -gt 0 ]; do
	case $1 in
	-q) quick=1; shift ;;
	-j) jobs=$2; shift 2 ;;
	*) echo "usage: $0 [-q] [-j N]" >&2; exit 2 ;;
	esac
done
t0=$(date +%s)
status=0
step() { echo; echo "== $* ($(($(date +%s) - t0)) s)"; }

step "machine"
uname -srm
make -s -j"$jobs" build/kt build/scripts/amx-cross \
	build/selftests/simd/variants || exit 1
build/kt info
if ! build/kt info | grep -q 'best amx'; then
	echo "amx-check.sh: this CPU has no usable AMX (kt info above)" >&2
	exit 1
fi

step "tile kernels against the oracle, real tiles"
build/selftests/simd/variants 2>&1 | grep -E '^(not )?ok .*amx|Totals' ||
	status=1

step "switch points: us per expert, one thread, weights from DRAM"
for q in int8 int4 bf16 fp8 mxfp4 q8_0 q4_k q5_k q6_k; do
	build/scripts/amx-cross -q "$q" -r 3 -M 64 || status=1
done

if [ "$quick" = 0 ]; then
	step "kt bench: amx, avx512, auto (2 threads)"
	for m in int8 int4 bf16 fp8 mxfp4 q4_k q8_0; do
		build/kt bench -m "$m" -T 1,4,32,128,512,4096 \
			--isa amx,avx512,auto --min-time 1000 --max-time 4000 ||
			status=1
	done
fi

step "done, status $status"
exit $status
