// SPDX-License-Identifier: MIT
/*
 * moe-avxvnni.c - the AVX-VNNI variant: 256-bit vpdpbusd for INT8/INT4, FMA for BF16
 * (body: moe-ymm.h).
 */
#define YMM_ISA avxvnni
#define YMM_VNNI 1
#include "kernels/moe-ymm.h"

#define QUANT_OPS(q)							\
	{								\
		.act_row_bytes = kern_act_row_bytes_##q##_avxvnni,	\
		.act_prepare = kern_act_prepare_##q##_avxvnni,		\
		.scratch_bytes = kern_scratch_bytes_avxvnni,		\
		.gate_up = kern_gate_up_##q##_avxvnni,			\
		.down = kern_down_##q##_avxvnni,				\
	}

const struct kern_ops kern_ops_avxvnni = {
	.isa = KT_ISA_AVX_VNNI,
	.name = "avxvnni",
	.q = {
		[KT_QUANT_INT8] = QUANT_OPS(int8),
		[KT_QUANT_INT4] = QUANT_OPS(int4),
		[KT_QUANT_BF16] = QUANT_OPS(bf16),
	},
};
