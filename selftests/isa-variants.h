/* SPDX-License-Identifier: MIT */
/*
 * isa-variants.h - one fixture variant per SIMD kernel variant, for the
 * tests that run the same checks on each (their FIXTURE_VARIANT has an
 * `enum kt_isa isa` member). A variant the CPU lacks skips in the setup.
 */
#ifndef KT_SELFTESTS_ISA_VARIANTS_H
#define KT_SELFTESTS_ISA_VARIANTS_H

#include <kt/kt.h>
#include "kt_test.h"

#define KT_SIMD_VARIANTS(f)						\
	FIXTURE_VARIANT_ADD(f, avx2) { .isa = KT_ISA_AVX2 };		\
	FIXTURE_VARIANT_ADD(f, avxvnni) { .isa = KT_ISA_AVX_VNNI };	\
	FIXTURE_VARIANT_ADD(f, avx512bw) { .isa = KT_ISA_AVX512BW };	\
	FIXTURE_VARIANT_ADD(f, avx512vnni) { .isa = KT_ISA_AVX512VNNI };	\
	FIXTURE_VARIANT_ADD(f, avx512) { .isa = KT_ISA_AVX512 };	\
	FIXTURE_VARIANT_ADD(f, amx) { .isa = KT_ISA_AMX }

#endif /* KT_SELFTESTS_ISA_VARIANTS_H */
