// SPDX-License-Identifier: MIT
/*
 * ops.c - choosing a kernel variant: the ops tables of the per-ISA files,
 * reached through weak references so that a missing variant is NULL.
 */
#include <math.h>

#include "kernels/kern.h"
#include "ktcore/core.h"

/*
 * Weak: a variant whose file is not (yet) compiled leaves its symbol at
 * address 0 instead of failing the link.
 */
extern const struct kern_ops kern_ops_avx2 __attribute__((weak));
extern const struct kern_ops kern_ops_avxvnni __attribute__((weak));
extern const struct kern_ops kern_ops_avx512 __attribute__((weak));
extern const struct kern_ops kern_ops_amx __attribute__((weak));

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
	default:
		return NULL;
	}
}

float kern_silu_f32(float g)
{
	return g / (1.0f + expf(-g));
}

KT_EXPORT const char *kt_quant_name(enum kt_quant q)
{
	switch (q) {
	case KT_QUANT_INT8:
		return "int8";
	case KT_QUANT_INT4:
		return "int4";
	case KT_QUANT_BF16:
		return "bf16";
	default:
		return "?";
	}
}
