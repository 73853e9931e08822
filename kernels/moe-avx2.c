// SPDX-License-Identifier: MIT
/*
 * moe-avx2.c - the AVX2 variant: vpmaddwd on sign-extended int16 for INT8/INT4, FMA for BF16
 * (body: moe-ymm.h).
 */
#define YMM_ISA avx2
#define YMM_VNNI 0
#include "kernels/moe-ymm.h"

#define QUANT_OPS(q)							\
	{								\
		.act_row_bytes = kern_act_row_bytes_##q##_avx2,	\
		.act_prepare = kern_act_prepare_##q##_avx2,		\
		.scratch_bytes = kern_scratch_bytes_avx2,		\
		.gate_up = kern_gate_up_##q##_avx2,			\
		.down = kern_down_##q##_avx2,				\
	}

const struct kern_ops kern_ops_avx2 = {
	.isa = KT_ISA_AVX2,
	.name = "avx2",
	.q = {
		[KT_QUANT_INT8] = QUANT_OPS(int8),
		[KT_QUANT_INT4] = QUANT_OPS(int4),
		[KT_QUANT_BF16] = QUANT_OPS(bf16),
	},
};
