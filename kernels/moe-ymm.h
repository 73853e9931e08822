/* SPDX-License-Identifier: MIT */
/*
 * moe-ymm.h - the body of the 256-bit variants: AVX2 (vpmaddubsw and
 * vpmaddwd by ones, FMA on bf16 widened by a shift) and, with YMM_VNNI,
 * AVX-VNNI (256-bit vpdpbusd). Included by moe-avx2.c and
 * moe-avxvnni.c, which define YMM_ISA (the name suffix) and YMM_VNNI.
 *
 * A 64-byte tile line is two halves of 8 output rows; each micro-kernel
 * call computes one half, so the 16-row block is two passes over its
 * tiles, the second from cache.
 */
#define VEC_BITS	256
#define VEC_ISA		YMM_ISA
#include "kernels/moe-vec.h"

/* Tokens per register block: limited by 16 ymm registers. */
#define MR		4
#define PF_DIST		(4 * 1024)
#define DOWN_NSUB	1024
/* The packed layout (layout.h): a weight line is one tile row, 16 lines
 * per tile, one 32-bit lane per output row and line; a half line holds
 * the lanes of HROW rows. */
#define LINE		KERN_TILE_ROW_BYTES
#define NLINE		KERN_TILE_LINES
#define NROW		KERN_TILE_ROWS
#define LANE		KERN_TILE_LANE_BYTES
#define HROW		(NROW / 2)

/*
 * The weight line PF_DIST ahead of a stream, into L1 (@l1) or L2: gate and
 * up streamed together (INT8, BF16) into L1, every other stream (down's
 * chunks, INT4's one matrix at a time) into L2. One core of a Zen 4 (32 KiB
 * L1), us per expert, H 2048, I 768, T = 1: L2 made INT8 gate+up 166 ->
 * 191 and BF16 345 -> 370, INT8 down 110 -> 96, BF16 down 227 -> 197,
 * INT4 gate+up 143 -> 128; at 6 and 32 tokens within 4%.
 */
AI void pf_line(const uint8_t *p, const int l1)
{
	if (l1)
		_mm_prefetch((const char *)p, _MM_HINT_T0);
	else
		_mm_prefetch((const char *)p, _MM_HINT_T1);
}

/* ---- micro-kernels: 8 output rows (one half line), M tokens ------------- */

/*
 * INT8: @two matrices (gate and up) or one; half @h of each line; int32
 * dots of the 8 rows per token in og/ou. AVX2 has vpmaddubsw (u8 * s8)
 * where VNNI has vpdpbusd: |w| is the unsigned operand and x takes w's
 * sign (vpsignb), each pair sum at most 2 * 128 * 127, within int16; then
 * vpmaddwd by ones. The same int32 dots either way.
 */
AI void mk_i8(const uint8_t *gw, const uint8_t *uw, const int two,
	      unsigned int h, unsigned int nt, const uint8_t *const *x,
	      const int32_t *const *xsum, const int M, __m256i *og,
	      __m256i *ou)
{
#if YMM_VNNI
	const __m256i flip = _mm256_set1_epi8((char)0x80);
#else
	const __m256i ones = _mm256_set1_epi16(1);
#endif
	__m256i ag[MR], au[MR];
	unsigned int t;
	int m, j;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		ag[m] = au[m] = _mm256_setzero_si256();
	for (t = 0; t < nt; t++) {
		const uint8_t *tg = gw + kern_tile_off(t) + h * HROW * LANE;
		const uint8_t *tu = two ? uw + kern_tile_off(t) + h * HROW * LANE : NULL;

#pragma GCC unroll 16
		for (j = 0; j < NLINE; j++) {
			__m256i wg = _mm256_loadu_si256((const void *)
							(tg + j * LINE));
			__m256i wu = wg;

			if (!h)
				pf_line(tg + PF_DIST + j * LINE, two);
			if (two) {
				wu = _mm256_loadu_si256((const void *)
							(tu + j * LINE));
				if (!h)
					pf_line(tu + PF_DIST + j * LINE, 1);
			}
#if YMM_VNNI
			/* weights flipped to u8 once per line, as in
			 * moe-zmm.h; 128 * sum(x) comes back at the end */
			wg = _mm256_xor_si256(wg, flip);
			wu = _mm256_xor_si256(wu, flip);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m256i xb = _mm256_set1_epi32(ld32(x[m] +
						t * KERN_TILE_K_INT8 + j * LANE));

				ag[m] = _mm256_dpbusd_avx_epi32(ag[m], wg, xb);
				if (two)
					au[m] = _mm256_dpbusd_avx_epi32(au[m],
								wu, xb);
			}
#else
			{
				__m256i ga = _mm256_abs_epi8(wg);
				__m256i ua = _mm256_abs_epi8(wu);

#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					__m256i xb = _mm256_set1_epi32(ld32(
						x[m] + t * KERN_TILE_K_INT8 +
						j * LANE));

					ag[m] = _mm256_add_epi32(ag[m],
						_mm256_madd_epi16(
						_mm256_maddubs_epi16(ga,
						_mm256_sign_epi8(xb, wg)),
						ones));
					if (two)
						au[m] = _mm256_add_epi32(au[m],
							_mm256_madd_epi16(
							_mm256_maddubs_epi16(ua,
							_mm256_sign_epi8(xb,
									 wu)),
							ones));
				}
			}
#endif
		}
	}
#if YMM_VNNI
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		__m256i corr = _mm256_set1_epi32(128 * xsum[m][0]);

		og[m] = _mm256_sub_epi32(ag[m], corr);
		if (two)
			ou[m] = _mm256_sub_epi32(au[m], corr);
	}
#else
	(void)xsum;
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		og[m] = ag[m];
		if (two)
			ou[m] = au[m];
	}
#endif
}

/*
 * INT4, one matrix, half @h: nibbles (q + 8) times activations, minus
 * 8 * sum(x) per group, times the group's scales; f32 per token. The
 * nibbles are the unsigned operand of vpdpbusd, or on AVX2 of vpmaddubsw:
 * its pair sums (at most 2 * 15 * 127) gather eight lines in int16 before
 * vpmaddwd by ones folds them into the int32 dots, the same integers.
 */
AI void mk_i4(const uint8_t *w, unsigned int h, unsigned int nt,
	      const uint8_t *const *x, const int32_t *const *gs,
	      const float *ws, size_t ws_stride, unsigned int G, const int M,
	      __m256 *out)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0f);
	__m256i al[MR], ah[MR];
#if !YMM_VNNI
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i sl[MR], sh[MR];
#endif
	__m256 f[MR];
	unsigned int t;
	int m, j;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		al[m] = ah[m] = _mm256_setzero_si256();
#if !YMM_VNNI
		sl[m] = sh[m] = _mm256_setzero_si256();
#endif
		f[m] = _mm256_setzero_ps();
	}
	for (t = 0; t < nt; t++) {
		const uint8_t *tw = w + kern_tile_off(t) + h * HROW * LANE;

#pragma GCC unroll 16
		for (j = 0; j < NLINE; j++) {
			__m256i wv = _mm256_loadu_si256((const void *)
							(tw + j * LINE));
			__m256i wl = _mm256_and_si256(wv, lo4);
			__m256i wh = _mm256_and_si256(
				_mm256_srli_epi16(wv, 4), lo4);

			if (!h)
				pf_line(tw + PF_DIST + j * LINE, 0);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				const uint8_t *xp = x[m] + t * KERN_TILE_K_INT4 + j * LANE;
				__m256i xl = _mm256_set1_epi32(ld32(xp));
				__m256i xh = _mm256_set1_epi32(ld32(xp +
							KERN_INT4_HI_K));

#if YMM_VNNI
				al[m] = _mm256_dpbusd_avx_epi32(al[m], wl, xl);
				ah[m] = _mm256_dpbusd_avx_epi32(ah[m], wh, xh);
#else
				sl[m] = _mm256_add_epi16(sl[m],
					_mm256_maddubs_epi16(wl, xl));
				sh[m] = _mm256_add_epi16(sh[m],
					_mm256_maddubs_epi16(wh, xh));
				if ((j & 7) == 7) {
					al[m] = _mm256_add_epi32(al[m],
						_mm256_madd_epi16(sl[m], ones));
					ah[m] = _mm256_add_epi32(ah[m],
						_mm256_madd_epi16(sh[m], ones));
					sl[m] = sh[m] = _mm256_setzero_si256();
				}
#endif
			}
			if ((G == 32 && j == NLINE / 2 - 1) ||
			    j == NLINE - 1) {
				unsigned int gl = t * (KERN_TILE_K_INT4 / G) +
						  (G == 32 && j == NLINE - 1);
				unsigned int gh = gl + KERN_INT4_HI_K / G;

#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					__m256i dl = al[m], dh = ah[m];

					if (G == 128) {
						dl = _mm256_add_epi32(dl, dh);
						dl = _mm256_sub_epi32(dl,
							_mm256_set1_epi32(
							8 * gs[m][gl]));
						f[m] = _mm256_fmadd_ps(
							_mm256_cvtepi32_ps(dl),
							_mm256_loadu_ps(ws +
							gl * ws_stride), f[m]);
					} else {
						dl = _mm256_sub_epi32(dl,
							_mm256_set1_epi32(
							8 * gs[m][gl]));
						dh = _mm256_sub_epi32(dh,
							_mm256_set1_epi32(
							8 * gs[m][gh]));
						f[m] = _mm256_fmadd_ps(
							_mm256_cvtepi32_ps(dl),
							_mm256_loadu_ps(ws +
							gl * ws_stride), f[m]);
						f[m] = _mm256_fmadd_ps(
							_mm256_cvtepi32_ps(dh),
							_mm256_loadu_ps(ws +
							gh * ws_stride), f[m]);
					}
					al[m] = ah[m] = _mm256_setzero_si256();
				}
			}
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		out[m] = f[m];
}

/*
 * BF16 with FMA: weights and activations widened to f32 by a shift (even
 * k) or a mask (odd k); one FMA chain per token in k order, as the oracle.
 */
AI void mk_bf16(const uint8_t *gw, const uint8_t *uw, const int two,
		unsigned int h, unsigned int nt, const uint8_t *const *x,
		const int M, __m256 *og, __m256 *ou)
{
	const __m256i hi16 = _mm256_set1_epi32((int)0xffff0000u);
	unsigned int t;
	int m, j;

	for (t = 0; t < nt; t++) {
		const uint8_t *tg = gw + kern_tile_off(t) + h * HROW * LANE;
		const uint8_t *tu = two ? uw + kern_tile_off(t) + h * HROW * LANE : NULL;

#pragma GCC unroll 16
		for (j = 0; j < NLINE; j++) {
			__m256i wg = _mm256_loadu_si256((const void *)
							(tg + j * LINE));
			__m256 ge = _mm256_castsi256_ps(_mm256_slli_epi32(wg, 16));
			__m256 go = _mm256_castsi256_ps(_mm256_and_si256(wg, hi16));
			__m256 ue = ge, uo = go;

			if (!h)
				pf_line(tg + PF_DIST + j * LINE, two);
			if (two) {
				__m256i wu = _mm256_loadu_si256((const void *)
							(tu + j * LINE));

				if (!h)
					pf_line(tu + PF_DIST + j * LINE, 1);
				ue = _mm256_castsi256_ps(
					_mm256_slli_epi32(wu, 16));
				uo = _mm256_castsi256_ps(
					_mm256_and_si256(wu, hi16));
			}
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m256i xb = _mm256_set1_epi32(ld32(x[m] +
						t * 2 * KERN_TILE_K_BF16 +
						j * LANE));
				__m256 xe = _mm256_castsi256_ps(
					_mm256_slli_epi32(xb, 16));
				__m256 xo = _mm256_castsi256_ps(
					_mm256_and_si256(xb, hi16));

				og[m] = _mm256_fmadd_ps(xe, ge, og[m]);
				og[m] = _mm256_fmadd_ps(xo, go, og[m]);
				if (two) {
					ou[m] = _mm256_fmadd_ps(xe, ue, ou[m]);
					ou[m] = _mm256_fmadd_ps(xo, uo, ou[m]);
				}
			}
		}
	}
}

/* ---- gate + up ------------------------------------------------------------ */

AI void gu_block(const struct kern_gate_up_args *a, enum kt_quant q,
		 unsigned int nb, unsigned int i0, const int M)
{
	const uint8_t *x[MR];
	const int32_t *gs[MR];
	float xs[MR];
	unsigned int h, K = a->K;
	int m;

	gu_rows(a, i0, x, xs, gs, M);
	for (h = 0; h < 2; h++) {
		unsigned int n = nb * NROW + h * HROW;
		__m256 g[MR], u[MR];

		if (q == KT_QUANT_INT8) {
			size_t off = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_INT8, nb, 0));
			__m256 wsg = _mm256_loadu_ps(a->gate->scales + n);
			__m256 wsu = _mm256_loadu_ps(a->up->scales + n);
			__m256i ig[MR], iu[MR];

			mk_i8(a->gate->tiles + off, a->up->tiles + off,
			      1, h, K / KERN_TILE_K_INT8, x, gs, M, ig, iu);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m256 s = _mm256_set1_ps(xs[m]);

				g[m] = _mm256_mul_ps(
					_mm256_cvtepi32_ps(ig[m]),
					_mm256_mul_ps(s, wsg));
				u[m] = _mm256_mul_ps(
					_mm256_cvtepi32_ps(iu[m]),
					_mm256_mul_ps(s, wsu));
			}
		} else if (q == KT_QUANT_INT4) {
			size_t off = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_INT4, nb, 0));

			mk_i4(a->gate->tiles + off, h, K / KERN_TILE_K_INT4, x, gs,
			      a->gate->scales + n, a->N, a->group, M,
			      g);
			mk_i4(a->up->tiles + off, h, K / KERN_TILE_K_INT4, x, gs,
			      a->up->scales + n, a->N, a->group, M, u);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m256 s = _mm256_set1_ps(xs[m]);

				g[m] = _mm256_mul_ps(g[m], s);
				u[m] = _mm256_mul_ps(u[m], s);
			}
		} else {
			size_t off = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_BF16, nb, 0));

#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				g[m] = u[m] = _mm256_setzero_ps();
			mk_bf16(a->gate->tiles + off,
				a->up->tiles + off, 1, h, K / KERN_TILE_K_BF16, x, M,
				g, u);
		}
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			_mm256_storeu_ps(a->out + (i0 + m) *
					 a->out_stride + n - a->n0,
					 vf_glu(a->glu, n, g[m], u[m]));
	}
}

/* Register blocks: INT4 holds 5 registers per token on AVX2 (3 with
 * VNNI), the others 2-4. */
static unsigned int mr_of(enum kt_quant q)
{
	return q != KT_QUANT_INT4 ? MR : YMM_VNNI ? 3 : 2;
}

/* Row blocks outer, token blocks inner, as in moe-zmm.h. */
AI void gate_up(const struct kern_gate_up_args *a, enum kt_quant q)
{
	unsigned int nb, i0, mr, lim = mr_of(q);

	for (nb = a->n0 / NROW; nb < a->n1 / NROW; nb++)
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < lim ? a->m - i0 : lim;
			KERN_DISPATCH_M(gu_block, mr, a, q, nb, i0);
		}
}

/* ---- down: K chunks outer, as in moe-zmm.h ------------------------------ */

AI void down_block(const struct kern_down_args *a, enum kt_quant q,
		   unsigned int i0, unsigned int ns0, unsigned int ns1,
		   float *part, const int M)
{
	const unsigned int P = a->kc / kern_tile_k(q);
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nsub = ns1 - ns0;
	unsigned int c, nb, h;
	int m;

	memset(part, 0, sizeof(float) * MR * nsub);
	for (c = c0; c < c1; c++) {
		const uint8_t *x[MR];
		const int32_t *gs[MR];
		vf xs[MR];

		down_rows(a, q, i0, c, x, xs, gs, M);
		for (nb = ns0 / NROW; nb < ns1 / NROW; nb++)
			for (h = 0; h < 2; h++) {
				const uint8_t *tw = a->down->tiles +
					kern_tile_off(kern_tile_kcm(a->N, a->kc,
						kern_tile_k(q), nb, c * P));
				float *pp = part + (nb * NROW + h * HROW -
						    ns0);
				__m256 r[MR];

				if (q == KT_QUANT_INT8) {
					__m256i d[MR];

					mk_i8(tw, NULL, 0, h, P, x, gs, M, d, NULL);
#pragma GCC unroll 16
					for (m = 0; m < M; m++)
						r[m] = _mm256_fmadd_ps(
							_mm256_cvtepi32_ps(d[m]),
							xs[m], _mm256_loadu_ps(
							pp + m * nsub));
				} else if (q == KT_QUANT_INT4) {
					mk_i4(tw, h, P, x, gs,
					      a->down->scales + nb * NROW +
					      h * HROW + (size_t)(c * a->kc /
					      a->group) * a->N, a->N,
					      a->group, M, r);
#pragma GCC unroll 16
					for (m = 0; m < M; m++)
						r[m] = _mm256_fmadd_ps(r[m],
							xs[m], _mm256_loadu_ps(
							pp + m * nsub));
				} else {
#pragma GCC unroll 16
					for (m = 0; m < M; m++)
						r[m] = _mm256_loadu_ps(pp +
								m * nsub);
					mk_bf16(tw, NULL, 0, h, P, x, M, r,
						NULL);
				}
#pragma GCC unroll 16
				for (m = 0; m < M; m++)
					_mm256_storeu_ps(pp + m * nsub, r[m]);
			}
	}
	down_add_y(a, q, i0, ns0, ns1, part, M);
}

/* inlined into each quantization's entry, as in moe-zmm.h */
AI void down(const struct kern_down_args *a, enum kt_quant q)
{
	float *part = a->scratch;
	unsigned int i0, mr, ns0, ns1, lim = mr_of(q);

	for (ns0 = a->n0; ns0 < a->n1; ns0 = ns1) {
		ns1 = a->n1 - ns0 < DOWN_NSUB ? a->n1 : ns0 + DOWN_NSUB;
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < lim ? a->m - i0 : lim;
			KERN_DISPATCH_M(down_block, mr, a, q, i0, ns0, ns1, part);
		}
	}
}

MOE_VEC_ENTRIES()
