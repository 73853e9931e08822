// SPDX-License-Identifier: MIT
/*
 * q8_0-avxvnni_evex-avx512.c - the AVX-VNNI Q8_0 body (q8_0-avxvnni.c)
 * with the EVEX dot of AVX512-VNNI/VL, for tests only, as
 * moe-avxvnni_evex-avx512.c.
 */
#include <immintrin.h>

#define _mm256_dpbusd_avx_epi32 _mm256_dpbusd_epi32
#define _mm256_dpwssd_avx_epi32 _mm256_dpwssd_epi32

#define VEC_BITS	256
#define VEC_VNNI	1
#define VEC_ISA		avxvnni_evex
#include "kernels/q8_0-vec.h"
