// SPDX-License-Identifier: MIT
/*
 * q8_0-avx512.c - Q8_0 on AVX-512 VNNI (vpdpbusd of the lines flipped to
 * u8): the body of q8_0-vec.h at 512 bits.
 */
#define VEC_BITS	512
#define VEC_ISA		avx512
#include "kernels/q8_0-vec.h"
