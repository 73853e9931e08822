// SPDX-License-Identifier: MIT
/*
 * q4_k-avx2.c - Q4_K on AVX2 (vpmaddubsw + vpmaddwd): the K-quant body of
 * qk-vec.h at 256 bits.
 */
#define VEC_BITS	256
#define VEC_ISA		avx2
#define QK_T		q4_k
#define QK_Q		KT_QUANT_Q4_K
#include "kernels/qk-vec.h"
