// SPDX-License-Identifier: MIT
/*
 * moe-avx512bw.c - the AVX-512 variant for CPUs without VNNI and BF16
 * (Skylake-SP): vpmaddubsw + vpmaddwd for INT8/INT4, bf16 widened by a
 * shift and FMA for BF16 (body: moe-zmm.h); the GGUF blocks on the
 * 512-bit bodies with the same dots (q*-avx512bw.c); FP8 and MXFP4 by
 * f32 FMA at 512 bits (moe-fp8-avx512bw.c, moe-mxfp4-avx512bw.c).
 */
#define ZMM_ISA		avx512bw
#define ZMM_VNNI	0
#define ZMM_BF16	0
#include "kernels/moe-zmm.h"
#include "kernels/qk.h"
#include "kernels/q8_0.h"

const struct kern_ops kern_ops_avx512bw =
	KERN_OPS(KT_ISA_AVX512BW, avx512bw, avx512bw,
		 [KT_QUANT_Q8_0] = KERN_Q8_0_OPS(avx512bw),
		 KERN_QK_SLOTS(avx512bw));
