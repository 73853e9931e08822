// SPDX-License-Identifier: MIT
/*
 * moe-avx512vnni.c - the AVX-512 variant for CPUs with VNNI but without
 * BF16 (Cascade Lake, Ice Lake): vpdpbusd for INT8/INT4, bf16 widened by a
 * shift and FMA for BF16 (body: moe-zmm.h); the GGUF blocks on the
 * 512-bit bodies of the avx512 variant (q*-avx512vnni.c), which need no
 * BF16; FP8 and MXFP4 by f32 FMA at 512 bits (moe-*-avx512bw.c).
 */
#define ZMM_ISA		avx512vnni
#define ZMM_VNNI	1
#define ZMM_BF16	0
#include "kernels/moe-zmm.h"
#include "kernels/qk.h"
#include "kernels/q8_0.h"

const struct kern_ops kern_ops_avx512vnni =
	KERN_OPS(KT_ISA_AVX512VNNI, avx512vnni, avx512bw,
		 [KT_QUANT_Q8_0] = KERN_Q8_0_OPS(avx512vnni),
		 KERN_QK_SLOTS(avx512vnni));
