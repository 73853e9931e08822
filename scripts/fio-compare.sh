#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fio-compare.sh - compare kt's model load throughput with fio reading the
# same file with the same block size and queue depth (O_DIRECT, io_uring),
# from a cold page cache each time; runs alternate, medians are reported.
#   scripts/fio-compare.sh FILE.ktw [BLOCK_BYTES] [DEPTH] [RUNS]
# Needs root (drop_caches) and fio. KT_BIN overrides the kt command.
set -eu
file=${1:?usage: fio-compare.sh FILE.ktw [BLOCK_BYTES] [DEPTH] [RUNS]}
bs=${2:-4194304}
depth=${3:-32}
runs=${4:-5}
kt=${KT_BIN:-$(dirname "$0")/../build/kt}
command -v fio >/dev/null || { echo "fio not installed (apt-get install -y fio)" >&2; exit 1; }
[ -w /proc/sys/vm/drop_caches ] || { echo "need root to drop caches" >&2; exit 1; }

cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

fio_gbs=() kt_gbs=()
for i in $(seq "$runs"); do
	cold
	# fio's bw in bytes/s from its terse JSON output
	f=$(fio --name=ktw --filename="$file" --rw=read --direct=1 --readonly \
		--ioengine=io_uring --bs="$bs" --iodepth="$depth" \
		--output-format=json 2>/dev/null |
		awk -F'[:,]' '/"bw_bytes"/ {print $2 / 1e9; exit}')
	cold
	line=$("$kt" inspect --load --block "$bs" --depth "$depth" "$file" 2>/dev/null)
	k=$(printf '%s\n' "$line" | sed -n 's/.*= \([0-9.]*\) GB\/s.*/\1/p')
	printf 'run %d: fio %.2f GB/s, kt %.2f GB/s   (%s)\n' "$i" "$f" "$k" "$line"
	fio_gbs+=("$f") kt_gbs+=("$k")
done
fm=$(printf '%s\n' "${fio_gbs[@]}" | median)
km=$(printf '%s\n' "${kt_gbs[@]}" | median)
printf 'median: fio %.2f GB/s, kt %.2f GB/s = %.0f%% of fio (bs %s, depth %s, %s runs)\n' \
	"$fm" "$km" "$(echo "$km $fm" | awk '{print 100 * $1 / $2}')" "$bs" "$depth" "$runs"
