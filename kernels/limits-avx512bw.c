// SPDX-License-Identifier: MIT
/*
 * limits-avx512bw.c - read and peak loops of kt_ctx_measure_*() with
 * 512-bit loads, vpmaddubsw + vpmaddwd and FMA: what the AVX-512 kernels
 * without VNNI and BF16 run (bodies: limits-vec.h).
 */
#define VEC_BITS	512
#define VEC_ISA		avx512bw
#include "kernels/limits-vec.h"

/* Needs only AVX512F: every 512-bit variant reads with it. */
uint64_t kern_read_avx512(const void *p, size_t bytes)
{
	return read_loop(p, bytes);
}

/*
 * 64 multiply-adds in three instructions, as mk_i8/mk_i4 of moe-zmm.h
 * without VNNI; the bytes read the chain's own accumulator (@x are the
 * int16 ones): a product of constants would leave the loop.
 */
#define dotbw(a, x, y)	_mm512_add_epi32(a, _mm512_madd_epi16(		\
				_mm512_maddubs_epi16(a, y), x))

PEAK_LOOP(kern_peak_int8_avx512bw, __m512i, int_init, dotbw, vi_add32,
	  vi_fold64, 64, _mm512_set1_epi16(1), _mm512_set1_epi8(-5))

PEAK_LOOP(kern_peak_bf16_avx512bw, __m512, fma_init, fma_mac, vf_add,
	  _mm512_reduce_add_ps, 16, _mm512_set1_ps(1.0f),
	  _mm512_set1_ps(0x1p-7f))
