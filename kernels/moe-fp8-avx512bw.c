// SPDX-License-Identifier: MIT
/*
 * moe-fp8-avx512bw.c - FP8 (E4M3) experts on AVX-512 without BF16
 * (Skylake-SP, Cascade Lake, Ice Lake): the body of fp8-vec.h at 512 bits,
 * f32 FMA over E4M3 widened through f16.
 */
#define VEC_BITS	512
#define VEC_ISA		avx512bw
#include "kernels/fp8-vec.h"
