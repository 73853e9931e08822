#!/bin/sh
# SPDX-License-Identifier: MIT
# amx-loops.sh - run build/scripts/amx-loops (built by make): ns per TDP of
# the AMX tile loop patterns, one thread, best of 30. Needs AMX.
set -e
cd "$(dirname "$0")/.."
make -s -j2 build/scripts/amx-loops
exec build/scripts/amx-loops "$@"
