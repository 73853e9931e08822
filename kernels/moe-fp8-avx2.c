// SPDX-License-Identifier: MIT
/*
 * moe-fp8-avx2.c - FP8 (E4M3) experts on AVX2 + FMA + F16C: each half line
 * of a tile (16 rows x a k pair) is widened to f32 exactly through f16, per
 * 8 rows and k parity, and multiplied with the bf16 activations widened;
 * each 128-column scale block's sums are scaled in f32. The variants
 * without AVX-512 BF16 run FP8 here (or on the scalar oracle).
 */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#define VEC_BITS	256
#define VEC_ISA		avx2
#include "kernels/fp8.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/dispatch-m.h"

/* Tokens per register block: 4 tokens x 2 row halves of accumulators. */
#define MR		4
#define PF_DIST		(4 * 1024)
#define NROW		KERN_TILE_ROWS
#define HALF		(KERN_TILE_ROW_BYTES / 2)	/* one k pair */
#define NHALF		(KERN_TILE_BYTES / HALF)
#define BT		(KERN_FP8_BLOCK / KERN_TILE_K_FP8)
#define DOWN_NSUB	1024

/*
 * Rows 8 * @hi .. + 7 of half line @p (each row's even-k and odd-k byte):
 * the even-k and odd-k weights, each 2^-8 of its E4M3 value, exactly. An
 * E4M3 byte's 7 low bits, 7 places up, are an f16 of the same mantissa and
 * an exponent 8 lower (bias 15 against 7), subnormals included; the sign
 * goes to bit 15, and F16C widens it. The scales put the 2^8 back
 * (scale8()). The NaN encodings read as +-480, as on AVX-512.
 */
AI void fp8_rows(const uint8_t *p, int hi, __m256 *we, __m256 *wo)
{
	/* bytes r0e r0o r1e r1o ... to the eight evens, then the eight odds */
	const __m128i sel = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14,
					  1, 3, 5, 7, 9, 11, 13, 15);
	__m128i b = _mm_shuffle_epi8(_mm_loadu_si128((const void *)(p +
						     16 * hi)), sel);
	/* sign-extended, 7 places up: the sign lands in bit 15 and again in
	 * bit 14, which the mask clears; the magnitude in bits 7-13 */
	__m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b),
						       7),
				     _mm256_set1_epi16((short)0xbf80));

	*we = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
	*wo = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

/*
 * One scale block (BT adjacent tiles, 16 rows x 128 columns) of one
 * matrix for M tokens whose bf16 activations of these columns are at x[m]:
 * the f32 dots, fresh, rows 0-7 in o[m][0], rows 8-15 in o[m][1]. The
 * block's reads prefetch the same length from @pf on.
 */
AI void mk_fp8(const uint8_t *w, const uint8_t *pf, const uint8_t *const *x,
	       const int M, __m256 o[][2])
{
	__m256 acc[MR][2];
	int m, h, s;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		acc[m][0] = acc[m][1] = _mm256_setzero_ps();
	for (h = 0; h < BT * NHALF; h++) {
		if (!(h & 1))
			_mm_prefetch((const char *)pf + h * HALF, _MM_HINT_T0);
#pragma GCC unroll 2
		for (s = 0; s < 2; s++) {
			__m256 we, wo;

			fp8_rows(w + h * HALF, s, &we, &wo);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				/* k pair h: the even bf16 is the low half */
				__m256i xb = _mm256_set1_epi32(ld32(x[m] +
								    4 * h));
				__m256 xe = _mm256_castsi256_ps(
					_mm256_slli_epi32(xb, 16));
				__m256 xo = _mm256_castsi256_ps(
					_mm256_and_si256(xb,
					_mm256_set1_epi32((int)0xffff0000u)));

				acc[m][s] = _mm256_fmadd_ps(xe, we, acc[m][s]);
				acc[m][s] = _mm256_fmadd_ps(xo, wo, acc[m][s]);
			}
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		o[m][0] = acc[m][0];
		o[m][1] = acc[m][1];
	}
}

/* The scales of rows 8 * s .. + 7 (the row's own, or the block's) times
 * the 2^8 that fp8_rows() leaves out: exact, a power of two. */
AI __m256 scale8(const float *sp, bool chan, unsigned int kb, int s)
{
	return chan ? _mm256_mul_ps(_mm256_loadu_ps(sp + 8 * s),
				    _mm256_set1_ps(256.0f)) :
		      _mm256_set1_ps(sp[kb] * 256.0f);
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
	__m256 g[MR][2], u[MR][2], d[MR][2];
	unsigned int kb;
	int m, s;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i0 + m] * a->act_stride;
		g[m][0] = g[m][1] = u[m][0] = u[m][1] = _mm256_setzero_ps();
	}
	for (kb = 0; kb < nkb; kb++) {
		size_t off = kern_tile_off(kern_tile_rbm(a->K, KERN_TILE_K_FP8,
							 nb, kb * BT));

#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			xk[m] = x[m] + (size_t)kb * KERN_FP8_BLOCK * 2;
		mk_fp8(a->gate->tiles + off, a->gate->tiles + off + PF_DIST,
		       xk, M, d);
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			for (s = 0; s < 2; s++)
				g[m][s] = _mm256_fmadd_ps(d[m][s],
					scale8(sg, chan, kb, s), g[m][s]);
		mk_fp8(a->up->tiles + off, a->up->tiles + off + PF_DIST, xk, M,
		       d);
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			for (s = 0; s < 2; s++)
				u[m][s] = _mm256_fmadd_ps(d[m][s],
					scale8(su, chan, kb, s), u[m][s]);
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		for (s = 0; s < 2; s++)
			_mm256_storeu_ps(a->out + (i0 + m) * a->out_stride +
					 nb * NROW - a->n0 + 8 * s,
					 vf_glu(a->glu, nb * NROW + 8 * s,
						g[m][s], u[m][s]));
}

void kern_gate_up_fp8_avx2(const struct kern_gate_up_args *a)
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
			const uint8_t *tw = down_block_at(a, c, nb);
			const float *sp = a->down->scales + kern_fp8_scale_idx(
				a->group, a->K, nb * NROW, c * a->kc);
			float *pp = part + (nb * NROW - ns0);
			__m256 r[MR][2];

			mk_fp8(tw, down_pf(a, tw, c), x, M, r);
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				for (s = 0; s < 2; s++)
					_mm256_storeu_ps(pp + m * nsub + 8 * s,
						_mm256_fmadd_ps(r[m][s],
						scale8(sp, chan, 0, s),
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

void kern_down_fp8_avx2(const struct kern_down_args *a)
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

size_t kern_scratch_bytes_fp8_avx2(const struct kern_geom *g,
				   unsigned int max_m)
{
	return sizeof(float) * MR * DOWN_NSUB;
}
