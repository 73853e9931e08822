// SPDX-License-Identifier: MIT
/*
 * ops.c - choosing a kernel variant: the ops tables of the per-ISA files,
 * all compiled into every build (each with its own -m flags).
 */
#include <math.h>

#include "kernels/kern.h"

/*
 * Strong references (kern.h declares the tables plainly): a program
 * linking libkt.a statically pulls in every variant without
 * --whole-archive.
 */
const struct kern_ops *kern_ops_get(enum kt_isa isa)
{
	switch (isa) {
	case KT_ISA_SCALAR:
		return &kern_ops_scalar;
	case KT_ISA_AVX2:
		return &kern_ops_avx2;
	case KT_ISA_AVX_VNNI:
		return &kern_ops_avxvnni;
	case KT_ISA_AVX512:
		return &kern_ops_avx512;
	case KT_ISA_AMX:
		return &kern_ops_amx;
	case KT_ISA_AVX512BW:
		return &kern_ops_avx512bw;
	case KT_ISA_AVX512VNNI:
		return &kern_ops_avx512vnni;
	default:
		return NULL;
	}
}

float kern_silu_f32(float g)
{
	return g / (1.0f + expf(-g));
}
