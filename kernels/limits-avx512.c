// SPDX-License-Identifier: MIT
/*
 * limits-avx512.c - the bf16 peak loop of kt_ctx_measure_peak() with
 * vdpbf16ps (body: limits-vec.h); the read loop and the int8 peak of the
 * AVX-512 variant need less and live in limits-avx512bw.c and
 * limits-avx512vnni.c.
 */
#define VEC_BITS	512
#define VEC_ISA		avx512
#include "kernels/limits-vec.h"

#define dpbf16(a, x, y)		_mm512_dpbf16_ps(a, x, y)

/* 1.0 and 2^-7 in bf16 */
PEAK_LOOP(kern_peak_bf16_avx512, __m512, fma_init, dpbf16, vf_add,
	  _mm512_reduce_add_ps, 32, (__m512bh)_mm512_set1_epi16(0x3f80),
	  (__m512bh)_mm512_set1_epi16(0x3c00))
