// SPDX-License-Identifier: MIT
/*
 * limits-avx512.c - read and peak loops of kt_ctx_measure_*() with 512-bit
 * loads, vpdpbusd and vdpbf16ps.
 */
#include <immintrin.h>

#include "kernels/simd.h"

/* Four streams (the four quarters of the range), two loads each per step:
 * enough concurrent misses for the prefetchers of one core. */
uint64_t kern_read_avx512(const void *p, size_t bytes)
{
	const uint8_t *b = p;
	size_t q = bytes / 4, off;
	__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;

	for (off = 0; off + 128 <= q; off += 128) {
		a0 = _mm512_xor_si512(a0, _mm512_load_si512(b + off));
		a1 = _mm512_xor_si512(a1, _mm512_load_si512(b + q + off));
		a2 = _mm512_xor_si512(a2, _mm512_load_si512(b + 2 * q + off));
		a3 = _mm512_xor_si512(a3, _mm512_load_si512(b + 3 * q + off));
		a0 = _mm512_xor_si512(a0, _mm512_load_si512(b + off + 64));
		a1 = _mm512_xor_si512(a1, _mm512_load_si512(b + q + off + 64));
		a2 = _mm512_xor_si512(a2,
				      _mm512_load_si512(b + 2 * q + off + 64));
		a3 = _mm512_xor_si512(a3,
				      _mm512_load_si512(b + 3 * q + off + 64));
	}
	a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1),
			      _mm512_xor_si512(a2, a3));
	return (uint64_t)_mm512_reduce_add_epi64(a0);
}

#define PEAK_ACCS 12

/* Twelve independent chains cover the latency (4-5 cycles) times the
 * issue rate (1-2 per cycle) of the dot-product units. */
uint64_t kern_peak_int8_avx512(uint64_t iters, uint64_t *sink)
{
	__m512i acc[PEAK_ACCS], x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-5);
	uint64_t i;
	int k;

	for (k = 0; k < PEAK_ACCS; k++)
		acc[k] = _mm512_set1_epi32(k);
	for (i = 0; i < iters; i++)
#pragma GCC unroll 16
		for (k = 0; k < PEAK_ACCS; k++)
			acc[k] = _mm512_dpbusd_epi32(acc[k], x, y);
	for (k = 1; k < PEAK_ACCS; k++)
		acc[0] = _mm512_add_epi32(acc[0], acc[k]);
	*sink += (uint64_t)_mm512_reduce_add_epi32(acc[0]);
	return iters * PEAK_ACCS * 64;
}

uint64_t kern_peak_bf16_avx512(uint64_t iters, uint64_t *sink)
{
	__m512 acc[PEAK_ACCS];
	__m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);	/* 1.0 */
	__m512bh y = (__m512bh)_mm512_set1_epi16(0x3c00);	/* 2^-7 */
	uint64_t i;
	int k;

	for (k = 0; k < PEAK_ACCS; k++)
		acc[k] = _mm512_setzero_ps();
	for (i = 0; i < iters; i++)
#pragma GCC unroll 16
		for (k = 0; k < PEAK_ACCS; k++)
			acc[k] = _mm512_dpbf16_ps(acc[k], x, y);
	for (k = 1; k < PEAK_ACCS; k++)
		acc[0] = _mm512_add_ps(acc[0], acc[k]);
	*sink += (uint64_t)_mm512_reduce_add_ps(acc[0]);
	return iters * PEAK_ACCS * 32;
}
