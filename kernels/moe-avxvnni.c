// SPDX-License-Identifier: MIT
/*
 * moe-avxvnni.c - the AVX-VNNI variant: 256-bit vpdpbusd for INT8/INT4,
 * FMA for BF16 (body: moe-ymm.h).
 */
#define YMM_ISA avxvnni
#define YMM_VNNI 1
#include "kernels/moe-ymm.h"

const struct kern_ops kern_ops_avxvnni = KERN_OPS(KT_ISA_AVX_VNNI, avxvnni);
