#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# check-abi.sh - fail when libkt.so exports a symbol that is not kt_* or
# not versioned by libkt.map.
set -eu
lib=$1
bad=$(nm -D --defined-only --with-symbol-versions "$lib" |
	awk '$3 != "" && $2 ~ /[TDBRVW]/ { print $3 }' |
	grep -vE '^kt_[A-Za-z0-9_]+@@KT_0$' | grep -vE '^KT_0@@KT_0$' || true)
if [ -n "$bad" ]; then
	echo "check-abi: exported symbols outside the kt_* ABI:" >&2
	echo "$bad" >&2
	exit 1
fi
n=$(nm -D --defined-only "$lib" | grep -c ' kt_' || true)
echo "check-abi: $n kt_* symbols, all versioned KT_0"
