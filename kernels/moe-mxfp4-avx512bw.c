// SPDX-License-Identifier: MIT
/*
 * moe-mxfp4-avx512bw.c - MXFP4 experts on AVX-512 without BF16
 * (Skylake-SP, Cascade Lake, Ice Lake): the body of mxfp4-vec.h at 512
 * bits.
 */
#define VEC_BITS	512
#define VEC_ISA		avx512bw
#include "kernels/mxfp4-vec.h"
