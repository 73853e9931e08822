// SPDX-License-Identifier: MIT
/*
 * q5_k-avx512bw.c - Q5_K on AVX-512 without VNNI (Skylake-SP): vpmaddubsw +
 * vpmaddwd: the K-quant body of qk-vec.h at 512 bits.
 */
#define VEC_BITS	512
#define VEC_VNNI	0
#define VEC_ISA		avx512bw
#define QK_T		q5_k
#define QK_Q		KT_QUANT_Q5_K
#include "kernels/qk-vec.h"
