// SPDX-License-Identifier: MIT
/*
 * moe-fp8-scalar.c - the scalar oracle of FP8: bf16 activations times the
 * exact E4M3 values, an f32 sum per 128-column scale block in k order,
 * scaled by the block's scale and summed in f32.
 */
#include <string.h>

#include "kernels/fp.h"
#include "kernels/fp8.h"

size_t kern_act_row_bytes_fp8_scalar(unsigned int K, unsigned int group)
{
	return ((size_t)K * 2 + 63) & ~(size_t)63;
}

void kern_act_prepare_fp8_scalar(const void *src, size_t src_stride,
				 enum kt_dtype dtype, unsigned int rows,
				 unsigned int K, unsigned int group,
				 uint8_t *dst, size_t dst_stride)
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

/*
 * Sum over the 128 columns [k0, k0 + 128) of row n of x[k - k0] * w[n][k],
 * the tile of (n, k) found by @tile_of.
 */
static float block_dot(const uint8_t *tiles, size_t (*tile_of)(unsigned int,
		       unsigned int, unsigned int), unsigned int NK,
		       unsigned int n, unsigned int k0, const uint16_t *x)
{
	float acc = 0.0f;
	unsigned int k;

	for (k = k0; k < k0 + KERN_FP8_BLOCK; k++) {
		const uint8_t *t = tiles + kern_tile_off(tile_of(NK,
			n / KERN_TILE_ROWS, k / KERN_TILE_K_FP8));
		uint8_t b = t[kern_tile_byte(KT_QUANT_FP8, n % KERN_TILE_ROWS,
					     k % KERN_TILE_K_FP8)];

		/* bf16 x e4m3 is exact in f32 */
		acc += kern_bf16_to_f32(x[k - k0]) * kern_fp8_to_f32(b);
	}
	return acc;
}

/* gate/up: row-block-major over K. */
static size_t tile_gu(unsigned int K, unsigned int nb, unsigned int kb)
{
	return kern_tile_rbm(K, KERN_TILE_K_FP8, nb, kb);
}

/* down: k-chunk-major over N (KC = 128). */
static size_t tile_dn(unsigned int N, unsigned int nb, unsigned int kb)
{
	return kern_tile_kcm(N, KERN_DOWN_CHUNK, KERN_TILE_K_FP8, nb, kb);
}

/* Per 128-column block its dot times its scale (per row: the same one). */
static float row_dot(const struct kern_mat *m, unsigned int K,
		     unsigned int group, unsigned int n, const uint16_t *x)
{
	float acc = 0.0f;
	unsigned int k;

	for (k = 0; k < K; k += KERN_FP8_BLOCK)
		acc += block_dot(m->tiles, tile_gu, K, n, k, x + k) *
		       kern_fp8_scale(m->scales, group, K, n, k);
	return acc;
}

void kern_gate_up_fp8_scalar(const struct kern_gate_up_args *a)
{
	unsigned int i, n;

	for (i = 0; i < a->m; i++) {
		const uint16_t *x = (const uint16_t *)(a->act +
			a->act_rows[i] * a->act_stride);
		float *out = a->out + i * a->out_stride;

		for (n = a->n0; n < a->n1; n++)
			out[n - a->n0] = kern_glu_f32(a->glu, n,
				row_dot(a->gate, a->K, a->group, n, x),
				row_dot(a->up, a->K, a->group, n, x));
	}
}

/* Per chunk (one scale block along K) the block's dot times its scale. */
void kern_down_fp8_scalar(const struct kern_down_args *a)
{
	size_t crow = kern_act_row_bytes_fp8_scalar(a->kc, 0);
	unsigned int i, n, c;

	for (i = 0; i < a->m; i++) {
		const uint8_t *row = a->act + i * a->act_stride;
		float *y = a->y + a->y_rows[i] * a->y_stride;

		for (n = a->n0; n < a->n1; n++) {
			float acc = 0.0f;

			for (c = a->k0 / a->kc; c < a->k1 / a->kc; c++) {
				const uint16_t *x = (const uint16_t *)(row +
					(c - a->k0 / a->kc) * crow);

				acc += block_dot(a->down->tiles, tile_dn, a->N,
						 n, c * a->kc, x) *
				       kern_fp8_scale(a->down->scales, a->group,
						      a->K, n, c * a->kc);
			}
			y[n] += a->w[i] * acc;
		}
	}
}
