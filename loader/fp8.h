/* SPDX-License-Identifier: MIT */
/*
 * fp8.h - FP8 E4M3 (the "fn" variant: no infinities) to f32, and the
 * dequantization of DeepSeek-V3 style block-scaled weights.
 */
#ifndef KT_LOADER_FP8_H
#define KT_LOADER_FP8_H

#include <stdbool.h>
#include <stdint.h>

float ldr_fp8_e4m3_to_f32(uint8_t v);

/*
 * w[n][k] = fp8(q[n][k]) * scale_inv[n / b0][k / b1] into @out [N][K];
 * scale_inv is [ceil(N/b0)][ceil(K/b1)], f32 or (@scale_bf16) bf16, and
 * may be unaligned.
 */
void ldr_fp8_dequant(const uint8_t *q, uint32_t N, uint32_t K,
		     const void *scale_inv, bool scale_bf16, uint32_t b0,
		     uint32_t b1, float *out);

/*
 * The @n scales at @src (f32 or, @bf16, bf16; may be unaligned) as f32
 * into @out.
 */
void ldr_fp8_scales_f32(const void *src, bool bf16, size_t n, float *out);

#endif /* KT_LOADER_FP8_H */
