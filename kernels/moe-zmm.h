/* SPDX-License-Identifier: MIT */
/*
 * moe-zmm.h - the body of the 512-bit variants over the packed tiles
 * (Documentation/packed-layout.md): built by moe-avx512.c with vpdpbusd
 * for INT8/INT4 and vdpbf16ps for BF16 (ZMM_VNNI, ZMM_BF16), and by
 * moe-avx512bw.c for the AVX-512 CPUs without them (Skylake-SP, Cascade
 * Lake, Ice Lake): vpmaddubsw + vpmaddwd, bf16 widened by a shift + FMA.
 * The AMX variant runs the AVX-512 build for experts with few tokens.
 */
#define VEC_BITS	512
#define VEC_ISA		ZMM_ISA
#if ZMM_BF16
/* vcvtneps2bf16 rounds to nearest even; NaN inputs are not expected */
#define vf_store_bf16(d, s)						\
	_mm256_storeu_si256((void *)(d),				\
			    (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s)))
#endif
#include "kernels/moe-vec.h"
#include "kernels/l2pf.h"

/* Tokens held in registers at once: 8 (INT8: 2 x 8 accumulators). */
#define MR		8
/*
 * Prefetch distance along a stream of tiles, in bytes, into L2: into a
 * 32 KiB L1 (Zen 4) the lines came 4 KiB early and were evicted before use
 * (one core, T = 6: INT8 down 180 -> 95 us per expert, gate+up 240 -> 157).
 */
#ifndef PF_DIST
#define PF_DIST		(4 * 1024)
#endif
/* The packed layout (layout.h): a weight line is one tile row, 16 lines
 * per tile, one 32-bit lane per output row and line. */
#define LINE		KERN_TILE_ROW_BYTES
#define NLINE		KERN_TILE_LINES
#define NROW		KERN_TILE_ROWS
#define LANE		KERN_TILE_LANE_BYTES
/* Output rows whose partial sums one down pass keeps in scratch. */
#define DOWN_NSUB	1024

AI __m512i bcast32(const void *p)
{
	return _mm512_set1_epi32(ld32(p));
}

/* ---- micro-kernels ----------------------------------------------------------
 * One block of 16 output rows, M tokens (a compile-time constant after
 * inlining), a run of nt consecutive tiles. Every weight line (64 bytes) is
 * loaded once and used by all M tokens; for the integer dots two
 * accumulator chains (even and odd lines) hide the latency when M is
 * small, exact in any order.
 */

/*
 * acc + the dots of 4 u8 of @u and 4 s8 of @s per int32 lane. Without
 * VNNI, vpmaddubsw + vpmaddwd by ones: exact while each pair of products
 * fits int16, which the callers keep (INT4 nibbles <= 15; INT8 |w| <= 128
 * with |x| <= 127), so both builds give the same int32.
 */
AI __m512i dot4(__m512i acc, __m512i u, __m512i s)
{
#if ZMM_VNNI
	return _mm512_dpbusd_epi32(acc, u, s);
#else
	return _mm512_add_epi32(acc, _mm512_madd_epi16(
		_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

/*
 * One INT8 weight line as the unsigned operand. With VNNI it is flipped
 * once to u8 (w + 128, an XOR shared by all tokens) and 128 * sum(x) is
 * taken back at the end. Without, |w| with the signs of w in @neg, given
 * to the activations instead (dot_w8): w * x = |w| * (x or -x), no
 * correction, and vpmaddubsw cannot saturate (2 * 128 * 127 < 32768).
 */
struct w8 {
	__m512i u;
	__mmask64 neg;
};

#define W8_CORR		(ZMM_VNNI ? 128 : 0)

AI struct w8 w8_load(const uint8_t *p)
{
	__m512i v = _mm512_loadu_si512(p);
	struct w8 w;

#if ZMM_VNNI
	w.u = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
	w.neg = 0;
#else
	w.u = _mm512_abs_epi8(v);
	w.neg = _mm512_movepi8_mask(v);
#endif
	return w;
}

AI __m512i dot_w8(__m512i acc, struct w8 w, __m512i xb)
{
#if !ZMM_VNNI
	xb = _mm512_mask_sub_epi8(xb, w.neg, _mm512_setzero_si512(), xb);
#endif
	return dot4(acc, w.u, xb);
}

/*
 * INT8, one matrix or two at once (@two). The s8 activations come straight
 * from memory as the broadcast operand; W8_CORR * sum(x) of the run, kept
 * in the activation row (@xsum, @usum), is taken back at the end.
 */
AI void mk_i8(const uint8_t *gw, const uint8_t *uw, const int two,
	      unsigned int nt, const uint8_t *const *x,
	      const int32_t *const *xsum, const uint8_t *const *ux,
	      const int32_t *const *usum, const int M, __m512i *og,
	      __m512i *ou, const struct l2pf pf)
{
	const int CH = M <= 3 ? 2 : 1;
	__m512i ag[2][MR], au[2][MR];
	unsigned int t;
	int m, c, j;

#pragma GCC unroll 16
	for (c = 0; c < CH; c++)
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			ag[c][m] = au[c][m] = _mm512_setzero_si512();
	for (t = 0; t < nt; t++) {
		const uint8_t *tg = gw + kern_tile_off(t);
		const uint8_t *tu = two ? uw + kern_tile_off(t) : NULL;

		l2pf_step(pf, t);
#pragma GCC unroll 16
		for (j = 0; j < NLINE; j++) {
			const int s = CH == 2 ? (j & 1) : 0;
			struct w8 wg = w8_load(tg + j * LINE);
			struct w8 wu = wg;

			_mm_prefetch((const char *)tg + PF_DIST + j * LINE,
				     _MM_HINT_T1);
			if (two) {
				wu = w8_load(tu + j * LINE);
				_mm_prefetch((const char *)tu + PF_DIST +
					     j * LINE, _MM_HINT_T1);
			}
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m512i xb = bcast32(x[m] +
					t * KERN_TILE_K_INT8 + j * LANE);
				__m512i ub = two != MK_TWO_OWN_X ? xb :
					bcast32(ux[m] + t * KERN_TILE_K_INT8 +
						j * LANE);

				ag[s][m] = dot_w8(ag[s][m], wg, xb);
				if (two)
					au[s][m] = dot_w8(au[s][m], wu, ub);
			}
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		__m512i corr = _mm512_set1_epi32(W8_CORR * xsum[m][0]);
		__m512i ucorr = two != MK_TWO_OWN_X ? corr :
			_mm512_set1_epi32(W8_CORR * usum[m][0]);

		if (CH == 2) {
			ag[0][m] = _mm512_add_epi32(ag[0][m], ag[1][m]);
			au[0][m] = _mm512_add_epi32(au[0][m], au[1][m]);
		}
		og[m] = _mm512_sub_epi32(ag[0][m], corr);
		if (two)
			ou[m] = _mm512_sub_epi32(au[0][m], ucorr);
	}
}

/*
 * INT8 decode: four matrices at once, four DRAM streams: w[v] on
 * activations x[v][m] (sums xsum[v][m]): gate and up of two row blocks far
 * apart on the same, or four chunks of down each on its own.
 */
AI void mk_i8_4(const uint8_t *const *w, unsigned int nt,
		const uint8_t *const *const *x,
		const int32_t *const *const *xsum, const int M,
		__m512i (*o)[MR])
{
	__m512i ac[4][MR];
	unsigned int t;
	int m, j, v;

#pragma GCC unroll 4
	for (v = 0; v < 4; v++)
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			ac[v][m] = _mm512_setzero_si512();
	for (t = 0; t < nt; t++) {
#pragma GCC unroll 16
		for (j = 0; j < NLINE; j++) {
			struct w8 wv[4];

#pragma GCC unroll 4
			for (v = 0; v < 4; v++) {
				const uint8_t *p = w[v] + kern_tile_off(t) +
						   j * LINE;

				wv[v] = w8_load(p);
				_mm_prefetch((const char *)p + PF_DIST,
					     _MM_HINT_T1);
			}
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
#pragma GCC unroll 4
				for (v = 0; v < 4; v++)
					ac[v][m] = dot_w8(ac[v][m], wv[v],
						bcast32(x[v][m] + t *
							KERN_TILE_K_INT8 +
							j * LANE));
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 4
		for (v = 0; v < 4; v++)
			o[v][m] = _mm512_sub_epi32(ac[v][m], _mm512_set1_epi32(
						   W8_CORR * xsum[v][m][0]));
}

/*
 * INT4 on one matrix, or (@NV 2) two each on its own activations, a line
 * of each in turn (gate and up, or down's chunks c and c + 1 in decode: two
 * DRAM streams). Nibbles (q + 8) are the unsigned operand, activations the
 * signed one; a group's dot is sum((q + 8) x) - 8 * sum(x). Matrix v's
 * weights are at w[v], token m's activations at x[v][m] with group sums
 * gs[v][m]; group g of the run has its 16 scales at ws[v] + g *
 * ws_stride. out[v][m]: the f32 sum over the run of dot * scale.
 */
AI void mk_i4(const int NV, const uint8_t *const *w, unsigned int nt,
	      const uint8_t *const *const *x,
	      const int32_t *const *const *gs, const float *const *ws,
	      size_t ws_stride, unsigned int G, const int M,
	      __m512 (*out)[MR], const struct l2pf pf)
{
	const __m512i lo4 = _mm512_set1_epi8(0x0f);
	__m512i al[2][MR], ah[2][MR];
	__m512 f[2][MR];
	unsigned int t;
	int m, j, v;

#pragma GCC unroll 2
	for (v = 0; v < NV; v++)
#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			al[v][m] = ah[v][m] = _mm512_setzero_si512();
			f[v][m] = _mm512_setzero_ps();
		}
	for (t = 0; t < nt; t++) {
		l2pf_step(pf, t);
#pragma GCC unroll 16
		for (j = 0; j < NLINE; j++)
#pragma GCC unroll 2
		for (v = 0; v < NV; v++) {
			const uint8_t *tw = w[v] + kern_tile_off(t);
			__m512i wv = _mm512_loadu_si512(tw + j * LINE);
			__m512i wl = _mm512_and_si512(wv, lo4);
			__m512i wh = _mm512_and_si512(
				_mm512_srli_epi16(wv, 4), lo4);

			_mm_prefetch((const char *)tw + PF_DIST + j * LINE,
				     _MM_HINT_T1);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				const uint8_t *xp = x[v][m] +
					t * KERN_TILE_K_INT4 + j * LANE;

				al[v][m] = dot4(al[v][m], wl, bcast32(xp));
				ah[v][m] = dot4(ah[v][m], wh,
						bcast32(xp + KERN_INT4_HI_K));
			}
			/* flush whole groups: low nibbles hold k 0..63 of
			 * the tile, high nibbles k 64..127 */
			if ((G == 32 && (j == NLINE / 2 - 1 ||
					  j == NLINE - 1)) ||
			    (G == 64 && j == NLINE - 1)) {
				unsigned int gl = t * (KERN_TILE_K_INT4 / G) +
						  (G == 32 && j == NLINE - 1);
				unsigned int gh = gl + KERN_INT4_HI_K / G;
				__m512 sl = _mm512_loadu_ps(ws[v] + gl *
							    ws_stride);
				__m512 sh = _mm512_loadu_ps(ws[v] + gh *
							    ws_stride);

#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					__m512i cl = _mm512_set1_epi32(
						8 * gs[v][m][gl]);
					__m512i chh = _mm512_set1_epi32(
						8 * gs[v][m][gh]);

					f[v][m] = _mm512_fmadd_ps(
						_mm512_cvtepi32_ps(
						_mm512_sub_epi32(al[v][m], cl)),
						sl, f[v][m]);
					f[v][m] = _mm512_fmadd_ps(
						_mm512_cvtepi32_ps(
						_mm512_sub_epi32(ah[v][m],
								 chh)),
						sh, f[v][m]);
					al[v][m] = ah[v][m] =
						_mm512_setzero_si512();
				}
			} else if (G == 128 && j == NLINE - 1) {
				__m512 sc = _mm512_loadu_ps(ws[v] + t *
							    ws_stride);

#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					__m512i d = _mm512_add_epi32(al[v][m],
								     ah[v][m]);

					d = _mm512_sub_epi32(d,
						_mm512_set1_epi32(
						8 * gs[v][m][t]));
					f[v][m] = _mm512_fmadd_ps(
						_mm512_cvtepi32_ps(d), sc,
						f[v][m]);
					al[v][m] = ah[v][m] =
						_mm512_setzero_si512();
				}
			}
		}
	}
#pragma GCC unroll 2
	for (v = 0; v < NV; v++)
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			out[v][m] = f[v][m];
}

/*
 * One BF16 weight line and its dot with a broadcast pair of activations:
 * vdpbf16ps, or without it both widened to f32 by a shift (even k) or a
 * mask (odd k) and two FMAs in k order.
 */
#if ZMM_BF16
typedef __m512bh wbf;

AI wbf wbf_load(const uint8_t *p)
{
	return (__m512bh)_mm512_loadu_si512(p);
}

AI __m512 dot_wbf(__m512 acc, __m512i xb, wbf w)
{
	return _mm512_dpbf16_ps(acc, (__m512bh)xb, w);
}
#else
typedef struct {
	__m512 e, o;
} wbf;

#define HI16	_mm512_set1_epi32((int)0xffff0000u)

AI wbf wbf_load(const uint8_t *p)
{
	__m512i v = _mm512_loadu_si512(p);
	wbf w = {
		_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)),
		_mm512_castsi512_ps(_mm512_and_si512(v, HI16)),
	};

	return w;
}

AI __m512 dot_wbf(__m512 acc, __m512i xb, wbf w)
{
	acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(xb, 16)),
			      w.e, acc);
	return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(xb,
								      HI16)),
			       w.o, acc);
}
#endif

/*
 * BF16, one matrix or (@two) two, accumulating into og/ou: one chain per
 * token and matrix in k order whatever M, so that a token's sums do not
 * depend on the block it is in (two chains for small blocks measured no
 * faster in decode, which streams from DRAM).
 */
AI void mk_bf16(const uint8_t *gw, const uint8_t *uw, const int two,
		unsigned int nt, const uint8_t *const *x,
		const uint8_t *const *ux, const int M, __m512 *og, __m512 *ou,
		const struct l2pf pf)
{
	unsigned int t;
	int m, j;

	for (t = 0; t < nt; t++) {
		const uint8_t *tg = gw + kern_tile_off(t);
		const uint8_t *tu = two ? uw + kern_tile_off(t) : NULL;

		l2pf_step(pf, t);
#pragma GCC unroll 16
		for (j = 0; j < NLINE; j++) {
			wbf wg = wbf_load(tg + j * LINE), wu;

			_mm_prefetch((const char *)tg + PF_DIST + j * LINE,
				     _MM_HINT_T1);
			if (two) {
				wu = wbf_load(tu + j * LINE);
				_mm_prefetch((const char *)tu + PF_DIST +
					     j * LINE, _MM_HINT_T1);
			}
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m512i xb = bcast32(x[m] +
						t * 2 * KERN_TILE_K_BF16 +
						j * LANE);
				__m512i ub = two != MK_TWO_OWN_X ? xb :
					bcast32(ux[m] +
						t * 2 * KERN_TILE_K_BF16 +
						j * LANE);

				og[m] = dot_wbf(og[m], xb, wg);
				if (two)
					ou[m] = dot_wbf(ou[m], ub, wu);
			}
		}
	}
}

/* ---- gate + up ------------------------------------------------------------ */

AI void gu_block(const struct kern_gate_up_args *a, enum kt_quant q,
		 unsigned int nb, unsigned int i0, unsigned int passes,
		 const int M)
{
	/* tiles of one row block per matrix; the next block follows it */
	const unsigned int nt = a->K / kern_tile_k(q);
	const size_t bb = kern_tile_off(nt);
	const bool more = nb + 1 < a->n1 / NROW;
	const uint8_t *ng = more ? a->gate->tiles + (nb + 1) * bb : NULL;
	const uint8_t *nu = more ? a->up->tiles + (nb + 1) * bb : NULL;
	struct l2pf pfgu = l2pf_share(ng, nu, nt * NLINE, nt, i0 / MR, passes);
	struct l2pf pfg = l2pf_share(ng, NULL, nt * NLINE, nt, i0 / MR, passes);
	struct l2pf pfu = l2pf_share(nu, NULL, nt * NLINE, nt, i0 / MR, passes);
	const uint8_t *x[MR];
	const int32_t *gs[MR];
	float xs[MR];
	unsigned int K = a->K;
	int m;

	gu_rows(a, i0, x, xs, gs, M);
	{
		__m512 g[MR], u[MR];

		if (q == KT_QUANT_INT8) {
			size_t off = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_INT8, nb, 0));
			__m512 wsg = _mm512_loadu_ps(a->gate->scales + nb * NROW);
			__m512 wsu = _mm512_loadu_ps(a->up->scales + nb * NROW);
			__m512i ig[MR], iu[MR];

			mk_i8(a->gate->tiles + off, a->up->tiles + off, MK_TWO,
			      K / KERN_TILE_K_INT8, x, gs, x, gs, M, ig, iu,
			      pfgu);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m512 s = _mm512_set1_ps(xs[m]);

				g[m] = _mm512_mul_ps(_mm512_cvtepi32_ps(ig[m]),
						     _mm512_mul_ps(s, wsg));
				u[m] = _mm512_mul_ps(_mm512_cvtepi32_ps(iu[m]),
						     _mm512_mul_ps(s, wsu));
			}
		} else if (q == KT_QUANT_INT4) {
			size_t off = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_INT4, nb, 0));
			const unsigned int nti = K / KERN_TILE_K_INT4;
			const uint8_t *w[2] = { a->gate->tiles + off,
						a->up->tiles + off };
			const uint8_t *const *xv[2] = { x, x };
			const int32_t *const *gv[2] = { gs, gs };
			const float *wsv[2] = { a->gate->scales + nb * NROW,
						a->up->scales + nb * NROW };
			__m512 d[2][MR];

			/* decode: both at once, two streams; more tokens'
			 * sums of both would not fit in registers */
			if (M <= 2) {
				mk_i4(2, w, nti, xv, gv, wsv, a->N, a->group,
				      M, d, pfgu);
			} else {
				mk_i4(1, w, nti, xv, gv, wsv, a->N, a->group,
				      M, d, pfg);
				mk_i4(1, w + 1, nti, xv + 1, gv + 1, wsv + 1,
				      a->N, a->group, M, d + 1, pfu);
			}
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m512 s = _mm512_set1_ps(xs[m]);

				g[m] = _mm512_mul_ps(d[0][m], s);
				u[m] = _mm512_mul_ps(d[1][m], s);
			}
		} else {
			size_t off = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_BF16, nb, 0));

#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				g[m] = u[m] = _mm512_setzero_ps();
			mk_bf16(a->gate->tiles + off, a->up->tiles + off,
				MK_TWO, K / KERN_TILE_K_BF16, x, x, M, g, u,
				pfgu);
		}
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			_mm512_storeu_ps(a->out + (i0 + m) * a->out_stride +
					 nb * NROW - a->n0,
					 vf_glu(a->glu, nb * NROW, g[m], u[m]));
	}
}

/*
 * INT8 decode (up to 2 tokens): row blocks @nb and @nb2 of gate and up at
 * once, four DRAM streams where gu_block() reads two (one core's reads are
 * capped per stream). Each block's sums are formed as in gu_block(), so
 * the bits are the same. BF16 measured no faster this way.
 */
AI void gu_block4(const struct kern_gate_up_args *a, unsigned int nb,
		  unsigned int nb2, const int M)
{
	const unsigned int K = a->K, tk = KERN_TILE_K_INT8;
	const size_t off = kern_tile_off(kern_tile_rbm(K, tk, nb, 0));
	const size_t off2 = kern_tile_off(kern_tile_rbm(K, tk, nb2, 0));
	const uint8_t *w[4] = {
		a->gate->tiles + off, a->up->tiles + off,
		a->gate->tiles + off2, a->up->tiles + off2,
	};
	const unsigned int b[2] = { nb, nb2 };
	const uint8_t *x[MR];
	const int32_t *gs[MR];
	float xs[MR];
	const uint8_t *const *xv[4] = { x, x, x, x };
	const int32_t *const *gv[4] = { gs, gs, gs, gs };
	__m512i d[4][MR];
	__m512 f[4][MR];
	int m, h, v;

	gu_rows(a, 0, x, xs, gs, M);
	mk_i8_4(w, K / tk, xv, gv, M, d);
#pragma GCC unroll 4
	for (v = 0; v < 4; v++) {
		__m512 ws = _mm512_loadu_ps((v & 1 ? a->up : a->gate)->scales +
					    b[v / 2] * NROW);

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			f[v][m] = _mm512_mul_ps(_mm512_cvtepi32_ps(d[v][m]),
						_mm512_mul_ps(
						_mm512_set1_ps(xs[m]), ws));
	}
#pragma GCC unroll 2
	for (h = 0; h < 2; h++)
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			_mm512_storeu_ps(a->out + m * a->out_stride +
					 b[h] * NROW - a->n0,
					 vf_glu(a->glu, b[h] * NROW, f[2 * h][m],
						f[2 * h + 1][m]));
}

/*
 * Row blocks outer, token blocks inner: a block's gate and up tiles
 * (2 x 16 x K bytes) stay in L2 while every token block passes over them.
 */
AI void gate_up(const struct kern_gate_up_args *a, enum kt_quant q)
{
	unsigned int nb, i0, mr, passes = (a->m + MR - 1) / MR;
	const unsigned int nb0 = a->n0 / NROW, nbs = a->n1 / NROW - nb0;

	/* decode: blocks nb and nb + nbs / 2, far apart, at once */
	if (q == KT_QUANT_INT8 && a->m <= 2 && nbs >= 2) {
		for (nb = nb0; nb < nb0 + nbs / 2; nb++)
			if (a->m == 1)
				gu_block4(a, nb, nb + nbs / 2, 1);
			else
				gu_block4(a, nb, nb + nbs / 2, 2);
		if (nbs % 2)
			KERN_DISPATCH_M(gu_block, a->m, a, q, nb0 + nbs - 1,
					0, 1);
		return;
	}
	for (nb = a->n0 / NROW; nb < a->n1 / NROW; nb++)
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			KERN_DISPATCH_M(gu_block, mr, a, q, nb, i0, passes);
		}
}

/* ---- down -----------------------------------------------------------------
 * K chunks outer, output blocks inner: for one chunk the blocks' tiles are
 * contiguous, so the weights stream in order; partial sums per token and
 * output row wait in scratch (f32 [MR][DOWN_NSUB]).
 */

/* INT4: the group scales of chunk @c of output block @nb */
AI const float *down_i4_scales(const struct kern_down_args *a, unsigned int c,
			       unsigned int nb)
{
	return a->down->scales + nb * NROW +
	       (size_t)(c * a->kc / a->group) * a->N;
}

/*
 * Output block @nb of chunk @c, one matrix: its tiles' sums added to the
 * partial sums at @pp (token m at pp + m * nsub).
 */
AI void down_tiles(const struct kern_down_args *a, enum kt_quant q,
		   unsigned int c, unsigned int nb, const uint8_t *const *x,
		   const vf *xs, const int32_t *const *gs, float *pp,
		   unsigned int nsub, const struct l2pf pf, const int M)
{
	const unsigned int P = a->kc / kern_tile_k(q);
	const uint8_t *tw = a->down->tiles + kern_tile_off(
		kern_tile_kcm(a->N, a->kc, kern_tile_k(q), nb, c * P));
	__m512 r[MR];
	int m;

	if (q == KT_QUANT_INT8) {
		__m512i d[MR];

		mk_i8(tw, NULL, MK_ONE, P, x, gs, x, gs, M, d, NULL, pf);
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			r[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[m]), xs[m],
					       _mm512_loadu_ps(pp + m * nsub));
	} else if (q == KT_QUANT_INT4) {
		const uint8_t *const *xv[1] = { x };
		const int32_t *const *gv[1] = { gs };
		const float *wsv[1] = { down_i4_scales(a, c, nb) };
		__m512 d[1][MR];

		mk_i4(1, &tw, P, xv, gv, wsv, a->N, a->group, M, d, pf);
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			r[m] = _mm512_fmadd_ps(d[0][m], xs[m],
					       _mm512_loadu_ps(pp + m * nsub));
	} else {
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			r[m] = _mm512_loadu_ps(pp + m * nsub);
		mk_bf16(tw, NULL, MK_ONE, P, x, x, M, r, NULL, pf);
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		_mm512_storeu_ps(pp + m * nsub, r[m]);
}

/*
 * Two output blocks at once, as gate and up in gate_up: block @nb of chunk
 * @c and block @nb2 of chunk @c2, on the same activations (MK_TWO: @nb2 is
 * @nb + 1 of the same chunk, its tiles adjacent, so each broadcast feeds
 * two dot products) or each on its own (MK_TWO_OWN_X: the next chunk, a
 * second stream). Each block's sums are formed exactly as in down_tiles(),
 * so results are unchanged. INT8 and BF16, and INT4 with MK_TWO_OWN_X.
 */
AI void down_tiles2(const struct kern_down_args *a, enum kt_quant q,
		    const int two, unsigned int c, unsigned int nb,
		    const uint8_t *const *x, const vf *xs,
		    const int32_t *const *gs, unsigned int c2, unsigned int nb2,
		    const uint8_t *const *ux, const vf *uxs,
		    const int32_t *const *ugs, float *part, unsigned int ns0,
		    unsigned int nsub, const struct l2pf pf, const int M)
{
	const unsigned int P = a->kc / kern_tile_k(q);
	const uint8_t *tw = a->down->tiles + kern_tile_off(
		kern_tile_kcm(a->N, a->kc, kern_tile_k(q), nb, c * P));
	const uint8_t *tw2 = a->down->tiles + kern_tile_off(
		kern_tile_kcm(a->N, a->kc, kern_tile_k(q), nb2, c2 * P));
	float *pp = part + (nb * NROW - ns0), *pp2 = part + (nb2 * NROW - ns0);
	__m512 r[MR], r2[MR];
	int m;

	if (q == KT_QUANT_INT8) {
		__m512i d[MR], d2[MR];

		mk_i8(tw, tw2, two, P, x, gs, ux, ugs, M, d, d2, pf);
#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			r[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[m]), xs[m],
					       _mm512_loadu_ps(pp + m * nsub));
			r2[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d2[m]),
						uxs[m], _mm512_loadu_ps(pp2 +
						m * nsub));
		}
	} else if (q == KT_QUANT_INT4) {
		/* only MK_TWO_OWN_X: INT4's chunk pairs in decode */
		const uint8_t *w[2] = { tw, tw2 };
		const uint8_t *const *xv[2] = { x, ux };
		const int32_t *const *gv[2] = { gs, ugs };
		const float *wsv[2] = { down_i4_scales(a, c, nb),
					down_i4_scales(a, c2, nb2) };
		__m512 d[2][MR];

		mk_i4(2, w, P, xv, gv, wsv, a->N, a->group, M, d, pf);
#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			r[m] = _mm512_fmadd_ps(d[0][m], xs[m],
					       _mm512_loadu_ps(pp + m * nsub));
			r2[m] = _mm512_fmadd_ps(d[1][m], uxs[m],
						_mm512_loadu_ps(pp2 + m * nsub));
		}
	} else {
#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			r[m] = _mm512_loadu_ps(pp + m * nsub);
			r2[m] = _mm512_loadu_ps(pp2 + m * nsub);
		}
		mk_bf16(tw, tw2, two, P, x, ux, M, r, r2, pf);
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		_mm512_storeu_ps(pp + m * nsub, r[m]);
		_mm512_storeu_ps(pp2 + m * nsub, r2[m]);
	}
}

/*
 * INT8, up to 2 tokens: block @nb of chunk @c, nb - 1 of c + 1, nb - 2 of
 * c + 2 and nb - 3 of c + 3 at once, four streams; token m of chunk c + s
 * at x[s][m].
 */
AI void down_tiles4(const struct kern_down_args *a, unsigned int c,
		    unsigned int nb, const uint8_t *const (*x)[MR],
		    const vf (*xs)[MR], const int32_t *const (*gs)[MR],
		    float *part, unsigned int ns0, unsigned int nsub,
		    const int M)
{
	const unsigned int P = a->kc / KERN_TILE_K_INT8;
	const uint8_t *w[4];
	const uint8_t *const *xv[4];
	const int32_t *const *gv[4];
	__m512i d[4][MR];
	int m, v;

#pragma GCC unroll 4
	for (v = 0; v < 4; v++) {
		w[v] = a->down->tiles + kern_tile_off(kern_tile_kcm(a->N,
			a->kc, KERN_TILE_K_INT8, nb - v, (c + v) * P));
		xv[v] = x[v];
		gv[v] = gs[v];
	}
	mk_i8_4(w, P, xv, gv, M, d);
#pragma GCC unroll 4
	for (v = 0; v < 4; v++) {
		float *pp = part + ((nb - v) * NROW - ns0);

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			_mm512_storeu_ps(pp + m * nsub, _mm512_fmadd_ps(
				_mm512_cvtepi32_ps(d[v][m]), xs[v][m],
				_mm512_loadu_ps(pp + m * nsub)));
	}
}

/* INT8, up to 2 tokens: chunks c .. c + 3, chunk c + s s blocks behind */
AI void down_decode4(const struct kern_down_args *a, unsigned int i0,
		     unsigned int c, unsigned int ns0, unsigned int ns1,
		     float *part, const int M)
{
	const enum kt_quant q = KT_QUANT_INT8;
	const unsigned int nb0 = ns0 / NROW, nb1 = ns1 / NROW;
	const unsigned int nsub = ns1 - ns0;
	const struct l2pf none = l2pf_share(NULL, NULL, 0, 0, 0, 1);
	const uint8_t *x[4][MR];
	const int32_t *gs[4][MR];
	vf xs[4][MR];
	unsigned int nb, s;

	for (s = 0; s < 4; s++)
		down_rows(a, q, i0, c + s, x[s], xs[s], gs[s], M);
	for (nb = nb0; nb < nb1 + 3; nb++) {
		if (nb >= nb0 + 3 && nb < nb1) {
			down_tiles4(a, c, nb, (const uint8_t *const (*)[MR])x,
				    (const vf (*)[MR])xs,
				    (const int32_t *const (*)[MR])gs, part,
				    ns0, nsub, M);
			continue;
		}
		for (s = 0; s < 4; s++)
			if (nb >= nb0 + s && nb - s < nb1)
				down_tiles(a, q, c + s, nb - s, x[s], xs[s],
					   gs[s], part + ((nb - s) * NROW -
					   ns0), nsub, none, M);
	}
}

/*
 * Decode (one token pass): two chunks at once, chunk c + 1 one output
 * block behind chunk c. One core's DRAM reads are capped per sequential
 * stream (Zen 5: ~17.5 GB/s for one, ~32 for two far apart), and
 * consecutive chunks' tiles are N / 16 blocks apart, so they are separate
 * streams. Every output block still takes its chunks in order, so the
 * bits are those of the chunk-by-chunk order. INT8 for up to 2 tokens:
 * four chunks at once (down_decode4()).
 */
AI void down_decode(const struct kern_down_args *a, enum kt_quant q,
		    unsigned int i0, unsigned int ns0, unsigned int ns1,
		    float *part, const int M)
{
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nb0 = ns0 / NROW, nb1 = ns1 / NROW;
	const unsigned int nsub = ns1 - ns0;
	const struct l2pf none = l2pf_share(NULL, NULL, 0, 0, 0, 1);
	/* INT4's sums of two chunks fit the registers for 2 tokens */
	const bool pairs = q != KT_QUANT_INT4 || M <= 2;
	unsigned int c, nb, step;

	for (c = c0; c < c1; c += step) {
		const uint8_t *x[MR], *ux[MR];
		const int32_t *gs[MR], *ugs[MR];
		vf xs[MR], uxs[MR];

		if (q == KT_QUANT_INT8 && M <= 2 && c + 4 <= c1) {
			down_decode4(a, i0, c, ns0, ns1, part, M);
			step = 4;
			continue;
		}
		down_rows(a, q, i0, c, x, xs, gs, M);
		if (!pairs || c + 1 == c1) {
			for (nb = nb0; nb < nb1; nb++)
				down_tiles(a, q, c, nb, x, xs, gs, part +
					   (nb * NROW - ns0), nsub, none, M);
			step = 1;
			continue;
		}
		down_rows(a, q, i0, c + 1, ux, uxs, ugs, M);
		down_tiles(a, q, c, nb0, x, xs, gs, part, nsub, none, M);
		for (nb = nb0 + 1; nb < nb1; nb++)
			down_tiles2(a, q, MK_TWO_OWN_X, c, nb, x, xs, gs, c + 1,
				    nb - 1, ux, uxs, ugs, part, ns0, nsub, none,
				    M);
		down_tiles(a, q, c + 1, nb1 - 1, ux, uxs, ugs, part +
			   (nb1 - 1 - nb0) * NROW, nsub, none, M);
		step = 2;
	}
}

AI void down_block(const struct kern_down_args *a, enum kt_quant q,
		   unsigned int i0, unsigned int ns0, unsigned int ns1,
		   float *part, unsigned int passes, const int M)
{
	const unsigned int P = a->kc / kern_tile_k(q);
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nsub = ns1 - ns0;
	unsigned int c, nb;

	memset(part, 0, sizeof(float) * MR * nsub);
	if (passes == 1) {
		down_decode(a, q, i0, ns0, ns1, part, M);
		down_add_y(a, q, i0, ns0, ns1, part, M);
		return;
	}
	for (c = c0; c < c1; c++) {
		const uint8_t *x[MR];
		const int32_t *gs[MR];
		vf xs[MR];

		down_rows(a, q, i0, c, x, xs, gs, M);
		for (nb = ns0 / NROW; nb < ns1 / NROW; nb++) {
			const uint8_t *tw = a->down->tiles + kern_tile_off(
				kern_tile_kcm(a->N, a->kc, kern_tile_k(q), nb,
					      c * P));
			const uint8_t *nw = a->next_down ?
				a->next_down->tiles + (tw - a->down->tiles) :
				NULL;
			float *pp = part + (nb * NROW - ns0);
			/* later passes fetch the next call's same tiles */
			const bool pair = q != KT_QUANT_INT4 &&
					  nb + 1 < ns1 / NROW;

			if (pair) {
				down_tiles2(a, q, MK_TWO, c, nb, x, xs, gs, c,
					    nb + 1, x, xs, gs, part, ns0, nsub,
					    l2pf_share(nw, NULL, 2 * P * NLINE,
						       P, i0 / MR, passes), M);
				nb++;
			} else {
				down_tiles(a, q, c, nb, x, xs, gs, pp, nsub,
					   l2pf_share(nw, NULL, P * NLINE, P,
						      i0 / MR, passes), M);
			}
		}
	}
	down_add_y(a, q, i0, ns0, ns1, part, M);
}

/*
 * Inlined into each quantization's entry (MOE_VEC_ENTRIES), as gate_up():
 * one function for all three kept some INT8 accumulators in memory, a
 * store and a load in every dot chain (INT8 prefill down 0.5 -> 0.63 of
 * the peak once apart).
 */
AI void down(const struct kern_down_args *a, enum kt_quant q)
{
	float *part = a->scratch;
	unsigned int i0, mr, ns0, ns1, passes = (a->m + MR - 1) / MR;

	for (ns0 = a->n0; ns0 < a->n1; ns0 = ns1) {
		ns1 = a->n1 - ns0 < DOWN_NSUB ? a->n1 : ns0 + DOWN_NSUB;
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			KERN_DISPATCH_M(down_block, mr, a, q, i0, ns0, ns1, part,
				   passes);
		}
	}
}

MOE_VEC_ENTRIES()
