// SPDX-License-Identifier: MIT
/*
 * limits.c - the loops that measure the machine's limits as kt's kernels
 * see them (STREAM-like reads, register-resident multiply-adds): the
 * scalar ones, and the choice of each ISA's.
 */
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

/* The empty asm hides the loop invariance of the products from the
 * compiler, so every multiply-add is executed. */
uint64_t kern_peak_int8_scalar(uint64_t iters, uint64_t *sink)
{
	uint32_t a0 = 1, a1 = 2, a2 = 3, a3 = 4, x = 3, y = 5;	/* wraps */
	uint64_t i;

	for (i = 0; i < iters; i++) {
		__asm__ volatile("" : "+r"(x), "+r"(y));
		a0 += x * y;
		a1 += x * a0;
		a2 += y * x;
		a3 += y * y;
	}
	*sink += a0 ^ a1 ^ a2 ^ a3;
	return iters * 4;
}

uint64_t kern_peak_bf16_scalar(uint64_t iters, uint64_t *sink)
{
	float a0 = 0, a1 = 0, a2 = 0, a3 = 0, x = 1.0001f, y = 0.9999f;
	uint64_t i;

	for (i = 0; i < iters; i++) {
		__asm__ volatile("" : "+x"(x), "+x"(y));
		a0 += x * y;
		a1 += x * x;
		a2 += y * x;
		a3 += y * y;
	}
	*sink += (uint64_t)(a0 + a1 + a2 + a3);
	return iters * 4;
}

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

kern_peak_fn kern_peak_for(enum kt_isa isa, enum kt_quant q)
{
	bool bf16 = q == KT_QUANT_BF16;

	switch (isa) {
	case KT_ISA_AMX:
		return bf16 ? kern_peak_bf16_amx : kern_peak_int8_amx;
	case KT_ISA_AVX512:
		return bf16 ? kern_peak_bf16_avx512 : kern_peak_int8_avx512;
	case KT_ISA_AVX512VNNI:
		return bf16 ? kern_peak_bf16_avx512bw : kern_peak_int8_avx512;
	case KT_ISA_AVX512BW:
		return bf16 ? kern_peak_bf16_avx512bw : kern_peak_int8_avx512bw;
	case KT_ISA_AVX_VNNI:
		return bf16 ? kern_peak_bf16_avx2 : kern_peak_int8_avxvnni;
	case KT_ISA_AVX2:
		return bf16 ? kern_peak_bf16_avx2 : kern_peak_int8_avx2;
	default:
		return bf16 ? kern_peak_bf16_scalar : kern_peak_int8_scalar;
	}
}
