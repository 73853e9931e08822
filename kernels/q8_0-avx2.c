// SPDX-License-Identifier: MIT
/*
 * q8_0-avx2.c - Q8_0 on AVX2: each 64-byte weight line is two halves of 8
 * rows; per group of 32, vpmaddubsw of |w| with x signed by w (no
 * saturation: 2 * 128 * 127 < 32768) and vpmaddwd by ones give the int32
 * dot, then one FMA by weight scale * activation scale, as the oracle.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/q8_0.h"
#include "kernels/simd.h"

#define AI	static inline __attribute__((always_inline))
#define MR	2			/* tokens sharing each weight line */
#define LINE	KERN_TILE_ROW_BYTES
#define GLINES	(Q8G / KERN_TILE_LANE_BYTES)	/* lines of one group: 8 */
#define HALF	(LINE / 2)		/* bytes of 8 rows of a line */
#define PF	(4 * 1024)

size_t kern_act_row_bytes_q8_0_avx2(unsigned int K, unsigned int group)
{
	return kern_q8_0_row_bytes(K);
}

void kern_act_prepare_q8_0_avx2(const void *src, size_t src_stride,
				enum kt_dtype dtype, unsigned int rows,
				unsigned int K, unsigned int group,
				uint8_t *dst, size_t dst_stride)
{
	kern_q8_0_prepare(src, src_stride, dtype, rows, K, dst, dst_stride);
}

size_t kern_scratch_bytes_q8_0_avx2(const struct kern_geom *g,
				    unsigned int max_m)
{
	return 0;
}

AI __m256i bcast(const uint8_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

/*
 * acc[m] += dot of one group's 8 half lines at @w (8 rows) with x[m] + @xo,
 * times ws * activation scale of group @xg (@K the activation row's K).
 */
AI void group_dot(const uint8_t *w, __m256 ws, const uint8_t *const *x,
		  unsigned int xo, unsigned int xg, unsigned int K,
		  const int M, __m256 *acc)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i d[MR];
	int m, j;

	for (m = 0; m < M; m++)
		d[m] = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (j = 0; j < GLINES; j++) {
		__m256i wl = _mm256_loadu_si256((const void *)(w + j * LINE));
		__m256i aw = _mm256_abs_epi8(wl);

		_mm_prefetch((const char *)w + PF + j * LINE, _MM_HINT_T0);
		for (m = 0; m < M; m++) {
			__m256i xs = _mm256_sign_epi8(bcast(x[m] + xo + j * 4),
						      wl);

			d[m] = _mm256_add_epi32(d[m], _mm256_madd_epi16(
				_mm256_maddubs_epi16(aw, xs), ones));
		}
	}
	for (m = 0; m < M; m++)
		acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[m]),
			_mm256_mul_ps(ws, _mm256_set1_ps(
				kern_q8_0_row_scales(x[m], K)[xg])), acc[m]);
}

/* rows [n, n + 8) of half @h of their 16-row block */
AI void gate_up_block(const struct kern_gate_up_args *a, unsigned int n,
		      unsigned int h, unsigned int i, const int M)
{
	const unsigned int K = a->K, N = a->N, r = n + h * 8;
	const size_t t0 = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_INT8,
						      n / KERN_TILE_ROWS, 0)) +
			  h * HALF;
	const uint8_t *tg = a->gate->tiles + t0, *tu = a->up->tiles + t0;
	const uint8_t *x[MR];
	__m256 fg[MR], fu[MR];
	float g8[16], u8[16];
	unsigned int g;
	int m;

	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i + m] * a->act_stride;
		fg[m] = fu[m] = _mm256_setzero_ps();
	}
	for (g = 0; g < K / Q8G; g++) {
		group_dot(tg + (size_t)g * GLINES * LINE,
			  _mm256_loadu_ps(a->gate->scales + (size_t)g * N + r),
			  x, g * Q8G, g, K, M, fg);
		group_dot(tu + (size_t)g * GLINES * LINE,
			  _mm256_loadu_ps(a->up->scales + (size_t)g * N + r),
			  x, g * Q8G, g, K, M, fu);
	}
	for (m = 0; m < M; m++) {
		float o[16];

		/* the variant's silu works on 16 floats at a time */
		_mm256_storeu_ps(g8, fg[m]);
		_mm256_storeu_ps(u8, fu[m]);
		memset(g8 + 8, 0, 32);
		memset(u8 + 8, 0, 32);
		kern_silu_mul_f32_avx2(o, g8, u8, 16);
		memcpy(a->out + (i + m) * a->out_stride + (r - a->n0), o, 32);
	}
}

void kern_gate_up_q8_0_avx2(const struct kern_gate_up_args *a)
{
	unsigned int n, h, i;

	for (n = a->n0; n < a->n1; n += KERN_TILE_ROWS)
		for (h = 0; h < 2; h++) {
			for (i = 0; i + MR <= a->m; i += MR)
				gate_up_block(a, n, h, i, MR);
			if (i < a->m)
				gate_up_block(a, n, h, i, 1);
		}
}

AI void down_block(const struct kern_down_args *a, unsigned int n,
		   unsigned int h, unsigned int i, const int M)
{
	const unsigned int kc = a->kc, c0 = a->k0 / kc, r = n + h * 8;
	const size_t crow = kern_q8_0_row_bytes(kc);
	const uint8_t *x[MR];
	__m256 f[MR];
	unsigned int c, gg;
	int m;

	for (m = 0; m < M; m++)
		f[m] = _mm256_setzero_ps();
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
				(k % KERN_TILE_K_INT8) / Q8G * GLINES * LINE +
				h * HALF;

			group_dot(t, _mm256_loadu_ps(a->down->scales +
					(size_t)(k / Q8G) * a->N + r),
				  x, gg * Q8G, gg, kc, M, f);
		}
	}
	for (m = 0; m < M; m++) {
		float *y = a->y + a->y_rows[i + m] * a->y_stride + r;

		_mm256_storeu_ps(y, _mm256_fmadd_ps(_mm256_set1_ps(a->w[i + m]),
						    f[m], _mm256_loadu_ps(y)));
	}
}

void kern_down_q8_0_avx2(const struct kern_down_args *a)
{
	unsigned int n, h, i;

	for (n = a->n0; n < a->n1; n += KERN_TILE_ROWS)
		for (h = 0; h < 2; h++) {
			for (i = 0; i + MR <= a->m; i += MR)
				down_block(a, n, h, i, MR);
			if (i < a->m)
				down_block(a, n, h, i, 1);
		}
}
