// SPDX-License-Identifier: MIT
/*
 * moe-mxfp4-avx512.c - MXFP4 experts on AVX-512 with vdpbf16ps: every
 * 32-byte line of a tile (4 k of 16 rows) is widened in registers to the
 * two bf16 lines it stands for (a vpermw table from code to bf16), fed to
 * the BF16 math per group of 32, and each group's f32 dot is multiplied by
 * its exact E8M0 scale 2^(e - 127) and summed in f32.
 */
#include <immintrin.h>
#include <string.h>

#define VEC_BITS	512
#define VEC_ISA		avx512
#include "kernels/mxfp4.h"
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
#define NG		(KERN_TILE_K_MXFP4 / KERN_MXFP4_GROUP)
#define DOWN_NSUB	1024

AI __m512bh bcast32(const void *p)
{
	return (__m512bh)_mm512_set1_epi32(ld32(p));
}

/*
 * One tile (16 rows x 128 k, four groups) of one matrix or (@two) two, for
 * M tokens whose bf16 activations of these columns are at x[m]: adds
 * sum_g dot_g * scale_g to o1[m] (o2[m]). @s1, @s2: the E8M0 bytes of the
 * tile's first group, the next group's @sstride bytes on. Two accumulator
 * chains (the low and the high nibbles) while they fit.
 */
AI void mk_mx(const uint8_t *w1, const uint8_t *w2, const int two,
	      const uint8_t *s1, const uint8_t *s2, size_t sstride,
	      const uint8_t *const *x, const int M, __m512 *o1, __m512 *o2)
{
	const int CH = M <= 3 ? 2 : 1;
	const __m512i tbl = mx_bf16_table();
	__m512 a1[2][MR], a2[2][MR];
	int m, c, g, l;

	for (g = 0; g < NG; g++) {
		const uint8_t *p1 = w1 + g * GL * LINE, *p2 = w2 + g * GL * LINE;
		__m512 sc1, sc2;

#pragma GCC unroll 16
		for (c = 0; c < CH; c++)
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				a1[c][m] = a2[c][m] = _mm512_setzero_ps();
#pragma GCC unroll 8
		for (l = 0; l < GL; l++) {
			__m512i lo1, hi1, lo2 = _mm512_setzero_si512(), hi2 = lo2;

			if (!(l & 1)) {
				_mm_prefetch((const char *)p1 + PF_DIST +
					     l * LINE, _MM_HINT_T0);
				if (two)
					_mm_prefetch((const char *)p2 + PF_DIST +
						     l * LINE, _MM_HINT_T0);
			}
			mx_bf16(p1 + l * LINE, tbl, &lo1, &hi1);
			if (two)
				mx_bf16(p2 + l * LINE, tbl, &lo2, &hi2);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				/* k 4l .. 4l + 3 of the group: 8 bytes */
				const uint8_t *xp = x[m] + g * 64 + l * 8;
				__m512bh x0 = bcast32(xp), x1 = bcast32(xp + 4);
				const int s = CH - 1;

				a1[0][m] = _mm512_dpbf16_ps(a1[0][m], x0,
							    (__m512bh)lo1);
				a1[s][m] = _mm512_dpbf16_ps(a1[s][m], x1,
							    (__m512bh)hi1);
				if (two) {
					a2[0][m] = _mm512_dpbf16_ps(a2[0][m], x0,
							(__m512bh)lo2);
					a2[s][m] = _mm512_dpbf16_ps(a2[s][m], x1,
							(__m512bh)hi2);
				}
			}
		}
		sc1 = mx_scale16(s1 + g * sstride);
		sc2 = two ? mx_scale16(s2 + g * sstride) : sc1;
#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			__m512 d1 = CH == 2 ? _mm512_add_ps(a1[0][m], a1[1][m]) :
				    a1[0][m];

			o1[m] = _mm512_fmadd_ps(d1, sc1, o1[m]);
			if (two) {
				__m512 d2 = CH == 2 ? _mm512_add_ps(a2[0][m],
								    a2[1][m]) :
					    a2[0][m];

				o2[m] = _mm512_fmadd_ps(d2, sc2, o2[m]);
			}
		}
	}
}

/* ---- gate + up ------------------------------------------------------------ */

AI void gu_block(const struct kern_gate_up_args *a, unsigned int nb,
		 unsigned int i0, const int M)
{
	const unsigned int nkb = a->K / KERN_TILE_K_MXFP4;
	const uint8_t *sg = (const uint8_t *)a->gate->scales + nb * NROW;
	const uint8_t *su = (const uint8_t *)a->up->scales + nb * NROW;
	const uint8_t *x[MR], *xk[MR];
	__m512 g[MR], u[MR];
	unsigned int kb;
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i0 + m] * a->act_stride;
		g[m] = u[m] = _mm512_setzero_ps();
	}
	for (kb = 0; kb < nkb; kb++) {
		size_t off = kern_tile_off(kern_tile_rbm(a->K,
				KERN_TILE_K_MXFP4, nb, kb));
		size_t so = (size_t)kb * NG * a->N;

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			xk[m] = x[m] + (size_t)kb * KERN_TILE_K_MXFP4 * 2;
		mk_mx(a->gate->tiles + off, a->up->tiles + off, 1, sg + so,
		      su + so, a->N, xk, M, g, u);
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
	unsigned int nb, i0, mr;

	for (nb = a->n0 / NROW; nb < a->n1 / NROW; nb++)
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			KERN_DISPATCH_M(gu_block, mr, a, nb, i0);
		}
}

/* ---- down -----------------------------------------------------------------
 * Chunks (one tile of KC = 128 per output block) outer, output blocks
 * inner, the partial sums per token and row in scratch (f32
 * [MR][DOWN_NSUB]); with more tokens than MR two output blocks share the
 * broadcasts.
 */

AI void down_block(const struct kern_down_args *a, unsigned int i0,
		   unsigned int ns0, unsigned int ns1, float *part,
		   const int M)
{
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nsub = ns1 - ns0;
	const size_t crow = ((size_t)a->kc * 2 + 63) & ~(size_t)63;
	const uint8_t *e8 = (const uint8_t *)a->down->scales;
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
				      sp + NROW, a->N, x, M, r, r2);
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
			mk_mx(tw, tw, 0, sp, sp, a->N, x, M, r, r2);
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

size_t kern_scratch_bytes_mxfp4_avx512(const struct kern_geom *g,
				       unsigned int max_m)
{
	return sizeof(float) * MR * DOWN_NSUB;
}
