#!/bin/sh
# SPDX-License-Identifier: MIT
# roofline.sh - draw `kt bench --json` output as an SVG roofline: each
# measured case (arithmetic intensity, achieved TOPS) against the run's
# measured read-bandwidth line and compute peaks. Needs awk and gnuplot
# (Debian: gnuplot-nox).
# Usage: kt bench --json [...] > runs.jsonl; scripts/roofline.sh runs.jsonl out.svg
set -eu

[ $# -eq 2 ] || { echo "usage: roofline.sh BENCH.jsonl OUT.svg" >&2; exit 2; }
in=$1 out=$2
command -v gnuplot >/dev/null || {
	echo "roofline: gnuplot not found (apt-get install gnuplot-nox)" >&2
	exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One flat JSON object per line; pull numbers and strings by key. Points
# go to one file per method (gnuplot gives each its own colour), the
# limits to a file of gnuplot variables.
awk -v dir="$tmp" '
function num(k,   m) {
	if (!match($0, "\"" k "\":-?[0-9.eE+-]+")) return ""
	m = substr($0, RSTART, RLENGTH); sub(/^[^:]*:/, "", m); return m
}
function str(k,   m) {
	if (!match($0, "\"" k "\":\"[^\"]*\"")) return ""
	m = substr($0, RSTART, RLENGTH); sub(/^[^:]*:"/, "", m)
	sub(/"$/, "", m); return m
}
/"limits":/ {
	bw = num("read_gbps"); p8 = num("peak_int8_tops")
	p16 = num("peak_bf16_tops"); isa = str("isa"); thr = num("threads")
	next
}
/"median_us":/ && /"ops":/ {
	ops = num("ops"); bytes = num("bytes"); us = num("median_us")
	if (ops == "" || bytes == "" || us == "" || bytes + 0 == 0 || us + 0 == 0)
		next
	m = str("method"); f = dir "/pts-" m
	if (!(m in seen)) { seen[m] = 1; methods = methods " " m }
	printf "%g %g %s\n", ops / bytes, ops / (us * 1e6), num("tokens") > f
	if (!title) title = str("preset") ", " isa ", " num("threads") " threads"
}
END {
	if (bw == "") { print "roofline: no limits line in the input (run kt bench --json)" > "/dev/stderr"; exit 1 }
	if (methods == "") { print "roofline: no measured cases in the input" > "/dev/stderr"; exit 1 }
	v = dir "/vars.gp"
	printf "bw = %s\np8 = %s\np16 = %s\n", bw, p8 + 0, p16 + 0 > v
	printf "title_s = \"%s\"\nmethods = \"%s\"\n", title, methods > v
}' "$in"

cat > "$tmp/plot.gp" <<EOF
load "$tmp/vars.gp"
set terminal svg size 900,600 dynamic enhanced font "sans,12" background "white"
set output "$out"
set title sprintf("kt bench roofline: %s", title_s)
set logscale xy
set xlabel "arithmetic intensity (ops per byte of expert weights)"
set ylabel "achieved TOPS (tera-ops/s)"
set key right bottom
set grid
set xrange [0.5:20000]
mem(x) = bw * x / 1000.0
roof8(x) = mem(x) < p8 ? mem(x) : p8
roof16(x) = mem(x) < p16 ? mem(x) : p16
set samples 400
plot roof8(x) with lines lw 2 dt 1 lc rgb "#444444" title sprintf("roof: %.1f GB/s read, int8 peak %.2f TOPS", bw, p8), \\
     roof16(x) with lines lw 2 dt 2 lc rgb "#888888" title sprintf("bf16 peak %.2f TOPS", p16), \\
     for [m in methods] "$tmp/pts-".m using 1:2 with linespoints pt 7 ps 1.2 title m, \\
     for [m in methods] "$tmp/pts-".m using 1:2:(sprintf("T=%d", \$3)) with labels offset 0,1 notitle
EOF
gnuplot "$tmp/plot.gp"
echo "roofline: wrote $out"
