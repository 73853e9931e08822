// SPDX-License-Identifier: MIT
/*
 * moe-mxfp4-avx2.c - MXFP4 experts on AVX2 + FMA: each half line of a tile
 * (8 rows x 4 k) is widened to f32, the magnitude through a vpermps table
 * of the eight E2M1 magnitudes, times the row's E8M0 scale (exact: a power
 * of two times a value of two significant bits), the sign from the code;
 * then FMA with the bf16 activations widened the same way. The variants
 * without AVX-512 BF16 run MXFP4 here.
 */
#include <immintrin.h>
#include <string.h>

#define VEC_BITS	256
#define VEC_ISA		avx2
#include "kernels/mxfp4.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/dispatch-m.h"

/* Tokens per register block: 4 tokens x 2 row halves of accumulators. */
#define MR		4
#define PF_DIST		(2 * 1024)
#define NROW		KERN_TILE_ROWS
#define LINE		KERN_MXFP4_LINE
#define GL		KERN_MXFP4_GROUP_LINES
#define NG		(KERN_TILE_K_MXFP4 / KERN_MXFP4_GROUP)
#define DOWN_NSUB	1024

/* 8 E8M0 bytes to 2^(e - 127) in f32 (e = 0: the subnormal 2^-127). */
AI __m256 mx_scale8(const uint8_t *p)
{
	__m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)p));
	__m256i z = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());

	return _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(e, 23),
		_mm256_and_si256(z, _mm256_set1_epi32(0x00400000))));
}

/*
 * The code in bits @sh .. @sh + 3 of each lane to its value times @sc:
 * vpermps reads the low three bits of the index, the magnitude; bit 3 is
 * the sign.
 */
AI __m256 mx_dec(__m256i d, const int sh, __m256 tbl, __m256 sc)
{
	__m256i idx = sh ? _mm256_srli_epi32(d, sh) : d;
	__m256 mag = _mm256_permutevar8x32_ps(tbl, idx);
	__m256i sign = _mm256_and_si256(_mm256_slli_epi32(d, 28 - sh),
					_mm256_set1_epi32((int)0x80000000u));

	return _mm256_xor_ps(_mm256_mul_ps(mag, sc),
			     _mm256_castsi256_ps(sign));
}

/*
 * One tile (16 rows x 128 k) of one matrix for M tokens whose bf16
 * activations of these columns are at x[m]: adds the dots to acc[m][0]
 * (rows 0-7) and acc[m][1] (rows 8-15). @s: the E8M0 bytes of the tile's
 * first group, the next group's @sstride bytes on.
 */
AI void mk_mx(const uint8_t *w, const uint8_t *s, size_t sstride,
	      const uint8_t *const *x, const int M, __m256 acc[][2])
{
	const __m256 tbl = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f,
					  4.0f, 6.0f);
	const __m256i hi16 = _mm256_set1_epi32((int)0xffff0000u);
	int m, g, l, h;

	for (g = 0; g < NG; g++) {
		const uint8_t *p = w + g * GL * LINE;
		__m256 sc[2];

		sc[0] = mx_scale8(s + g * sstride);
		sc[1] = mx_scale8(s + g * sstride + 8);
		for (l = 0; l < GL; l++) {
			if (!(l & 1))
				_mm_prefetch((const char *)p + PF_DIST +
					     l * LINE, _MM_HINT_T0);
#pragma GCC unroll 2
			for (h = 0; h < 2; h++) {
				/* lane r: bytes 2r, 2r + 1 of the half line:
				 * k 4l, 4l + 2, 4l + 1, 4l + 3 by nibble */
				__m256i d = _mm256_cvtepu16_epi32(_mm_loadu_si128(
					(const void *)(p + l * LINE + 16 * h)));
				__m256 w0 = mx_dec(d, 0, tbl, sc[h]);
				__m256 w2 = mx_dec(d, 4, tbl, sc[h]);
				__m256 w1 = mx_dec(d, 8, tbl, sc[h]);
				__m256 w3 = mx_dec(d, 12, tbl, sc[h]);

#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					const uint8_t *xp = x[m] + g * 64 +
							    l * 8;
					__m256i b0 = _mm256_set1_epi32(ld32(xp));
					__m256i b1 = _mm256_set1_epi32(ld32(xp +
									    4));
					__m256 a = acc[m][h];

					a = _mm256_fmadd_ps(_mm256_castsi256_ps(
						_mm256_slli_epi32(b0, 16)), w0, a);
					a = _mm256_fmadd_ps(_mm256_castsi256_ps(
						_mm256_and_si256(b0, hi16)), w1, a);
					a = _mm256_fmadd_ps(_mm256_castsi256_ps(
						_mm256_slli_epi32(b1, 16)), w2, a);
					a = _mm256_fmadd_ps(_mm256_castsi256_ps(
						_mm256_and_si256(b1, hi16)), w3, a);
					acc[m][h] = a;
				}
			}
		}
	}
}

/* ---- gate + up: gate's row block over K, then up's ---------------------- */

AI void gu_block(const struct kern_gate_up_args *a, unsigned int nb,
		 unsigned int i0, const int M)
{
	const unsigned int nkb = a->K / KERN_TILE_K_MXFP4;
	const struct kern_mat *mat[2] = { a->gate, a->up };
	const uint8_t *x[MR], *xk[MR];
	__m256 acc[2][MR][2];
	unsigned int kb;
	int m, s, v;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		x[m] = a->act + a->act_rows[i0 + m] * a->act_stride;
	for (v = 0; v < 2; v++) {
		const uint8_t *e8 = (const uint8_t *)mat[v]->scales +
				    nb * NROW;

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			acc[v][m][0] = acc[v][m][1] = _mm256_setzero_ps();
		for (kb = 0; kb < nkb; kb++) {
			size_t off = kern_tile_off(kern_tile_rbm(a->K,
					KERN_TILE_K_MXFP4, nb, kb));

#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				xk[m] = x[m] + (size_t)kb *
					KERN_TILE_K_MXFP4 * 2;
			mk_mx(mat[v]->tiles + off, e8 + (size_t)kb * NG * a->N,
			      a->N, xk, M, acc[v]);
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		for (s = 0; s < 2; s++)
			_mm256_storeu_ps(a->out + (i0 + m) * a->out_stride +
					 nb * NROW - a->n0 + 8 * s,
					 vf_glu(a->glu, nb * NROW + 8 * s,
						acc[0][m][s], acc[1][m][s]));
}

void kern_gate_up_mxfp4_avx2(const struct kern_gate_up_args *a)
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
	unsigned int c, nb, n;
	int m, s;

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
			float *pp = part + (nb * NROW - ns0);
			__m256 r[MR][2];

#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				r[m][0] = r[m][1] = _mm256_setzero_ps();
			mk_mx(tw, e8 + kern_mxfp4_scale_idx(a->N, nb * NROW,
							    c * NG),
			      a->N, x, M, r);
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				for (s = 0; s < 2; s++)
					_mm256_storeu_ps(pp + m * nsub + 8 * s,
						_mm256_add_ps(r[m][s],
						_mm256_loadu_ps(pp + m * nsub +
								8 * s)));
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		float *y = a->y + a->y_rows[i0 + m] * a->y_stride;
		__m256 w = _mm256_set1_ps(a->w[i0 + m]);

		for (n = ns0; n < ns1; n += 8)
			_mm256_storeu_ps(y + n, _mm256_fmadd_ps(w,
				_mm256_loadu_ps(part + m * nsub + n - ns0),
				_mm256_loadu_ps(y + n)));
	}
}

void kern_down_mxfp4_avx2(const struct kern_down_args *a)
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

size_t kern_scratch_bytes_mxfp4_avx2(const struct kern_geom *g,
				     unsigned int max_m)
{
	return sizeof(float) * MR * DOWN_NSUB;
}
