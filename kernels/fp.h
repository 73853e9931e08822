/* SPDX-License-Identifier: MIT */
/*
 * fp.h - bf16 and f16 <-> f32 conversions in plain C, bit exact: what the
 * packer, the oracle and the tests use (vector variants must agree).
 */
#ifndef KT_KERNELS_FP_H
#define KT_KERNELS_FP_H

#include <stdint.h>
#include <string.h>

static inline uint32_t kern_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float kern_bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline float kern_bf16_to_f32(uint16_t h)
{
	return kern_bits_f32((uint32_t)h << 16);
}

/* Round to nearest even; NaN stays a (quiet) NaN. */
static inline uint16_t kern_f32_to_bf16(float f)
{
	uint32_t u = kern_f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static inline float kern_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;

	if (exp == 0x1f)
		return kern_bits_f32(sign | 0x7f800000u | (man << 13));
	if (exp == 0) {
		/* zero or subnormal: man * 2^-24, exact in f32 */
		float v = (float)man * (1.0f / 16777216.0f);

		return sign ? -v : v;
	}
	return kern_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even, overflow to inf, NaN stays NaN. */
static inline uint16_t kern_f32_to_f16(float f)
{
	uint32_t u = kern_f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffffu;

	if (a > 0x7f800000u)
		return sign | 0x7e00;
	if (a >= 0x477ff000u)	/* rounds to >= 65520: inf */
		return sign | 0x7c00;
	if (a < 0x38800000u) {
		/* subnormal f16: scale to units of 2^-24, round even */
		float v = kern_bits_f32(a) * 16777216.0f;
		uint32_t q = (uint32_t)v;
		float rem = v - (float)q;

		if (rem > 0.5f || (rem == 0.5f && (q & 1)))
			q++;
		return sign | (uint16_t)q;
	}
	a += 0xfffu + ((a >> 13) & 1);
	return sign | (uint16_t)(((a >> 13) - (112u << 10)) & 0x7fff);
}

#endif /* KT_KERNELS_FP_H */
