// SPDX-License-Identifier: MIT
/*
 * limits-avx2.c - read and peak loops of kt_ctx_measure_*() with 256-bit
 * loads, vpmaddwd (what the AVX2 int8 kernels use) and FMA.
 */
#include <immintrin.h>

#include "kernels/simd.h"

uint64_t kern_read_avx2(const void *p, size_t bytes)
{
	const uint8_t *b = p;
	size_t q = bytes / 4, off;
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;

	for (off = 0; off + 64 <= q; off += 64) {
		a0 = _mm256_xor_si256(a0, _mm256_load_si256((const void *)(b + off)));
		a1 = _mm256_xor_si256(a1, _mm256_load_si256((const void *)(b + q + off)));
		a2 = _mm256_xor_si256(a2, _mm256_load_si256((const void *)(b + 2 * q + off)));
		a3 = _mm256_xor_si256(a3, _mm256_load_si256((const void *)(b + 3 * q + off)));
		a0 = _mm256_xor_si256(a0, _mm256_load_si256((const void *)(b + off + 32)));
		a1 = _mm256_xor_si256(a1, _mm256_load_si256((const void *)(b + q + off + 32)));
		a2 = _mm256_xor_si256(a2, _mm256_load_si256((const void *)(b + 2 * q + off + 32)));
		a3 = _mm256_xor_si256(a3, _mm256_load_si256((const void *)(b + 3 * q + off + 32)));
	}
	a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
	return (uint64_t)_mm256_extract_epi64(a0, 0) ^
	       (uint64_t)_mm256_extract_epi64(a0, 1) ^
	       (uint64_t)_mm256_extract_epi64(a0, 2) ^
	       (uint64_t)_mm256_extract_epi64(a0, 3);
}

#define PEAK_ACCS 12

/* vpmaddwd does 16 multiply-adds; the vpaddd that follows it in the
 * kernels is part of the cost, so it is part of the loop. */
uint64_t kern_peak_int8_avx2(uint64_t iters, uint64_t *sink)
{
	__m256i acc[PEAK_ACCS], x = _mm256_set1_epi16(3), y = _mm256_set1_epi16(-5);
	uint64_t i;
	int k;

	for (k = 0; k < PEAK_ACCS; k++)
		acc[k] = _mm256_set1_epi32(k);
	for (i = 0; i < iters; i++)
#pragma GCC unroll 16
		for (k = 0; k < PEAK_ACCS; k++)
			acc[k] = _mm256_add_epi32(acc[k],
						  _mm256_madd_epi16(x, y));
	for (k = 1; k < PEAK_ACCS; k++)
		acc[0] = _mm256_add_epi32(acc[0], acc[k]);
	*sink += (uint64_t)_mm256_extract_epi32(acc[0], 0);
	return iters * PEAK_ACCS * 16;
}

uint64_t kern_peak_bf16_avx2(uint64_t iters, uint64_t *sink)
{
	__m256 acc[PEAK_ACCS], x = _mm256_set1_ps(1.0f), y = _mm256_set1_ps(0x1p-7f);
	uint64_t i;
	int k;

	for (k = 0; k < PEAK_ACCS; k++)
		acc[k] = _mm256_setzero_ps();
	for (i = 0; i < iters; i++)
#pragma GCC unroll 16
		for (k = 0; k < PEAK_ACCS; k++)
			acc[k] = _mm256_fmadd_ps(x, y, acc[k]);
	for (k = 1; k < PEAK_ACCS; k++)
		acc[0] = _mm256_add_ps(acc[0], acc[k]);
	*sink += (uint64_t)_mm256_cvtss_f32(acc[0]);
	return iters * PEAK_ACCS * 8;
}
