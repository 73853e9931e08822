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

float kern_glu_f32(const struct kern_glu *e, unsigned int n, float g,
		   float u)
{
	if (!e)
		return kern_silu_f32(g) * u;
	if (e->gate_bias)
		g += e->gate_bias[n];
	if (e->up_bias)
		u += e->up_bias[n];
	if (e->act != KT_ACT_SWIGLU_OAI)
		return kern_silu_f32(g) * u;
	g = fminf(g, e->limit);
	u = fmaxf(fminf(u, e->limit), -e->limit);
	return g / (1.0f + expf(-e->alpha * g)) * (u + 1.0f);
}
