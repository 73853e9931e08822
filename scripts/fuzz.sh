#!/bin/sh
# SPDX-License-Identifier: MIT
# fuzz.sh - run the libFuzzer harnesses that `make fuzz` built, each for
# SECONDS (or RUNS executions), starting from the seed corpus in
# selftests/fuzz/corpus/NAME plus what earlier runs kept in WORKDIR.
# Prints one line per harness (executions, coverage, crashes) and exits 1
# when any harness crashed, leaked or hung; the crashing input is kept in
# WORKDIR/crashes/ (add it to the seed corpus with the fix: it then runs
# in every `make check` as a regression test).
# Usage: scripts/fuzz.sh [-t SECONDS] [-r RUNS] [-w WORKDIR] [-b BUILD] [NAME...]
set -u
cd "$(dirname "$0")/.."
secs=20 runs="" work=build/fuzz/work bin=build/fuzz
while getopts t:r:w:b: o; do
	case $o in
	t) secs=$OPTARG ;;
	r) runs=$OPTARG ;;
	w) work=$OPTARG ;;
	b) bin=$OPTARG ;;
	*) sed -n 's/^# Usage: //p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
names=${*:-$(for f in selftests/fuzz/*.c; do basename "$f" .c; done)}
limit="-max_total_time=$secs"
[ -n "$runs" ] && limit="-runs=$runs"
mkdir -p "$work/crashes"
# leaks count as failures; a UBSan report stops the run like ASan's does
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
bad=0 total=0
for n in $names; do
	[ -x "$bin/$n" ] || { echo "fuzz: $bin/$n missing (make fuzz)" >&2; exit 2; }
	mkdir -p "$work/corpus/$n"
	log=$work/$n.log
	"$bin/$n" $limit -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$work/crashes/$n-" \
		"$work/corpus/$n" "selftests/fuzz/corpus/$n" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -n 1)
	corp=$(ls "$work/corpus/$n" | wc -l)
	echo "fuzz: $n: ${execs:-0} executions, ${cov:-cov: ? ft: ?}, corpus $corp, exit $rc"
	total=$((total + ${execs:-0}))
	if [ "$rc" -ne 0 ]; then
		bad=1
		grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -n 5
		echo "fuzz: $n: see $log and $work/crashes/"
	fi
done
echo "fuzz: $total executions in all, $( [ $bad -eq 0 ] && echo 0 || echo some) crashes"
exit $bad
