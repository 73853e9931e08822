// SPDX-License-Identifier: MIT
/*
 * moe-fp8-avx2.c - FP8 (E4M3) experts on AVX2 + FMA + F16C: the body of
 * fp8-vec.h at 256 bits, which the variants without AVX-512 run (AVX2,
 * AVX-VNNI).
 */
#define VEC_BITS	256
#define VEC_ISA		avx2
#include "kernels/fp8-vec.h"
