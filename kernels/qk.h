/* SPDX-License-Identifier: MIT */
/*
 * qk.h - what the K-quant kernels (GGUF super-blocks of 256: Q4_K, Q5_K,
 * Q6_K) of every variant share: the activation rows (Q8_K as ggml makes
 * them: per block of 256 an f32 scale amax/127, int32 sums of q per
 * sub-block) and the entry points the ops tables name.
 */
#ifndef KT_KERNELS_QK_H
#define KT_KERNELS_QK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/fp.h"
#include "kernels/kern.h"
#include "kernels/layout.h"
#include "kernels/qk-layout.h"

/*
 * Activation block: 256 (a Q8_K block) for rows of K = H; a down chunk of
 * K = KC = 128 is one block of 128, since each chunk of the intermediate
 * is quantized on its own (Documentation/formats.md).
 */
static inline unsigned int kern_qk_act_block(unsigned int K)
{
	return K % KERN_Q4_K_SUPER ? K : KERN_Q4_K_SUPER;
}

/*
 * A prepared row of K: K int8 q, K/B f32 scales, K/@sg int32 sums of q,
 * the same sums as int16 (they fit: 32 * 127; the vector kernels take
 * them in pairs, the operand of an int16 dot with the mins); padded to 64
 * bytes. Each part's byte offset follows from the one before.
 */
static inline size_t kern_qk_sums_off(unsigned int K)
{
	return K + (size_t)K / kern_qk_act_block(K) * 4;
}

static inline size_t kern_qk_hsums_off(unsigned int K, unsigned int sg)
{
	return kern_qk_sums_off(K) + (size_t)K / sg * 4;
}

static inline size_t kern_qk_row_bytes(unsigned int K, unsigned int sg)
{
	return (kern_qk_hsums_off(K, sg) + (size_t)K / sg * 2 + 63) &
	       ~(size_t)63;
}

static inline const float *kern_qk_row_scales(const uint8_t *row,
					      unsigned int K)
{
	return (const float *)(row + K);
}

static inline const int32_t *kern_qk_row_sums(const uint8_t *row,
					      unsigned int K)
{
	return (const int32_t *)(row + kern_qk_sums_off(K));
}

static inline const int16_t *kern_qk_row_hsums(const uint8_t *row,
					       unsigned int K, unsigned int sg)
{
	return (const int16_t *)(row + kern_qk_hsums_off(K, sg));
}

/* q = rint(x * 127 / amax) (ggml's nearest_int: nearest even), scale
 * amax / 127 in f32 (0 for a zero block), sums of q per @sg */
static inline void kern_qk_prepare(const void *src, size_t src_stride,
				   enum kt_dtype dtype, unsigned int rows,
				   unsigned int K, unsigned int sg,
				   uint8_t *dst, size_t dst_stride)
{
	unsigned int B = kern_qk_act_block(K), r, b, k;

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint8_t *d = dst + r * dst_stride;
		int8_t *q = (int8_t *)d;
		float *sc = (float *)(d + K);
		int32_t *sum = (int32_t *)(d + kern_qk_sums_off(K));
		int16_t *hsum = (int16_t *)(d + kern_qk_hsums_off(K, sg));

		for (b = 0; b < K / B; b++) {
			float amax = 0.0f, inv;

			for (k = b * B; k < (b + 1) * B; k++) {
				float v = dtype == KT_DTYPE_BF16 ?
					kern_bf16_to_f32(((const uint16_t *)s)[k]) :
					((const float *)s)[k];

				amax = fabsf(v) > amax ? fabsf(v) : amax;
			}
			inv = amax > 0.0f ? 127.0f / amax : 0.0f;
			sc[b] = amax / 127.0f;
			for (k = b * B; k < (b + 1) * B; k++) {
				float v = dtype == KT_DTYPE_BF16 ?
					kern_bf16_to_f32(((const uint16_t *)s)[k]) :
					((const float *)s)[k];

				q[k] = (int8_t)rintf(v * inv);
			}
		}
		for (b = 0; b < K / sg; b++) {
			int32_t t = 0;

			for (k = 0; k < sg; k++)
				t += q[b * sg + k];
			sum[b] = t;
			hsum[b] = (int16_t)t;
		}
	}
}

#define KERN_DECLARE_QK(t, isa)						\
	size_t kern_act_row_bytes_##t##_##isa(unsigned int K,		\
					      unsigned int group);	\
	void kern_act_prepare_##t##_##isa(const void *src,		\
			size_t src_stride, enum kt_dtype dtype,		\
			unsigned int rows, unsigned int K,		\
			unsigned int group, uint8_t *dst,		\
			size_t dst_stride);				\
	size_t kern_scratch_bytes_##t##_##isa(const struct kern_geom *g,\
					      unsigned int max_m);	\
	void kern_gate_up_##t##_##isa(const struct kern_gate_up_args *a);\
	void kern_down_##t##_##isa(const struct kern_down_args *a)

#define KERN_DECLARE_QK_ALL(isa)					\
	KERN_DECLARE_QK(q4_k, isa);					\
	KERN_DECLARE_QK(q5_k, isa);					\
	KERN_DECLARE_QK(q6_k, isa)

KERN_DECLARE_QK_ALL(scalar);
KERN_DECLARE_QK_ALL(avx2);
KERN_DECLARE_QK_ALL(avx512);
KERN_DECLARE_QK_ALL(avx512vnni);
KERN_DECLARE_QK_ALL(avx512bw);
KERN_DECLARE_QK_ALL(avxvnni);
KERN_DECLARE_QK_ALL(avxvnni_evex);	/* tests only */

#define KERN_QK_OPS(t, isa)						\
	{								\
		.act_row_bytes = kern_act_row_bytes_##t##_##isa,	\
		.act_prepare = kern_act_prepare_##t##_##isa,		\
		.scratch_bytes = kern_scratch_bytes_##t##_##isa,	\
		.gate_up = kern_gate_up_##t##_##isa,			\
		.down = kern_down_##t##_##isa,				\
	}

/* the ops table slots of the three K-quants of variant @isa */
#define KERN_QK_SLOTS(isa)						\
	[KT_QUANT_Q4_K] = KERN_QK_OPS(q4_k, isa),			\
	[KT_QUANT_Q5_K] = KERN_QK_OPS(q5_k, isa),			\
	[KT_QUANT_Q6_K] = KERN_QK_OPS(q6_k, isa)

#endif /* KT_KERNELS_QK_H */
