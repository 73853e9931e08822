// SPDX-License-Identifier: MIT
/*
 * q4_k-avx512.c - Q4_K on AVX-512 VNNI: the nibbles (0..15) are already
 * the unsigned operand of vpdpbusd, so each weight line gives two
 * sub-block dots (low and high nibbles) with no correction; per sub-block
 * the dots are scaled by the 6-bit scales (vpmulld) and the mins times the
 * activation sums collected, per activation block one f32 FMA, as the
 * oracle (q4_k-scalar.c).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/q4_k.h"
#include "kernels/simd.h"

#define AI	static inline __attribute__((always_inline))
#define MR	4
#define LINE	KERN_TILE_ROW_BYTES
#define PF	(4 * 1024)

size_t kern_act_row_bytes_q4_k_avx512(unsigned int K, unsigned int group)
{
	return kern_q4k_row_bytes(K);
}

void kern_act_prepare_q4_k_avx512(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	kern_q4k_prepare(src, src_stride, dtype, rows, K, dst, dst_stride);
}

size_t kern_scratch_bytes_q4_k_avx512(const struct kern_geom *g,
				      unsigned int max_m)
{
	return 0;
}

AI __m512i bcast(const uint8_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

AI __m512i u8x16(const uint8_t *p)
{
	return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

/*
 * One activation block of @nt tiles (consecutive in memory from @t) of
 * rows [n, n + 16): column @kw (in the weight matrix) of its first value,
 * @xo its offset in the activation rows x[m] (of K @kx), block @xb.
 */
AI void block(const uint8_t *t, unsigned int nt,
	      const struct kern_q4k_mat *s, unsigned int N, unsigned int n,
	      unsigned int kw, const uint8_t *const *x, unsigned int kx,
	      unsigned int xo, unsigned int xb, const int M, __m512 *acc)
{
	const __m512i lo4 = _mm512_set1_epi8(0x0f);
	__m512i sumi[MR], summ[MR];
	unsigned int tt, h, j;
	__m512 d, dm;
	int m;

	for (m = 0; m < M; m++)
		sumi[m] = summ[m] = _mm512_setzero_si512();
	for (tt = 0; tt < nt; tt++) {
		const uint8_t *tp = t + kern_tile_off(tt);

		for (h = 0; h < 2; h++) {
			/* sub-blocks: low nibbles k 32h.., high 64 + 32h.. */
			unsigned int k0 = kw + tt * KERN_TILE_K_INT4 + h * 32;
			unsigned int x0 = xo + tt * KERN_TILE_K_INT4 + h * 32;
			__m512i dl[MR], dh[MR], scl, sch, mnl, mnh;

			for (m = 0; m < M; m++)
				dl[m] = dh[m] = _mm512_setzero_si512();
#pragma GCC unroll 8
			for (j = 0; j < 8; j++) {
				const uint8_t *lp = tp + (h * 8 + j) * LINE;
				__m512i w = _mm512_loadu_si512(lp);
				__m512i wl = _mm512_and_si512(w, lo4);
				__m512i wh = _mm512_and_si512(
					_mm512_srli_epi16(w, 4), lo4);

				_mm_prefetch((const char *)lp + PF, _MM_HINT_T0);
				for (m = 0; m < M; m++) {
					dl[m] = _mm512_dpbusd_epi32(dl[m], wl,
						bcast(x[m] + x0 + j * 4));
					dh[m] = _mm512_dpbusd_epi32(dh[m], wh,
						bcast(x[m] + x0 + 64 + j * 4));
				}
			}
			scl = u8x16(s->sc + (size_t)(k0 / 32) * N + n);
			sch = u8x16(s->sc + (size_t)(k0 / 32 + 2) * N + n);
			mnl = u8x16(s->mn + (size_t)(k0 / 32) * N + n);
			mnh = u8x16(s->mn + (size_t)(k0 / 32 + 2) * N + n);
			for (m = 0; m < M; m++) {
				const int32_t *xs = kern_q4k_row_sums(x[m], kx);

				sumi[m] = _mm512_add_epi32(sumi[m],
					_mm512_add_epi32(
						_mm512_mullo_epi32(dl[m], scl),
						_mm512_mullo_epi32(dh[m], sch)));
				summ[m] = _mm512_add_epi32(summ[m],
					_mm512_add_epi32(
						_mm512_mullo_epi32(mnl,
							_mm512_set1_epi32(xs[x0 / 32])),
						_mm512_mullo_epi32(mnh,
							_mm512_set1_epi32(xs[x0 / 32 + 2]))));
			}
		}
	}
	d = _mm512_loadu_ps(s->d + (size_t)(kw / KERN_Q4_K_SUPER) * N + n);
	dm = _mm512_loadu_ps(s->dmin + (size_t)(kw / KERN_Q4_K_SUPER) * N + n);
	for (m = 0; m < M; m++)
		acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(
				kern_q4k_row_scales(x[m], kx)[xb]),
			_mm512_fmsub_ps(d, _mm512_cvtepi32_ps(sumi[m]),
				_mm512_mul_ps(dm, _mm512_cvtepi32_ps(summ[m]))),
			acc[m]);
}

/* gate or up rows [n, n + 16) for M tokens: K = H in blocks of 256 */
AI void mat_rows(const struct kern_mat *mat, unsigned int N, unsigned int K,
		 unsigned int n, const uint8_t *const *x, const int M,
		 __m512 *acc)
{
	struct kern_q4k_mat s;
	unsigned int b;
	int m;

	kern_q4k_mat_at(mat->scales, N, K, &s);
	for (m = 0; m < M; m++)
		acc[m] = _mm512_setzero_ps();
	for (b = 0; b < K / KERN_Q4_K_SUPER; b++)
		block(mat->tiles + kern_tile_off(kern_tile_rbm(K,
				KERN_TILE_K_INT4, n / KERN_TILE_ROWS, b * 2)),
		      2, &s, N, n, b * KERN_Q4_K_SUPER, x, K,
		      b * KERN_Q4_K_SUPER, b, M, acc);
}

AI void gate_up_block(const struct kern_gate_up_args *a, unsigned int n,
		      unsigned int i, const int M)
{
	const uint8_t *x[MR];
	__m512 fg[MR], fu[MR];
	float g16[16], u16[16];
	int m;

	for (m = 0; m < M; m++)
		x[m] = a->act + a->act_rows[i + m] * a->act_stride;
	mat_rows(a->gate, a->N, a->K, n, x, M, fg);
	mat_rows(a->up, a->N, a->K, n, x, M, fu);
	for (m = 0; m < M; m++) {
		_mm512_storeu_ps(g16, fg[m]);
		_mm512_storeu_ps(u16, fu[m]);
		kern_silu_mul_f32_avx512(a->out + (i + m) * a->out_stride +
					 (n - a->n0), g16, u16, 16);
	}
}

void kern_gate_up_q4_k_avx512(const struct kern_gate_up_args *a)
{
	unsigned int n, i;

	for (n = a->n0; n < a->n1; n += KERN_TILE_ROWS) {
		for (i = 0; i + MR <= a->m; i += MR)
			gate_up_block(a, n, i, MR);
		switch (a->m - i) {
		case 3:
			gate_up_block(a, n, i, 3);
			break;
		case 2:
			gate_up_block(a, n, i, 2);
			break;
		case 1:
			gate_up_block(a, n, i, 1);
			break;
		}
	}
}

/* down: each KC chunk is one activation block and KC / 128 tiles */
AI void down_block(const struct kern_down_args *a, unsigned int n,
		   unsigned int i, const int M)
{
	const unsigned int kc = a->kc, c0 = a->k0 / kc;
	const size_t crow = kern_q4k_row_bytes(kc);
	struct kern_q4k_mat s;
	const uint8_t *x[MR];
	__m512 f[MR];
	unsigned int c;
	int m;

	kern_q4k_mat_at(a->down->scales, a->N, a->K, &s);
	for (m = 0; m < M; m++)
		f[m] = _mm512_setzero_ps();
	for (c = c0; c < a->k1 / kc; c++) {
		for (m = 0; m < M; m++)
			x[m] = a->act + (i + m) * a->act_stride +
			       (c - c0) * crow;
		block(a->down->tiles + kern_tile_off(kern_tile_kcm(a->N, kc,
				KERN_TILE_K_INT4, n / KERN_TILE_ROWS,
				c * kc / KERN_TILE_K_INT4)),
		      kc / KERN_TILE_K_INT4, &s, a->N, n, c * kc, x, kc, 0, 0,
		      M, f);
	}
	for (m = 0; m < M; m++) {
		float *y = a->y + a->y_rows[i + m] * a->y_stride + n;

		_mm512_storeu_ps(y, _mm512_fmadd_ps(_mm512_set1_ps(a->w[i + m]),
						    f[m], _mm512_loadu_ps(y)));
	}
}

void kern_down_q4_k_avx512(const struct kern_down_args *a)
{
	unsigned int n, i;

	for (n = a->n0; n < a->n1; n += KERN_TILE_ROWS) {
		for (i = 0; i + MR <= a->m; i += MR)
			down_block(a, n, i, MR);
		switch (a->m - i) {
		case 3:
			down_block(a, n, i, 3);
			break;
		case 2:
			down_block(a, n, i, 2);
			break;
		case 1:
			down_block(a, n, i, 1);
			break;
		}
	}
}
