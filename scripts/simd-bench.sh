#!/bin/sh
# SPDX-License-Identifier: MIT
# simd-bench.sh - run build/scripts/simd-bench (built by make with the
# library's flags): decode GB/s and prefill TOPS of one kernel variant
# against the machine's measured limits.  Usage: scripts/simd-bench.sh [opts]
set -e
cd "$(dirname "$0")/.."
make -s -j2 build/scripts/simd-bench
exec build/scripts/simd-bench "$@"
