// SPDX-License-Identifier: MIT
/*
 * moe-mxfp4-avx2.c - MXFP4 experts on AVX2 (the avx2 and avxvnni tables):
 * the int16 body of moe-mxfp4-avx512.c at 256 bits. Each half of a 32-byte
 * tile line (4 k of 8 rows) is widened to the two int16 vectors of doubled
 * E2M1 values it stands for (vpshufb of a code table, vpmovsxbw), dotted
 * by vpmaddwd with the tokens' activations quantized to int16 per group of
 * 32 once per call (the same rule and bits as avx512), and each group's
 * exact int32 dot is multiplied by its E8M0 scale and the activations'
 * group scale and summed in f32: the same formula, so the same bits as the
 * avx512 body, and the same for a token in a call of any size.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define VEC_BITS	256
#define VEC_ISA		avx2
#include "kernels/mxfp4.h"
#include "kernels/mxfp4-xq.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/dispatch-m.h"
#include "kernels/add-y-vec.h"

/* Tokens per register block. */
#define MR		4
#define PF_DIST		4096
#define NROW		KERN_TILE_ROWS
/* Row slices of a tile, one vector of 8 rows each. */
#define NS		(KERN_TILE_ROWS / VF_LANES)
#define LINE		KERN_MXFP4_LINE
#define GL		KERN_MXFP4_GROUP_LINES
#define GROUP		KERN_MXFP4_GROUP
#define NG		(KERN_TILE_K_MXFP4 / GROUP)
#define DOWN_NSUB	1024

/*
 * int32 accumulators live through a group's 8 lines, one per matrix, row
 * slice and token of a pass: at most ACC_MAX, which with the widening's
 * temporaries fills the 16 ymm. A pass takes both row slices of a tile
 * while they fit, else one (the tile is in L1 for the next).
 */
#define ACC_MAX		4
#define SLICES(M, two)	((M) * NS * ((two) ? 2 : 1) <= ACC_MAX ? NS : 1)

/* Eight f32 to int16 (nearest even, saturated) at @q, then eight more. */
AI void store_i16x16(int16_t *q, __m256 a, __m256 b)
{
	__m256i p = _mm256_packs_epi32(_mm256_cvtps_epi32(a),
				       _mm256_cvtps_epi32(b));

	/* packs interleaves the 128-bit halves: a0-3 b0-3 a4-7 b4-7 */
	_mm256_storeu_si256((void *)q, _mm256_permute4x64_epi64(p, 0xd8));
}

/*
 * @n bf16 at @src to int16 at @q per group of 32, by the power of two
 * that brings the group's largest magnitude into [2^14, 2^15), as
 * moe-mxfp4-avx512.c's mx_quant() (formats.md, "MXFP4"): the same int16
 * and scales (halved: the weights enter doubled) at @s; a group below
 * 2^-111 reads as zeros, one holding NaN or inf as NaN.
 */
static void mx_quant(const uint8_t *src, unsigned int n, int16_t *q,
		     float *s)
{
	unsigned int g;

	for (g = 0; g < n / GROUP; g++) {
		const uint8_t *p = src + g * GROUP * 2;
		__m256 f0 = vf_load_bf16(p), f1 = vf_load_bf16(p + 16);
		__m256 f2 = vf_load_bf16(p + 32), f3 = vf_load_bf16(p + 48);
		float amax = vf_hmax(vf_max(vf_max(vf_abs(f0), vf_abs(f1)),
					    vf_max(vf_abs(f2), vf_abs(f3))));
		__m256 nan = _mm256_or_ps(_mm256_cmp_ps(f0, f1, _CMP_UNORD_Q),
					  _mm256_cmp_ps(f2, f3, _CMP_UNORD_Q));
		uint32_t bits;
		int e;
		__m256 inv;

		memcpy(&bits, &amax, 4);
		e = (int)(bits >> 23);	/* amax >= 0: no sign bit */
		inv = vf_set1(e > 15 ? pow2_biased(268 - e) : 0.0f);
		store_i16x16(q + g * GROUP, vf_mul(f0, inv), vf_mul(f1, inv));
		store_i16x16(q + g * GROUP + 16, vf_mul(f2, inv),
			     vf_mul(f3, inv));
		s[g] = e > 15 ? pow2_biased(e - 15) : 0.0f;
		if (e == 255 || _mm256_movemask_ps(nan))
			s[g] = NAN;
	}
}

/* 2 * E2M1 code i as int8 at byte i, for vpshufb. */
AI __m128i mx_i8_table(void)
{
	return _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12,
			     0, -1, -2, -3, -4, -6, -8, -12);
}

/*
 * Slice @s (rows 8s .. 8s + 7: 16 bytes) of the 32-byte line at @p to its
 * two int16 vectors, row r in 32-bit lane r: *@lo k 4l and 4l + 1 (the low
 * nibbles of the row's two bytes), *@hi k 4l + 2 and 4l + 3 (the high).
 */
AI void mx_i16(const uint8_t *p, int s, __m128i tbl, __m256i *lo,
	       __m256i *hi)
{
	const __m128i m4 = _mm_set1_epi8(0x0f);
	__m128i b = _mm_loadu_si128((const void *)(p + 16 * s));

	*lo = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(tbl,
						    _mm_and_si128(b, m4)));
	*hi = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(tbl, _mm_and_si128(
		_mm_srli_epi16(b, 4), m4)));
}

/* Both slices of the line at @p (mx_i16()'s for s = 0 and 1), the nibbles
 * split and looked up 32 bytes at a time. */
AI void mx_i16_line(const uint8_t *p, __m128i tbl, __m256i lo[NS],
		    __m256i hi[NS])
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	const __m256i t2 = _mm256_broadcastsi128_si256(tbl);
	__m256i b = _mm256_loadu_si256((const void *)p);
	__m256i l8 = _mm256_shuffle_epi8(t2, _mm256_and_si256(b, m4));
	__m256i h8 = _mm256_shuffle_epi8(t2, _mm256_and_si256(
		_mm256_srli_epi16(b, 4), m4));

	lo[0] = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(l8));
	hi[0] = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(h8));
	lo[1] = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(l8, 1));
	hi[1] = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(h8, 1));
}

/* Eight E8M0 bytes at @p to 2^(e - 127) in f32 (e = 0: 2^-127). */
AI __m256 mx_scale8(const uint8_t *p)
{
	__m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)p));
	__m256i z = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());

	return _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(e, 23),
		_mm256_and_si256(z, _mm256_set1_epi32(0x00400000))));
}

/*
 * Row slices @s0 .. @s0 + @SS - 1 of one tile (16 rows x 128 k, four
 * groups) of one matrix or (@two) two, for M tokens whose int16
 * activations of these columns are at x[m] and their group scales at
 * xs[m]: adds sum_g dot_g * scale_g * xscale_g to o1[m][s] (o2[m][s]).
 * @s1, @s2: the E8M0 bytes of the tile's first group, the next group's
 * @sstride bytes on. A group's dot is an exact int32 (at most 32 * 12 *
 * 32767), and vpaddd's one-cycle chain needs no second accumulator.
 */
AI void mk_pass(const uint8_t *w1, const uint8_t *w2, const int two,
		const uint8_t *s1, const uint8_t *s2, size_t sstride,
		const int16_t *const *x, const float *const *xs, const int M,
		const int s0, const int SS, __m256 o1[][NS], __m256 o2[][NS])
{
	const __m128i tbl = mx_i8_table();
	__m256i a1[MR][NS], a2[MR][NS];
	int m, j, g, l;

	for (g = 0; g < NG; g++) {
		const uint8_t *p1 = w1 + g * GL * LINE;
		const uint8_t *p2 = w2 + g * GL * LINE;

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
#pragma GCC unroll 2
			for (j = 0; j < SS; j++)
				a1[m][j] = a2[m][j] = vi_zero();
#pragma GCC unroll 2
		for (l = 0; l < GL; l++) {
			__m256i lo1[NS], hi1[NS], lo2[NS], hi2[NS];

			if (!s0 && !(l & 1)) {
				_mm_prefetch((const char *)p1 + PF_DIST +
					     l * LINE, _MM_HINT_T0);
				if (two)
					_mm_prefetch((const char *)p2 +
						     PF_DIST + l * LINE,
						     _MM_HINT_T0);
			}
			if (SS == NS) {
				mx_i16_line(p1 + l * LINE, tbl, lo1, hi1);
				if (two)
					mx_i16_line(p2 + l * LINE, tbl, lo2,
						    hi2);
			} else {
				mx_i16(p1 + l * LINE, s0, tbl, lo1, hi1);
				if (two)
					mx_i16(p2 + l * LINE, s0, tbl, lo2,
					       hi2);
			}
#pragma GCC unroll 2
			for (j = 0; j < SS; j++) {
#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					/* k 4l .. 4l + 3 of the group */
					const int16_t *xp = x[m] + g * GROUP +
							    l * 4;
					__m256i x0 = vi_set1_32(ld32(xp));
					__m256i x1 = vi_set1_32(ld32(xp + 2));

					a1[m][j] = vi_dot_i16(vi_dot_i16(
						a1[m][j], lo1[j], x0), hi1[j],
						x1);
					if (two)
						a2[m][j] = vi_dot_i16(
							vi_dot_i16(a2[m][j],
								   lo2[j], x0),
							hi2[j], x1);
				}
			}
		}
#pragma GCC unroll 2
		for (j = 0; j < SS; j++) {
			const int r = VF_LANES * (s0 + j);
			__m256 sc1 = mx_scale8(s1 + g * sstride + r);
			__m256 sc2 = two ? mx_scale8(s2 + g * sstride + r) :
					   sc1;

#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				const __m256 xv = vf_set1(xs[m][g]);

				o1[m][s0 + j] = vf_fmadd(
					vf_cvt_f32(a1[m][j]),
					vf_mul(sc1, xv), o1[m][s0 + j]);
				if (two)
					o2[m][s0 + j] = vf_fmadd(
						vf_cvt_f32(a2[m][j]),
						vf_mul(sc2, xv),
						o2[m][s0 + j]);
			}
		}
	}
}

/* Every row slice of mk_pass(), in as few passes as the registers allow. */
AI void mk_mx(const uint8_t *w1, const uint8_t *w2, const int two,
	      const uint8_t *s1, const uint8_t *s2, size_t sstride,
	      const int16_t *const *x, const float *const *xs, const int M,
	      __m256 o1[][NS], __m256 o2[][NS])
{
	int s;

	if (SLICES(M, two) == NS) {
		mk_pass(w1, w2, two, s1, s2, sstride, x, xs, M, 0, NS, o1,
			o2);
		return;
	}
#pragma GCC unroll 1
	for (s = 0; s < NS; s++)
		mk_pass(w1, w2, two, s1, s2, sstride, x, xs, M, s, 1, o1,
			o2);
}

/* ---- gate + up ------------------------------------------------------------ */

/*
 * Gate and up stream side by side while their accumulators fit (one or
 * two tokens); more tokens take gate's tile, then up's from the same row
 * block, so a pass holds one matrix's accumulators.
 */
AI void gu_block(const struct kern_gate_up_args *a, const struct mx_xq *xq,
		 unsigned int nb, unsigned int i0, const int M)
{
	const unsigned int nkb = a->K / KERN_TILE_K_MXFP4;
	const uint8_t *sg = (const uint8_t *)a->gate->scales + nb * NROW;
	const uint8_t *su = (const uint8_t *)a->up->scales + nb * NROW;
	const int two = M <= 2;
	const int16_t *xk[MR];
	const float *sk[MR];
	__m256 g[MR][NS], u[MR][NS];
	unsigned int kb;
	int m, s;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (s = 0; s < NS; s++)
			g[m][s] = u[m][s] = vf_zero();
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
		if (two) {
			mk_mx(a->gate->tiles + off, a->up->tiles + off, 1,
			      sg + so, su + so, a->N, xk, sk, M, g, u);
			continue;
		}
		/* one matrix: the second's pointers repeat the first */
		mk_mx(a->gate->tiles + off, a->gate->tiles + off, 0, sg + so,
		      sg + so, a->N, xk, sk, M, g, g);
		mk_mx(a->up->tiles + off, a->up->tiles + off, 0, su + so,
		      su + so, a->N, xk, sk, M, u, u);
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (s = 0; s < NS; s++)
			vf_store(a->out + (i0 + m) * a->out_stride +
				 nb * NROW - a->n0 + VF_LANES * s,
				 vf_glu(a->glu, nb * NROW + VF_LANES * s,
					g[m][s], u[m][s]));
}

/* Row blocks outer, token blocks inner: a block's tiles stay in L1/L2. */
void kern_gate_up_mxfp4_avx2(const struct kern_gate_up_args *a)
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
 * [MR][DOWN_NSUB]); a lone token takes two output blocks (consecutive
 * tiles) per pass.
 */

AI void down_block(const struct kern_down_args *a, const struct mx_xq *xq,
		   unsigned int i0, unsigned int ns0, unsigned int ns1,
		   float *part, const int M)
{
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nsub = ns1 - ns0;
	const uint8_t *e8 = (const uint8_t *)a->down->scales;
	unsigned int c, nb, b, nbk;
	int m, s;

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
		for (nb = ns0 / NROW; nb < ns1 / NROW; nb += nbk) {
			const uint8_t *tw = a->down->tiles + kern_tile_off(
				kern_tile_kcm(a->N, a->kc, KERN_TILE_K_MXFP4,
					      nb, c));
			const uint8_t *sp = e8 + kern_mxfp4_scale_idx(a->N,
				nb * NROW, c * NG);
			__m256 r[2][MR][NS];

			nbk = M == 1 && nb + 1 < ns1 / NROW ? 2 : 1;
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
#pragma GCC unroll 2
				for (s = 0; s < NS; s++)
					r[0][m][s] = r[1][m][s] = vf_zero();
			if (nbk == 2)
				mk_mx(tw, tw + KERN_TILE_BYTES, 1, sp,
				      sp + NROW, a->N, x, xs, M, r[0], r[1]);
			else
				mk_mx(tw, tw, 0, sp, sp, a->N, x, xs, M,
				      r[0], r[0]);
			for (b = 0; b < nbk; b++) {
				float *pp = part + ((nb + b) * NROW - ns0);

#pragma GCC unroll 16
				for (m = 0; m < M; m++)
#pragma GCC unroll 2
					for (s = 0; s < NS; s++) {
						float *q = pp + m * nsub +
							   VF_LANES * s;

						vf_store(q, vf_add(r[b][m][s],
								   vf_load(q)));
					}
			}
		}
	}
	down_add_y(a, KT_QUANT_MXFP4, i0, ns0, ns1, part, M);
}

void kern_down_mxfp4_avx2(const struct kern_down_args *a)
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

size_t kern_scratch_bytes_mxfp4_avx2(const struct kern_geom *g,
				     unsigned int max_m)
{
	size_t k = g->hidden > g->inter ? g->hidden : g->inter;

	return sizeof(float) * MR * DOWN_NSUB + mx_xq_bytes(k, max_m);
}
