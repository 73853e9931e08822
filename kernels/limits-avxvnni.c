// SPDX-License-Identifier: MIT
/*
 * limits-avxvnni.c - int8 peak loop of kt_ctx_measure_peak() with the
 * 256-bit vpdpbusd of AVX-VNNI (body: limits-vec.h).
 */
#define VEC_BITS	256
#define VEC_ISA		avxvnni
#include "kernels/limits-vec.h"

#define dpbusd(a, x, y)		_mm256_dpbusd_avx_epi32(a, x, y)

PEAK_LOOP(kern_peak_int8_avxvnni, __m256i, int_init, dpbusd, vi_add32,
	  vi_fold64, 32, _mm256_set1_epi8(3), _mm256_set1_epi8(-5))
