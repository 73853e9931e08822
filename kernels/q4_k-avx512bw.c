// SPDX-License-Identifier: MIT
/*
 * q4_k-avx512bw.c - Q4_K on AVX-512 without VNNI (Skylake-SP): vpmaddubsw +
 * vpmaddwd: the K-quant body of qk-vec.h at 512 bits.
 */
#define VEC_BITS	512
#define VEC_VNNI	0
#define VEC_ISA		avx512bw
#define QK_T		q4_k
#define QK_Q		KT_QUANT_Q4_K
#include "kernels/qk-vec.h"
