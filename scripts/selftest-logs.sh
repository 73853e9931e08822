#!/bin/sh
# SPDX-License-Identifier: MIT
# selftest-logs.sh - print the logs of run-selftests.sh runs (make
# check-all's passes) one after the other, then add up their counts into
# the one last line "N passed, N failed". A log that is missing or lacks
# its count line (its run died) counts as one failure. Every failure is
# named again just above the totals, with its binary, so that the last
# lines of a long run say what failed.
# Usage: selftest-logs.sh LOG...
pass=0 fail=0 skip=0 failed=
for log in "$@"; do
	echo "# pass: $log"
	if [ ! -f "$log" ]; then
		echo "not ok $log # missing"
		failed="$failed# failed: $log: missing
"
		fail=$((fail + 1))
		continue
	fi
	# all but the count lines, which are added up below
	grep -vE '^([0-9]+ passed, [0-9]+ failed|# skipped: [0-9]+ .*)$' "$log"
	last=$(tail -n 1 "$log")
	s=$(sed -n 's/^# skipped: \([0-9]*\) .*/\1/p' "$log" | tail -n 1)
	case $last in
	*" passed, "*" failed")
		p=${last%% passed*}
		f=${last#*passed, }
		f=${f%% failed}
		;;
	*)
		echo "not ok $log # ended without its count line"
		failed="$failed# failed: $log: ended without its count line
"
		p=0 f=1
		;;
	esac
	echo "# $log: $p passed, $f failed, ${s:-0} skipped"
	named=$(awk -v lf="$log" '
		/^# selftest: / { bin = $3 }
		/^ *not ok / { sub(/^ */, ""); print "# failed: " lf ": " \
			(bin != "" ? bin ": " : "") $0 }' "$log")
	if [ -n "$named" ]; then
		failed="$failed$named
"
	fi
	pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + ${s:-0}))
done
echo "# skipped: $skip (reasons above, after '# SKIP')"
printf '%s' "$failed"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
