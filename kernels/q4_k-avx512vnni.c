// SPDX-License-Identifier: MIT
/*
 * q4_k-avx512vnni.c - Q4_K on AVX-512 VNNI without BF16 (Cascade Lake, Ice
 * Lake): the K-quant body of qk-vec.h at 512 bits, as q4_k-avx512.c.
 */
#define VEC_BITS	512
#define VEC_ISA		avx512vnni
#define QK_T		q4_k
#define QK_Q		KT_QUANT_Q4_K
#include "kernels/qk-vec.h"
