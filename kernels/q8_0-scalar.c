// SPDX-License-Identifier: MIT
/*
 * q8_0-scalar.c - the Q8_0 oracle: per group of 32, an int32 dot of the
 * int8 weights and activations times (weight scale * activation scale),
 * summed in f32, as ggml's reference vec_dot_q8_0_q8_0 does.
 */
#include "kernels/q8_0.h"

size_t kern_act_row_bytes_q8_0_scalar(unsigned int K, unsigned int group)
{
	return kern_q8_0_row_bytes(K);
}

void kern_act_prepare_q8_0_scalar(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	kern_q8_0_prepare(src, src_stride, dtype, rows, K, dst, dst_stride);
}

size_t kern_scratch_bytes_q8_0_scalar(const struct kern_geom *g,
				      unsigned int max_m)
{
	return 0;
}

/* int32 dot of group @g (32 values) of row @n, whose tiles are found by
 * @tile(kb), with the activations @x of that group */
static int32_t dot_group(const uint8_t *tile, unsigned int n, unsigned int g,
			 const int8_t *x)
{
	int32_t acc = 0;
	unsigned int c, c0 = (g % 2) * Q8G;

	for (c = 0; c < Q8G; c++)
		acc += (int32_t)(int8_t)tile[kern_tile_byte(KT_QUANT_Q8_0,
				n % KERN_TILE_ROWS, c0 + c)] * x[c];
	return acc;
}

static float row_dot(const struct kern_mat *m, unsigned int N, unsigned int K,
		     unsigned int n, const uint8_t *x)
{
	const float *xs = kern_q8_0_row_scales(x, K);
	float acc = 0.0f;
	unsigned int g;

	for (g = 0; g < K / Q8G; g++) {
		const uint8_t *t = m->tiles + kern_tile_off(kern_tile_rbm(
			K, KERN_TILE_K_INT8, n / KERN_TILE_ROWS,
			g * Q8G / KERN_TILE_K_INT8));
		int32_t d = dot_group(t, n, g, (const int8_t *)x + g * Q8G);

		acc += (float)d * (m->scales[(size_t)g * N + n] * xs[g]);
	}
	return acc;
}

void kern_gate_up_q8_0_scalar(const struct kern_gate_up_args *a)
{
	unsigned int i, n;

	for (i = 0; i < a->m; i++) {
		const uint8_t *x = a->act + a->act_rows[i] * a->act_stride;
		float *out = a->out + i * a->out_stride;

		for (n = a->n0; n < a->n1; n++)
			out[n - a->n0] = kern_glu_f32(a->glu, n,
				row_dot(a->gate, a->N, a->K, n, x),
				row_dot(a->up, a->N, a->K, n, x));
	}
}

void kern_down_q8_0_scalar(const struct kern_down_args *a)
{
	size_t crow = kern_q8_0_row_bytes(a->kc);
	unsigned int i, n, c, g, c0 = a->k0 / a->kc;

	for (i = 0; i < a->m; i++) {
		const uint8_t *row = a->act + i * a->act_stride;
		float *y = a->y + a->y_rows[i] * a->y_stride;

		for (n = a->n0; n < a->n1; n++) {
			float acc = 0.0f;

			for (c = c0; c < a->k1 / a->kc; c++) {
				const uint8_t *x = row + (c - c0) * crow;
				const float *xs = kern_q8_0_row_scales(x, a->kc);

				for (g = 0; g < a->kc / Q8G; g++) {
					unsigned int k = c * a->kc + g * Q8G;
					const uint8_t *t = a->down->tiles +
						kern_tile_off(kern_tile_kcm(
							a->N, a->kc,
							KERN_TILE_K_INT8,
							n / KERN_TILE_ROWS,
							k / KERN_TILE_K_INT8));
					int32_t d = dot_group(t, n, k / Q8G,
						(const int8_t *)x + g * Q8G);

					acc += (float)d * (a->down->scales[
						(size_t)(k / Q8G) * a->N + n] *
						xs[g]);
				}
			}
			y[n] += a->w[i] * acc;
		}
	}
}
