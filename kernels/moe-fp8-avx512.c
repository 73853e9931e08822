// SPDX-License-Identifier: MIT
/*
 * moe-fp8-avx512.c - FP8 (E4M3) experts on AVX-512 with vdpbf16ps: every
 * half line of a tile (16 rows x a k pair) is widened to the bf16 line it
 * stands for in registers, exactly, then fed to the BF16 math; each
 * 128 x 128 scale block's sums are scaled in f32.
 */
#include <immintrin.h>
#include <string.h>

#define VEC_BITS	512
#define VEC_ISA		avx512
#include "kernels/fp8.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/fp8-zmm.h"

/* Tokens held in registers at once. */
#define MR		8
#define PF_DIST		(8192)
#define NROW		KERN_TILE_ROWS
#define HALF		(KERN_TILE_ROW_BYTES / 2)	/* bytes of one k pair */
#define NHALF		(KERN_TILE_BYTES / HALF)	/* k pairs of a tile */
/* Tiles of one 128-column scale block; its tiles are adjacent in both
 * matrix orders (rbm: along K; kcm: P = KC / 64 tiles per chunk). */
#define BT		(KERN_FP8_BLOCK / KERN_TILE_K_FP8)
#define DOWN_NSUB	1024

AI __m512i bcast32(const void *p)
{
	return _mm512_set1_epi32(ld32(p));
}

/*
 * One scale block (BT adjacent tiles, 16 rows x 128 columns) of one matrix
 * or (@two) two, for M tokens whose bf16 activations of these columns are
 * at x[m]: the f32 dots, fresh, in og/ou. Two accumulator chains (even and
 * odd k pairs) while they fit.
 */
AI void mk_fp8(const uint8_t *gw, const uint8_t *uw, const int two,
	       const uint8_t *const *x, const int M, __m512 *og, __m512 *ou)
{
	const int CH = M <= 3 ? 2 : 1;
	const __m512i tbl = fp8_sub_table();
	__m512 ag[2][MR], au[2][MR];
	int m, c, h;

#pragma GCC unroll 16
	for (c = 0; c < CH; c++)
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			ag[c][m] = au[c][m] = _mm512_setzero_ps();
	for (h = 0; h < BT * NHALF; h++) {
		const int s = CH == 2 ? (h & 1) : 0;
		__m512i wg = fp8_bf16(gw + h * HALF, tbl), wu = wg;

		if (!(h & 1)) {
			_mm_prefetch((const char *)gw + PF_DIST + h * HALF,
				     _MM_HINT_T0);
			if (two)
				_mm_prefetch((const char *)uw + PF_DIST +
					     h * HALF, _MM_HINT_T0);
		}
		if (two)
			wu = fp8_bf16(uw + h * HALF, tbl);
#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			/* k pair h of the block: bytes 4h of the bf16 row */
			__m512bh xb = (__m512bh)bcast32(x[m] + 4 * h);

			ag[s][m] = _mm512_dpbf16_ps(ag[s][m], xb,
						    (__m512bh)wg);
			if (two)
				au[s][m] = _mm512_dpbf16_ps(au[s][m], xb,
							    (__m512bh)wu);
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

/* ---- gate + up ------------------------------------------------------------ */

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
		/* a row's scale is the same for every block: its own */
		__m512 vg = chan ? _mm512_loadu_ps(sg) :
				   _mm512_set1_ps(sg[kb]);
		__m512 vu = chan ? _mm512_loadu_ps(su) :
				   _mm512_set1_ps(su[kb]);

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			xk[m] = x[m] + (size_t)kb * KERN_FP8_BLOCK * 2;
		mk_fp8(a->gate->tiles + off, a->up->tiles + off, 1, xk, M, dg,
		       du);
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

#define DISPATCH_M(fn, mr, ...)						\
	do {								\
		switch (mr) {						\
		case 1: fn(__VA_ARGS__, 1); break;			\
		case 2: fn(__VA_ARGS__, 2); break;			\
		case 3: fn(__VA_ARGS__, 3); break;			\
		case 4: fn(__VA_ARGS__, 4); break;			\
		case 5: fn(__VA_ARGS__, 5); break;			\
		case 6: fn(__VA_ARGS__, 6); break;			\
		case 7: fn(__VA_ARGS__, 7); break;			\
		default: fn(__VA_ARGS__, 8); break;			\
		}							\
	} while (0)

/* Row blocks outer, token blocks inner: a block's tiles stay in L2. */
void kern_gate_up_fp8_avx512(const struct kern_gate_up_args *a)
{
	unsigned int nb, i0, mr;

	for (nb = a->n0 / NROW; nb < a->n1 / NROW; nb++)
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			DISPATCH_M(gu_block, mr, a, nb, i0);
		}
}

/* ---- down -----------------------------------------------------------------
 * Chunks (one scale block each, KC = 128) outer, output blocks inner, the
 * partial sums per token and row in scratch (f32 [MR][DOWN_NSUB]).
 */

AI void down_block(const struct kern_down_args *a, unsigned int i0,
		   unsigned int ns0, unsigned int ns1, float *part,
		   const int M)
{
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nsub = ns1 - ns0;
	const size_t crow = ((size_t)a->kc * 2 + 63) & ~(size_t)63;
	unsigned int c, nb;
	int m;

	memset(part, 0, sizeof(float) * MR * nsub);
	for (c = c0; c < c1; c++) {
		const uint8_t *x[MR];

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			x[m] = a->act + (i0 + m) * a->act_stride +
			       (c - c0) * crow;
		for (nb = ns0 / NROW; nb < ns1 / NROW; nb++) {
			const uint8_t *tw = a->down->tiles + kern_tile_off(
				kern_tile_kcm(a->N, a->kc, KERN_TILE_K_FP8, nb,
					      c * BT));
			float *pp = part + (nb * NROW - ns0);
			const bool chan = a->group == KERN_FP8_CHANNEL;
			const float *sp = a->down->scales + kern_fp8_scale_idx(
				a->group, a->K, nb * NROW, c * a->kc);
			__m512 s = chan ? _mm512_loadu_ps(sp) :
					  _mm512_set1_ps(*sp);
			__m512 s2 = chan ? _mm512_loadu_ps(sp + NROW) : s;
			__m512 r[MR], r2[MR];

			/* two output blocks (adjacent tiles) per broadcast
			 * when the block is reused by several passes */
			if (a->m > MR && nb + 1 < ns1 / NROW &&
			    (chan || ((nb + 1) * NROW) % KERN_FP8_BLOCK)) {
				mk_fp8(tw, tw + kern_tile_off(BT), 1, x, M, r,
				       r2);
#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					_mm512_storeu_ps(pp + m * nsub,
						_mm512_fmadd_ps(r[m], s,
						_mm512_loadu_ps(pp + m * nsub)));
					_mm512_storeu_ps(pp + NROW + m * nsub,
						_mm512_fmadd_ps(r2[m], s2,
						_mm512_loadu_ps(pp + NROW +
								m * nsub)));
				}
				nb++;
				continue;
			}
			mk_fp8(tw, NULL, 0, x, M, r, NULL);
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				_mm512_storeu_ps(pp + m * nsub,
					_mm512_fmadd_ps(r[m], s,
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

void kern_down_fp8_avx512(const struct kern_down_args *a)
{
	float *part = a->scratch;
	unsigned int i0, mr, ns0, ns1;

	for (ns0 = a->n0; ns0 < a->n1; ns0 = ns1) {
		ns1 = a->n1 - ns0 < DOWN_NSUB ? a->n1 : ns0 + DOWN_NSUB;
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			DISPATCH_M(down_block, mr, a, i0, ns0, ns1, part);
		}
	}
}
