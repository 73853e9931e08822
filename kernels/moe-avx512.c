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
#include "kernels/q4_k.h"
#include "kernels/q8_0.h"

const struct kern_ops kern_ops_avx512 = KERN_OPS(KT_ISA_AVX512, avx512,
	[KT_QUANT_Q8_0] = KERN_Q8_0_OPS(avx512),
	[KT_QUANT_Q4_K] = KERN_Q4_K_OPS(avx512));
