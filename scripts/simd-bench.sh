#!/bin/sh
# SPDX-License-Identifier: MIT
# simd-bench.sh - build scripts/simd-bench.c against build/libkt.a and run
# it: decode GB/s and prefill TOPS of one kernel variant against the
# machine's measured limits.  Usage: scripts/simd-bench.sh [bench options]
set -e
cd "$(dirname "$0")/.."
make -s -j2 build/libkt.a
cc -std=gnu11 -O2 -D_GNU_SOURCE -Iinclude -I. -o build/simd-bench \
	scripts/simd-bench.c -Wl,--whole-archive build/libkt.a \
	-Wl,--no-whole-archive -luring -lnuma -ljansson -ldl -lpthread -lm
exec build/simd-bench "$@"
