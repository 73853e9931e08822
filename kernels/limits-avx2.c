// SPDX-License-Identifier: MIT
/*
 * limits-avx2.c - read and peak loops of kt_ctx_measure_*() with 256-bit
 * loads, vpmaddubsw + vpmaddwd (what the AVX2 int8 kernels use) and FMA
 * (bodies: limits-vec.h).
 */
#define VEC_BITS	256
#define VEC_ISA		avx2
#include "kernels/limits-vec.h"

uint64_t kern_read_avx2(const void *p, size_t bytes)
{
	return read_loop(p, bytes);
}

/*
 * vpmaddubsw does 32 multiplies, vpmaddwd by ones adds their pairs to
 * int32 and vpaddd accumulates: the three steps of an int8 dot in the
 * kernels (moe-ymm.h), so all three are in the loop. The product reads
 * the chain's own accumulator (@x: the ones): a product of constants
 * would be computed once, outside the loop.
 */
#define maddubs(a, x, y)	_mm256_add_epi32(a, _mm256_madd_epi16(	\
					_mm256_maddubs_epi16(a, y), x))

PEAK_LOOP(kern_peak_int8_avx2, __m256i, int_init, maddubs, vi_add32,
	  vi_fold64, 32, _mm256_set1_epi16(1), _mm256_set1_epi8(-5))

PEAK_LOOP(kern_peak_bf16_avx2, __m256, fma_init, fma_mac, vf_add,
	  _mm256_cvtss_f32, 8, _mm256_set1_ps(1.0f), _mm256_set1_ps(0x1p-7f))
