// SPDX-License-Identifier: MIT
/*
 * q4_k-avxvnni.c - Q4_K on AVX-VNNI (Alder Lake and later clients): VEX
 * vpdpbusd: the K-quant body of qk-vec.h at 256 bits.
 */
#define VEC_BITS	256
#define VEC_VNNI	1
#define VEC_ISA		avxvnni
#define QK_T		q4_k
#define QK_Q		KT_QUANT_Q4_K
#include "kernels/qk-vec.h"
