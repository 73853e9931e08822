// SPDX-License-Identifier: MIT
/*
 * moe-avxvnni_evex-avx512.c - the AVX-VNNI body (moe-ymm.h) built with the
 * EVEX vpdpbusd of AVX512-VNNI/VL instead of the VEX one, for tests only:
 * it lets CPUs with AVX-512 but without AVX-VNNI (Zen 4, Ice Lake) check
 * the AVX-VNNI data flow against the oracle. Not reachable by KT_ISA.
 */
#include <immintrin.h>

/* same operation, EVEX encoding */
#define _mm256_dpbusd_avx_epi32 _mm256_dpbusd_epi32

#define YMM_ISA avxvnni_evex
#define YMM_VNNI 1
#include "kernels/moe-ymm.h"

#define QUANT_OPS(q)							\
	{								\
		.act_row_bytes = kern_act_row_bytes_##q##_avxvnni_evex,	\
		.act_prepare = kern_act_prepare_##q##_avxvnni_evex,	\
		.scratch_bytes = kern_scratch_bytes_avxvnni_evex,	\
		.gate_up = kern_gate_up_##q##_avxvnni_evex,		\
		.down = kern_down_##q##_avxvnni_evex,			\
	}

const struct kern_ops kern_ops_avxvnni_evex = {
	.isa = KT_ISA_AVX512,
	.name = "avxvnni_evex",
	.q = {
		[KT_QUANT_INT8] = QUANT_OPS(int8),
		[KT_QUANT_INT4] = QUANT_OPS(int4),
		[KT_QUANT_BF16] = QUANT_OPS(bf16),
	},
};
