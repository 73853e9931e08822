// SPDX-License-Identifier: MIT
/*
 * q8_0-avx2.c - Q8_0 on AVX2 (vpmaddubsw of |w| with x signed by w): the
 * body of q8_0-vec.h at 256 bits.
 */
#define VEC_BITS	256
#define VEC_ISA		avx2
#include "kernels/q8_0-vec.h"
