// SPDX-License-Identifier: MIT
/*
 * q8_0-avx512vnni.c - Q8_0 on AVX-512 VNNI without BF16 (Cascade Lake, Ice
 * Lake): the body of q8_0-vec.h at 512 bits, as q8_0-avx512.c.
 */
#define VEC_BITS	512
#define VEC_ISA		avx512vnni
#include "kernels/q8_0-vec.h"
