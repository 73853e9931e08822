// SPDX-License-Identifier: MIT
/*
 * moe-avx2.c - the AVX2 variant: vpmaddubsw + vpmaddwd for INT8/INT4,
 * FMA for BF16 (body: moe-ymm.h).
 */
#define YMM_ISA avx2
#define YMM_VNNI 0
#include "kernels/moe-ymm.h"
#include "kernels/qk.h"
#include "kernels/q8_0.h"

const struct kern_ops kern_ops_avx2 = KERN_OPS(KT_ISA_AVX2, avx2, avx2,
	[KT_QUANT_Q8_0] = KERN_Q8_0_OPS(avx2),
	KERN_QK_SLOTS(avx2));
