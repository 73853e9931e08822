// SPDX-License-Identifier: MIT
/*
 * qk-scalar.c - the K-quant oracle, as ggml's vec_dot_q{4,5,6}_K_q8_K: per
 * activation block (256, or a 128 down chunk) the int32 sums over its
 * sub-blocks, then one f32 step. Q4_K/Q5_K: sumi = sum_j sc_j * dot(q_j,
 * x_j), summ = sum_j m_j * sum(x_j) (j per 32), acc += dx * (d * sumi -
 * dmin * summ). Q6_K: sumi = sum_j sc_j * (dot(q_j, x_j) - 32 * sum(x_j))
 * (j per 16), acc += dx * (d * sumi).
 */
#include "kernels/qk.h"

/* value (0..15, 31 or 63) of row n, column k of a K-quant tile */
static int qval(const uint8_t *t, enum kt_quant q, unsigned int n,
		unsigned int k)
{
	unsigned int r = n % KERN_TILE_ROWS, c = k % KERN_TILE_K_INT4, sh;
	uint8_t b = t[kern_tile_byte(q, r, c)];
	int v = c < KERN_INT4_HI_K ? (b & 0xf) : (b >> 4);
	unsigned int hb = kern_qk_hi_bits(q);

	if (hb) {
		/* the byte first: it sets sh */
		unsigned int o = kern_qk_hi_byte(q, r, c, &sh);

		v |= ((t[o] >> sh) & ((1 << hb) - 1)) << 4;
	}
	return v;
}

/*
 * Row n of the [N][Kw] matrix @m over its columns [k0, k0 + K) against one
 * activation row of K (@kcm: the down's chunk-major tiles of chunk @kc).
 */
static float row_dot(enum kt_quant q, const struct kern_mat *m,
		     unsigned int N, unsigned int Kw, unsigned int n,
		     unsigned int k0, unsigned int K, const uint8_t *x,
		     bool kcm, unsigned int kc)
{
	struct kern_qk_rec s;
	const float *xs = kern_qk_row_scales(x, K);
	const int32_t *xsum = kern_qk_row_sums(x, K);
	unsigned int B = kern_qk_act_block(K), sg = kern_qk_sub(q), b, j, c;
	float acc = 0.0f;

	for (b = 0; b < K / B; b++) {
		unsigned int kb = k0 + b * B;
		int32_t sumi = 0, summ = 0;

		kern_qk_rec_at(q, m->scales, Kw, n, kb, &s);
		for (j = 0; j < B / sg; j++) {
			unsigned int k = kb + j * sg;
			size_t sj = (size_t)(k % KERN_Q4_K_SUPER / sg) *
				    KERN_QK_REC_ROWS;
			const uint8_t *t = m->tiles + kern_tile_off_q(q, kcm ?
				kern_tile_kcm(N, kc, KERN_TILE_K_INT4,
					      n / KERN_TILE_ROWS,
					      k / KERN_TILE_K_INT4) :
				kern_tile_rbm(Kw, KERN_TILE_K_INT4,
					      n / KERN_TILE_ROWS,
					      k / KERN_TILE_K_INT4));
			int32_t dot = 0, xj = xsum[(k - k0) / sg];

			for (c = 0; c < sg; c++)
				dot += qval(t, q, n, k + c) *
				       ((const int8_t *)x)[k - k0 + c];
			if (q == KT_QUANT_Q6_K) {
				sumi += (int32_t)(int8_t)s.sc[sj] * dot;
				summ += (int32_t)(int8_t)s.sc[sj] * xj;
			} else {
				sumi += (int32_t)s.sc[sj] * dot;
				summ += (int32_t)s.mn[sj] * xj;
			}
		}
		if (q == KT_QUANT_Q6_K)
			acc += xs[b] * (s.d[0] * (float)(sumi - 32 * summ));
		else
			acc += xs[b] * (s.d[0] * (float)sumi -
					s.dmin[0] * (float)summ);
	}
	return acc;
}

static void gate_up(enum kt_quant q, const struct kern_gate_up_args *a)
{
	unsigned int i, n;

	for (i = 0; i < a->m; i++) {
		const uint8_t *x = a->act + a->act_rows[i] * a->act_stride;
		float *out = a->out + i * a->out_stride;

		for (n = a->n0; n < a->n1; n++)
			out[n - a->n0] = kern_glu_f32(a->glu, n,
				row_dot(q, a->gate, a->N, a->K, n, 0, a->K, x,
					false, 0),
				row_dot(q, a->up, a->N, a->K, n, 0, a->K, x,
					false, 0));
	}
}

static void down(enum kt_quant q, const struct kern_down_args *a)
{
	size_t crow = kern_qk_row_bytes(a->kc, kern_qk_sub(q));
	unsigned int i, n, c, c0 = a->k0 / a->kc;

	for (i = 0; i < a->m; i++) {
		const uint8_t *row = a->act + i * a->act_stride;
		float *y = a->y + a->y_rows[i] * a->y_stride;

		for (n = a->n0; n < a->n1; n++) {
			float acc = 0.0f;

			for (c = c0; c < a->k1 / a->kc; c++)
				acc += row_dot(q, a->down, a->N, a->K, n,
					       c * a->kc, a->kc,
					       row + (c - c0) * crow, true,
					       a->kc);
			y[n] += a->w[i] * acc;
		}
	}
}

#define QK_SCALAR(t, Q)							\
size_t kern_act_row_bytes_##t##_scalar(unsigned int K, unsigned int group)\
{									\
	return kern_qk_row_bytes(K, kern_qk_sub(Q));			\
}									\
void kern_act_prepare_##t##_scalar(const void *src, size_t src_stride,	\
				   enum kt_dtype dtype, unsigned int rows,\
				   unsigned int K, unsigned int group,	\
				   uint8_t *dst, size_t dst_stride)	\
{									\
	kern_qk_prepare(src, src_stride, dtype, rows, K, kern_qk_sub(Q),\
			dst, dst_stride);				\
}									\
size_t kern_scratch_bytes_##t##_scalar(const struct kern_geom *g,	\
				       unsigned int max_m)		\
{									\
	return 0;							\
}									\
void kern_gate_up_##t##_scalar(const struct kern_gate_up_args *a)	\
{									\
	gate_up(Q, a);							\
}									\
void kern_down_##t##_scalar(const struct kern_down_args *a)		\
{									\
	down(Q, a);							\
}

QK_SCALAR(q4_k, KT_QUANT_Q4_K)
QK_SCALAR(q5_k, KT_QUANT_Q5_K)
QK_SCALAR(q6_k, KT_QUANT_Q6_K)
