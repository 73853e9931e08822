/* SPDX-License-Identifier: MIT */
/*
 * fp8-vec.h - FP8 (E4M3) experts on FMA + F16C at either width, for the
 * variants without AVX-512 BF16: each half line of a tile (16 rows x a k
 * pair) is widened to f32 exactly (through f16, or by shifts into f32
 * bits), per VF_LANES rows and k parity, and multiplied with the bf16
 * activations widened; each
 * 128-column scale block's sums are scaled in f32. Gate + up runs scale
 * blocks outer over GU_NB row blocks, down (like moe-vec.h) column chunks
 * outer over up to DOWN_NSUB rows, so that each activation is widened
 * once for many rows. At 256 bits, for many tokens, each block is
 * widened once into an f32 copy that passes of tokens read (the panels).
 * Built at 256 bits by moe-fp8-avx2.c (AVX2, AVX-VNNI; with
 * FP8_PASS_F16 by moe-fp8-f16-avx2.c, which it defers to on CPUs whose
 * FMAs are slow on subnormals) and at 512 by moe-fp8-avx512bw.c (AVX-512
 * without BF16: Skylake-SP, Cascade Lake, Ice Lake).
 */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/fp8.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/dispatch-m.h"
#include "kernels/add-y-vec.h"

#ifndef FP8_PASS_F16
#define FP8_PASS_F16	0
#endif
/* the passes widen to f32 bits (256 bits, unless FP8_PASS_F16) */
#define FP8_BITS	(VEC_BITS != 512 && !FP8_PASS_F16)

/* Row slices of a tile, one vector of VF_LANES rows each. */
#define NS		(KERN_TILE_ROWS / VF_LANES)
/*
 * Tokens per register block, and the accumulators a pass may hold
 * (tokens x row slices x VF_CHAINS()): at 256 bits six tokens of one
 * slice keep two chains each, twelve FMAs a step against a latency of
 * four; four or seven tokens ran slower (Zen 3, one expert in L3, T = 64,
 * gate + up: 7.0 ms against 11.0 and 9.0).
 */
#if VEC_BITS == 512
#define MR		8
#define ACC		8
#else
#define MR		6
#define ACC		12
#endif
/*
 * Row slices per pass over a block for M tokens: all while their
 * accumulators fit with room for the weights (a few tokens: independent
 * chains to hide the FMA latency, AVX2 decode 2.5 -> 1.5 ms per layer),
 * else one, the block in L1 for the next (AVX2, T = 512: 400 -> 280 ms).
 * Each row's sums are the same either way.
 */
#define SLICES(M)	((M) * NS <= ACC - 2 ? NS : 1)
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
 * Widening through f16, exactly: an E4M3 byte's 7 low bits, 7 places up,
 * are an f16 of the same mantissa and an exponent 8 lower (bias 15
 * against 7), subnormals included; the sign goes to bit 15, and F16C
 * widens it, each weight 2^-8 of its E4M3 value (CB_UNIT). The NaN
 * encodings read as +-480, as on AVX-512. The mask: sign-extended and 7
 * places up, the sign lands in bit 15 and again in bit 14, which it
 * clears; the magnitude in bits 7-13.
 *
 * A half line's 16-bit word r is row r's even byte, then its odd: the odd
 * byte is the word shifted right once (arithmetic), the even one first
 * shifted up 8. Shifts and masks only: the shuffles that gathered the
 * bytes (vpshufb, vpermq, vpmovsxbw) shared port 5 with the widening
 * (AVX-512, one line, in L1: 13 -> 10.5 cycles; Zen 3, AVX2, one expert
 * in L3, T = 1: 445 -> 265 us).
 *
 * fp8_step() is one step of mk_pass(): KS columns k = 2h .. from @p, the
 * line or half line of k pair h, row slice @s, in w[0 .. KS - 1], each
 * its E4M3 value over X_UNIT * W_UNIT, exactly; widen_x() puts X_UNIT
 * on the activations, the scales W_UNIT on the sums. unparity() puts
 * the slices' rows in order.
 */
#define CB_UNIT		256.0f
#if VEC_BITS == 512
/* the whole line (one row slice of 16): both half lines */
#define KS		4
AI void fp8_step(const uint8_t *p, int s, vf w[KS])
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
/*
 * Rows 8 * @s .. 8 * @s + 7 of a half line through f16, in xmm
 * registers: the panels' widening (cvt_block()), once for many tokens,
 * and the passes' where FP8_PASS_F16 is set.
 */
AI void fp8_step_f16(const uint8_t *p, int s, vf w[2])
{
	const __m128i mask = _mm_set1_epi16((short)0xbf80);
	__m128i b = _mm_loadu_si128((const void *)(p + 16 * s));

	w[0] = _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(
		_mm_slli_epi16(b, 8), 1), mask));
	w[1] = _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(b, 1), mask));
}

#if FP8_PASS_F16
#define KS		2
AI void fp8_step(const uint8_t *p, int s, vf w[KS])
{
	fp8_step_f16(p, s, w);
}
#else
/*
 * A pass widens each weight for a few tokens only, and there F16C's
 * vcvtph2ps (one every two cycles on Zen 3) was the bound. So mk_pass()
 * takes each byte to f32 bits with 32-bit shifts and a mask: the sign to
 * bit 31, the 7 low bits to bits 20-26, where they read as an f32 of the
 * same mantissa and an exponent 120 lower (bias 127 against 7; E4M3
 * subnormals become f32 subnormals, exactly, which fp8_no_daz() keeps
 * from reading as zero). A product with an activation below 2^-6 would
 * leave the f32 normals, so the activations are scaled up 2^64 (X_UNIT:
 * finite below 2^64) and the scales carry the 2^56 left over (W_UNIT):
 * each product is the f16 route's times a power of two, so every sum is
 * the same bits. A half line's dword i is rows 2i and 2i + 1, each its
 * even-k then its odd-k byte: slice @s is the rows of parity s. Zen 3,
 * one expert in L3, T = 1: gate + up 287 -> 213 us, down 177 -> 102 us.
 */
#define KS		2
#define W_UNIT		0x1p56f
#define X_UNIT		0x1p64f
AI vf fp8_bits(__m256i b, int up)
{
	const __m256i mask = _mm256_set1_epi32((int)0x87f00000u);

	if (up)
		b = _mm256_slli_epi32(b, up);
	return _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(b, 4),
						    mask));
}

AI void fp8_step(const uint8_t *p, int s, vf w[KS])
{
	__m256i b = _mm256_loadu_si256((const void *)p);

	w[0] = fp8_bits(b, 24 - 16 * s);
	w[1] = fp8_bits(b, 16 - 16 * s);
}

/* Slices of even and odd rows back into rows 0-7 and 8-15. */
AI void unparity(vf o[NS])
{
	vf lo = _mm256_unpacklo_ps(o[0], o[1]);
	vf hi = _mm256_unpackhi_ps(o[0], o[1]);

	o[0] = _mm256_permute2f128_ps(lo, hi, 0x20);
	o[1] = _mm256_permute2f128_ps(lo, hi, 0x31);
}

/* MXCSR.DAZ (bit 6) off until fp8_restore_csr(), where the caller set
 * it. */
AI unsigned int fp8_no_daz(void)
{
	unsigned int csr = _mm_getcsr();

	if (csr & 0x40)
		_mm_setcsr(csr & ~0x40u);
	return csr;
}

AI void fp8_restore_csr(unsigned int csr)
{
	if (csr & 0x40)
		_mm_setcsr(csr);
}
#endif /* FP8_PASS_F16 */
#endif

#if !FP8_BITS
/* through f16, rows in order */
#define W_UNIT		CB_UNIT
#define X_UNIT		1.0f
AI void unparity(vf o[NS])
{
	(void)o;
}
#endif

/*
 * Each activation as the FMAs take it. At 512 bits a float, which the FMA
 * broadcasts from memory itself ({1to16}). At 256 bits a whole vector,
 * stored broadcast once (widen_x()), which each FMA takes as a memory
 * operand: a vbroadcastss per FMA held it to about one a cycle (Zen 3,
 * one expert in L3, T = 64: gate + up 7.85 -> 7.04 ms, down 3.86 -> 3.46
 * ms). The rows are a line longer than the data: 4 KiB apart, each step's
 * loads would all fall in one L1 set.
 */
#if VEC_BITS == 512
#define XL		1
#else
#define XL		VF_LANES
#endif
typedef float xrow_t[XB * XL + (XL > 1 ? 16 : 0)];

/* activation @k of the row @xr, in every lane */
AI vf x_at(const float *xr, int k)
{
	return XL == 1 ? vf_set1(xr[k]) : vf_load(xr + k * XL);
}

/* The XB bf16 activations of @M tokens from x[m] on, widened to f32, to
 * xf[m] in x_at()'s form. */
AI void widen_x(xrow_t *xf, const uint8_t *const *x, const int M)
{
	float t[XB] __attribute__((aligned(64)));
	int m, k;

	if (XL == 1) {
		vf_widen_bf16_rows(&xf[0][0], x, M, XB);
		return;
	}
#pragma GCC unroll 1
	for (m = 0; m < M; m++) {
		vf_widen_bf16(t, x[m], XB);
#pragma GCC unroll 8
		for (k = 0; k < XB; k++)
			vf_store(xf[m] + k * XL, vf_set1(t[k] * X_UNIT));
	}
}

/* Row slices @s0 .. @s0 + @SS - 1 of mk_fp8(), in one pass, each sum over
 * VF_CHAINS() accumulators (k mod 4 or its parity). */
AI void mk_pass(const uint8_t *w, const uint8_t *pf, xrow_t *xf,
		const int M, const int s0, const int SS, vf o[][NS])
{
	const int CH = VF_CHAINS(M, SS, ACC);
	vf acc[MR][NS][4];
	int m, h, j, c;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (j = 0; j < SS; j++)
#pragma GCC unroll 4
			for (c = 0; c < CH; c++)
				acc[m][j][c] = vf_zero();
	for (h = 0; h < BT * NHALF; h += KS / 2) {
		vf wv[NS][KS];

		if (!s0 && !(h & 1))
			_mm_prefetch((const char *)pf + h * HALF, _MM_HINT_T0);
#pragma GCC unroll 2
		for (j = 0; j < SS; j++)
			fp8_step(w + h * HALF, s0 + j, wv[j]);
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
#pragma GCC unroll 4
			for (c = 0; c < KS; c++) {
				vf xv = x_at(xf[m], 2 * h + c);

#pragma GCC unroll 2
				for (j = 0; j < SS; j++)
					acc[m][j][c % CH] = vf_fmadd(xv,
						wv[j][c], acc[m][j][c % CH]);
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
AI void mk_fp8(const uint8_t *w, const uint8_t *pf, xrow_t *xf,
	       const int M, vf o[][NS])
{
	int s, m;

	if (SLICES(M) == NS) {
		mk_pass(w, pf, xf, M, 0, NS, o);
	} else {
#pragma GCC unroll 1
		for (s = 0; s < NS; s++)
			mk_pass(w, pf, xf, M, s, 1, o);
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		unparity(o[m]);
}

/* The scales of rows VF_LANES * s .. (the row's own, or the block's)
 * times the @unit that the sums leave out: exact, a power of two. */
AI vf scale_u(const float *sp, bool chan, unsigned int kb, int s,
	      float unit)
{
	return chan ? vf_mul(vf_load(sp + VF_LANES * s), vf_set1(unit)) :
		      vf_set1(sp[kb] * unit);
}

/* acc[m] += d[m] times the scales of block column @kb, for M tokens */
AI void add_scaled(vf acc[][NS], vf d[][NS], const float *sp, bool chan,
		   unsigned int kb, float unit, const int M)
{
	int m, s;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (s = 0; s < NS; s++)
			acc[m][s] = vf_fmadd(d[m][s],
					     scale_u(sp, chan, kb, s, unit),
					     acc[m][s]);
}

/* The same into M tokens' rows of sums in memory, @nsub floats apart. */
AI void add_scaled_rows(float *pp, unsigned int nsub, vf r[][NS],
			const float *sp, bool chan, float unit, const int M)
{
	int m, s;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (s = 0; s < NS; s++) {
			float *q = pp + m * nsub + VF_LANES * s;

			vf_store(q, vf_fmadd(r[m][s],
					     scale_u(sp, chan, 0, s, unit),
					     vf_load(q)));
		}
}

/* ---- gate + up ----------------------------------------------------------- */

/*
 * Row blocks whose gate and up sums one pass over the columns feeds, so
 * that each scale block's activations are widened (widen_x()) once for
 * all of them: at 256 bits a store per activation, which for one row
 * block cost as much as the FMAs it saved. Their weights, GU_NB * 32 rows
 * of K, stay in L2 or L3 for the next tokens. At 512 bits, where widening
 * is a store per 16 activations, one: row blocks outer, as measured.
 */
#if VEC_BITS == 512
#define GU_NB		1
#else
#define GU_NB		8
#endif

/* block @kb (of KERN_FP8_BLOCK columns) of row block @nb of @w */
AI const uint8_t *gu_at(const struct kern_mat *w, unsigned int K,
			unsigned int nb, unsigned int kb)
{
	return w->tiles + kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_FP8, nb,
						      kb * BT));
}

/* One matrix's block (@nb, @kb) for M tokens, its sums scaled into acc. */
AI void gu_mat(const struct kern_gate_up_args *a, const struct kern_mat *w,
	       unsigned int nb, unsigned int kb, const uint8_t *pf,
	       xrow_t *xf, const int M, vf acc[][NS])
{
	const float *sp = w->scales + kern_fp8_scale_idx(a->group, a->K,
							 nb * NROW, 0);
	const bool chan = a->group == KERN_FP8_CHANNEL;
	vf d[MR][NS];

	mk_fp8(gu_at(w, a->K, nb, kb), pf, xf, M, d);
	add_scaled(acc, d, sp, chan, kb, W_UNIT, M);
}

/* Row blocks @nb0 .. @nb0 + @nbn - 1 (nbn <= GU_NB) for tokens @i0 ..
 * @i0 + M - 1: scale blocks outer, row blocks inner. */
AI void gu_blocks(const struct kern_gate_up_args *a, unsigned int nb0,
		  unsigned int nbn, unsigned int i0, const int M)
{
	const unsigned int nkb = a->K / KERN_FP8_BLOCK;
	const uint8_t *x[MR], *xk[MR];
	xrow_t xf[MR] __attribute__((aligned(64)));
	vf g[GU_NB][MR][NS], u[GU_NB][MR][NS];
	unsigned int kb, b;
	int m, s;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		x[m] = a->act + a->act_rows[i0 + m] * a->act_stride;
	for (b = 0; b < nbn; b++)
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
#pragma GCC unroll 2
			for (s = 0; s < NS; s++)
				g[b][m][s] = u[b][m][s] = vf_zero();
	for (kb = 0; kb < nkb; kb++) {
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			xk[m] = x[m] + (size_t)kb * KERN_FP8_BLOCK * 2;
		widen_x(xf, xk, M);
		for (b = 0; b < nbn; b++) {
			/*
			 * Prefetch the block read two on (PF_DIST), past the
			 * last column into the next row blocks (where one row
			 * block a pass, the bytes that follow).
			 */
			unsigned int pb = nb0 + (b + 2) % nbn;
			unsigned int pk = kb + (b + 2) / nbn;

			if (pk >= nkb)
				pb += nbn, pk -= nkb;
			gu_mat(a, a->gate, nb0 + b, kb,
			       gu_at(a->gate, a->K, pb, pk), xf, M, g[b]);
			gu_mat(a, a->up, nb0 + b, kb,
			       gu_at(a->up, a->K, pb, pk), xf, M, u[b]);
		}
	}
	for (b = 0; b < nbn; b++)
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
#pragma GCC unroll 2
			for (s = 0; s < NS; s++) {
				unsigned int n = (nb0 + b) * NROW +
						 VF_LANES * s;

				vf_store(a->out + (i0 + m) * a->out_stride +
					 n - a->n0,
					 vf_glu(a->glu, n, g[b][m][s],
						u[b][m][s]));
			}
}

/* ---- gate + up, many tokens at 256 bits: each block widened once ------- */

#if VEC_BITS == 512
#define FP8_PANEL	0
#else
/*
 * With F16C at 256 bits the widening took pipe time the FMAs needed: a
 * pass of six tokens, twelve FMAs a step, ran at about half the FMA peak
 * (Zen 3). For many tokens each block is widened once per PANEL_M of
 * them, to f32 in L1 (cblk), and passes of up to MP tokens read it: four
 * loads and two broadcasts per token a step, where the FMAs are 4 * MP.
 */
#define FP8_PANEL	1
#define PANEL_M		60
#define MP		5
/*
 * Tokens from which a call takes the panel path: below, widening a block
 * per pass costs less than its f32 copy, four times its bytes, stored
 * and read back (Zen 3, one expert in L3, gate + up per token: 112 us
 * direct at T = 12 to 30; panels 144 at 12, 116 at 20, 92 at 30, 88 at
 * 60; down, whose passes hold fewer rows, gains from 10).
 */
#define PANEL_MIN_GU	24
#define PANEL_MIN_DOWN	10

/* a block widened: k pair h, row slice s, even and odd k */
typedef vf cblk_t[BT * NHALF][NS][2];

/* block @w widened into @cb, prefetching as many bytes from @pf on */
AI void cvt_block(const uint8_t *w, const uint8_t *pf, cblk_t cb)
{
	int h, s;

	for (h = 0; h < BT * NHALF; h++) {
		if (!(h & 1))
			_mm_prefetch((const char *)pf + h * HALF, _MM_HINT_T0);
#pragma GCC unroll 2
		for (s = 0; s < NS; s++)
			fp8_step_f16(w + h * HALF, s, cb[h][s]);
	}
}

/* mk_fp8() on a widened block, both slices a pass, for M <= MP tokens
 * whose activations (f32) are xf[m] */
AI void mk_cblk(cblk_t cb, float xf[][XB], const int M, vf o[][NS])
{
	const int CH = VF_CHAINS(M, NS, ACC - 2);
	vf acc[MR][NS][2];
	int m, h, j, c;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (j = 0; j < NS; j++)
#pragma GCC unroll 2
			for (c = 0; c < CH; c++)
				acc[m][j][c] = vf_zero();
	for (h = 0; h < BT * NHALF; h++) {
		vf wv[NS][2];

#pragma GCC unroll 2
		for (j = 0; j < NS; j++)
			wv[j][0] = cb[h][j][0], wv[j][1] = cb[h][j][1];
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
#pragma GCC unroll 2
			for (c = 0; c < 2; c++) {
				vf xv = vf_bcast(&xf[m][2 * h + c]);

#pragma GCC unroll 2
				for (j = 0; j < NS; j++)
					acc[m][j][c % CH] = vf_fmadd(xv,
						wv[j][c], acc[m][j][c % CH]);
			}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (j = 0; j < NS; j++)
			o[m][j] = vf_sum_chains(acc[m][j], CH);
}

/* Block column @kb of row block @nb, tokens @i0 .. @i0 + M - 1, into
 * their sums g[m], u[m]. */
AI void gu_pass(const struct kern_gate_up_args *a, unsigned int nb,
		unsigned int kb, unsigned int i0, cblk_t cbg, cblk_t cbu,
		vf g[][NS], vf u[][NS], const int M)
{
	const float *sg = a->gate->scales + kern_fp8_scale_idx(a->group, a->K,
							       nb * NROW, 0);
	const float *su = a->up->scales + (sg - a->gate->scales);
	const bool chan = a->group == KERN_FP8_CHANNEL;
	const uint8_t *x[MR];
	float xf[MR][XB] __attribute__((aligned(64)));
	vf d[MR][NS];
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		x[m] = a->act + a->act_rows[i0 + m] * a->act_stride +
		       (size_t)kb * KERN_FP8_BLOCK * 2;
	vf_widen_bf16_rows(&xf[0][0], x, M, XB);
	mk_cblk(cbg, xf, M, d);
	add_scaled(g, d, sg, chan, kb, CB_UNIT, M);
	mk_cblk(cbu, xf, M, d);
	add_scaled(u, d, su, chan, kb, CB_UNIT, M);
}

/* Row block @nb for tokens @i0 .. @i0 + @mt - 1 (mt <= PANEL_M). */
static void gu_panel(const struct kern_gate_up_args *a, unsigned int nb,
		     unsigned int i0, unsigned int mt)
{
	cblk_t cbg __attribute__((aligned(64))), cbu
		__attribute__((aligned(64)));
	vf g[PANEL_M][NS], u[PANEL_M][NS];
	unsigned int kb, t, mp;
	int s;

	for (t = 0; t < mt; t++)
		for (s = 0; s < NS; s++)
			g[t][s] = u[t][s] = vf_zero();
	for (kb = 0; kb < a->K / KERN_FP8_BLOCK; kb++) {
		const uint8_t *tg = gu_at(a->gate, a->K, nb, kb);
		const uint8_t *tu = gu_at(a->up, a->K, nb, kb);

		cvt_block(tg, tg + PF_DIST, cbg);
		cvt_block(tu, tu + PF_DIST, cbu);
		for (t = 0; t < mt; t += mp) {
			mp = mt - t < MP ? mt - t : MP;
			KERN_DISPATCH_M(gu_pass, mp, a, nb, kb, i0 + t, cbg,
					cbu, g + t, u + t);
		}
	}
	for (t = 0; t < mt; t++)
		for (s = 0; s < NS; s++) {
			unsigned int n = nb * NROW + VF_LANES * s;

			vf_store(a->out + (i0 + t) * a->out_stride + n - a->n0,
				 vf_glu(a->glu, n, g[t][s], u[t][s]));
		}
}
#endif

static void gate_up(const struct kern_gate_up_args *a)
{
	unsigned int nb, nbn, i0, mr;
#if FP8_PANEL
	if (a->m >= PANEL_MIN_GU) {
		for (nb = a->n0 / NROW; nb < a->n1 / NROW; nb++)
			for (i0 = 0; i0 < a->m; i0 += PANEL_M)
				gu_panel(a, nb, i0, a->m - i0 < PANEL_M ?
					 a->m - i0 : PANEL_M);
		return;
	}
#endif

	for (nb = a->n0 / NROW; nb < a->n1 / NROW; nb += nbn) {
		nbn = a->n1 / NROW - nb < GU_NB ? a->n1 / NROW - nb : GU_NB;
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			KERN_DISPATCH_M(gu_blocks, mr, a, nb, nbn, i0);
		}
	}
}

void VNAME(kern_gate_up_fp8)(const struct kern_gate_up_args *a)
{
#if FP8_BITS
	unsigned int csr;

	if (!kern_fma_subnormals_free()) {
		kern_gate_up_fp8_f16_avx2(a);
		return;
	}
	csr = fp8_no_daz();
	gate_up(a);
	fp8_restore_csr(csr);
#else
	gate_up(a);
#endif
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
	int m;

	memset(part, 0, sizeof(float) * MR * nsub);
	for (c = c0; c < c1; c++) {
		const uint8_t *x[MR];
		xrow_t xf[MR] __attribute__((aligned(64)));

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			x[m] = a->act + (i0 + m) * a->act_stride +
			       (c - c0) * crow;
		widen_x(xf, x, M);
		for (nb = ns0 / NROW; nb < ns1 / NROW; nb++) {
			const uint8_t *tw = down_block_at(a, c, nb);
			const float *sp = a->down->scales + kern_fp8_scale_idx(
				a->group, a->K, nb * NROW, c * a->kc);
			vf r[MR][NS];

			mk_fp8(tw, down_pf(a, tw, c), xf, M, r);
			add_scaled_rows(part + (nb * NROW - ns0), nsub, r, sp,
					chan, W_UNIT, M);
		}
	}
	down_add_y(a, KT_QUANT_FP8, i0, ns0, ns1, part, M);
}

#if FP8_PANEL
/* rows of a down panel's sums: L2 holds them, their weights and the
 * activations widened */
#define PANEL_NSUB	256

/* Chunk @c's widened block @cb into the sums @pp (rows of @nsub) of M
 * tokens whose activations are xf[m]. */
AI void down_pass(cblk_t cb, float xf[][XB], const float *sp, bool chan,
		  float *pp, unsigned int nsub, const int M)
{
	vf r[MR][NS];

	mk_cblk(cb, xf, M, r);
	add_scaled_rows(pp, nsub, r, sp, chan, CB_UNIT, M);
}

/*
 * Rows @ns0 .. @ns1 - 1 (at most PANEL_NSUB) for tokens @i0 .. @i0 + @mt
 * - 1 (mt <= PANEL_M): chunks outer, blocks inner, each block widened
 * once for all the tokens. Scratch: their sums, then their activations.
 */
static void down_panel(const struct kern_down_args *a, unsigned int i0,
		       unsigned int mt, unsigned int ns0, unsigned int ns1)
{
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nsub = ns1 - ns0;
	const size_t crow = ((size_t)a->kc * 2 + 63) & ~(size_t)63;
	const bool chan = a->group == KERN_FP8_CHANNEL;
	float *part = a->scratch;
	float (*xf)[XB] = (float (*)[XB])(part + PANEL_M * PANEL_NSUB);
	cblk_t cb __attribute__((aligned(64)));
	unsigned int c, nb, t, mp;

	memset(part, 0, sizeof(float) * mt * nsub);
	for (c = c0; c < c1; c++) {
		for (t = 0; t < mt; t++)
			vf_widen_bf16(xf[t], a->act + (i0 + t) * a->act_stride +
				      (c - c0) * crow, XB);
		for (nb = ns0 / NROW; nb < ns1 / NROW; nb++) {
			const uint8_t *tw = down_block_at(a, c, nb);
			const float *sp = a->down->scales + kern_fp8_scale_idx(
				a->group, a->K, nb * NROW, c * a->kc);

			cvt_block(tw, down_pf(a, tw, c), cb);
			for (t = 0; t < mt; t += mp) {
				mp = mt - t < MP ? mt - t : MP;
				KERN_DISPATCH_M(down_pass, mp, cb, xf + t, sp,
						chan, part + t * nsub +
						nb * NROW - ns0, nsub);
			}
		}
	}
	down_add_y(a, KT_QUANT_FP8, i0, ns0, ns1, part, mt);
}
#endif

static void down(const struct kern_down_args *a)
{
	float *part = a->scratch;
	unsigned int i0, mr, ns0, ns1;
#if FP8_PANEL
	if (a->m >= PANEL_MIN_DOWN) {
		for (ns0 = a->n0; ns0 < a->n1; ns0 = ns1) {
			ns1 = a->n1 - ns0 < PANEL_NSUB ? a->n1 :
							 ns0 + PANEL_NSUB;
			for (i0 = 0; i0 < a->m; i0 += PANEL_M)
				down_panel(a, i0, a->m - i0 < PANEL_M ?
					   a->m - i0 : PANEL_M, ns0, ns1);
		}
		return;
	}
#endif

	for (ns0 = a->n0; ns0 < a->n1; ns0 = ns1) {
		ns1 = a->n1 - ns0 < DOWN_NSUB ? a->n1 : ns0 + DOWN_NSUB;
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			KERN_DISPATCH_M(down_block, mr, a, i0, ns0, ns1, part);
		}
	}
}

void VNAME(kern_down_fp8)(const struct kern_down_args *a)
{
#if FP8_BITS
	unsigned int csr;

	if (!kern_fma_subnormals_free()) {
		kern_down_fp8_f16_avx2(a);
		return;
	}
	csr = fp8_no_daz();
	down(a);
	fp8_restore_csr(csr);
#else
	down(a);
#endif
}

size_t VNAME(kern_scratch_bytes_fp8)(const struct kern_geom *g,
				     unsigned int max_m)
{
	size_t b = sizeof(float) * MR * DOWN_NSUB;

#if FP8_PANEL
	if (max_m >= PANEL_MIN_DOWN) {
		size_t p = sizeof(float) * PANEL_M * (PANEL_NSUB + XB);

		b = p > b ? p : b;
	}
#endif
	(void)g;
	return b;
}
