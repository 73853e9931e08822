#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench.sh - run kt bench over presets and methods into one JSON Lines file
# and print a summary table (needs jq for the table; the file is written
# without it). Models that do not fit in memory are reported and skipped.
#
#   scripts/bench.sh [-o FILE] [-p PRESETS] [-m METHODS] [-T TOKENS] [-- kt bench options]
#     -o FILE     output (default bench-<host>-<date>.jsonl)
#     -p LIST     presets, comma separated (default qwen3-30b-a3b,mixtral-8x7b)
#     -m LIST     methods (default int8,int4,bf16)
#     -T LIST     tokens (default 1,4,32,512)
#   KT_BIN selects the kt binary (default build/kt).
set -u
kt=${KT_BIN:-build/kt}
out="bench-$(hostname -s)-$(date +%Y%m%d-%H%M%S).jsonl"
presets=qwen3-30b-a3b,mixtral-8x7b
methods=int8,int4,bf16
tokens=1,4,32,512
while getopts "o:p:m:T:h" opt; do
	case $opt in
	o) out=$OPTARG ;;
	p) presets=$OPTARG ;;
	m) methods=$OPTARG ;;
	T) tokens=$OPTARG ;;
	*) sed -n '2,12p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ -x "$kt" ] || { echo "bench.sh: no kt binary at $kt (make first)" >&2; exit 1; }

"$kt" info --json > "$out" || exit 1
fail=0
for p in ${presets//,/ }; do
	for m in ${methods//,/ }; do
		echo "bench.sh: $p $m" >&2
		# one method per run, so a model that does not fit skips alone
		"$kt" bench --json -p "$p" -m "$m" -T "$tokens" "$@" >> "$out" ||
			fail=1
	done
done
echo "bench.sh: results in $out" >&2
if command -v jq > /dev/null; then
	printf '%-16s %-5s %-7s %6s %11s %11s %8s %7s %8s\n' preset method isa \
		tokens median_us p90_us GB/s TOPS roofline
	jq -r 'select(.median_us != null and .preset != null) |
		[.preset, .method, .isa, .tokens, .median_us, .p90_us,
		 .gbps, .tops, .roofline] | @tsv' "$out" |
	while IFS=$'\t' read -r p m i t med p90 g tp r; do
		printf '%-16s %-5s %-7s %6s %11.1f %11.1f %8.1f %7.3f %8.2f\n' \
			"$p" "$m" "$i" "$t" "$med" "$p90" "$g" "$tp" "$r"
	done
fi
exit $fail
