#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cache-table.sh - the expert cache's table on one .ktw file, all in one
# run: fio random reads of the file at the cache's request size and depth,
# then decode (and prefill) through the cache at two budgets, with and
# without self-prefetch, and the mmap baseline, for zipf and uniform
# routing. The mmap baseline runs twice: with all the machine's memory for
# its page cache, and in a memory cgroup of the cache's budget (plus
# 512 MiB for what is not weights), the same memory as the cache.
#   scripts/cache-table.sh FILE.ktw [WARMUP_S] [SECONDS]
# Needs fio; root for the memory cgroup (v1 or v2). KT_BIN overrides the
# kt command. Documentation/cache.md.
set -eu
file=${1:?usage: cache-table.sh FILE.ktw [WARMUP_S] [SECONDS]}
warm=${2:-30}
secs=${3:-15}
kt=${KT_BIN:-$(dirname "$0")/../build/kt}
command -v fio >/dev/null || { echo "fio not installed (apt-get install -y fio)" >&2; exit 1; }

# "$@" in a new memory cgroup of $1 bytes (page cache included)
limited() {
	local bytes=$1 cg
	shift
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		cg=/sys/fs/cgroup/kt-table-$$
		mkdir "$cg" && echo "$bytes" > "$cg/memory.max"
	elif [ -d /sys/fs/cgroup/memory ]; then
		cg=/sys/fs/cgroup/memory/kt-table-$$
		mkdir "$cg" && echo "$bytes" > "$cg/memory.limit_in_bytes"
	else
		echo "no memory cgroup: mmap at the budget skipped" >&2
		return 0
	fi
	sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$@" || true
	rmdir "$cg" 2>/dev/null || { sleep 1; rmdir "$cg"; }
}

model=$(stat -c %s "$file")
echo "# $(date -u +%FT%TZ) $file; warmup ${warm}s, timed ${secs}s"
fio --name=rr --filename="$file" --rw=randread --bs=1M --iodepth=64 \
	--ioengine=io_uring --direct=1 --readonly --runtime=15 --time_based \
	--output-format=json 2>/dev/null |
	awk -F'[:,]' '/"bw_bytes"/ {printf "fio randread bs 1M depth 64: %.1f MB/s\n", $2 / 1e6; exit}'
for routing in zipf:1.0 uniform; do
	for budget in 25 50; do
		for pf in 0 8; do
			"$kt" bench --model "$file" --budget "$budget%" \
				--routing "$routing" --prefetch "$pf" -T 1,128 \
				--warmup "$warm" --seconds "$secs" 2>/dev/null |
				sed "s/^cache /cache $budget% pf $pf $routing /"
		done
		limited $((model * budget / 100 + (512 << 20))) \
			"$kt" bench --model "$file" --load mmap \
			--routing "$routing" -T 1 --warmup "$warm" \
			--seconds "$secs" 2>/dev/null |
			sed "s/^mmap /mmap $budget% (cgroup) $routing /"
	done
	"$kt" bench --model "$file" --load mmap --routing "$routing" -T 1 \
		--warmup "$warm" --seconds "$secs" 2>/dev/null |
		sed "s/^mmap /mmap all memory $routing /"
done
