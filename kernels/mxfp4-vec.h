/* SPDX-License-Identifier: MIT */
/*
 * mxfp4-vec.h - MXFP4 experts on FMA, for the AVX-512 variants without
 * BF16: each tile line (16 rows x 4 k) is widened to f32, the value
 * through a vpermps table of the E2M1 codes, times the row's E8M0 scale
 * (exact: a power of two times a value of two significant bits); then FMA
 * with the bf16 activations widened the same way. Built by
 * moe-mxfp4-avx512bw.c, over the width layer's names (vec.h); the 256-bit
 * variants dot int16 instead (moe-mxfp4-avx2.c).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/mxfp4.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/dispatch-m.h"
#include "kernels/add-y-vec.h"

/* Row slices of a tile, one vector of VF_LANES rows each. */
#define NS		(KERN_TILE_ROWS / VF_LANES)
/* Tokens per register block (accumulators per token and slice: VF_CHAINS()). */
#define MR		8
/* Row slices per pass over a tile for M tokens (as fp8-vec.h): all while
 * their accumulators fit, else one, the tile in L1 for the next. */
#define SLICES(M)	((M) * NS <= MR ? NS : 1)
#define PF_DIST		(2 * 1024)
#define NROW		KERN_TILE_ROWS
#define LINE		KERN_MXFP4_LINE
#define GL		KERN_MXFP4_GROUP_LINES
#define NG		(KERN_TILE_K_MXFP4 / KERN_MXFP4_GROUP)
#define DOWN_NSUB	1024
/* columns whose activations are widened to f32 at once (as fp8-vec.h) */
#define XB		KERN_TILE_K_MXFP4

#if VEC_BITS != 512
#error "mxfp4-vec.h: 512 bits only (256: moe-mxfp4-avx2.c)"
#endif

/* VF_LANES E8M0 bytes to 2^(e - 127) in f32 (e = 0: the subnormal
 * 2^-127). */
AI vf mx_scales(const uint8_t *p)
{
	__m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)p));
	__mmask16 z = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());

	return _mm512_castsi512_ps(_mm512_mask_mov_epi32(
		_mm512_slli_epi32(e, 23), z, _mm512_set1_epi32(0x00400000)));
}

/* The rows' 16-bit code groups of slice @s of the line at @p, one row
 * per 32-bit lane: k 4l, 4l + 2, 4l + 1, 4l + 3 by nibble. */
AI vi mx_codes(const uint8_t *p, int s)
{
	(void)s;
	return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)p));
}

/* All sixteen E2M1 codes: vpermps reads the low four bits of the index,
 * so the sign (bit 3) comes with the value. */
AI vf mx_table(void)
{
	return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
			      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f,
			      -6.0f);
}

/* The code in bits @sh .. @sh + 3 of each lane to its value times @sc. */
AI vf mx_dec(vi d, const int sh, vf tbl, vf sc)
{
	return _mm512_mul_ps(_mm512_permutexvar_ps(sh ?
		_mm512_srli_epi32(d, sh) : d, tbl), sc);
}

/* Slice @s of the line at @p (scales @sc) for M tokens, columns @k .. +3
 * of xf[m]: the dots added to a[m][@j][k mod CH], in k order. */
AI void mx_line(const uint8_t *p, int s, const int j, vf sc, vf tbl,
		float xf[][XB], int k, const int M, const int CH,
		vf a[][NS][4])
{
	vi d = mx_codes(p, s);
	vf w[4];
	int m, c;

	w[0] = mx_dec(d, 0, tbl, sc);
	w[2] = mx_dec(d, 4, tbl, sc);
	w[1] = mx_dec(d, 8, tbl, sc);
	w[3] = mx_dec(d, 12, tbl, sc);
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 4
		for (c = 0; c < 4; c++)
			a[m][j][c % CH] = vf_fmadd(vf_set1(xf[m][k + c]), w[c],
						   a[m][j][c % CH]);
}

/* Row slices @s0 .. @s0 + @SS - 1 of mk_mx(), in one pass, each sum over
 * VF_CHAINS() accumulators. */
AI void mk_pass(const uint8_t *w, const uint8_t *e8, size_t sstride,
		float xf[][XB], const int M, const int s0, const int SS,
		vf acc[][NS])
{
	const int CH = VF_CHAINS(M, SS, MR);
	const vf tbl = mx_table();
	vf a[MR][NS][4];
	int m, g, l, j, c;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (j = 0; j < SS; j++) {
			a[m][j][0] = acc[m][s0 + j];
#pragma GCC unroll 4
			for (c = 1; c < CH; c++)
				a[m][j][c] = vf_zero();
		}
	for (g = 0; g < NG; g++) {
		const uint8_t *p = w + g * GL * LINE;
		vf sc[NS];

#pragma GCC unroll 2
		for (j = 0; j < SS; j++)
			sc[j] = mx_scales(e8 + g * sstride +
					  VF_LANES * (s0 + j));
		for (l = 0; l < GL; l++) {
			if (!s0 && !(l & 1))
				_mm_prefetch((const char *)p + PF_DIST +
					     l * LINE, _MM_HINT_T0);
#pragma GCC unroll 2
			for (j = 0; j < SS; j++)
				mx_line(p + l * LINE, s0 + j, j, sc[j], tbl,
					xf, g * KERN_MXFP4_GROUP + l * 4, M,
					CH, a);
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (j = 0; j < SS; j++)
			acc[m][s0 + j] = vf_sum_chains(a[m][j], CH);
}

/*
 * One tile (16 rows x 128 k) of one matrix for M tokens whose activations
 * of these columns are xf[m] (f32): adds the dots to acc[m][s] (rows
 * VF_LANES * s ..). @e8: the E8M0 bytes of the tile's first group, the
 * next group's @sstride bytes on.
 */
AI void mk_mx(const uint8_t *w, const uint8_t *e8, size_t sstride,
	      float xf[][XB], const int M, vf acc[][NS])
{
	int s;

	if (SLICES(M) == NS) {
		mk_pass(w, e8, sstride, xf, M, 0, NS, acc);
		return;
	}
#pragma GCC unroll 1
	for (s = 0; s < NS; s++)
		mk_pass(w, e8, sstride, xf, M, s, 1, acc);
}

/* ---- gate + up: per tile of K, gate's row block then up's ------------- */

AI void gu_block(const struct kern_gate_up_args *a, unsigned int nb,
		 unsigned int i0, const int M)
{
	const unsigned int nkb = a->K / KERN_TILE_K_MXFP4;
	const struct kern_mat *mat[2] = { a->gate, a->up };
	const uint8_t *x[MR], *xk[MR];
	float xf[MR][XB] __attribute__((aligned(64)));
	vf acc[2][MR][NS];
	unsigned int kb;
	int m, s, v;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i0 + m] * a->act_stride;
#pragma GCC unroll 2
		for (s = 0; s < NS; s++)
			acc[0][m][s] = acc[1][m][s] = vf_zero();
	}
	for (kb = 0; kb < nkb; kb++) {
		size_t off = kern_tile_off(kern_tile_rbm(a->K,
				KERN_TILE_K_MXFP4, nb, kb));

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			xk[m] = x[m] + (size_t)kb * KERN_TILE_K_MXFP4 * 2;
		vf_widen_bf16_rows(&xf[0][0], xk, M, XB);
#pragma GCC unroll 2
		for (v = 0; v < 2; v++)
			mk_mx(mat[v]->tiles + off,
			      (const uint8_t *)mat[v]->scales + nb * NROW +
			      (size_t)kb * NG * a->N, a->N, xf, M, acc[v]);
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
#pragma GCC unroll 2
		for (s = 0; s < NS; s++)
			vf_store(a->out + (i0 + m) * a->out_stride +
				 nb * NROW - a->n0 + VF_LANES * s,
				 vf_glu(a->glu, nb * NROW + VF_LANES * s,
					acc[0][m][s], acc[1][m][s]));
}

void VNAME(kern_gate_up_mxfp4)(const struct kern_gate_up_args *a)
{
	unsigned int nb, i0, mr;

	for (nb = a->n0 / NROW; nb < a->n1 / NROW; nb++)
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			KERN_DISPATCH_M(gu_block, mr, a, nb, i0);
		}
}

/* ---- down: chunks outer, output blocks inner, sums in scratch ----------- */

AI void down_block(const struct kern_down_args *a, unsigned int i0,
		   unsigned int ns0, unsigned int ns1, float *part,
		   const int M)
{
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nsub = ns1 - ns0;
	const size_t crow = ((size_t)a->kc * 2 + 63) & ~(size_t)63;
	const uint8_t *e8 = (const uint8_t *)a->down->scales;
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
			const uint8_t *tw = a->down->tiles + kern_tile_off(
				kern_tile_kcm(a->N, a->kc, KERN_TILE_K_MXFP4,
					      nb, c));
			float *pp = part + (nb * NROW - ns0);
			vf r[MR][NS];

#pragma GCC unroll 16
			for (m = 0; m < M; m++)
#pragma GCC unroll 2
				for (s = 0; s < NS; s++)
					r[m][s] = vf_zero();
			mk_mx(tw, e8 + kern_mxfp4_scale_idx(a->N, nb * NROW,
							    c * NG),
			      a->N, xf, M, r);
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
#pragma GCC unroll 2
				for (s = 0; s < NS; s++) {
					float *q = pp + m * nsub +
						   VF_LANES * s;

					vf_store(q, vf_add(r[m][s],
							   vf_load(q)));
				}
		}
	}
	down_add_y(a, KT_QUANT_MXFP4, i0, ns0, ns1, part, M);
}

void VNAME(kern_down_mxfp4)(const struct kern_down_args *a)
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

size_t VNAME(kern_scratch_bytes_mxfp4)(const struct kern_geom *g,
				       unsigned int max_m)
{
	return sizeof(float) * MR * DOWN_NSUB;
}
