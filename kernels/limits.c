// SPDX-License-Identifier: MIT
/*
 * limits.c - the loops that measure the machine's limits as kt's kernels
 * see them (STREAM-like reads, register-resident multiply-adds): the
 * scalar ones, and the choice of each ISA's.
 */
#include <string.h>

#include "kernels/simd.h"

/* Four streams of 8-byte loads; the compiler may widen them. */
uint64_t kern_read_scalar(const void *p, size_t bytes)
{
	const uint64_t *q = p;
	size_t n = bytes / 32, i;
	uint64_t a = 0, b = 0, c = 0, d = 0;

	for (i = 0; i < n; i++) {
		a ^= q[i];
		b ^= q[n + i];
		c ^= q[2 * n + i];
		d ^= q[3 * n + i];
	}
	return a ^ b ^ c ^ d;
}

/*
 * Four independent multiply-add chains of @type (uint32_t wraps). The empty
 * asm hides the loop invariance of the products from the compiler, so
 * every multiply-add is executed; the sink folds the bits of the sum.
 */
#define PEAK_SCALAR(name, type, reg, x0, y0)				\
uint64_t name(uint64_t iters, uint64_t *sink)				\
{									\
	type a0 = 0, a1 = 0, a2 = 0, a3 = 0, x = x0, y = y0, sum;	\
	uint32_t bits;							\
	uint64_t i;							\
									\
	for (i = 0; i < iters; i++) {					\
		__asm__ volatile("" : "+" reg(x), "+" reg(y));		\
		a0 += x * y;						\
		a1 += x * x;						\
		a2 += y * x;						\
		a3 += y * y;						\
	}								\
	sum = a0 + a1 + a2 + a3;					\
	memcpy(&bits, &sum, sizeof(bits));				\
	*sink ^= bits;							\
	return iters * 4;						\
}

PEAK_SCALAR(kern_peak_int8_scalar, uint32_t, "r", 3, 5)
PEAK_SCALAR(kern_peak_bf16_scalar, float, "x", 1.0001f, 0.9999f)

kern_read_fn kern_read_for(enum kt_isa isa)
{
	switch (isa) {
	case KT_ISA_AMX:
	case KT_ISA_AVX512:
	case KT_ISA_AVX512VNNI:
	case KT_ISA_AVX512BW:
		return kern_read_avx512;
	case KT_ISA_AVX_VNNI:
	case KT_ISA_AVX2:
		return kern_read_avx2;
	default:
		return kern_read_scalar;
	}
}

/* Each variant's peak loops: INT8 (INT4 shares it) and BF16. */
static const struct {
	kern_peak_fn int8, bf16;
} peak_loops[KT_ISA_COUNT] = {
	[KT_ISA_SCALAR] = { kern_peak_int8_scalar, kern_peak_bf16_scalar },
	[KT_ISA_AVX2] = { kern_peak_int8_avx2, kern_peak_bf16_avx2 },
	[KT_ISA_AVX_VNNI] = { kern_peak_int8_avxvnni, kern_peak_bf16_avx2 },
	[KT_ISA_AVX512BW] = { kern_peak_int8_avx512bw, kern_peak_bf16_avx512bw },
	[KT_ISA_AVX512VNNI] = { kern_peak_int8_avx512, kern_peak_bf16_avx512bw },
	[KT_ISA_AVX512] = { kern_peak_int8_avx512, kern_peak_bf16_avx512 },
	[KT_ISA_AMX] = { kern_peak_int8_amx, kern_peak_bf16_amx },
};

kern_peak_fn kern_peak_for(enum kt_isa isa, enum kt_quant q)
{
	if ((unsigned int)isa >= KT_ISA_COUNT || !peak_loops[isa].int8)
		isa = KT_ISA_SCALAR;
	/* FP8 computes through bf16 */
	return q == KT_QUANT_BF16 || q == KT_QUANT_FP8 ? peak_loops[isa].bf16 :
	       peak_loops[isa].int8;
}
