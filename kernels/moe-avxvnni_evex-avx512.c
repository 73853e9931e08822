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
#include "kernels/qk.h"
#include "kernels/q8_0.h"

/* KT_ISA_AVX512: what the CPU must run; the name tells it apart. The GGUF
 * bodies of the same encoding: q*-avxvnni_evex-avx512.c */
const struct kern_ops kern_ops_avxvnni_evex =
	KERN_OPS(KT_ISA_AVX512, avxvnni_evex, avx2,
		 [KT_QUANT_Q8_0] = KERN_Q8_0_OPS(avxvnni_evex),
		 KERN_QK_SLOTS(avxvnni_evex));
