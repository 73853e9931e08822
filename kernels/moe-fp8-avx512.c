// SPDX-License-Identifier: MIT
/*
 * moe-fp8-avx512.c - FP8 (E4M3) experts on AVX-512 with vdpbf16ps: every
 * half line of a tile (16 rows x a k pair) is widened to the bf16 line it
 * stands for, exactly, then fed to the BF16 math; each 128 x 128 scale
 * block's sums are scaled in f32. A call of up to MR tokens widens in
 * registers. A longer one (prefill) widens each 16 x 128 block once into
 * scratch and runs all its tokens over that copy in L1, where widening
 * per MR tokens cost as much as the dots; down widens two row blocks at
 * a time, so that each activation load feeds two dots (gate+up has its
 * two matrices). Same values, same order of operations per token, so the
 * bits do not depend on the path.
 */
#include <immintrin.h>
#include <string.h>

#define VEC_BITS	512
#define VEC_ISA		avx512
#include "kernels/fp8.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/dispatch-m.h"
#include "kernels/fp8-zmm.h"

/* Tokens held in registers at once. */
#define MR		8
/* weight prefetch distance, into L2 (as moe-zmm.h: one core, T = 32, down
 * 601 -> 534 us per expert, gate+up 1205 -> 1049) */
#define PF_DIST		(8192)
/*
 * ... and in decode (up to MR tokens in registers), where one core's
 * stream bounds the time: one expert at one token from DRAM, one core,
 * 406-415 -> 353-392 us; both threads, four runs each, T = 1 1.76-1.88
 * -> 1.70-1.84 ms per layer, T = 2 3.16-3.26 -> 2.96-3.16.
 */
#define PF_DECODE	(4096)
#define NROW		KERN_TILE_ROWS
#define HALF		(KERN_TILE_ROW_BYTES / 2)	/* bytes of one k pair */
#define NHALF		(KERN_TILE_BYTES / HALF)	/* k pairs of a tile */
/* Tiles of one 128-column scale block; its tiles are adjacent in both
 * matrix orders (rbm: along K; kcm: P = KC / 64 tiles per chunk). */
#define BT		(KERN_FP8_BLOCK / KERN_TILE_K_FP8)
#define DOWN_NSUB	1024
/*
 * Tokens that share one widened block: gate+up, down. A second widening
 * for the few tokens past a group costs more than the group's sums in L2:
 * one core, H 2048, I 768, from 64 and 32: down T = 40 378 -> 345 us per
 * expert, T = 256 2161 -> 2033; gate+up T = 96 1568 -> 1517.
 */
#define TB_GU		128
#define TB_DN		64
/* Output rows of down whose sums one widened pass keeps: TB_DN x 512. */
#define DOWN_NSUB_W	512
#define WBLOCK		(BT * NHALF * 64)	/* bytes of a widened block */

AI __m512i bcast32(const void *p)
{
	return _mm512_set1_epi32(ld32(p));
}

/*
 * One scale block (BT adjacent tiles, 16 rows x 128 columns) of one matrix
 * or two (@two: MK_*, vec.h), for M tokens whose bf16 activations of these
 * columns are at x[m] (MK_TWO_OWN_X: the second's at ux[m]): the f32 dots,
 * fresh, in og/ou. @wide: gw/uw are the block already widened (widen()),
 * else its FP8 tiles, and as many bytes at pg/pu are prefetched meanwhile.
 * Two accumulator chains (even and odd k pairs) while they fit.
 */
AI void mk_dot(const uint8_t *gw, const uint8_t *uw, const uint8_t *pg,
	       const uint8_t *pu, const int two, const int wide,
	       const uint8_t *const *x,
	       const uint8_t *const *ux, const int M, __m512 *og, __m512 *ou)
{
	const int CH = M <= 3 ? 2 : 1;
	const struct fp8_tbl tbl = fp8_tables();
	__m512 ag[2][MR], au[2][MR];
	int m, c, h, j;

#pragma GCC unroll 16
	for (c = 0; c < CH; c++)
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			ag[c][m] = au[c][m] = _mm512_setzero_ps();
	/* a tile line at a time: k pairs h and h + 1 */
	for (h = 0; h < BT * NHALF; h += 2) {
		__m512i wg[2], wu[2];

		if (wide) {
			for (j = 0; j < 2; j++) {
				wg[j] = _mm512_load_si512(gw + (h + j) * 64);
				if (two)
					wu[j] = _mm512_load_si512(uw +
							(h + j) * 64);
			}
		} else {
			fp8_bf16_line(gw + h * HALF, &tbl, &wg[0], &wg[1]);
			_mm_prefetch((const char *)pg + h * HALF,
				     _MM_HINT_T1);
			if (two) {
				fp8_bf16_line(uw + h * HALF, &tbl, &wu[0],
					      &wu[1]);
				_mm_prefetch((const char *)pu + h * HALF,
					     _MM_HINT_T1);
			}
		}
#pragma GCC unroll 2
		for (j = 0; j < 2; j++) {
			const int s = CH == 2 ? j : 0;

#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				/* k pair h + j: bytes 4 (h + j) of the row */
				__m512bh xb = (__m512bh)bcast32(x[m] +
							       4 * (h + j));
				__m512bh ub = two != MK_TWO_OWN_X ? xb :
					(__m512bh)bcast32(ux[m] + 4 * (h + j));

				ag[s][m] = _mm512_dpbf16_ps(ag[s][m], xb,
							    (__m512bh)wg[j]);
				if (two)
					au[s][m] = _mm512_dpbf16_ps(au[s][m],
						ub, (__m512bh)wu[j]);
			}
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		og[m] = CH == 2 ? _mm512_add_ps(ag[0][m], ag[1][m]) : ag[0][m];
		if (two)
			ou[m] = CH == 2 ? _mm512_add_ps(au[0][m], au[1][m]) :
				au[0][m];
	}
}

/*
 * The block of BT tiles at @src widened to bf16 lines at @dst (WBLOCK);
 * the block at @pf, as many bytes, prefetched meanwhile.
 */
AI void widen(const uint8_t *src, uint8_t *dst, const uint8_t *pf)
{
	const struct fp8_tbl tbl = fp8_tables();
	int h;

	for (h = 0; h < BT * NHALF; h += 2) {
		__m512i h0, h1;

		if (pf)
			_mm_prefetch((const char *)pf + h * HALF, _MM_HINT_T1);
		fp8_bf16_line(src + h * HALF, &tbl, &h0, &h1);
		_mm512_store_si512(dst + h * 64, h0);
		_mm512_store_si512(dst + (h + 1) * 64, h1);
	}
}

/* Scratch of the widened path, carved from the worker's (64-aligned). */
struct wide {
	uint8_t *wg, *wu;	/* widened blocks */
	float *acc;		/* gate+up: [2][TB_GU][NROW]; down: [TB_DN][nsub] */
};

static size_t wide_bytes(void)
{
	size_t gu = 2 * sizeof(float) * TB_GU * NROW;
	size_t dn = sizeof(float) * TB_DN * DOWN_NSUB_W;

	return 64 + 2 * WBLOCK + (gu > dn ? gu : dn);
}

static struct wide wide_of(void *scratch)
{
	uint8_t *p = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
	struct wide w = { p, p + WBLOCK, (float *)(p + 2 * WBLOCK) };

	return w;
}

size_t kern_scratch_bytes_fp8_avx512(const struct kern_geom *g,
				     unsigned int max_m)
{
	size_t v = kern_scratch_bytes_avx512(g, max_m);

	return v > wide_bytes() ? v : wide_bytes();
}

/* ---- gate + up ------------------------------------------------------------ */

/*
 * The scales of scale block @kb of 16 rows whose scales start at @s: per
 * row (@chan: a row's scale is the same for every block, its own), else
 * the block's one.
 */
AI __m512 block_scale(const float *s, bool chan, unsigned int kb)
{
	return chan ? _mm512_loadu_ps(s) : _mm512_set1_ps(s[kb]);
}

AI void gu_block(const struct kern_gate_up_args *a, unsigned int nb,
		 unsigned int i0, const int M)
{
	const unsigned int nkb = a->K / KERN_FP8_BLOCK;
	const bool chan = a->group == KERN_FP8_CHANNEL;
	const float *sg = a->gate->scales + kern_fp8_scale_idx(a->group, a->K,
							       nb * NROW, 0);
	const float *su = a->up->scales + (sg - a->gate->scales);
	const uint8_t *x[MR], *xk[MR];
	__m512 g[MR], u[MR], dg[MR], du[MR];
	unsigned int kb;
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i0 + m] * a->act_stride;
		g[m] = u[m] = _mm512_setzero_ps();
	}
	for (kb = 0; kb < nkb; kb++) {
		size_t off = kern_tile_off(kern_tile_rbm(a->K, KERN_TILE_K_FP8,
							 nb, kb * BT));
		__m512 vg = block_scale(sg, chan, kb);
		__m512 vu = block_scale(su, chan, kb);

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			xk[m] = x[m] + (size_t)kb * KERN_FP8_BLOCK * 2;
		mk_dot(a->gate->tiles + off, a->up->tiles + off,
		       a->gate->tiles + off + PF_DECODE,
		       a->up->tiles + off + PF_DECODE, MK_TWO, 0, xk, xk, M,
		       dg, du);
#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			g[m] = _mm512_fmadd_ps(dg[m], vg, g[m]);
			u[m] = _mm512_fmadd_ps(du[m], vu, u[m]);
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		_mm512_storeu_ps(a->out + (i0 + m) * a->out_stride +
				 nb * NROW - a->n0,
				 vf_glu(a->glu, nb * NROW, g[m], u[m]));
}

/*
 * Tokens i0 + i .. + M of scale block @kb of the widened gate and up: their
 * sums (w->acc: gate [TB_GU][NROW], then up) += the dots times vg / vu.
 */
AI void gu_wide_block(const struct kern_gate_up_args *a, const struct wide *w,
		      unsigned int i0, unsigned int i, unsigned int kb,
		      __m512 vg, __m512 vu, const int M)
{
	float *ag = w->acc + (size_t)i * NROW, *au = ag + TB_GU * NROW;
	const uint8_t *x[MR];
	__m512 dg[MR], du[MR];
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		x[m] = a->act + a->act_rows[i0 + i + m] * a->act_stride +
		       (size_t)kb * KERN_FP8_BLOCK * 2;
	mk_dot(w->wg, w->wu, NULL, NULL, MK_TWO, 1, x, x, M, dg, du);
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		_mm512_store_ps(ag + m * NROW, _mm512_fmadd_ps(dg[m], vg,
				_mm512_load_ps(ag + m * NROW)));
		_mm512_store_ps(au + m * NROW, _mm512_fmadd_ps(du[m], vu,
				_mm512_load_ps(au + m * NROW)));
	}
}

/* Row block @nb, tokens i0 .. + n (<= TB_GU), each block widened once. */
static void gu_wide(const struct kern_gate_up_args *a, const struct wide *w,
		    unsigned int nb, unsigned int i0, unsigned int n)
{
	const bool chan = a->group == KERN_FP8_CHANNEL;
	const float *sg = a->gate->scales + kern_fp8_scale_idx(a->group, a->K,
							       nb * NROW, 0);
	const float *su = a->up->scales + (sg - a->gate->scales);
	float *ag = w->acc, *au = w->acc + TB_GU * NROW;
	unsigned int kb, i, mr;

	memset(ag, 0, sizeof(float) * n * NROW);
	memset(au, 0, sizeof(float) * n * NROW);
	for (kb = 0; kb < a->K / KERN_FP8_BLOCK; kb++) {
		size_t off = kern_tile_off(kern_tile_rbm(a->K, KERN_TILE_K_FP8,
							 nb, kb * BT));
		__m512 vg = block_scale(sg, chan, kb);
		__m512 vu = block_scale(su, chan, kb);

		/* rbm: the blocks of consecutive kb and nb are adjacent */
		widen(a->gate->tiles + off, w->wg,
		      a->gate->tiles + off + PF_DIST);
		widen(a->up->tiles + off, w->wu, a->up->tiles + off + PF_DIST);
		for (i = 0; i < n; i += mr) {
			mr = n - i < MR ? n - i : MR;
			KERN_DISPATCH_M(gu_wide_block, mr, a, w, i0, i, kb, vg, vu);
		}
	}
	for (i = 0; i < n; i++)
		_mm512_storeu_ps(a->out + (i0 + i) * a->out_stride +
				 nb * NROW - a->n0,
				 vf_glu(a->glu, nb * NROW,
					_mm512_load_ps(ag + i * NROW),
					_mm512_load_ps(au + i * NROW)));
}

/* Row blocks outer, token blocks inner: a block's tiles stay in L2. */
void kern_gate_up_fp8_avx512(const struct kern_gate_up_args *a)
{
	const struct wide w = wide_of(a->scratch);
	unsigned int nb, i0, mr;

	for (nb = a->n0 / NROW; nb < a->n1 / NROW; nb++) {
		if (a->m > MR) {
			for (i0 = 0; i0 < a->m; i0 += mr) {
				mr = a->m - i0 < TB_GU ? a->m - i0 : TB_GU;
				gu_wide(a, &w, nb, i0, mr);
			}
			continue;
		}
		KERN_DISPATCH_M(gu_block, a->m, a, nb, 0);
	}
}

/* ---- down -----------------------------------------------------------------
 * Chunks (one scale block each, KC = 128) outer, output blocks inner, the
 * partial sums per token and row in scratch (f32 [MR][DOWN_NSUB]).
 */

/* y rows of tokens i0 .. + @n, columns ns0 .. ns1, += w * their sums
 * (@part [n][ns1 - ns0]) */
AI void add_y(const struct kern_down_args *a, unsigned int i0, unsigned int n,
	      const float *part, unsigned int ns0, unsigned int ns1)
{
	const unsigned int nsub = ns1 - ns0;
	unsigned int i, r;

#pragma GCC unroll 16
	for (i = 0; i < n; i++) {
		float *y = a->y + a->y_rows[i0 + i] * a->y_stride;
		__m512 w = _mm512_set1_ps(a->w[i0 + i]);

		for (r = ns0; r < ns1; r += NROW)
			_mm512_storeu_ps(y + r, _mm512_fmadd_ps(w,
				_mm512_loadu_ps(part + i * nsub + r - ns0),
				_mm512_loadu_ps(y + r)));
	}
}

/* token i0 + m's bf16 activations of chunk @c at x[m] */
AI void down_x(const struct kern_down_args *a, unsigned int i0,
	       unsigned int c, const uint8_t **x, const int M)
{
	const size_t crow = ((size_t)a->kc * 2 + 63) & ~(size_t)63;
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		x[m] = a->act + (i0 + m) * a->act_stride +
		       (c - a->k0 / a->kc) * crow;
}

/* chunk @c of output block @nb: its tiles */
AI const uint8_t *down_block_at(const struct kern_down_args *a,
				unsigned int c, unsigned int nb)
{
	return a->down->tiles + kern_tile_off(kern_tile_kcm(a->N, a->kc,
					      KERN_TILE_K_FP8, nb, c * BT));
}

/* ... and its scales at @s */
AI const uint8_t *down_at(const struct kern_down_args *a, unsigned int c,
			  unsigned int nb, __m512 *s)
{
	*s = block_scale(a->down->scales + kern_fp8_scale_idx(a->group, a->K,
			 nb * NROW, c * a->kc),
			 a->group == KERN_FP8_CHANNEL, 0);
	return down_block_at(a, c, nb);
}

/* What to prefetch while the block at @t of chunk @c is read: PF_DECODE
 * bytes on in the chunk's run, or in the next call's (kern_down_pf()). */
AI const uint8_t *down_pf(const struct kern_down_args *a, const uint8_t *t,
			  unsigned int c)
{
	const uint8_t *p = kern_down_pf(a, down_block_at(a, c, a->n0 / NROW),
					(size_t)(a->n1 - a->n0) / NROW * BT *
					KERN_TILE_BYTES, t, PF_DECODE);

	return p ? p : t + PF_DECODE;
}

/*
 * Chunk @c of output block @nb into the partial sums (row n of token m at
 * part[m * nsub + n - ns0]), or with @two (MK_TWO_OWN_X) also chunk c + 1
 * of block nb - 1 on activations ux: two DRAM streams for decode, each
 * block's chunks still in order (the bits of one at a time).
 */
AI void down_tiles(const struct kern_down_args *a, const int two,
		   unsigned int c, unsigned int nb, const uint8_t *const *x,
		   const uint8_t *const *ux, float *part, unsigned int ns0,
		   unsigned int nsub, const int M)
{
	float *pp = part + (nb * NROW - ns0);
	float *pp2 = pp - NROW;
	__m512 s, s2 = _mm512_setzero_ps(), r[MR], r2[MR];
	const uint8_t *tw = down_at(a, c, nb, &s);
	const uint8_t *tw2 = two ? down_at(a, c + 1, nb - 1, &s2) : NULL;
	int m;

	mk_dot(tw, tw2, down_pf(a, tw, c), two ? down_pf(a, tw2, c + 1) : NULL,
	       two, 0, x, ux, M, r, r2);
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		_mm512_storeu_ps(pp + m * nsub, _mm512_fmadd_ps(r[m], s,
				 _mm512_loadu_ps(pp + m * nsub)));
		if (two)
			_mm512_storeu_ps(pp2 + m * nsub, _mm512_fmadd_ps(r2[m],
					 s2, _mm512_loadu_ps(pp2 + m * nsub)));
	}
}

/* Decode: chunks two at a time, chunk c + 1 one output block behind c. */
AI void down_block(const struct kern_down_args *a, unsigned int i0,
		   unsigned int ns0, unsigned int ns1, float *part,
		   const int M)
{
	const unsigned int c1 = a->k1 / a->kc;
	const unsigned int nb0 = ns0 / NROW, nb1 = ns1 / NROW;
	const unsigned int nsub = ns1 - ns0;
	unsigned int c, nb;

	memset(part, 0, sizeof(float) * MR * nsub);
	for (c = a->k0 / a->kc; c < c1; c += 2) {
		const uint8_t *x[MR], *ux[MR];

		down_x(a, i0, c, x, M);
		if (c + 1 == c1) {
			for (nb = nb0; nb < nb1; nb++)
				down_tiles(a, MK_ONE, c, nb, x, x, part, ns0,
					   nsub, M);
			break;
		}
		down_x(a, i0, c + 1, ux, M);
		down_tiles(a, MK_ONE, c, nb0, x, x, part, ns0, nsub, M);
		for (nb = nb0 + 1; nb < nb1; nb++)
			down_tiles(a, MK_TWO_OWN_X, c, nb, x, ux, part, ns0,
				   nsub, M);
		down_tiles(a, MK_ONE, c + 1, nb1 - 1, ux, ux, part, ns0, nsub,
			   M);
	}
	add_y(a, i0, M, part, ns0, ns1);
}

/*
 * Tokens i0 + i .. + M of the widened block (chunk @c, rows nb * NROW ..)
 * of down, with @two (MK_TWO) also the next block (rows + NROW) on the
 * same activations: their sums (part [TB_DN][nsub], row n at n - ns0) +=
 * the dots times @s (@s2). Two blocks share every activation load, which
 * one block's dots could not hide.
 */
AI void down_wide_block(const struct kern_down_args *a, const struct wide *w,
			const int two, unsigned int i0, unsigned int i,
			unsigned int c, unsigned int ns0, unsigned int nsub,
			unsigned int nb, __m512 s, __m512 s2, const int M)
{
	float *pp = w->acc + (size_t)i * nsub + (nb * NROW - ns0);
	const uint8_t *x[MR];
	__m512 r[MR], r2[MR];
	int m;

	down_x(a, i0 + i, c, x, M);
	mk_dot(w->wg, w->wu, NULL, NULL, two, 1, x, x, M, r, r2);
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		_mm512_storeu_ps(pp + m * nsub, _mm512_fmadd_ps(r[m], s,
				 _mm512_loadu_ps(pp + m * nsub)));
		if (two)
			_mm512_storeu_ps(pp + m * nsub + NROW,
					 _mm512_fmadd_ps(r2[m], s2,
					 _mm512_loadu_ps(pp + m * nsub +
							 NROW)));
	}
}

/*
 * down_wide() takes the blocks of its rows chunk by chunk, and a chunk's
 * blocks of other rows lie between: the block this many later in that
 * order, not in memory, is the one to prefetch: by address, the first
 * blocks of every chunk were demand misses (one core, T = 32, H 2048, I
 * 768: down 302-304 -> 279-284 us per expert).
 */
#define DOWN_PF_BLOCKS	(PF_DIST / (BT * KERN_TILE_BYTES))

/* chunk @c of block @nb (of rows ns0 .. ns1) widened at @dst; its scale */
static __m512 down_widen(const struct kern_down_args *a, unsigned int c,
			 unsigned int nb, unsigned int ns0, unsigned int ns1,
			 uint8_t *dst)
{
	const float *sp = a->down->scales + kern_fp8_scale_idx(a->group, a->K,
							      nb * NROW,
							      c * a->kc);
	const unsigned int nbs = (ns1 - ns0) / NROW;
	const unsigned int ahead = nb - ns0 / NROW + DOWN_PF_BLOCKS;
	const unsigned int pc = c + ahead / nbs;

	widen(down_block_at(a, c, nb), dst, pc < a->k1 / a->kc ?
	      down_block_at(a, pc, ns0 / NROW + ahead % nbs) : NULL);
	return block_scale(sp, a->group == KERN_FP8_CHANNEL, 0);
}

/* Rows ns0 .. ns1 (<= DOWN_NSUB_W), tokens i0 .. + n (<= TB_DN), output
 * blocks two at a time. */
static void down_wide(const struct kern_down_args *a, const struct wide *w,
		      unsigned int i0, unsigned int n, unsigned int ns0,
		      unsigned int ns1)
{
	const unsigned int nsub = ns1 - ns0;
	unsigned int c, nb, i, mr;

	memset(w->acc, 0, sizeof(float) * n * nsub);
	for (c = a->k0 / a->kc; c < a->k1 / a->kc; c++)
		for (nb = ns0 / NROW; nb < ns1 / NROW; nb += 2) {
			const bool two = nb + 1 < ns1 / NROW;
			__m512 s = down_widen(a, c, nb, ns0, ns1, w->wg);
			__m512 s2 = s;

			if (two)
				s2 = down_widen(a, c, nb + 1, ns0, ns1,
						w->wu);
			for (i = 0; i < n; i += mr) {
				mr = n - i < MR ? n - i : MR;
				if (two)
					KERN_DISPATCH_M(down_wide_block, mr, a,
							w, MK_TWO, i0, i, c,
							ns0, nsub, nb, s, s2);
				else
					KERN_DISPATCH_M(down_wide_block, mr, a,
							w, MK_ONE, i0, i, c,
							ns0, nsub, nb, s, s2);
			}
		}
	add_y(a, i0, n, w->acc, ns0, ns1);
}

void kern_down_fp8_avx512(const struct kern_down_args *a)
{
	const struct wide w = wide_of(a->scratch);
	float *part = a->scratch;
	unsigned int i0, mr, ns0, ns1;

	if (a->m > MR) {
		for (ns0 = a->n0; ns0 < a->n1; ns0 = ns1) {
			ns1 = a->n1 - ns0 < DOWN_NSUB_W ? a->n1 :
			      ns0 + DOWN_NSUB_W;
			for (i0 = 0; i0 < a->m; i0 += mr) {
				mr = a->m - i0 < TB_DN ? a->m - i0 : TB_DN;
				down_wide(a, &w, i0, mr, ns0, ns1);
			}
		}
		return;
	}
	for (ns0 = a->n0; ns0 < a->n1; ns0 = ns1) {
		ns1 = a->n1 - ns0 < DOWN_NSUB ? a->n1 : ns0 + DOWN_NSUB;
		KERN_DISPATCH_M(down_block, a->m, a, 0, ns0, ns1, part);
	}
}
