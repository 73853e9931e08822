#!/bin/sh
# SPDX-License-Identifier: MIT
# amx-cross.sh - run build/scripts/amx-cross (built by make with the
# library's flags): per tokens-per-expert m, the AMX tile kernels against
# the AVX-512 ones (one thread, best pass).
# Usage: scripts/amx-cross.sh [-q int8|int4|bf16|fp8|q8_0|q4_k|...] ...
set -e
cd "$(dirname "$0")/.."
make -s -j2 build/scripts/amx-cross
exec build/scripts/amx-cross "$@"
