/* SPDX-License-Identifier: MIT */
/*
 * moe-vec.h - the parts of the SIMD MoE kernels that differ only in vector
 * width, written once over vec.h: the activation rows (Documentation/
 * simd.md) and the exp / SiLU array loops (the weighted add of a down
 * result into y: add-y-vec.h). Included by moe-zmm.h and moe-ymm.h.
 */
#ifndef KT_KERNELS_MOE_VEC_H
#define KT_KERNELS_MOE_VEC_H

#include "kernels/kern.h"
#include "kernels/dispatch-m.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/act-vec.h"
#include "kernels/add-y-vec.h"

/* ---- exp / SiLU over arrays (n a multiple of 16) -------------------------- */

void VNAME(kern_exp_f32)(float *out, const float *x, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i += VF_LANES)
		vf_store(out + i, vf_exp(vf_load(x + i)));
}

void VNAME(kern_silu_mul_f32)(float *out, const float *g, const float *u,
			      unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i += VF_LANES)
		vf_store(out + i, vf_silu_mul(vf_load(g + i), vf_load(u + i)));
}

/* ---- activation rows --------------------------------------------------------
 * INT8/INT4: K int8 values q = rint(x * 127 / amax), the f32 scale
 * amax / 127, then int32 sums of q: over the row (INT8) or each group
 * (INT4). BF16: K bf16 values (round to nearest even).
 */

size_t VNAME(kern_act_row_bytes_int8)(unsigned int K, unsigned int group)
{
	return kern_act_row_bytes_q(K, 0);
}

size_t VNAME(kern_act_row_bytes_int4)(unsigned int K, unsigned int group)
{
	return kern_act_row_bytes_q(K, group);
}

size_t VNAME(kern_act_row_bytes_bf16)(unsigned int K, unsigned int group)
{
	return kern_act_row_bytes_b16(K);
}

static void act_prepare_q(const void *src, size_t src_stride,
			  enum kt_dtype dtype, unsigned int rows,
			  unsigned int K, unsigned int group, uint8_t *dst,
			  size_t dst_stride)
{
	/* sums of q per group (INT4) or over the row (INT8) */
	unsigned int G = group ? group : K, r, g;

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint8_t *d = dst + r * dst_stride;
		float scale = act_quant_block(s, dtype, 0, K, (int8_t *)d) /
			      127.0f;

		memcpy(d + K, &scale, sizeof(scale));
		for (g = 0; g < K / G; g++) {
			int32_t sum = act_sum_q((const int8_t *)d + g * G, G);

			memcpy(d + K + 4 + 4 * g, &sum, 4);
		}
	}
}

void VNAME(kern_act_prepare_int8)(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	act_prepare_q(src, src_stride, dtype, rows, K, 0, dst, dst_stride);
}

void VNAME(kern_act_prepare_int4)(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	act_prepare_q(src, src_stride, dtype, rows, K, group, dst,
		      dst_stride);
}

#ifndef vf_store_bf16
/*
 * VF_LANES f32 at @s to bf16 at @d, nearest even, like kern_f32_to_bf16()
 * for finite inputs: u + 0x7fff + ((u >> 16) & 1), then the high half. A
 * file whose ISA converts by itself defines vf_store_bf16 first.
 */
AI void vf_store_bf16(void *d, const void *s)
{
	vi u = vi_load(s);

	u = vi_add32(u, vi_add32(vi_set1_32(0x7fff),
		     vi_and(vi_srli32(u, 16), vi_set1_32(1))));
	vi_store_lo16(d, vi_srli32(u, 16));
}
#endif

void VNAME(kern_act_prepare_bf16)(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	unsigned int r, k;

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint8_t *d = dst + r * dst_stride;

		if (dtype == KT_DTYPE_BF16) {
			memcpy(d, s, (size_t)K * 2);
			continue;
		}
		for (k = 0; k < K; k += VF_LANES)
			vf_store_bf16(d + 2 * (size_t)k, s + 4 * (size_t)k);
	}
}

AI float act_scale(const uint8_t *row, unsigned int K)
{
	float s;

	memcpy(&s, row + K, sizeof(s));
	return s;
}

/* ---- the rows of one register block of tokens --------------------------- */

/* Token i0 + m's gate/up activation row, its scale and its sums of q. */
AI void gu_rows(const struct kern_gate_up_args *a, unsigned int i0,
		const uint8_t **x, float *xs, const int32_t **gs, const int M)
{
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i0 + m] * a->act_stride;
		xs[m] = act_scale(x[m], a->K);
		gs[m] = (const int32_t *)(x[m] + a->K + 4);
	}
}

/*
 * Token i0 + m's prepared row of chunk @c of a down call, its scale (INT8,
 * INT4) broadcast and its sums of q.
 */
AI void down_rows(const struct kern_down_args *a, enum kt_quant q,
		  unsigned int i0, unsigned int c, const uint8_t **x, vf *xs,
		  const int32_t **gs, const int M)
{
	const size_t crow = q == KT_QUANT_BF16 ? (size_t)a->kc * 2 :
			    kern_act_row_bytes_q(a->kc, q == KT_QUANT_INT4 ?
						 a->group : 0);
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		x[m] = a->act + (i0 + m) * a->act_stride +
		       (c - a->k0 / a->kc) * crow;
		/* BF16 rows have no scale: 1, unused */
		xs[m] = vf_set1(q == KT_QUANT_BF16 ? 1.0f :
				act_scale(x[m], a->kc));
		gs[m] = (const int32_t *)(x[m] + a->kc + 4);
	}
}

/*
 * The entry points of a body over its static gate_up(a, q) and down(a, q),
 * with a scratch of MR x DOWN_NSUB f32 partial sums.
 */
#define MOE_VEC_ENTRIES()						\
void VNAME(kern_gate_up_int8)(const struct kern_gate_up_args *a)	\
{									\
	gate_up(a, KT_QUANT_INT8);					\
}									\
void VNAME(kern_gate_up_int4)(const struct kern_gate_up_args *a)	\
{									\
	gate_up(a, KT_QUANT_INT4);					\
}									\
void VNAME(kern_gate_up_bf16)(const struct kern_gate_up_args *a)	\
{									\
	gate_up(a, KT_QUANT_BF16);					\
}									\
void VNAME(kern_down_int8)(const struct kern_down_args *a)		\
{									\
	down(a, KT_QUANT_INT8);						\
}									\
void VNAME(kern_down_int4)(const struct kern_down_args *a)		\
{									\
	down(a, KT_QUANT_INT4);						\
}									\
void VNAME(kern_down_bf16)(const struct kern_down_args *a)		\
{									\
	down(a, KT_QUANT_BF16);						\
}									\
size_t VNAME(kern_scratch_bytes)(const struct kern_geom *g,		\
				 unsigned int max_m)			\
{									\
	return sizeof(float) * MR * DOWN_NSUB;				\
}

#endif /* KT_KERNELS_MOE_VEC_H */
