// SPDX-License-Identifier: MIT
/*
 * moe-avxvnni.c - the AVX-VNNI variant: 256-bit vpdpbusd for INT8/INT4,
 * FMA for BF16 (body: moe-ymm.h); the GGUF blocks on the 256-bit bodies
 * with the same dot (q*-avxvnni.c).
 */
#define YMM_ISA avxvnni
#define YMM_VNNI 1
#include "kernels/moe-ymm.h"
#include "kernels/qk.h"
#include "kernels/q8_0.h"

const struct kern_ops kern_ops_avxvnni =
	KERN_OPS(KT_ISA_AVX_VNNI, avxvnni, avx2,
		 [KT_QUANT_Q8_0] = KERN_Q8_0_OPS(avxvnni),
		 KERN_QK_SLOTS(avxvnni));
