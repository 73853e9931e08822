// SPDX-License-Identifier: MIT
/*
 * q8_0-avx512bw.c - Q8_0 on AVX-512 without VNNI (Skylake-SP): vpmaddubsw +
 * vpmaddwd: the body of q8_0-vec.h at 512 bits.
 */
#define VEC_BITS	512
#define VEC_VNNI	0
#define VEC_ISA		avx512bw
#include "kernels/q8_0-vec.h"
