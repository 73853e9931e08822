// SPDX-License-Identifier: MIT
/*
 * q4_k-scalar.c - the Q4_K oracle, as ggml's vec_dot_q4_K_q8_K: per
 * activation block (256, or a 128 down chunk) the int32 sums
 * sumi = sum_j sc_j * dot(q_j, x_j) and summ = sum_j m_j * sum(x_j) over
 * its sub-blocks of 32, then acc += dx * (d * sumi - dmin * summ) in f32.
 */
#include "kernels/q4_k.h"

size_t kern_act_row_bytes_q4_k_scalar(unsigned int K, unsigned int group)
{
	return kern_q4k_row_bytes(K);
}

void kern_act_prepare_q4_k_scalar(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	kern_q4k_prepare(src, src_stride, dtype, rows, K, dst, dst_stride);
}

size_t kern_scratch_bytes_q4_k_scalar(const struct kern_geom *g,
				      unsigned int max_m)
{
	return 0;
}

/* nibble (0..15) of row n, column k of an INT4-layout tile */
static int nib(const uint8_t *t, unsigned int n, unsigned int k)
{
	uint8_t b = t[kern_tile_byte(KT_QUANT_Q4_K, n % KERN_TILE_ROWS,
				     k % KERN_TILE_K_INT4)];

	return k % KERN_TILE_K_INT4 < KERN_INT4_HI_K ? (b & 0xf) : (b >> 4);
}

/*
 * Row n of the [N][Kw] matrix @m over its columns [k0, k0 + K) (@tile(k)
 * finds the tile of column k) against one activation row of K.
 */
static float row_dot(const struct kern_mat *m, unsigned int N,
		     unsigned int Kw, unsigned int n, unsigned int k0,
		     unsigned int K, const uint8_t *x, bool kcm,
		     unsigned int kc)
{
	struct kern_q4k_mat s;
	const float *xs = kern_q4k_row_scales(x, K);
	const int32_t *xsum = kern_q4k_row_sums(x, K);
	unsigned int B = kern_q4k_act_block(K), b, j, c;
	float acc = 0.0f;

	kern_q4k_mat_at(m->scales, N, Kw, &s);
	for (b = 0; b < K / B; b++) {
		unsigned int kb = k0 + b * B, sb = kb / KERN_Q4_K_SUPER;
		int32_t sumi = 0, summ = 0;

		for (j = 0; j < B / 32; j++) {
			unsigned int k = kb + j * 32;
			size_t sj = (size_t)(k / 32) * N + n;
			const uint8_t *t = m->tiles + kern_tile_off(kcm ?
				kern_tile_kcm(N, kc, KERN_TILE_K_INT4,
					      n / KERN_TILE_ROWS,
					      k / KERN_TILE_K_INT4) :
				kern_tile_rbm(Kw, KERN_TILE_K_INT4,
					      n / KERN_TILE_ROWS,
					      k / KERN_TILE_K_INT4));
			int32_t dot = 0;

			for (c = 0; c < 32; c++)
				dot += nib(t, n, k + c) *
				       ((const int8_t *)x)[k - k0 + c];
			sumi += (int32_t)s.sc[sj] * dot;
			summ += (int32_t)s.mn[sj] * xsum[(k - k0) / 32];
		}
		acc += xs[b] * (s.d[(size_t)sb * N + n] * (float)sumi -
				s.dmin[(size_t)sb * N + n] * (float)summ);
	}
	return acc;
}

void kern_gate_up_q4_k_scalar(const struct kern_gate_up_args *a)
{
	unsigned int i, n;

	for (i = 0; i < a->m; i++) {
		const uint8_t *x = a->act + a->act_rows[i] * a->act_stride;
		float *out = a->out + i * a->out_stride;

		for (n = a->n0; n < a->n1; n++)
			out[n - a->n0] =
				kern_silu_f32(row_dot(a->gate, a->N, a->K, n, 0,
						      a->K, x, false, 0)) *
				row_dot(a->up, a->N, a->K, n, 0, a->K, x,
					false, 0);
	}
}

void kern_down_q4_k_scalar(const struct kern_down_args *a)
{
	size_t crow = kern_q4k_row_bytes(a->kc);
	unsigned int i, n, c, c0 = a->k0 / a->kc;

	for (i = 0; i < a->m; i++) {
		const uint8_t *row = a->act + i * a->act_stride;
		float *y = a->y + a->y_rows[i] * a->y_stride;

		for (n = a->n0; n < a->n1; n++) {
			float acc = 0.0f;

			for (c = c0; c < a->k1 / a->kc; c++)
				acc += row_dot(a->down, a->N, a->K, n,
					       c * a->kc, a->kc,
					       row + (c - c0) * crow, true,
					       a->kc);
			y[n] += a->w[i] * acc;
		}
	}
}
