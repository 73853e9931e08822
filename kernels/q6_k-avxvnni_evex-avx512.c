// SPDX-License-Identifier: MIT
/*
 * q6_k-avxvnni_evex-avx512.c - the AVX-VNNI Q6_K body (q6_k-avxvnni.c) with
 * the EVEX dots of AVX512-VNNI/VL, for tests only, as
 * moe-avxvnni_evex-avx512.c.
 */
#include <immintrin.h>

#define _mm256_dpbusd_avx_epi32 _mm256_dpbusd_epi32
#define _mm256_dpwssd_avx_epi32 _mm256_dpwssd_epi32

#define VEC_BITS	256
#define VEC_VNNI	1
#define VEC_ISA		avxvnni_evex
#define QK_T		q6_k
#define QK_Q		KT_QUANT_Q6_K
#include "kernels/qk-vec.h"
