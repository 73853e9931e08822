// SPDX-License-Identifier: MIT
/*
 * moe-mxfp4-avx2.c - MXFP4 experts on AVX2 + FMA: the body of mxfp4-vec.h
 * at 256 bits, which the variants without AVX-512 run (AVX2, AVX-VNNI).
 */
#define VEC_BITS	256
#define VEC_ISA		avx2
#include "kernels/mxfp4-vec.h"
