/* SPDX-License-Identifier: MIT */
/*
 * q8_0.h - what the Q8_0 kernels (GGUF blocks of 32 int8 with one scale)
 * of every variant share: the activation quantization ggml uses for a
 * Q8_0 dot (per 32 values, scale amax/127 rounded to f16) and the entry
 * points the ops tables name.
 */
#ifndef KT_KERNELS_Q8_0_H
#define KT_KERNELS_Q8_0_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/fp.h"
#include "kernels/kern.h"
#include "kernels/layout.h"

#define Q8G	KERN_Q8_0_GROUP

/*
 * One group of 32 activations as ggml's x86 quantize_row_q8_0 makes it:
 * q = rint(x * (127 / amax)) (nearest even), scale amax / 127 rounded to
 * f16 (ggml stores it so); returns the scale as f32, 0 for a zero group.
 * Returns the sum of q in @sum (for kernels that need it).
 */
static inline float kern_q8_0_act_group(const float *x, int8_t *q, int *sum)
{
	float amax = 0.0f, inv;
	int i, s = 0;

	for (i = 0; i < Q8G; i++) {
		float a = fabsf(x[i]);

		amax = a > amax ? a : amax;
	}
	inv = amax > 0.0f ? 127.0f / amax : 0.0f;
	for (i = 0; i < Q8G; i++) {
		q[i] = (int8_t)rintf(x[i] * inv);
		s += q[i];
	}
	*sum = s;
	return kern_f16_to_f32(kern_f32_to_f16(amax / 127.0f));
}

/*
 * The prepared row every variant uses: K int8 q, then K/32 f32 scales,
 * then K/32 int32 128 * sum(q): what the VNNI kernels take back after
 * flipping the weights to u8 (w + 128), kept multiplied so that it is one
 * broadcast operand; padded to 64 bytes.
 */
static inline size_t kern_q8_0_row_bytes(unsigned int K)
{
	return ((size_t)K + (size_t)K / Q8G * 8 + 63) & ~(size_t)63;
}

static inline const float *kern_q8_0_row_scales(const uint8_t *row,
						unsigned int K)
{
	return (const float *)(row + K);
}

static inline const int32_t *kern_q8_0_row_corr(const uint8_t *row,
						unsigned int K)
{
	return (const int32_t *)(row + K + (size_t)K / Q8G * 4);
}

static inline void kern_q8_0_prepare(const void *src, size_t src_stride,
				     enum kt_dtype dtype, unsigned int rows,
				     unsigned int K, uint8_t *dst,
				     size_t dst_stride)
{
	unsigned int r, g, k;
	float x[Q8G];

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint8_t *d = dst + r * dst_stride;
		float *sc = (float *)(d + K);
		int32_t *corr = (int32_t *)(d + K + (size_t)K / Q8G * 4);

		for (g = 0; g < K / Q8G; g++) {
			int t;

			for (k = 0; k < Q8G; k++)
				x[k] = dtype == KT_DTYPE_BF16 ?
					kern_bf16_to_f32(((const uint16_t *)s)[g * Q8G + k]) :
					((const float *)s)[g * Q8G + k];
			sc[g] = kern_q8_0_act_group(x, (int8_t *)d + g * Q8G,
						    &t);
			corr[g] = 128 * t;
		}
	}
}

#define KERN_DECLARE_Q8_0(isa)						\
	size_t kern_act_row_bytes_q8_0_##isa(unsigned int K,		\
					     unsigned int group);	\
	void kern_act_prepare_q8_0_##isa(const void *src,		\
			size_t src_stride, enum kt_dtype dtype,		\
			unsigned int rows, unsigned int K,		\
			unsigned int group, uint8_t *dst,		\
			size_t dst_stride);				\
	size_t kern_scratch_bytes_q8_0_##isa(const struct kern_geom *g,\
					     unsigned int max_m);	\
	void kern_gate_up_q8_0_##isa(const struct kern_gate_up_args *a);\
	void kern_down_q8_0_##isa(const struct kern_down_args *a)

KERN_DECLARE_Q8_0(scalar);
KERN_DECLARE_Q8_0(avx2);
KERN_DECLARE_Q8_0(avx512);
KERN_DECLARE_Q8_0(avx512vnni);
KERN_DECLARE_Q8_0(avx512bw);
KERN_DECLARE_Q8_0(avxvnni);
KERN_DECLARE_Q8_0(avxvnni_evex);	/* tests only */

#define KERN_Q8_0_OPS(isa)						\
	{								\
		.act_row_bytes = kern_act_row_bytes_q8_0_##isa,		\
		.act_prepare = kern_act_prepare_q8_0_##isa,		\
		.scratch_bytes = kern_scratch_bytes_q8_0_##isa,		\
		.gate_up = kern_gate_up_q8_0_##isa,			\
		.down = kern_down_q8_0_##isa,				\
	}

#endif /* KT_KERNELS_Q8_0_H */
