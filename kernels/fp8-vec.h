/* SPDX-License-Identifier: MIT */
/*
 * fp8-vec.h - FP8 (E4M3) experts on FMA + F16C at either width, for the
 * variants without AVX-512 BF16: each half line of a tile (16 rows x a k
 * pair) is widened to f32 exactly through f16, per VF_LANES rows and k
 * parity, and multiplied with the bf16 activations widened; each
 * 128-column scale block's sums are scaled in f32. Built at 256 bits by
 * moe-fp8-avx2.c (AVX2, AVX-VNNI) and at 512 by moe-fp8-avx512bw.c
 * (AVX-512 without BF16: Skylake-SP, Cascade Lake, Ice Lake).
 */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/fp8.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/dispatch-m.h"
#include "kernels/add-y-vec.h"

/* Row slices of a tile, one vector of VF_LANES rows each. */
#define NS		(KERN_TILE_ROWS / VF_LANES)
/* Tokens per register block (accumulators per token and slice: VF_CHAINS()). */
#define MR		8
/*
 * Row slices per pass over a block for M tokens: all while their
 * accumulators fit (a few tokens: independent chains to hide the FMA
 * latency, AVX2 decode 2.5 -> 1.5 ms per layer), else one, the block in L1
 * for the next (AVX2, T = 512: 400 -> 280 ms). Each row's sums are the
 * same either way.
 */
#define SLICES(M)	((M) * NS <= MR ? NS : 1)
#define PF_DIST		(4 * 1024)
#define NROW		KERN_TILE_ROWS
#define HALF		(KERN_TILE_ROW_BYTES / 2)	/* one k pair */
#define NHALF		(KERN_TILE_BYTES / HALF)
#define BT		(KERN_FP8_BLOCK / KERN_TILE_K_FP8)
#define DOWN_NSUB	1024
/*
 * Columns whose bf16 activations are widened to f32 at once, per token,
 * for all the block's rows: each FMA then takes its factor as a broadcast
 * from memory, where widening a pair per token and row slice cost two ALU
 * ops beside the two FMAs (Zen 4, avx512vnni, T = 512: 265 -> 206 ms per
 * layer).
 */
#define XB		KERN_FP8_BLOCK

/*
 * Line @p (k pairs h and h + 1, one per half line; each row's even-k and
 * odd-k byte), rows VF_LANES * @s ..: the weights of k = 2h .. 2h + 3 in
 * w[0..3], each 2^-8 of its E4M3 value, exactly. An E4M3 byte's 7 low
 * bits, 7 places up, are an f16 of the same mantissa and an exponent 8
 * lower (bias 15 against 7), subnormals included; the sign goes to bit
 * 15, and F16C widens it. The scales put the 2^8 back (scale8()). The NaN
 * encodings read as +-480, as on AVX-512. The mask: sign-extended and 7
 * places up, the sign lands in bit 15 and again in bit 14, which it
 * clears; the magnitude in bits 7-13.
 */
#if VEC_BITS == 512
/*
 * A half line's 16-bit word r is row r's even byte, then its odd: the odd
 * byte is the word shifted right once (arithmetic), the even one first
 * shifted up 8. Shifts and masks only: the shuffles that gathered the
 * bytes (vpshufb, vpermq, vpmovsxbw) shared port 5 with the widening
 * (one line, in L1: 13 -> 10.5 cycles).
 */
AI void fp8_line(const uint8_t *p, int s, vf w[4])
{
	const __m512i mask = _mm512_set1_epi16((short)0xbf80);
	__m512i b = _mm512_loadu_si512((const void *)p);
	__m512i ev = _mm512_and_si512(_mm512_srai_epi16(
		_mm512_slli_epi16(b, 8), 1), mask);
	__m512i od = _mm512_and_si512(_mm512_srai_epi16(b, 1), mask);

	(void)s;
	w[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(ev));
	w[1] = _mm512_cvtph_ps(_mm512_castsi512_si256(od));
	w[2] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(ev, 1));
	w[3] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(od, 1));
}
#else
/* half line @p: bytes r0e r0o r1e r1o ... to the eight evens, the odds */
AI void fp8_rows(const uint8_t *p, int s, vf *we, vf *wo)
{
	const __m128i sel = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14,
					  1, 3, 5, 7, 9, 11, 13, 15);
	__m128i b = _mm_shuffle_epi8(_mm_loadu_si128((const void *)(p +
						     16 * s)), sel);
	__m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b),
						       7),
				     _mm256_set1_epi16((short)0xbf80));

	*we = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
	*wo = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

AI void fp8_line(const uint8_t *p, int s, vf w[4])
{
	fp8_rows(p, s, &w[0], &w[1]);
	fp8_rows(p + HALF, s, &w[2], &w[3]);
}
#endif

/* Row slices @s0 .. @s0 + @SS - 1 of mk_fp8(), in one pass, each sum over
 * VF_CHAINS() accumulators. */
AI void mk_pass(const uint8_t *w, const uint8_t *pf, float xf[][XB],
		const int M, const int s0, const int SS, vf o[][NS])
{
	const int CH = VF_CHAINS(M, SS, MR);
	vf acc[MR][NS][4];
	int m, h, j, c;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (j = 0; j < SS; j++)
#pragma GCC unroll 4
			for (c = 0; c < CH; c++)
				acc[m][j][c] = vf_zero();
	for (h = 0; h < BT * NHALF; h += 2) {
		if (!s0)
			_mm_prefetch((const char *)pf + h * HALF, _MM_HINT_T0);
#pragma GCC unroll 2
		for (j = 0; j < SS; j++) {
			vf wv[4];

			fp8_line(w + h * HALF, s0 + j, wv);
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
#pragma GCC unroll 4
				for (c = 0; c < 4; c++)
					acc[m][j][c % CH] = vf_fmadd(
						vf_set1(xf[m][2 * h + c]),
						wv[c], acc[m][j][c % CH]);
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (j = 0; j < SS; j++)
			o[m][s0 + j] = vf_sum_chains(acc[m][j], CH);
}

/*
 * One scale block (BT adjacent tiles, 16 rows x 128 columns) of one
 * matrix for M tokens whose activations of these columns are xf[m] (f32):
 * the f32 dots, fresh, rows VF_LANES * s .. in o[m][s]. The block's reads
 * prefetch the same length from @pf on.
 */
AI void mk_fp8(const uint8_t *w, const uint8_t *pf, float xf[][XB],
	       const int M, vf o[][NS])
{
	int s;

	if (SLICES(M) == NS) {
		mk_pass(w, pf, xf, M, 0, NS, o);
		return;
	}
#pragma GCC unroll 1
	for (s = 0; s < NS; s++)
		mk_pass(w, pf, xf, M, s, 1, o);
}

/* The scales of rows VF_LANES * s .. (the row's own, or the block's)
 * times the 2^8 that fp8_rows() leaves out: exact, a power of two. */
AI vf scale8(const float *sp, bool chan, unsigned int kb, int s)
{
	return chan ? vf_mul(vf_load(sp + VF_LANES * s), vf_set1(256.0f)) :
		      vf_set1(sp[kb] * 256.0f);
}

/* ---- gate + up ----------------------------------------------------------- */

AI void gu_block(const struct kern_gate_up_args *a, unsigned int nb,
		 unsigned int i0, const int M)
{
	const unsigned int nkb = a->K / KERN_FP8_BLOCK;
	const bool chan = a->group == KERN_FP8_CHANNEL;
	const float *sg = a->gate->scales + kern_fp8_scale_idx(a->group, a->K,
							       nb * NROW, 0);
	const float *su = a->up->scales + (sg - a->gate->scales);
	const uint8_t *x[MR], *xk[MR];
	float xf[MR][XB] __attribute__((aligned(64)));
	vf g[MR][NS], u[MR][NS], d[MR][NS];
	unsigned int kb;
	int m, s;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i0 + m] * a->act_stride;
#pragma GCC unroll 2
		for (s = 0; s < NS; s++)
			g[m][s] = u[m][s] = vf_zero();
	}
	for (kb = 0; kb < nkb; kb++) {
		size_t off = kern_tile_off(kern_tile_rbm(a->K, KERN_TILE_K_FP8,
							 nb, kb * BT));

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			xk[m] = x[m] + (size_t)kb * KERN_FP8_BLOCK * 2;
		vf_widen_bf16_rows(&xf[0][0], xk, M, XB);
		mk_fp8(a->gate->tiles + off, a->gate->tiles + off + PF_DIST,
		       xf, M, d);
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
#pragma GCC unroll 2
			for (s = 0; s < NS; s++)
				g[m][s] = vf_fmadd(d[m][s],
					scale8(sg, chan, kb, s), g[m][s]);
		mk_fp8(a->up->tiles + off, a->up->tiles + off + PF_DIST, xf, M,
		       d);
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
#pragma GCC unroll 2
			for (s = 0; s < NS; s++)
				u[m][s] = vf_fmadd(d[m][s],
					scale8(su, chan, kb, s), u[m][s]);
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

void VNAME(kern_gate_up_fp8)(const struct kern_gate_up_args *a)
{
	unsigned int nb, i0, mr;

	for (nb = a->n0 / NROW; nb < a->n1 / NROW; nb++)
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			KERN_DISPATCH_M(gu_block, mr, a, nb, i0);
		}
}

/* ---- down: chunks outer, output blocks inner, sums in scratch ----------- */

AI const uint8_t *down_block_at(const struct kern_down_args *a,
				unsigned int c, unsigned int nb)
{
	return a->down->tiles + kern_tile_off(kern_tile_kcm(a->N, a->kc,
					      KERN_TILE_K_FP8, nb, c * BT));
}

/* What to prefetch while the block at @t of chunk @c is read: PF_DIST
 * bytes on in the chunk's run, or in the next call's (kern_down_pf()). */
AI const uint8_t *down_pf(const struct kern_down_args *a, const uint8_t *t,
			  unsigned int c)
{
	const uint8_t *p = kern_down_pf(a, down_block_at(a, c, a->n0 / NROW),
					(size_t)(a->n1 - a->n0) / NROW * BT *
					KERN_TILE_BYTES, t, PF_DIST);

	return p ? p : t + PF_DIST;
}

AI void down_block(const struct kern_down_args *a, unsigned int i0,
		   unsigned int ns0, unsigned int ns1, float *part,
		   const int M)
{
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nsub = ns1 - ns0;
	const size_t crow = ((size_t)a->kc * 2 + 63) & ~(size_t)63;
	const bool chan = a->group == KERN_FP8_CHANNEL;
	unsigned int c, nb;
	int m, s;

	memset(part, 0, sizeof(float) * MR * nsub);
	for (c = c0; c < c1; c++) {
		const uint8_t *x[MR];
		float xf[MR][XB] __attribute__((aligned(64)));

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			x[m] = a->act + (i0 + m) * a->act_stride +
			       (c - c0) * crow;
		vf_widen_bf16_rows(&xf[0][0], x, M, XB);
		for (nb = ns0 / NROW; nb < ns1 / NROW; nb++) {
			const uint8_t *tw = down_block_at(a, c, nb);
			const float *sp = a->down->scales + kern_fp8_scale_idx(
				a->group, a->K, nb * NROW, c * a->kc);
			float *pp = part + (nb * NROW - ns0);
			vf r[MR][NS];

			mk_fp8(tw, down_pf(a, tw, c), xf, M, r);
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
#pragma GCC unroll 2
				for (s = 0; s < NS; s++) {
					float *q = pp + m * nsub +
						   VF_LANES * s;

					vf_store(q, vf_fmadd(r[m][s],
						scale8(sp, chan, 0, s),
						vf_load(q)));
				}
		}
	}
	down_add_y(a, KT_QUANT_FP8, i0, ns0, ns1, part, M);
}

void VNAME(kern_down_fp8)(const struct kern_down_args *a)
{
	float *part = a->scratch;
	unsigned int i0, mr, ns0, ns1;

	for (ns0 = a->n0; ns0 < a->n1; ns0 = ns1) {
		ns1 = a->n1 - ns0 < DOWN_NSUB ? a->n1 : ns0 + DOWN_NSUB;
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			KERN_DISPATCH_M(down_block, mr, a, i0, ns0, ns1, part);
		}
	}
}

size_t VNAME(kern_scratch_bytes_fp8)(const struct kern_geom *g,
				     unsigned int max_m)
{
	return sizeof(float) * MR * DOWN_NSUB;
}
