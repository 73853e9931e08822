// SPDX-License-Identifier: MIT
/*
 * moe-mxfp4-avx512.c - MXFP4 experts on AVX-512 with vpdpwssd: every
 * 32-byte line of a tile (4 k of 16 rows) is widened in registers to the
 * two int16 lines of doubled E2M1 values it stands for (a vpermw table),
 * dotted with the tokens' activations quantized to int16 per group of 32
 * (once per call), and each group's exact int32 dot is multiplied by its
 * E8M0 scale 2^(e - 127) and the activations' group scale and summed in
 * f32.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define VEC_BITS	512
#define VEC_ISA		avx512
#include "kernels/mxfp4.h"
#include "kernels/mxfp4-xq.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/dispatch-m.h"
#include "kernels/mxfp4-zmm.h"

/* Tokens held in registers at once: 4 MR accumulators fit in 32 zmm. */
#define MR		6
#define PF_DIST		(4096)
#define NROW		KERN_TILE_ROWS
#define LINE		KERN_MXFP4_LINE
#define GL		KERN_MXFP4_GROUP_LINES
#define GROUP		KERN_MXFP4_GROUP
#define NG		(KERN_TILE_K_MXFP4 / GROUP)
#define DOWN_NSUB	1024

/*
 * @n bf16 at @src to int16 at @q per group of 32, by the power of two
 * that brings the group's largest magnitude into [2^14, 2^15): every
 * element within 2^7 of the largest (a bf16 has 8 significant bits) is
 * exact, smaller ones are rounded to nearest (an error below 2^-15 of the
 * largest). The scales (halved: the weights enter doubled) go to @s; a
 * group below 2^-111 reads as zeros, one holding NaN or inf as NaN.
 */
static void mx_quant(const uint8_t *src, unsigned int n, int16_t *q,
		     float *s)
{
	const __m512 sign = _mm512_set1_ps(-0.0f);
	unsigned int g;

	for (g = 0; g < n / GROUP; g++) {
		__m512 f0 = vf_load_bf16(src + g * 64);
		__m512 f1 = vf_load_bf16(src + g * 64 + 32);
		float amax = _mm512_reduce_max_ps(_mm512_max_ps(
			_mm512_andnot_ps(sign, f0),
			_mm512_andnot_ps(sign, f1)));
		uint32_t bits;
		int e;
		__m512 inv;

		memcpy(&bits, &amax, 4);
		e = (int)(bits >> 23);	/* amax >= 0: no sign bit */
		inv = _mm512_set1_ps(e > 15 ? pow2_biased(268 - e) : 0.0f);
		_mm256_storeu_si256((void *)(q + g * GROUP),
			_mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(
				_mm512_mul_ps(f0, inv))));
		_mm256_storeu_si256((void *)(q + g * GROUP + 16),
			_mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(
				_mm512_mul_ps(f1, inv))));
		s[g] = e > 15 ? pow2_biased(e - 15) : 0.0f;
		/* NaN or inf in the group: its dots come out NaN, as the
		 * oracle's do, not as saturated int16 */
		if (e == 255 || _mm512_cmp_ps_mask(f0, f1, _CMP_UNORD_Q))
			s[g] = NAN;
	}
}

/* 2 * E2M1 code i & 15 as int16 at word i (0..31), for vpermw. */
static inline __m512i mx_i16_table(void)
{
	return _mm512_set_epi16(-12, -8, -6, -4, -3, -2, -1, 0,
				12, 8, 6, 4, 3, 2, 1, 0,
				-12, -8, -6, -4, -3, -2, -1, 0,
				12, 8, 6, 4, 3, 2, 1, 0);
}

/* One 32-byte tile line to its two int16 lines (mx_bf16()'s order). */
AI void mx_i16(const uint8_t *p, __m512i tbl, __m512i *lo, __m512i *hi)
{
	__m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const void *)p));

	*lo = _mm512_permutexvar_epi16(w, tbl);
	*hi = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), tbl);
}

/*
 * One tile (16 rows x 128 k, four groups) of one matrix or (@two) two, for
 * M tokens whose int16 activations of these columns are at x[m] and their
 * group scales at xs[m]: adds sum_g dot_g * scale_g * xscale_g to o1[m]
 * (o2[m]). @s1, @s2: the E8M0 bytes of the tile's first group, the next
 * group's @sstride bytes on.
 *
 * vpdpwssd of doubled E2M1 values against int16 activations: a group's
 * dot is an exact int32 (at most 32 * 12 * 32767), so the chains that
 * hide its latency (four for one token, k and line parity) change no bit,
 * and the f32 sum over groups is the same for any M. Against vdpbf16ps
 * (one per 2.2 cycles, beside the widening's permutes on the same port)
 * half the cycles per line on Sapphire Rapids.
 */
AI void mk_mx(const uint8_t *w1, const uint8_t *w2, const int two,
	      const uint8_t *s1, const uint8_t *s2, size_t sstride,
	      const int16_t *const *x, const float *const *xs, const int M,
	      __m512 *o1, __m512 *o2)
{
	const int CH = M <= 1 ? 4 : M <= 3 ? 2 : 1;
	const __m512i tbl = mx_i16_table();
	__m512i a1[4][MR], a2[4][MR];
	int m, c, g, l;

	for (g = 0; g < NG; g++) {
		const uint8_t *p1 = w1 + g * GL * LINE, *p2 = w2 + g * GL * LINE;
		__m512 sc1, sc2;

#pragma GCC unroll 16
		for (c = 0; c < CH; c++)
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				a1[c][m] = a2[c][m] = _mm512_setzero_si512();
#pragma GCC unroll 8
		for (l = 0; l < GL; l++) {
			__m512i lo1, hi1, lo2 = _mm512_setzero_si512(), hi2 = lo2;
			/* chains: k parity, then line parity */
			const int c0 = CH == 4 ? 2 * (l & 1) : 0;
			const int c1 = CH == 1 ? 0 : c0 + 1;

			if (!(l & 1)) {
				_mm_prefetch((const char *)p1 + PF_DIST +
					     l * LINE, _MM_HINT_T0);
				if (two)
					_mm_prefetch((const char *)p2 + PF_DIST +
						     l * LINE, _MM_HINT_T0);
			}
			mx_i16(p1 + l * LINE, tbl, &lo1, &hi1);
			if (two)
				mx_i16(p2 + l * LINE, tbl, &lo2, &hi2);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				/* k 4l .. 4l + 3 of the group: 8 bytes */
				const int16_t *xp = x[m] + g * GROUP + l * 4;
				__m512i x0 = _mm512_set1_epi32(ld32(xp));
				__m512i x1 = _mm512_set1_epi32(ld32(xp + 2));

				a1[c0][m] = _mm512_dpwssd_epi32(a1[c0][m], lo1,
								x0);
				a1[c1][m] = _mm512_dpwssd_epi32(a1[c1][m], hi1,
								x1);
				if (two) {
					a2[c0][m] = _mm512_dpwssd_epi32(
						a2[c0][m], lo2, x0);
					a2[c1][m] = _mm512_dpwssd_epi32(
						a2[c1][m], hi2, x1);
				}
			}
		}
		sc1 = mx_scale16(s1 + g * sstride);
		sc2 = two ? mx_scale16(s2 + g * sstride) : sc1;
#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			const __m512 xv = _mm512_set1_ps(xs[m][g]);
			__m512i d1 = a1[0][m], d2 = a2[0][m];

#pragma GCC unroll 4
			for (c = 1; c < CH; c++) {
				d1 = _mm512_add_epi32(d1, a1[c][m]);
				d2 = _mm512_add_epi32(d2, a2[c][m]);
			}
			o1[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1),
						_mm512_mul_ps(sc1, xv), o1[m]);
			if (two)
				o2[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d2),
						_mm512_mul_ps(sc2, xv), o2[m]);
		}
	}
}

/* ---- gate + up ------------------------------------------------------------ */

AI void gu_block(const struct kern_gate_up_args *a, const struct mx_xq *xq,
		 unsigned int nb, unsigned int i0, const int M)
{
	const unsigned int nkb = a->K / KERN_TILE_K_MXFP4;
	const uint8_t *sg = (const uint8_t *)a->gate->scales + nb * NROW;
	const uint8_t *su = (const uint8_t *)a->up->scales + nb * NROW;
	const int16_t *xk[MR];
	const float *sk[MR];
	__m512 g[MR], u[MR];
	unsigned int kb;
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		g[m] = u[m] = _mm512_setzero_ps();
	for (kb = 0; kb < nkb; kb++) {
		size_t off = kern_tile_off(kern_tile_rbm(a->K,
				KERN_TILE_K_MXFP4, nb, kb));
		size_t so = (size_t)kb * NG * a->N;

#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			xk[m] = xq->q + (size_t)(i0 + m) * xq->K +
				kb * KERN_TILE_K_MXFP4;
			sk[m] = xq->s + (size_t)(i0 + m) * (xq->K / GROUP) +
				kb * NG;
		}
		mk_mx(a->gate->tiles + off, a->up->tiles + off, 1, sg + so,
		      su + so, a->N, xk, sk, M, g, u);
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		_mm512_storeu_ps(a->out + (i0 + m) * a->out_stride +
				 nb * NROW - a->n0,
				 vf_glu(a->glu, nb * NROW, g[m], u[m]));
}

/* Row blocks outer, token blocks inner: a block's tiles stay in L1/L2. */
void kern_gate_up_mxfp4_avx512(const struct kern_gate_up_args *a)
{
	const struct mx_xq xq = mx_xq_at(a->scratch, a->K, a->m);
	unsigned int nb, i0, mr;

	for (i0 = 0; i0 < a->m; i0++)
		mx_quant(a->act + a->act_rows[i0] * a->act_stride, a->K,
			 xq.q + (size_t)i0 * a->K,
			 xq.s + (size_t)i0 * (a->K / GROUP));
	for (nb = a->n0 / NROW; nb < a->n1 / NROW; nb++)
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			KERN_DISPATCH_M(gu_block, mr, a, &xq, nb, i0);
		}
}

/* ---- down -----------------------------------------------------------------
 * Chunks (one tile of KC = 128 per output block) outer, output blocks
 * inner, the partial sums per token and row in scratch (f32
 * [MR][DOWN_NSUB]); with more tokens than MR two output blocks share the
 * broadcasts.
 */

AI void down_block(const struct kern_down_args *a, const struct mx_xq *xq,
		   unsigned int i0, unsigned int ns0, unsigned int ns1,
		   float *part, const int M)
{
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nsub = ns1 - ns0;
	const uint8_t *e8 = (const uint8_t *)a->down->scales;
	unsigned int c, nb;
	int m;

	memset(part, 0, sizeof(float) * MR * nsub);
	for (c = c0; c < c1; c++) {
		const int16_t *x[MR];
		const float *xs[MR];

#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			x[m] = xq->q + (size_t)(i0 + m) * xq->K +
			       (c - c0) * a->kc;
			xs[m] = xq->s + (size_t)(i0 + m) * (xq->K / GROUP) +
				(c - c0) * (a->kc / GROUP);
		}
		for (nb = ns0 / NROW; nb < ns1 / NROW; nb++) {
			const uint8_t *tw = a->down->tiles + kern_tile_off(
				kern_tile_kcm(a->N, a->kc, KERN_TILE_K_MXFP4,
					      nb, c));
			const uint8_t *sp = e8 + kern_mxfp4_scale_idx(a->N,
				nb * NROW, c * NG);
			float *pp = part + (nb * NROW - ns0);
			__m512 r[MR], r2[MR];

#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				r[m] = r2[m] = _mm512_setzero_ps();
			/* the next block's tile is the next tile */
			if (a->m > MR && nb + 1 < ns1 / NROW) {
				mk_mx(tw, tw + KERN_TILE_BYTES, 1, sp,
				      sp + NROW, a->N, x, xs, M, r, r2);
#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					_mm512_storeu_ps(pp + m * nsub,
						_mm512_add_ps(r[m],
						_mm512_loadu_ps(pp + m * nsub)));
					_mm512_storeu_ps(pp + NROW + m * nsub,
						_mm512_add_ps(r2[m],
						_mm512_loadu_ps(pp + NROW +
								m * nsub)));
				}
				nb++;
				continue;
			}
			mk_mx(tw, tw, 0, sp, sp, a->N, x, xs, M, r, r2);
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				_mm512_storeu_ps(pp + m * nsub,
					_mm512_add_ps(r[m],
					_mm512_loadu_ps(pp + m * nsub)));
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		float *y = a->y + a->y_rows[i0 + m] * a->y_stride;
		__m512 w = _mm512_set1_ps(a->w[i0 + m]);
		unsigned int n;

		for (n = ns0; n < ns1; n += NROW)
			_mm512_storeu_ps(y + n, _mm512_fmadd_ps(w,
				_mm512_loadu_ps(part + m * nsub + n - ns0),
				_mm512_loadu_ps(y + n)));
	}
}

void kern_down_mxfp4_avx512(const struct kern_down_args *a)
{
	const size_t crow = ((size_t)a->kc * 2 + 63) & ~(size_t)63;
	const unsigned int K = a->k1 - a->k0, nc = K / a->kc;
	float *part = a->scratch;
	const struct mx_xq xq = mx_xq_at(part + MR * DOWN_NSUB, K, a->m);
	unsigned int i0, mr, ns0, ns1, c;

	/* a token's chunk rows (kc bf16, rows of crow bytes) in one row */
	for (i0 = 0; i0 < a->m; i0++)
		for (c = 0; c < nc; c++)
			mx_quant(a->act + i0 * a->act_stride + c * crow, a->kc,
				 xq.q + (size_t)i0 * K + c * a->kc,
				 xq.s + (size_t)i0 * (K / GROUP) +
				 c * (a->kc / GROUP));

	for (ns0 = a->n0; ns0 < a->n1; ns0 = ns1) {
		ns1 = a->n1 - ns0 < DOWN_NSUB ? a->n1 : ns0 + DOWN_NSUB;
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			KERN_DISPATCH_M(down_block, mr, a, &xq, i0, ns0, ns1,
					part);
		}
	}
}

size_t kern_scratch_bytes_mxfp4_avx512(const struct kern_geom *g,
				       unsigned int max_m)
{
	size_t k = g->hidden > g->inter ? g->hidden : g->inter;

	return sizeof(float) * MR * DOWN_NSUB + mx_xq_bytes(k, max_m);
}
