// SPDX-License-Identifier: MIT
/*
 * moe-avx512.c - the AVX-512 variant: vpdpbusd for INT8/INT4, vdpbf16ps for
 * BF16 (body: moe-zmm.h). The AMX variant runs these for experts with few
 * tokens.
 */
#define ZMM_ISA		avx512
#define ZMM_VNNI	1
#define ZMM_BF16	1
#include "kernels/moe-zmm.h"
#include "kernels/fp8.h"
#include "kernels/mxfp4.h"
#include "kernels/qk.h"
#include "kernels/q8_0.h"

/* FP8 reads the BF16 activation rows (moe-fp8-avx512.c). */
#define FP8_OPS(sfx)							\
	{								\
		.act_row_bytes = kern_act_row_bytes_bf16_avx512,	\
		.act_prepare = kern_act_prepare_bf16_avx512,		\
		.scratch_bytes = kern_scratch_bytes_fp8_##sfx,		\
		.gate_up = kern_gate_up_fp8_avx512,			\
		.down = kern_down_fp8_avx512,				\
	}

const struct kern_ops kern_ops_avx512 = {
	.isa = KT_ISA_AVX512,
	.name = "avx512",
	.q = {
		[KT_QUANT_INT8] = KERN_QUANT_OPS(int8, avx512),
		[KT_QUANT_INT4] = KERN_QUANT_OPS(int4, avx512),
		[KT_QUANT_BF16] = KERN_QUANT_OPS(bf16, avx512),
		[KT_QUANT_FP8] = FP8_OPS(avx512),
		/* MXFP4 too (moe-mxfp4-avx512.c) */
		[KT_QUANT_MXFP4] = {
			.act_row_bytes = kern_act_row_bytes_bf16_avx512,
			.act_prepare = kern_act_prepare_bf16_avx512,
			.scratch_bytes = kern_scratch_bytes_mxfp4_avx512,
			.gate_up = kern_gate_up_mxfp4_avx512,
			.down = kern_down_mxfp4_avx512,
		},
		[KT_QUANT_Q8_0] = KERN_Q8_0_OPS(avx512),
		KERN_QK_SLOTS(avx512),
	},
};
