// SPDX-License-Identifier: MIT
/*
 * limits-avx2.c - read and peak loops of kt_ctx_measure_*() with 256-bit
 * loads, vpmaddwd (what the AVX2 int8 kernels use) and FMA (bodies:
 * limits-vec.h).
 */
#define VEC_BITS	256
#define VEC_ISA		avx2
#include "kernels/limits-vec.h"

uint64_t kern_read_avx2(const void *p, size_t bytes)
{
	return read_loop(p, bytes);
}

/*
 * vpmaddwd does 16 multiply-adds; the vpaddd that follows it in the
 * kernels is part of the cost, so it is part of the loop. The product
 * reads the chain's own accumulator (@x unused): a product of constants
 * would be computed once, outside the loop.
 */
#define maddwd(a, x, y)		_mm256_add_epi32(a, _mm256_madd_epi16(a, y))

PEAK_LOOP(kern_peak_int8_avx2, __m256i, int_init, maddwd, vi_add32,
	  vi_fold64, 16, _mm256_set1_epi16(3), _mm256_set1_epi16(-5))

PEAK_LOOP(kern_peak_bf16_avx2, __m256, fma_init, fma_mac, vf_add,
	  _mm256_cvtss_f32, 8, _mm256_set1_ps(1.0f), _mm256_set1_ps(0x1p-7f))
