// SPDX-License-Identifier: MIT
/*
 * q4_k-avx512.c - Q4_K on AVX-512 VNNI (vpdpbusd): the K-quant body of
 * qk-vec.h at 512 bits.
 */
#define VEC_BITS	512
#define VEC_ISA		avx512
#define QK_T		q4_k
#define QK_Q		KT_QUANT_Q4_K
#include "kernels/qk-vec.h"
