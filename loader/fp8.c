// SPDX-License-Identifier: MIT
/*
 * fp8.c - E4M3FN decoding (bias 7, S.1111.111 is NaN, no infinities) and
 * block-scaled dequantization for FP8 checkpoints such as DeepSeek-V3's.
 */
#include <math.h>
#include <string.h>

#include "loader/fp8.h"

float ldr_fp8_e4m3_to_f32(uint8_t v)
{
	unsigned int e = (v >> 3) & 0xf, m = v & 7;
	float r;

	if (e == 0xf && m == 7)
		return NAN;
	if (e == 0)
		r = ldexpf((float)m, -9);	/* subnormal: m/8 * 2^-6 */
	else
		r = ldexpf((float)(8 + m), (int)e - 10);	/* (1+m/8) 2^(e-7) */
	return (v & 0x80) ? -r : r;
}

void ldr_fp8_dequant(const uint8_t *q, uint32_t N, uint32_t K,
		     const void *scale_inv, bool scale_bf16, uint32_t b0,
		     uint32_t b1, float *out)
{
	uint32_t kb = (K + b1 - 1) / b1, n, k;
	const uint8_t *sp = scale_inv;
	float lut[256];

	for (n = 0; n < 256; n++)
		lut[n] = ldr_fp8_e4m3_to_f32((uint8_t)n);
	for (n = 0; n < N; n++) {
		const uint8_t *row = q + (size_t)n * K;
		float *o = out + (size_t)n * K;

		for (k = 0; k < K; k += b1) {
			size_t si = (size_t)(n / b0) * kb + k / b1;
			uint32_t end = k + b1 < K ? k + b1 : K, j;
			float s;

			if (scale_bf16) {
				uint16_t h;
				uint32_t u;

				memcpy(&h, sp + si * 2, 2);
				u = (uint32_t)h << 16;
				memcpy(&s, &u, 4);
			} else {
				memcpy(&s, sp + si * 4, 4);
			}
			for (j = k; j < end; j++)
				o[j] = lut[row[j]] * s;
		}
	}
}

void ldr_fp8_scales_f32(const void *src, bool bf16, size_t n, float *out)
{
	const uint8_t *p = src;
	size_t i;

	for (i = 0; i < n; i++) {
		if (bf16) {
			uint16_t h;
			uint32_t u;

			memcpy(&h, p + i * 2, 2);
			u = (uint32_t)h << 16;
			memcpy(&out[i], &u, 4);
		} else {
			memcpy(&out[i], p + i * 4, 4);
		}
	}
}
