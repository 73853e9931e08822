#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# valgrind-check.sh - valgrind memcheck over a subset of the selftests
# (make valgrind): invalid reads and writes, uses of uninitialised values,
# definite leaks. Valgrind does not decode AVX-512 or AMX, so the kernels
# run as AVX2 (KT_ISA=avx2); files are read with pread (KT_NO_URING:
# valgrind does not see what io_uring writes); the per-test timeouts are 30x. Each binary
# passes when it reports no failed test and valgrind no error; the last
# line is "N passed, N failed" (binaries).
# Usage: scripts/valgrind-check.sh TEST_BINARY...
set -u
pass=0 fail=0
export KT_ISA=avx2 KT_NO_URING=1 KT_TEST_TIMEOUT_SCALE=30
for bin in "$@"; do
	echo "# valgrind: ${bin#build/}"
	out=$(valgrind -q --fair-sched=yes --error-exitcode=99 --leak-check=full \
		--errors-for-leak-kinds=definite --show-leak-kinds=definite \
		--child-silent-after-fork=no "$bin" 2>&1)
	rc=$?
	printf '%s\n' "$out" | grep -E '^==[0-9]+==|^not ok|^# Totals' | sed 's/^/  /'
	if [ $rc -eq 0 ] && ! printf '%s\n' "$out" | grep -qE '^==[0-9]+== .*(Invalid|uninitialised|definitely lost|Mismatched|overlap)' &&
	   ! printf '%s\n' "$out" | grep -qE '^not ok'; then
		pass=$((pass + 1))
	else
		echo "  FAILED (rc $rc)"
		fail=$((fail + 1))
	fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
