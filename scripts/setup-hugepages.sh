#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# setup-hugepages.sh - reserve hugepages on every NUMA node and mount
# hugetlbfs for `kt stage`; --undo gives them back. Uses hugeadm (Debian's
# libhugetlbfs-bin) when installed, sysfs otherwise.
#   scripts/setup-hugepages.sh [--size 2M|1G] [--gib G | --for FILE.ktw]
#                              [--mount DIR] [--undo]
# Pages are split evenly over the nodes that have memory, as kt places
# each node's slice of every expert on that node. Needs root.
set -eu
size=2M gib= file= mnt=/mnt/kt-huge undo=0
while [ $# -gt 0 ]; do
	case $1 in
	--size) size=$2; shift ;;
	--gib) gib=$2; shift ;;
	--for) file=$2; shift ;;
	--mount) mnt=$2; shift ;;
	--undo) undo=1 ;;
	-h|--help) sed -n '2,9p' "$0"; exit 0 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
case $size in
2M|2m|2MB) kb=2048 ;;
1G|1g|1GB) kb=1048576 ;;
*) echo "--size must be 2M or 1G" >&2; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || { echo "needs root" >&2; exit 1; }

nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | sed 's/.*node//' | sort -n)
[ -n "$nodes" ] || nodes=0
node_pages() { # node -> sysfs nr_hugepages path
	local p=/sys/devices/system/node/node$1/hugepages/hugepages-${kb}kB/nr_hugepages
	[ -e "$p" ] || p=/sys/kernel/mm/hugepages/hugepages-${kb}kB/nr_hugepages
	echo "$p"
}

if [ "$undo" -eq 1 ]; then
	if mountpoint -q "$mnt"; then
		umount "$mnt"
		echo "unmounted $mnt"
	fi
	rmdir "$mnt" 2>/dev/null || true
	for n in $nodes; do echo 0 > "$(node_pages "$n")"; done
	echo "released ${size} hugepages"
	exit 0
fi

if [ -n "$file" ]; then
	bytes=$(stat -c %s "$file")
	pages=$(( (bytes + kb * 1024 - 1) / (kb * 1024) + 1 ))
elif [ -n "$gib" ]; then
	pages=$(( gib * 1048576 / kb ))
else
	echo "say how much: --gib G or --for FILE.ktw" >&2
	exit 2
fi
nn=$(echo "$nodes" | wc -w)
per=$(( (pages + nn - 1) / nn ))

if command -v hugeadm >/dev/null && [ "$nn" -eq 1 ]; then
	hugeadm --pool-pages-min "${size%B}B:$per" 2>/dev/null ||
		hugeadm --pool-pages-min "${kb}K:$per"
else
	for n in $nodes; do
		p=$(node_pages "$n")
		cur=$(cat "$p")
		[ "$cur" -ge "$per" ] || echo "$per" > "$p"
	done
fi
got=0
for n in $nodes; do
	p=$(node_pages "$n")
	c=$(cat "${p%nr_hugepages}free_hugepages")
	echo "node $n: $(cat "$p") pages of ${size} reserved, $c free"
	got=$((got + c))
done
[ "$got" -ge "$pages" ] || echo "warning: only $got of $pages pages free (memory fragmented? reserve at boot: hugepages=N on the kernel command line)" >&2

mkdir -p "$mnt"
if ! mountpoint -q "$mnt"; then
	mount -t hugetlbfs -o "pagesize=${size%B},mode=0755" none "$mnt"
fi
echo "hugetlbfs mounted at $mnt; stage a model with: kt stage FILE.ktw $mnt"
