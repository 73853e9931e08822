// SPDX-License-Identifier: MIT
/*
 * moe-mxfp4-scalar.c - the scalar oracle of MXFP4: every weight
 * dequantized exactly to f32, e2m1(code) * 2^(e - 127) (ldexpf), times the
 * bf16 activation and summed in f32 in k order, one sum per output.
 */
#include "kernels/fp.h"
#include "kernels/fp8.h"
#include "kernels/mxfp4.h"

/* The weight (n, k) of a matrix with N rows, its tile found by @tile. */
static float mx_weight(const struct kern_mat *m, unsigned int N, size_t tile,
		       unsigned int n, unsigned int k)
{
	const uint8_t *t = m->tiles + kern_tile_off(tile);
	const uint8_t *e8 = (const uint8_t *)m->scales;
	unsigned int c = k % KERN_TILE_K_MXFP4;
	uint8_t b = t[kern_tile_byte(KT_QUANT_MXFP4, n % KERN_TILE_ROWS, c)];

	return kern_mxfp4_value(kern_mxfp4_hi(c) ? b >> 4 : b & 0xf,
				e8[kern_mxfp4_scale_idx(N, n,
							k / KERN_MXFP4_GROUP)]);
}

static float row_dot(const struct kern_mat *m, unsigned int N,
		     unsigned int K, unsigned int n, const uint16_t *x)
{
	float acc = 0.0f;
	unsigned int k;

	for (k = 0; k < K; k++)
		acc += kern_bf16_to_f32(x[k]) * mx_weight(m, N,
			kern_tile_rbm(K, KERN_TILE_K_MXFP4, n / KERN_TILE_ROWS,
				      k / KERN_TILE_K_MXFP4), n, k);
	return acc;
}

void kern_gate_up_mxfp4_scalar(const struct kern_gate_up_args *a)
{
	unsigned int i, n;

	for (i = 0; i < a->m; i++) {
		const uint16_t *x = (const uint16_t *)(a->act +
			a->act_rows[i] * a->act_stride);
		float *out = a->out + i * a->out_stride;

		for (n = a->n0; n < a->n1; n++)
			out[n - a->n0] = kern_glu_f32(a->glu, n,
				row_dot(a->gate, a->N, a->K, n, x),
				row_dot(a->up, a->N, a->K, n, x));
	}
}

/* One sum over [k0, k1) in k order; the chunks' rows are back to back. */
void kern_down_mxfp4_scalar(const struct kern_down_args *a)
{
	size_t crow = kern_act_row_bytes_fp8_scalar(a->kc, 0);
	unsigned int i, n, k;

	for (i = 0; i < a->m; i++) {
		const uint8_t *row = a->act + i * a->act_stride;
		float *y = a->y + a->y_rows[i] * a->y_stride;

		for (n = a->n0; n < a->n1; n++) {
			float acc = 0.0f;

			for (k = a->k0; k < a->k1; k++) {
				const uint16_t *x = (const uint16_t *)(row +
					(k - a->k0) / a->kc * crow);

				acc += kern_bf16_to_f32(x[k % a->kc]) *
				       mx_weight(a->down, a->N, kern_tile_kcm(
						a->N, a->kc, KERN_TILE_K_MXFP4,
						n / KERN_TILE_ROWS,
						k / KERN_TILE_K_MXFP4), n, k);
			}
			y[n] += a->w[i] * acc;
		}
	}
}
