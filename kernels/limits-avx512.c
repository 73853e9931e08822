// SPDX-License-Identifier: MIT
/*
 * limits-avx512.c - read and peak loops of kt_ctx_measure_*() with 512-bit
 * loads, vpdpbusd and vdpbf16ps (bodies: limits-vec.h).
 */
#define VEC_BITS	512
#define VEC_ISA		avx512
#include "kernels/limits-vec.h"

uint64_t kern_read_avx512(const void *p, size_t bytes)
{
	return read_loop(p, bytes);
}

#define dpbusd(a, x, y)		_mm512_dpbusd_epi32(a, x, y)
#define dpbf16(a, x, y)		_mm512_dpbf16_ps(a, x, y)

PEAK_LOOP(kern_peak_int8_avx512, __m512i, int_init, dpbusd, vi_add32,
	  vi_hadd32, 64, _mm512_set1_epi8(3), _mm512_set1_epi8(-5))

/* 1.0 and 2^-7 in bf16 */
PEAK_LOOP(kern_peak_bf16_avx512, __m512, fma_init, dpbf16, vf_add,
	  _mm512_reduce_add_ps, 32, (__m512bh)_mm512_set1_epi16(0x3f80),
	  (__m512bh)_mm512_set1_epi16(0x3c00))
