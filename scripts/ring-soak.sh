#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ring-soak.sh - the long ring soak: selftests/moe/soak with 10^7 ops (or
# $1), plain and then under TSan (10^6 ops: TSan runs some 20x slower).
# Prints the soak's counts; exits nonzero on any failure.
# Usage: scripts/ring-soak.sh [OPS] [TSAN_OPS]
set -eu
cd "$(dirname "$0")/.."
ops=${1:-10000000}
tsan_ops=${2:-1000000}
make -s -j"$(nproc)" build/selftests/moe/soak
make -s -j"$(nproc)" SAN=thread build/san-thread/selftests/moe/soak
echo "# plain: $ops ops"
KT_SOAK_OPS=$ops KT_TEST_TIMEOUT_SCALE=1000 build/selftests/moe/soak
echo "# TSan: $tsan_ops ops"
KT_SOAK_OPS=$tsan_ops KT_TEST_TIMEOUT_SCALE=1000 \
	TSAN_OPTIONS=halt_on_error=1 build/san-thread/selftests/moe/soak
