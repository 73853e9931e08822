// SPDX-License-Identifier: MIT
/*
 * q8_0-avx512.c - Q8_0 on AVX-512 VNNI: per group of 32 and block of 16
 * rows, vpdpbusd of the weight lines (flipped to u8, the 128 * sum(x) of
 * the group taken back) with the broadcast activations, then one FMA by
 * weight scale * activation scale. Same arithmetic as q8_0-scalar.c.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/q8_0.h"
#include "kernels/simd.h"

#define AI	static inline __attribute__((always_inline))
#define MR	4			/* tokens sharing each weight line */
#define LINE	KERN_TILE_ROW_BYTES
#define GLINES	(Q8G / KERN_TILE_LANE_BYTES)	/* lines of one group: 8 */
#define PF	(4 * 1024)		/* prefetch distance, bytes */

size_t kern_act_row_bytes_q8_0_avx512(unsigned int K, unsigned int group)
{
	return kern_q8_0_row_bytes(K);
}

void kern_act_prepare_q8_0_avx512(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	kern_q8_0_prepare(src, src_stride, dtype, rows, K, dst, dst_stride);
}

size_t kern_scratch_bytes_q8_0_avx512(const struct kern_geom *g,
				      unsigned int max_m)
{
	return 0;
}

AI __m512i wline(const uint8_t *p)
{
	return _mm512_xor_si512(_mm512_loadu_si512(p),
				_mm512_set1_epi8((char)0x80));
}

AI __m512i bcast(const uint8_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

/*
 * acc[m] += (dot of one group's 8 lines at @w with x[m] + @xo) scaled by
 * ws * (activation scale of group @xg of row x[m]); @K the row's K.
 */
AI void group_dot(const uint8_t *w, __m512 ws, const uint8_t *const *x,
		  unsigned int xo, unsigned int xg, unsigned int K,
		  const int M, __m512 *acc)
{
	__m512i d[MR];
	int m, j;

	for (m = 0; m < M; m++)
		d[m] = _mm512_setzero_si512();
#pragma GCC unroll 8
	for (j = 0; j < GLINES; j++) {
		__m512i wl = wline(w + j * LINE);

		_mm_prefetch((const char *)w + PF + j * LINE, _MM_HINT_T0);
		for (m = 0; m < M; m++)
			d[m] = _mm512_dpbusd_epi32(d[m], wl,
					bcast(x[m] + xo + j * 4));
	}
	for (m = 0; m < M; m++) {
		__m512i corr = _mm512_set1_epi32(
			128 * kern_q8_0_row_sums(x[m], K)[xg]);
		__m512 s = _mm512_mul_ps(ws, _mm512_set1_ps(
			kern_q8_0_row_scales(x[m], K)[xg]));

		acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(
			_mm512_sub_epi32(d[m], corr)), s, acc[m]);
	}
}

AI void gate_up_block(const struct kern_gate_up_args *a, unsigned int n,
		      unsigned int i, const int M)
{
	const unsigned int K = a->K, N = a->N;
	const size_t t0 = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_INT8,
						      n / KERN_TILE_ROWS, 0));
	const uint8_t *tg = a->gate->tiles + t0, *tu = a->up->tiles + t0;
	const uint8_t *x[MR];
	__m512 fg[MR], fu[MR];
	float g16[16], u16[16];
	unsigned int g;
	int m;

	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i + m] * a->act_stride;
		fg[m] = fu[m] = _mm512_setzero_ps();
	}
	/* group g is lines (g % 2) * 8 .. + 8 of tile g / 2: g * 512 bytes */
	for (g = 0; g < K / Q8G; g++) {
		group_dot(tg + (size_t)g * GLINES * LINE,
			  _mm512_loadu_ps(a->gate->scales + (size_t)g * N + n),
			  x, g * Q8G, g, K, M, fg);
		group_dot(tu + (size_t)g * GLINES * LINE,
			  _mm512_loadu_ps(a->up->scales + (size_t)g * N + n),
			  x, g * Q8G, g, K, M, fu);
	}
	for (m = 0; m < M; m++) {
		_mm512_storeu_ps(g16, fg[m]);
		_mm512_storeu_ps(u16, fu[m]);
		kern_silu_mul_f32_avx512(a->out + (i + m) * a->out_stride +
					 (n - a->n0), g16, u16, 16);
	}
}

void kern_gate_up_q8_0_avx512(const struct kern_gate_up_args *a)
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

AI void down_block(const struct kern_down_args *a, unsigned int n,
		   unsigned int i, const int M)
{
	const unsigned int kc = a->kc, c0 = a->k0 / kc;
	const size_t crow = kern_q8_0_row_bytes(kc);
	const uint8_t *x[MR];
	__m512 f[MR];
	unsigned int c, gg;
	int m;

	for (m = 0; m < M; m++)
		f[m] = _mm512_setzero_ps();
	for (c = c0; c < a->k1 / kc; c++) {
		for (m = 0; m < M; m++)
			x[m] = a->act + (i + m) * a->act_stride +
			       (c - c0) * crow;
		for (gg = 0; gg < kc / Q8G; gg++) {
			unsigned int k = c * kc + gg * Q8G;
			const uint8_t *t = a->down->tiles + kern_tile_off(
				kern_tile_kcm(a->N, kc, KERN_TILE_K_INT8,
					      n / KERN_TILE_ROWS,
					      k / KERN_TILE_K_INT8)) +
				(k % KERN_TILE_K_INT8) / Q8G * GLINES * LINE;

			group_dot(t, _mm512_loadu_ps(a->down->scales +
					(size_t)(k / Q8G) * a->N + n),
				  x, gg * Q8G, gg, kc, M, f);
		}
	}
	for (m = 0; m < M; m++) {
		float *y = a->y + a->y_rows[i + m] * a->y_stride + n;

		_mm512_storeu_ps(y, _mm512_fmadd_ps(_mm512_set1_ps(a->w[i + m]),
						    f[m], _mm512_loadu_ps(y)));
	}
}

void kern_down_q8_0_avx512(const struct kern_down_args *a)
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
