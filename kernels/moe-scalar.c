// SPDX-License-Identifier: MIT
/*
 * moe-scalar.c - the scalar oracle: plain loops over the packed layout with
 * the accumulation order the vector variants follow (int32 dots times
 * scales for INT8/INT4, f32 FMA of bf16 products for BF16).
 */
#include <math.h>
#include <string.h>

#include "kernels/fp.h"
#include "kernels/fp8.h"
#include "kernels/mxfp4.h"
#include "kernels/kern.h"
#include "kernels/layout.h"

/*
 * Prepared rows: INT8/INT4 are K int8 values then the f32 scale, padded to
 * 64 bytes; BF16 is K bf16 values.
 */
static size_t act_row_bytes_q8(unsigned int K, unsigned int group)
{
	return ((size_t)K + 4 + 63) & ~(size_t)63;
}

static size_t act_row_bytes_bf16(unsigned int K, unsigned int group)
{
	return ((size_t)K * 2 + 63) & ~(size_t)63;
}

static size_t scratch_none(const struct kern_geom *g, unsigned int max_m)
{
	return 0;
}

static float load_src(const uint8_t *row, enum kt_dtype dtype, unsigned int k)
{
	if (dtype == KT_DTYPE_BF16)
		return kern_bf16_to_f32(((const uint16_t *)row)[k]);
	return ((const float *)row)[k];
}

/* The contract of kern.h: scale = amax/127, q = rint(x * (127/amax)). */
static void act_prepare_q8(const void *src, size_t src_stride,
			   enum kt_dtype dtype, unsigned int rows,
			   unsigned int K, unsigned int group, uint8_t *dst,
			   size_t dst_stride)
{
	unsigned int r, k;

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint8_t *d = dst + r * dst_stride;
		float amax = 0.0f, inv, scale;

		for (k = 0; k < K; k++) {
			float v = fabsf(load_src(s, dtype, k));

			amax = v > amax ? v : amax;
		}
		inv = amax > 0.0f ? 127.0f / amax : 0.0f;
		scale = amax / 127.0f;
		for (k = 0; k < K; k++)
			d[k] = (uint8_t)(int8_t)rintf(load_src(s, dtype, k) *
						      inv);
		memcpy(d + K, &scale, sizeof(scale));
	}
}

static void act_prepare_bf16(const void *src, size_t src_stride,
			     enum kt_dtype dtype, unsigned int rows,
			     unsigned int K, unsigned int group, uint8_t *dst,
			     size_t dst_stride)
{
	unsigned int r, k;

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint16_t *d = (uint16_t *)(dst + r * dst_stride);

		for (k = 0; k < K; k++)
			d[k] = dtype == KT_DTYPE_BF16 ?
				((const uint16_t *)s)[k] :
				kern_f32_to_bf16(((const float *)s)[k]);
	}
}

static float act_scale(const uint8_t *row, unsigned int K)
{
	float s;

	memcpy(&s, row + K, sizeof(s));
	return s;
}

/* Tile of output row n, K block kb: row-block-major (gate, up). */
static const uint8_t *tile_rbm(const uint8_t *tiles, unsigned int K,
			       unsigned int kt, unsigned int n,
			       unsigned int kb)
{
	return tiles + kern_tile_off(kern_tile_rbm(K, kt, n / KERN_TILE_ROWS,
						  kb));
}

/* Tile of output row n, K block kb: k-chunk-major (down). */
static const uint8_t *tile_kcm(const uint8_t *tiles, unsigned int N,
			       unsigned int kc, unsigned int kt,
			       unsigned int n, unsigned int kb)
{
	return tiles + kern_tile_off(kern_tile_kcm(N, kc, kt,
						  n / KERN_TILE_ROWS, kb));
}

/* int32 dot of row r of an INT8 tile with its K int8 activations. */
static int32_t dot_tile_i8(const uint8_t *t, unsigned int r, const int8_t *x)
{
	int32_t acc = 0;
	unsigned int c;

	for (c = 0; c < KERN_TILE_K_INT8; c++)
		acc += (int32_t)(int8_t)t[kern_tile_byte(KT_QUANT_INT8, r, c)] *
		       x[c];
	return acc;
}

/* int32 dot of columns [c0, c0 + len) of row r of an INT4 tile. */
static int32_t dot_tile_i4(const uint8_t *t, unsigned int r,
			   const int8_t *x, unsigned int c0, unsigned int len)
{
	int32_t acc = 0;
	unsigned int c;

	for (c = c0; c < c0 + len; c++) {
		uint8_t b = t[kern_tile_byte(KT_QUANT_INT4, r, c)];
		int q = (c < KERN_INT4_HI_K ? (b & 0xf) : (b >> 4)) - 8;

		acc += q * x[c - c0];
	}
	return acc;
}

static float dot_tile_bf16(const uint8_t *t, unsigned int r,
			   const uint16_t *x, float acc)
{
	unsigned int c;

	for (c = 0; c < KERN_TILE_K_BF16; c++) {
		uint16_t w;

		memcpy(&w, t + kern_tile_byte(KT_QUANT_BF16, r, c), 2);
		/* a bf16 product is exact in f32: the same as fmaf */
		acc += kern_bf16_to_f32(x[c]) * kern_bf16_to_f32(w);
	}
	return acc;
}

/* gate or up row n times activation row x, in f32, row-block-major. */
static float row_dot_int8(const struct kern_mat *m, unsigned int K,
			  unsigned int n, const uint8_t *x)
{
	int32_t acc = 0;
	unsigned int kb;

	for (kb = 0; kb < K / KERN_TILE_K_INT8; kb++)
		acc += dot_tile_i8(tile_rbm(m->tiles, K, KERN_TILE_K_INT8, n,
					    kb), n % KERN_TILE_ROWS,
				   (const int8_t *)x + kb * KERN_TILE_K_INT8);
	return (float)acc * (act_scale(x, K) * m->scales[n]);
}

static float row_dot_int4(const struct kern_mat *m, unsigned int N,
			  unsigned int K, unsigned int group, unsigned int n,
			  const uint8_t *x)
{
	float acc = 0.0f;
	unsigned int g;

	for (g = 0; g < K / group; g++) {
		unsigned int k = g * group;
		int32_t d = dot_tile_i4(tile_rbm(m->tiles, K, KERN_TILE_K_INT4,
						 n, k / KERN_TILE_K_INT4),
					n % KERN_TILE_ROWS,
					(const int8_t *)x + k,
					k % KERN_TILE_K_INT4, group);

		acc += (float)d * m->scales[(size_t)g * N + n];
	}
	return acc * act_scale(x, K);
}

static float row_dot_bf16(const struct kern_mat *m, unsigned int K,
			  unsigned int n, const uint8_t *x)
{
	float acc = 0.0f;
	unsigned int kb;

	for (kb = 0; kb < K / KERN_TILE_K_BF16; kb++)
		acc = dot_tile_bf16(tile_rbm(m->tiles, K, KERN_TILE_K_BF16, n,
					     kb), n % KERN_TILE_ROWS,
				    (const uint16_t *)x + kb * KERN_TILE_K_BF16,
				    acc);
	return acc;
}

static void gate_up_common(const struct kern_gate_up_args *a,
			   enum kt_quant q)
{
	unsigned int i, n;

	for (i = 0; i < a->m; i++) {
		const uint8_t *x = a->act + a->act_rows[i] * a->act_stride;
		float *out = a->out + i * a->out_stride;

		for (n = a->n0; n < a->n1; n++) {
			float g, u;

			if (q == KT_QUANT_INT8) {
				g = row_dot_int8(a->gate, a->K, n, x);
				u = row_dot_int8(a->up, a->K, n, x);
			} else if (q == KT_QUANT_INT4) {
				g = row_dot_int4(a->gate, a->N, a->K,
						 a->group, n, x);
				u = row_dot_int4(a->up, a->N, a->K, a->group,
						 n, x);
			} else {
				g = row_dot_bf16(a->gate, a->K, n, x);
				u = row_dot_bf16(a->up, a->K, n, x);
			}
			out[n - a->n0] = kern_glu_f32(a->glu, n, g, u);
		}
	}
}

void kern_gate_up_int8_scalar(const struct kern_gate_up_args *a);
void kern_gate_up_int4_scalar(const struct kern_gate_up_args *a);
void kern_gate_up_bf16_scalar(const struct kern_gate_up_args *a);
void kern_down_int8_scalar(const struct kern_down_args *a);
void kern_down_int4_scalar(const struct kern_down_args *a);
void kern_down_bf16_scalar(const struct kern_down_args *a);

void kern_gate_up_int8_scalar(const struct kern_gate_up_args *a)
{
	gate_up_common(a, KT_QUANT_INT8);
}

void kern_gate_up_int4_scalar(const struct kern_gate_up_args *a)
{
	gate_up_common(a, KT_QUANT_INT4);
}

void kern_gate_up_bf16_scalar(const struct kern_gate_up_args *a)
{
	gate_up_common(a, KT_QUANT_BF16);
}

/* K of one tile, short for the deep loops of down */
#define KT8	KERN_TILE_K_INT8
#define KT4	KERN_TILE_K_INT4
#define KT16	KERN_TILE_K_BF16

/*
 * Down: per chunk, an int32 (INT8) or per-group (INT4) dot scaled by the
 * chunk's activation scale, summed in f32 over the chunks; then the weight
 * row scale (INT8), then w[i].
 */
void kern_down_int8_scalar(const struct kern_down_args *a)
{
	size_t crow = act_row_bytes_q8(a->kc, a->group);
	unsigned int i, n, c, kb;

	for (i = 0; i < a->m; i++) {
		const uint8_t *row = a->act + i * a->act_stride;
		float *y = a->y + a->y_rows[i] * a->y_stride;

		for (n = a->n0; n < a->n1; n++) {
			float acc = 0.0f;

			for (c = a->k0 / a->kc; c < a->k1 / a->kc; c++) {
				const uint8_t *x = row + (c - a->k0 / a->kc) *
					crow;
				int32_t d = 0;

				for (kb = 0; kb < a->kc / KT8; kb++)
					d += dot_tile_i8(
						tile_kcm(a->down->tiles, a->N,
							 a->kc, KT8, n,
							 c * (a->kc / KT8) + kb),
						n % KERN_TILE_ROWS,
						(const int8_t *)x + kb * KT8);
				acc += (float)d * act_scale(x, a->kc);
			}
			y[n] += a->w[i] * (acc * a->down->scales[n]);
		}
	}
}

void kern_down_int4_scalar(const struct kern_down_args *a)
{
	size_t crow = act_row_bytes_q8(a->kc, a->group);
	unsigned int i, n, c, g;

	for (i = 0; i < a->m; i++) {
		const uint8_t *row = a->act + i * a->act_stride;
		float *y = a->y + a->y_rows[i] * a->y_stride;

		for (n = a->n0; n < a->n1; n++) {
			float acc = 0.0f;

			for (c = a->k0 / a->kc; c < a->k1 / a->kc; c++) {
				const uint8_t *x = row + (c - a->k0 / a->kc) *
					crow;
				float cacc = 0.0f;

				for (g = 0; g < a->kc / a->group; g++) {
					unsigned int k = c * a->kc +
						g * a->group;
					int32_t d = dot_tile_i4(
						tile_kcm(a->down->tiles, a->N,
							 a->kc, KT4, n,
							 k / KT4),
						n % KERN_TILE_ROWS,
						(const int8_t *)x + g * a->group,
						k % KT4, a->group);

					cacc += (float)d * a->down->scales[
						(size_t)(k / a->group) * a->N +
						n];
				}
				acc += cacc * act_scale(x, a->kc);
			}
			y[n] += a->w[i] * acc;
		}
	}
}

void kern_down_bf16_scalar(const struct kern_down_args *a)
{
	size_t crow = act_row_bytes_bf16(a->kc, 0);
	unsigned int i, n, c, kb;

	for (i = 0; i < a->m; i++) {
		const uint8_t *row = a->act + i * a->act_stride;
		float *y = a->y + a->y_rows[i] * a->y_stride;

		for (n = a->n0; n < a->n1; n++) {
			float acc = 0.0f;

			for (c = a->k0 / a->kc; c < a->k1 / a->kc; c++) {
				const uint16_t *x = (const uint16_t *)(row +
					(c - a->k0 / a->kc) * crow);

				for (kb = 0; kb < a->kc / KT16; kb++)
					acc = dot_tile_bf16(
						tile_kcm(a->down->tiles, a->N,
							 a->kc, KT16, n,
							 c * (a->kc / KT16) + kb),
						n % KERN_TILE_ROWS, x + kb * KT16,
						acc);
			}
			y[n] += a->w[i] * acc;
		}
	}
}

#include "kernels/qk.h"
#include "kernels/q8_0.h"

const struct kern_ops kern_ops_scalar = {
	.isa = KT_ISA_SCALAR,
	.name = "scalar",
	.q = {
		[KT_QUANT_INT8] = {
			.act_row_bytes = act_row_bytes_q8,
			.act_prepare = act_prepare_q8,
			.scratch_bytes = scratch_none,
			.gate_up = kern_gate_up_int8_scalar,
			.down = kern_down_int8_scalar,
		},
		[KT_QUANT_INT4] = {
			.act_row_bytes = act_row_bytes_q8,
			.act_prepare = act_prepare_q8,
			.scratch_bytes = scratch_none,
			.gate_up = kern_gate_up_int4_scalar,
			.down = kern_down_int4_scalar,
		},
		[KT_QUANT_BF16] = {
			.act_row_bytes = act_row_bytes_bf16,
			.act_prepare = act_prepare_bf16,
			.scratch_bytes = scratch_none,
			.gate_up = kern_gate_up_bf16_scalar,
			.down = kern_down_bf16_scalar,
		},
		[KT_QUANT_FP8] = {
			.act_row_bytes = kern_act_row_bytes_fp8_scalar,
			.act_prepare = kern_act_prepare_fp8_scalar,
			.scratch_bytes = scratch_none,
			.gate_up = kern_gate_up_fp8_scalar,
			.down = kern_down_fp8_scalar,
		},
		/* MXFP4 reads the same bf16 rows as FP8 */
		[KT_QUANT_MXFP4] = {
			.act_row_bytes = kern_act_row_bytes_fp8_scalar,
			.act_prepare = kern_act_prepare_fp8_scalar,
			.scratch_bytes = scratch_none,
			.gate_up = kern_gate_up_mxfp4_scalar,
			.down = kern_down_mxfp4_scalar,
		},
		[KT_QUANT_Q8_0] = KERN_Q8_0_OPS(scalar),
		KERN_QK_SLOTS(scalar),
	},
};
