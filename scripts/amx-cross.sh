#!/bin/sh
# SPDX-License-Identifier: MIT
# amx-cross.sh - build scripts/amx-cross.c against build/libkt.a and run
# it: per tokens-per-expert m, the AMX tile kernels against the AVX-512
# ones (one thread, best pass).  Usage: scripts/amx-cross.sh [-q int8|int4|bf16] ...
set -e
cd "$(dirname "$0")/.."
make -s -j2 build/libkt.a
cc -std=gnu11 -O2 -D_GNU_SOURCE -Iinclude -I. -o build/amx-cross \
	scripts/amx-cross.c -Wl,--whole-archive build/libkt.a \
	-Wl,--no-whole-archive -luring -lnuma -ljansson -ldl -lpthread -lm
exec build/amx-cross "$@"
