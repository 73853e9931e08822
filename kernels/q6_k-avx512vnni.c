// SPDX-License-Identifier: MIT
/*
 * q6_k-avx512vnni.c - Q6_K on AVX-512 VNNI without BF16 (Cascade Lake, Ice
 * Lake): the K-quant body of qk-vec.h at 512 bits, as q6_k-avx512.c.
 */
#define VEC_BITS	512
#define VEC_ISA		avx512vnni
#define QK_T		q6_k
#define QK_Q		KT_QUANT_Q6_K
#include "kernels/qk-vec.h"
