#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run-selftests.sh - run kt's selftest binaries, echo their TAP output and
# end with the plain line "N passed, N failed" (skips are counted apart).
# A binary that dies without reporting its cases counts as one failure.
# Usage: run-selftests.sh [--kt KT_BINARY] [--scale N] TEST... [--kt ...]
# (--kt sets KT_BIN, the kt command the CLI tests run, for what follows;
# --scale multiplies the per-test timeouts that follow, for sanitizers.)
set -u
pass=0 fail=0 skip=0
timeout_s=${KT_SELFTEST_TIMEOUT:-900}
# sanitizer runs: fail on the first report, no leak noise from forked tests
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
while [ $# -gt 0 ]; do
	bin=$1
	shift
	if [ "$bin" = "--scale" ]; then
		KT_TEST_TIMEOUT_SCALE=$1
		export KT_TEST_TIMEOUT_SCALE
		shift
		continue
	fi
	if [ "$bin" = "--kt" ]; then
		KT_BIN=$(realpath "$1")
		export KT_BIN
		shift
		continue
	fi
	name=${bin#build/}
	echo "# selftest: $name"
	t0=$(date +%s.%N)
	out=$(timeout -k 10 "$timeout_s" "$bin" 2>&1)
	rc=$?
	printf '%s\n' "$out" | sed 's/^/  /'
	awk -v a="$t0" -v b="$(date +%s.%N)" -v n="$name" 'BEGIN { printf "# %s: %.1f s\n", n, b - a }'
	p=$(printf '%s\n' "$out" | grep -cE '^ok [0-9]+ ' )
	s=$(printf '%s\n' "$out" | grep -cE '^ok [0-9]+ .*# SKIP')
	f=$(printf '%s\n' "$out" | grep -cE '^not ok [0-9]+ ')
	p=$((p - s))
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 4 ] && [ "$f" -eq 0 ]; then
		echo "not ok $name # exited with status $rc"
		f=1
	fi
	pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s))
done
echo "# skipped: $skip (reasons above, after '# SKIP')"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
