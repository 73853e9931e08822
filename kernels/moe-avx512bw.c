// SPDX-License-Identifier: MIT
/*
 * moe-avx512bw.c - the AVX-512 variant for CPUs without VNNI and BF16
 * (Skylake-SP): vpmaddubsw + vpmaddwd for INT8/INT4, bf16 widened by a
 * shift and FMA for BF16 (body: moe-zmm.h).
 */
#define ZMM_ISA		avx512bw
#define ZMM_VNNI	0
#define ZMM_BF16	0
#include "kernels/moe-zmm.h"

const struct kern_ops kern_ops_avx512bw = KERN_OPS(KT_ISA_AVX512BW, avx512bw);
