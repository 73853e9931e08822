// SPDX-License-Identifier: MIT
/*
 * q8_0-avxvnni.c - Q8_0 on AVX-VNNI (Alder Lake and later clients): VEX
 * vpdpbusd: the body of q8_0-vec.h at 256 bits.
 */
#define VEC_BITS	256
#define VEC_VNNI	1
#define VEC_ISA		avxvnni
#include "kernels/q8_0-vec.h"
