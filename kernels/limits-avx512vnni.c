// SPDX-License-Identifier: MIT
/*
 * limits-avx512vnni.c - the int8 peak loop of kt_ctx_measure_peak() with
 * the 512-bit vpdpbusd, for the AVX-512 variants with VNNI (body:
 * limits-vec.h).
 */
#define VEC_BITS	512
#define VEC_ISA		avx512vnni
#include "kernels/limits-vec.h"

#define dpbusd(a, x, y)		_mm512_dpbusd_epi32(a, x, y)

PEAK_LOOP(kern_peak_int8_avx512, __m512i, int_init, dpbusd, vi_add32,
	  vi_fold64, 64, _mm512_set1_epi8(3), _mm512_set1_epi8(-5))
