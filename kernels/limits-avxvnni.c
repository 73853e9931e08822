// SPDX-License-Identifier: MIT
/*
 * limits-avxvnni.c - int8 peak loop of kt_ctx_measure_peak() with the
 * 256-bit vpdpbusd of AVX-VNNI.
 */
#include <immintrin.h>

#include "kernels/simd.h"

#define PEAK_ACCS 12

uint64_t kern_peak_int8_avxvnni(uint64_t iters, uint64_t *sink)
{
	__m256i acc[PEAK_ACCS], x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-5);
	uint64_t i;
	int k;

	for (k = 0; k < PEAK_ACCS; k++)
		acc[k] = _mm256_set1_epi32(k);
	for (i = 0; i < iters; i++)
#pragma GCC unroll 16
		for (k = 0; k < PEAK_ACCS; k++)
			acc[k] = _mm256_dpbusd_avx_epi32(acc[k], x, y);
	for (k = 1; k < PEAK_ACCS; k++)
		acc[0] = _mm256_add_epi32(acc[0], acc[k]);
	*sink += (uint64_t)_mm256_extract_epi32(acc[0], 0);
	return iters * PEAK_ACCS * 32;
}
