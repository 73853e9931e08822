#!/bin/sh
# SPDX-License-Identifier: MIT
# ggml-bench.sh - llama.cpp's ggml against kt on the same GGUF file: a
# Qwen3-30B-A3B-shaped MoE file (H 2048, I 768, E 128, top-8) written by
# ggml's own library, one MoE layer timed in ggml's CPU graph
# (build/scripts/ggml-bench, the graph of build_moe_ffn) and with
# `kt bench --model`, alternating, each comparison run --rounds times.
# Usage: scripts/ggml-bench.sh [--types q8_0,q4_k] [-T 1,512] [-t 2]
#        [--layers 4] [--rounds 2] [--seconds 3] [--dir /var/tmp]
# Types: q8_0 q4_0 q4_k q5_k q6_k bf16 f16 q4_k_m q5_k_m. Routing: uniform
# (k distinct experts per token, weights 1/k, new each call) in both.
# Needs the ggml libraries (scripts/fetch-ggml.sh); removes its files.
set -eu
cd "$(dirname "$0")/.."

types=q8_0,q4_k
tokens=1,512
threads=2
layers=4
rounds=2
seconds=3
dir=/var/tmp
while [ $# -gt 0 ]; do
	case $1 in
	--types) types=$2; shift ;;
	-T|--tokens) tokens=$2; shift ;;
	-t|--threads) threads=$2; shift ;;
	--layers) layers=$2; shift ;;
	--rounds) rounds=$2; shift ;;
	--seconds) seconds=$2; shift ;;
	--dir) dir=$2; shift ;;
	-h|--help) sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "ggml-bench: unknown option $1" >&2; exit 2 ;;
	esac
	shift
done

make -s -j2 build/kt build/scripts/ggml-bench
scripts/fetch-ggml.sh >/dev/null || {
	echo "ggml-bench: no ggml libraries (scripts/fetch-ggml.sh)" >&2
	exit 1
}
KT=build/kt
GB=build/scripts/ggml-bench
base=$dir/kt-ggml-bench-$$
res=$base.results
trap 'rm -f "$base".*' EXIT INT TERM
: >"$res"

# ggml T=512  median  1059.601 ms/layer ...  ->  "512 1059.601"
ggml_ms() {
	sed -n 's/^ggml T=\([0-9]*\) *median *\([0-9.]*\) ms.*/\1 \2/p'
}
# cache T=512  tokens/s  2900.90  steps ...  ->  "512 ms-per-layer"
kt_ms() {
	awk -v L="$1" '$1 == "cache" && $3 == "tokens/s" {
		sub("T=", "", $2); printf "%s %.3f\n", $2, 1000 * $2 / ($4 * L) }'
}

echo "ggml-bench: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs," \
	"$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n1)"
for ty in $(echo "$types" | tr , ' '); do
	case $ty in
	q4_k_m) spec=q4_k/q6_k ;;
	q5_k_m) spec=q5_k/q6_k ;;
	*) spec=$ty ;;
	esac
	gguf=$base.$ty.gguf
	ktw=$base.$ty.ktw
	$GB write "$gguf" "$spec" -L "$layers"
	# kt bench --model reads .ktw: kt convert keeps the GGUF blocks as
	# they are (selftests/ggml checks the .ktw gives the .gguf's bits)
	$KT convert --input "$gguf" --output "$ktw" >/dev/null
	r=1
	while [ "$r" -le "$rounds" ]; do
		# alternate which goes first
		for who in $(if [ $((r % 2)) -eq 1 ]; then echo ggml kt; else
			     echo kt ggml; fi); do
			if [ "$who" = ggml ]; then
				$GB run "$gguf" -T "$tokens" -t "$threads" \
					--min-time $((seconds * 1000)) \
					>"$base.out"
				cat "$base.out" | sed 's/^/  /'
				ggml_ms <"$base.out" | sed "s/^/$ty $r ggml /" >>"$res"
			else
				$KT bench --model "$ktw" -T "$tokens" \
					-t "$threads" --routing uniform \
					--seconds "$seconds" --warmup 1 >"$base.out"
				grep '^cache T=' "$base.out" |
					sed 's/ *read\/token.*//; s/^/  kt /'
				kt_ms "$layers" <"$base.out" |
					sed "s/^/$ty $r kt /" >>"$res"
			fi
		done
		r=$((r + 1))
	done
	rm -f "$gguf" "$ktw"
done

echo
echo "ms per MoE layer (median of calls; one column per round), $threads threads, uniform routing, $layers layers rotated"
printf '%-7s %5s  %-21s  %-21s  %s\n' type T "ggml ms" "kt ms" "ggml/kt (best rounds)"
for ty in $(echo "$types" | tr , ' '); do
	for T in $(echo "$tokens" | tr , ' '); do
		g=$(awk -v t="$ty" -v T="$T" '$1 == t && $3 == "ggml" && $4 == T { printf "%s ", $5 }' "$res")
		k=$(awk -v t="$ty" -v T="$T" '$1 == t && $3 == "kt" && $4 == T { printf "%s ", $5 }' "$res")
		ratio=$(echo "$g|$k" | awk -F'|' '{
			n = split($1, a, " "); m = split($2, b, " ");
			ga = a[1]; for (i = 2; i <= n; i++) if (a[i] < ga) ga = a[i];
			kb = b[1]; for (i = 2; i <= m; i++) if (b[i] < kb) kb = b[i];
			if (n && m && kb > 0) printf "%.1fx", ga / kb; else print "-" }')
		printf '%-7s %5s  %-21s  %-21s  %s\n' "$ty" "$T" "$g" "$k" "$ratio"
	done
done
