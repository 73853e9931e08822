// SPDX-License-Identifier: MIT
/*
 * moe-fp8-f16-avx2.c - the body of fp8-vec.h at 256 bits with every pass
 * widening through F16C: what the avx2 FP8 entry points run on CPUs whose
 * FMAs slow down on subnormal inputs (kern_fma_subnormals_free()).
 */
#define VEC_BITS	256
#define VEC_ISA		f16_avx2
#define FP8_PASS_F16	1
#include "kernels/fp8-vec.h"
