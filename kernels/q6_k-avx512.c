// SPDX-License-Identifier: MIT
/*
 * q6_k-avx512.c - Q6_K on AVX-512 VNNI (vpdpbusd): the K-quant body of
 * qk-vec.h at 512 bits.
 */
#define VEC_BITS	512
#define VEC_ISA		avx512
#define QK_T		q6_k
#define QK_Q		KT_QUANT_Q6_K
#include "kernels/qk-vec.h"
