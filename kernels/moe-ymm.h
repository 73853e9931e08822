/* SPDX-License-Identifier: MIT */
/*
 * moe-ymm.h - the body of the 256-bit variants: AVX2 (vpmaddwd on
 * sign-extended int16, FMA on bf16 widened by a shift) and, with
 * YMM_VNNI, AVX-VNNI (256-bit vpdpbusd). Included by moe-avx2.c and
 * moe-avxvnni.c, which define YMM_ISA (the name suffix) and YMM_VNNI.
 *
 * A 64-byte tile line is two halves of 8 output rows; each micro-kernel
 * call computes one half, so the 16-row block is two passes over its
 * tiles, the second from cache.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/simd.h"

#define AI __attribute__((always_inline)) static inline
#define YCAT_(a, b) a##_##b
#define YCAT(a, b) YCAT_(a, b)
#define YNAME(name) YCAT(name, YMM_ISA)

/* Tokens per register block: limited by 16 ymm registers. */
#define MR		4
#define PF_DIST		(4 * 1024)
#define DOWN_NSUB	1024

AI int32_t ld32(const void *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* ---- exp / SiLU on 8 lanes ---------------------------------------------- */

/*
 * exp(x) = 2^n e^r as in vexp-avx512.h; without vscalefps, 2^n is built in
 * two factors (n = 128 near 88.7 is not one normal float) and the range
 * ends are set by hand: +inf above 88.72, 0 below -87.3 (no denormals).
 */
AI __m256 exp8(__m256 x)
{
	const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
	const __m256 ln2_hi = _mm256_set1_ps(0.693145751953125f);
	const __m256 ln2_lo = _mm256_set1_ps(1.428606765330187e-06f);
	const __m256 hi = _mm256_set1_ps(88.72283f), lo = _mm256_set1_ps(-87.3f);
	__m256 n, r, p, f, xc;
	__m256i e;

	xc = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
	n = _mm256_round_ps(_mm256_mul_ps(xc, log2e),
			    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(n, ln2_hi, xc);
	r = _mm256_fnmadd_ps(n, ln2_lo, r);
	p = _mm256_set1_ps(1.0f / 5040);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	e = _mm256_cvtps_epi32(n);
	f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(
		_mm256_srai_epi32(e, 1), _mm256_set1_epi32(127)), 23));
	p = _mm256_mul_ps(p, f);
	f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(
		_mm256_sub_epi32(e, _mm256_srai_epi32(e, 1)),
		_mm256_set1_epi32(127)), 23));
	p = _mm256_mul_ps(p, f);
	p = _mm256_blendv_ps(p, _mm256_set1_ps(__builtin_inff()),
			     _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
	return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), p);
}

AI __m256 silu_mul8(__m256 g, __m256 u)
{
	__m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));

	return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(
				_mm256_set1_ps(1.0f), e)), u);
}

void YNAME(kern_exp_f32)(float *out, const float *x, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i += 8)
		_mm256_storeu_ps(out + i, exp8(_mm256_loadu_ps(x + i)));
}

void YNAME(kern_silu_mul_f32)(float *out, const float *g, const float *u,
			      unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i += 8)
		_mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(g + i),
						    _mm256_loadu_ps(u + i)));
}

/* ---- activation rows: the same format as the AVX-512 variant ----------- *
 * K int8, the f32 scale, int32 sums of q over the row (INT8) or each group
 * (INT4); BF16: K bf16.
 */

static size_t act_row_bytes_q(unsigned int K, unsigned int group)
{
	size_t b = (size_t)K + 4 + 4 * (size_t)(group ? K / group : 1);

	return (b + 63) & ~(size_t)63;
}

size_t YNAME(kern_act_row_bytes_int8)(unsigned int K, unsigned int group)
{
	return act_row_bytes_q(K, 0);
}

size_t YNAME(kern_act_row_bytes_int4)(unsigned int K, unsigned int group)
{
	return act_row_bytes_q(K, group);
}

size_t YNAME(kern_act_row_bytes_bf16)(unsigned int K, unsigned int group)
{
	return ((size_t)K * 2 + 63) & ~(size_t)63;
}

AI __m256 load_src8(const uint8_t *s, enum kt_dtype dtype, unsigned int k)
{
	if (dtype == KT_DTYPE_BF16)
		return _mm256_castsi256_ps(_mm256_slli_epi32(
			_mm256_cvtepu16_epi32(_mm_loadu_si128(
				(const void *)(s + 2 * (size_t)k))), 16));
	return _mm256_loadu_ps((const float *)(s + 4 * (size_t)k));
}

static void act_prepare_q(const void *src, size_t src_stride,
			  enum kt_dtype dtype, unsigned int rows,
			  unsigned int K, unsigned int group, uint8_t *dst,
			  size_t dst_stride)
{
	const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	unsigned int r, k, i;

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint8_t *d = dst + r * dst_stride;
		__m256 vmax = _mm256_setzero_ps(), vinv;
		float amax = 0.0f, inv, scale, lanes[8];

		for (k = 0; k < K; k += 8)
			vmax = _mm256_max_ps(vmax, _mm256_and_ps(absm,
					     load_src8(s, dtype, k)));
		_mm256_storeu_ps(lanes, vmax);
		for (i = 0; i < 8; i++)
			amax = lanes[i] > amax ? lanes[i] : amax;
		inv = amax > 0.0f ? 127.0f / amax : 0.0f;
		scale = amax / 127.0f;
		vinv = _mm256_set1_ps(inv);
		for (k = 0; k < K; k += 16) {
			/* cvtps rounds to nearest even, as rintf() does */
			__m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(
					load_src8(s, dtype, k), vinv));
			__m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(
					load_src8(s, dtype, k + 8), vinv));
			__m256i w = _mm256_packs_epi32(q0, q1);
			__m128i b;

			w = _mm256_permute4x64_epi64(w, 0xd8);
			b = _mm_packs_epi16(_mm256_castsi256_si128(w),
					    _mm256_extracti128_si256(w, 1));
			_mm_storeu_si128((void *)(d + k), b);
		}
		memcpy(d + K, &scale, sizeof(scale));
		{
			/* sums of q per group (INT4) or over the row (INT8) */
			unsigned int G = group ? group : K, g;

			for (g = 0; g < K / G; g++) {
				int32_t sum = 0;

				for (k = 0; k < G; k++)
					sum += (int8_t)d[g * G + k];
				memcpy(d + K + 4 + 4 * g, &sum, 4);
			}
		}
	}
}

void YNAME(kern_act_prepare_int8)(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	act_prepare_q(src, src_stride, dtype, rows, K, 0, dst, dst_stride);
}

void YNAME(kern_act_prepare_int4)(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	act_prepare_q(src, src_stride, dtype, rows, K, group, dst,
		      dst_stride);
}

/* Round to nearest even like kern_f32_to_bf16() (finite inputs). */
void YNAME(kern_act_prepare_bf16)(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	unsigned int r, k;

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint8_t *d = dst + r * dst_stride;

		if (dtype == KT_DTYPE_BF16) {
			memcpy(d, s, (size_t)K * 2);
			continue;
		}
		for (k = 0; k < K; k += 16) {
			__m256i a = _mm256_loadu_si256((const void *)(s + 4 * k));
			__m256i b = _mm256_loadu_si256((const void *)(s + 4 * k + 32));
			__m256i w;

			/* u + 0x7fff + ((u >> 16) & 1), then the high half */
			a = _mm256_add_epi32(a, _mm256_add_epi32(
				_mm256_set1_epi32(0x7fff), _mm256_and_si256(
				_mm256_srli_epi32(a, 16), _mm256_set1_epi32(1))));
			b = _mm256_add_epi32(b, _mm256_add_epi32(
				_mm256_set1_epi32(0x7fff), _mm256_and_si256(
				_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1))));
			w = _mm256_packus_epi32(_mm256_srli_epi32(a, 16),
						_mm256_srli_epi32(b, 16));
			w = _mm256_permute4x64_epi64(w, 0xd8);
			_mm256_storeu_si256((void *)(d + 2 * k), w);
		}
	}
}

AI float act_scale(const uint8_t *row, unsigned int K)
{
	float s;

	memcpy(&s, row + K, sizeof(s));
	return s;
}

/* ---- micro-kernels: 8 output rows (one half line), M tokens ------------- */

#if !YMM_VNNI
/* Pair sums of rows 0-3 in @a and rows 4-7 in @b, to rows 0-7. */
AI __m256i red_pairs(__m256i a, __m256i b)
{
	return _mm256_permute4x64_epi64(_mm256_hadd_epi32(a, b), 0xd8);
}

/* Four int8 activations as int16, repeated over the register. */
AI __m256i bcast_x16(const uint8_t *p)
{
	return _mm256_broadcastq_epi64(_mm_cvtepi8_epi16(
		_mm_cvtsi32_si128(ld32(p))));
}
#endif

/*
 * INT8: @two matrices (gate and up) or one; half @h of each line; int32
 * dots of the 8 rows per token in og/ou.
 */
AI void mk_i8(const uint8_t *gw, const uint8_t *uw, const int two,
	      unsigned int h, unsigned int nt, const uint8_t *const *x,
	      const int32_t *const *xsum, const int M, __m256i *og,
	      __m256i *ou)
{
#if YMM_VNNI
	const __m256i flip = _mm256_set1_epi8((char)0x80);
	__m256i ag[MR], au[MR];
#else
	__m256i ag[2][MR], au[2][MR];
#endif
	unsigned int t;
	int m, j;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
#if YMM_VNNI
		ag[m] = au[m] = _mm256_setzero_si256();
#else
		ag[0][m] = ag[1][m] = au[0][m] = au[1][m] =
			_mm256_setzero_si256();
#endif
	}
	for (t = 0; t < nt; t++) {
		const uint8_t *tg = gw + (size_t)t * 1024 + h * 32;
		const uint8_t *tu = two ? uw + (size_t)t * 1024 + h * 32 : NULL;

#pragma GCC unroll 16
		for (j = 0; j < 16; j++) {
			__m256i wg = _mm256_loadu_si256((const void *)
							(tg + j * 64));
			__m256i wu = wg;

			if (!h)
				_mm_prefetch((const char *)tg + PF_DIST +
					     j * 64, _MM_HINT_T0);
			if (two) {
				wu = _mm256_loadu_si256((const void *)
							(tu + j * 64));
				if (!h)
					_mm_prefetch((const char *)tu +
						     PF_DIST + j * 64,
						     _MM_HINT_T0);
			}
#if YMM_VNNI
			/* weights flipped to u8 once per line, as in
			 * moe-avx512.c; 128 * sum(x) comes back at the end */
			wg = _mm256_xor_si256(wg, flip);
			wu = _mm256_xor_si256(wu, flip);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m256i xb = _mm256_set1_epi32(ld32(x[m] +
						t * 64 + j * 4));

				ag[m] = _mm256_dpbusd_avx_epi32(ag[m], wg, xb);
				if (two)
					au[m] = _mm256_dpbusd_avx_epi32(au[m],
								wu, xb);
			}
#else
			{
				__m256i ga = _mm256_cvtepi8_epi16(
					_mm256_castsi256_si128(wg));
				__m256i gb = _mm256_cvtepi8_epi16(
					_mm256_extracti128_si256(wg, 1));
				__m256i ua = _mm256_cvtepi8_epi16(
					_mm256_castsi256_si128(wu));
				__m256i ub = _mm256_cvtepi8_epi16(
					_mm256_extracti128_si256(wu, 1));

#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					__m256i xb = bcast_x16(x[m] + t * 64 +
							       j * 4);

					ag[0][m] = _mm256_add_epi32(ag[0][m],
						_mm256_madd_epi16(ga, xb));
					ag[1][m] = _mm256_add_epi32(ag[1][m],
						_mm256_madd_epi16(gb, xb));
					if (two) {
						au[0][m] = _mm256_add_epi32(
							au[0][m],
							_mm256_madd_epi16(ua,
									  xb));
						au[1][m] = _mm256_add_epi32(
							au[1][m],
							_mm256_madd_epi16(ub,
									  xb));
					}
				}
			}
#endif
		}
	}
#if YMM_VNNI
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		__m256i corr = _mm256_set1_epi32(128 * xsum[m][0]);

		og[m] = _mm256_sub_epi32(ag[m], corr);
		if (two)
			ou[m] = _mm256_sub_epi32(au[m], corr);
	}
#else
	(void)xsum;
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		og[m] = red_pairs(ag[0][m], ag[1][m]);
		if (two)
			ou[m] = red_pairs(au[0][m], au[1][m]);
	}
#endif
}

/*
 * INT4, one matrix, half @h: nibbles (q + 8) times activations, minus
 * 8 * sum(x) per group, times the group's scales; f32 per token.
 */
AI void mk_i4(const uint8_t *w, unsigned int h, unsigned int nt,
	      const uint8_t *const *x, const int32_t *const *gs,
	      const float *ws, size_t ws_stride, unsigned int G, const int M,
	      __m256 *out)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0f);
#if YMM_VNNI
	__m256i al[MR], ah[MR];
#else
	__m256i al[2][MR], ah[2][MR];
#endif
	__m256 f[MR];
	unsigned int t;
	int m, j;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
#if YMM_VNNI
		al[m] = ah[m] = _mm256_setzero_si256();
#else
		al[0][m] = al[1][m] = ah[0][m] = ah[1][m] =
			_mm256_setzero_si256();
#endif
		f[m] = _mm256_setzero_ps();
	}
	for (t = 0; t < nt; t++) {
		const uint8_t *tw = w + (size_t)t * 1024 + h * 32;

#pragma GCC unroll 16
		for (j = 0; j < 16; j++) {
			__m256i wv = _mm256_loadu_si256((const void *)
							(tw + j * 64));
			__m256i wl = _mm256_and_si256(wv, lo4);
			__m256i wh = _mm256_and_si256(
				_mm256_srli_epi16(wv, 4), lo4);

			if (!h)
				_mm_prefetch((const char *)tw + PF_DIST +
					     j * 64, _MM_HINT_T0);
#if YMM_VNNI
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				const uint8_t *xp = x[m] + t * 128 + j * 4;

				al[m] = _mm256_dpbusd_avx_epi32(al[m], wl,
					_mm256_set1_epi32(ld32(xp)));
				ah[m] = _mm256_dpbusd_avx_epi32(ah[m], wh,
					_mm256_set1_epi32(ld32(xp + 64)));
			}
#else
			{
				__m256i la = _mm256_cvtepu8_epi16(
					_mm256_castsi256_si128(wl));
				__m256i lb = _mm256_cvtepu8_epi16(
					_mm256_extracti128_si256(wl, 1));
				__m256i ha = _mm256_cvtepu8_epi16(
					_mm256_castsi256_si128(wh));
				__m256i hb = _mm256_cvtepu8_epi16(
					_mm256_extracti128_si256(wh, 1));

#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					const uint8_t *xp = x[m] + t * 128 +
							    j * 4;
					__m256i xl = bcast_x16(xp);
					__m256i xh = bcast_x16(xp + 64);

					al[0][m] = _mm256_add_epi32(al[0][m],
						_mm256_madd_epi16(la, xl));
					al[1][m] = _mm256_add_epi32(al[1][m],
						_mm256_madd_epi16(lb, xl));
					ah[0][m] = _mm256_add_epi32(ah[0][m],
						_mm256_madd_epi16(ha, xh));
					ah[1][m] = _mm256_add_epi32(ah[1][m],
						_mm256_madd_epi16(hb, xh));
				}
			}
#endif
			if ((G == 32 && (j == 7 || j == 15)) ||
			    (G == 64 && j == 15) || (G == 128 && j == 15)) {
				unsigned int gl = t * (128 / G) +
						  (G == 32 && j == 15);
				unsigned int gh = gl + 64 / G;

#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
#if YMM_VNNI
					__m256i dl = al[m], dh = ah[m];
#else
					__m256i dl = red_pairs(al[0][m],
							       al[1][m]);
					__m256i dh = red_pairs(ah[0][m],
							       ah[1][m]);
#endif
					if (G == 128) {
						dl = _mm256_add_epi32(dl, dh);
						dl = _mm256_sub_epi32(dl,
							_mm256_set1_epi32(
							8 * gs[m][gl]));
						f[m] = _mm256_fmadd_ps(
							_mm256_cvtepi32_ps(dl),
							_mm256_loadu_ps(ws +
							gl * ws_stride), f[m]);
					} else {
						dl = _mm256_sub_epi32(dl,
							_mm256_set1_epi32(
							8 * gs[m][gl]));
						dh = _mm256_sub_epi32(dh,
							_mm256_set1_epi32(
							8 * gs[m][gh]));
						f[m] = _mm256_fmadd_ps(
							_mm256_cvtepi32_ps(dl),
							_mm256_loadu_ps(ws +
							gl * ws_stride), f[m]);
						f[m] = _mm256_fmadd_ps(
							_mm256_cvtepi32_ps(dh),
							_mm256_loadu_ps(ws +
							gh * ws_stride), f[m]);
					}
#if YMM_VNNI
					al[m] = ah[m] = _mm256_setzero_si256();
#else
					al[0][m] = al[1][m] = ah[0][m] =
						ah[1][m] =
						_mm256_setzero_si256();
#endif
				}
			}
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		out[m] = f[m];
}

/*
 * BF16 with FMA: weights and activations widened to f32 by a shift (even
 * k) or a mask (odd k); one FMA chain per token in k order, as the oracle.
 */
AI void mk_bf16(const uint8_t *gw, const uint8_t *uw, const int two,
		unsigned int h, unsigned int nt, const uint8_t *const *x,
		const int M, __m256 *og, __m256 *ou)
{
	const __m256i hi16 = _mm256_set1_epi32((int)0xffff0000u);
	unsigned int t;
	int m, j;

	for (t = 0; t < nt; t++) {
		const uint8_t *tg = gw + (size_t)t * 1024 + h * 32;
		const uint8_t *tu = two ? uw + (size_t)t * 1024 + h * 32 : NULL;

#pragma GCC unroll 16
		for (j = 0; j < 16; j++) {
			__m256i wg = _mm256_loadu_si256((const void *)
							(tg + j * 64));
			__m256 ge = _mm256_castsi256_ps(_mm256_slli_epi32(wg, 16));
			__m256 go = _mm256_castsi256_ps(_mm256_and_si256(wg, hi16));
			__m256 ue = ge, uo = go;

			if (!h)
				_mm_prefetch((const char *)tg + PF_DIST +
					     j * 64, _MM_HINT_T0);
			if (two) {
				__m256i wu = _mm256_loadu_si256((const void *)
							(tu + j * 64));

				if (!h)
					_mm_prefetch((const char *)tu +
						     PF_DIST + j * 64,
						     _MM_HINT_T0);
				ue = _mm256_castsi256_ps(
					_mm256_slli_epi32(wu, 16));
				uo = _mm256_castsi256_ps(
					_mm256_and_si256(wu, hi16));
			}
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m256i xb = _mm256_set1_epi32(ld32(x[m] +
						t * 64 + j * 4));
				__m256 xe = _mm256_castsi256_ps(
					_mm256_slli_epi32(xb, 16));
				__m256 xo = _mm256_castsi256_ps(
					_mm256_and_si256(xb, hi16));

				og[m] = _mm256_fmadd_ps(xe, ge, og[m]);
				og[m] = _mm256_fmadd_ps(xo, go, og[m]);
				if (two) {
					ou[m] = _mm256_fmadd_ps(xe, ue, ou[m]);
					ou[m] = _mm256_fmadd_ps(xo, uo, ou[m]);
				}
			}
		}
	}
}

/* ---- gate + up ------------------------------------------------------------ */

AI void gu_block(const struct kern_gate_up_args *a, enum kt_quant q,
		 unsigned int nb, unsigned int i0, const int M)
{
	const uint8_t *x[MR];
	const int32_t *gs[MR];
	float xs[MR];
	unsigned int h, K = a->K;
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i0 + m] * a->act_stride;
		xs[m] = act_scale(x[m], K);
		gs[m] = (const int32_t *)(x[m] + K + 4);
	}
	for (h = 0; h < 2; h++) {
		unsigned int n = nb * 16 + h * 8;
		__m256 g[MR], u[MR];

		if (q == KT_QUANT_INT8) {
			size_t off = (size_t)nb * (K / 64) * 1024;
			__m256 wsg = _mm256_loadu_ps(a->gate->scales + n);
			__m256 wsu = _mm256_loadu_ps(a->up->scales + n);
			__m256i ig[MR], iu[MR];

			mk_i8(a->gate->tiles + off, a->up->tiles + off,
			      1, h, K / 64, x, gs, M, ig, iu);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m256 s = _mm256_set1_ps(xs[m]);

				g[m] = _mm256_mul_ps(
					_mm256_cvtepi32_ps(ig[m]),
					_mm256_mul_ps(s, wsg));
				u[m] = _mm256_mul_ps(
					_mm256_cvtepi32_ps(iu[m]),
					_mm256_mul_ps(s, wsu));
			}
		} else if (q == KT_QUANT_INT4) {
			size_t off = (size_t)nb * (K / 128) * 1024;

			mk_i4(a->gate->tiles + off, h, K / 128, x, gs,
			      a->gate->scales + n, a->N, a->group, M,
			      g);
			mk_i4(a->up->tiles + off, h, K / 128, x, gs,
			      a->up->scales + n, a->N, a->group, M, u);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m256 s = _mm256_set1_ps(xs[m]);

				g[m] = _mm256_mul_ps(g[m], s);
				u[m] = _mm256_mul_ps(u[m], s);
			}
		} else {
			size_t off = (size_t)nb * (K / 32) * 1024;

#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				g[m] = u[m] = _mm256_setzero_ps();
			mk_bf16(a->gate->tiles + off,
				a->up->tiles + off, 1, h, K / 32, x, M,
				g, u);
		}
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			_mm256_storeu_ps(a->out + (i0 + m) *
					 a->out_stride + n - a->n0,
					 silu_mul8(g[m], u[m]));
	}
}

#define DISPATCH_M(fn, mr, ...)						\
	do {								\
		switch (mr) {						\
		case 1: fn(__VA_ARGS__, 1); break;			\
		case 2: fn(__VA_ARGS__, 2); break;			\
		case 3: fn(__VA_ARGS__, 3); break;			\
		default: fn(__VA_ARGS__, 4); break;			\
		}							\
	} while (0)

/* Register blocks: INT4 on AVX2 holds 5 registers per token, others 2-4. */
static unsigned int mr_of(enum kt_quant q)
{
	return !YMM_VNNI && q != KT_QUANT_BF16 ? 2 : q == KT_QUANT_INT4 ? 3 :
	       MR;
}

/* Row blocks outer, token blocks inner, as in moe-avx512.c. */
static void gate_up(const struct kern_gate_up_args *a, enum kt_quant q)
{
	unsigned int nb, i0, mr, lim = mr_of(q);

	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++)
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < lim ? a->m - i0 : lim;
			DISPATCH_M(gu_block, mr, a, q, nb, i0);
		}
}

void YNAME(kern_gate_up_int8)(const struct kern_gate_up_args *a)
{
	gate_up(a, KT_QUANT_INT8);
}

void YNAME(kern_gate_up_int4)(const struct kern_gate_up_args *a)
{
	gate_up(a, KT_QUANT_INT4);
}

void YNAME(kern_gate_up_bf16)(const struct kern_gate_up_args *a)
{
	gate_up(a, KT_QUANT_BF16);
}

/* ---- down: K chunks outer, as in moe-avx512.c ------------------------------ */

AI void down_block(const struct kern_down_args *a, enum kt_quant q,
		   unsigned int i0, unsigned int ns0, unsigned int ns1,
		   float *part, const int M)
{
	const unsigned int kt = q == KT_QUANT_INT8 ? 64 :
				q == KT_QUANT_INT4 ? 128 : 32;
	const unsigned int P = a->kc / kt, NB = a->N / 16;
	const size_t crow = q == KT_QUANT_BF16 ? (size_t)a->kc * 2 :
			    act_row_bytes_q(a->kc, q == KT_QUANT_INT4 ?
					    a->group : 0);
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nsub = ns1 - ns0;
	unsigned int c, nb, h;
	int m;

	memset(part, 0, sizeof(float) * MR * nsub);
	for (c = c0; c < c1; c++) {
		const uint8_t *x[MR];
		const int32_t *gs[MR];
		__m256 xs[MR];

#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			x[m] = a->act + (i0 + m) * a->act_stride +
			       (c - c0) * crow;
			if (q != KT_QUANT_BF16)
				xs[m] = _mm256_set1_ps(act_scale(x[m], a->kc));
			gs[m] = (const int32_t *)(x[m] + a->kc + 4);
		}
		for (nb = ns0 / 16; nb < ns1 / 16; nb++)
			for (h = 0; h < 2; h++) {
				const uint8_t *tw = a->down->tiles +
					((size_t)c * NB * P + (size_t)nb * P) *
					1024;
				float *pp = part + (nb * 16 + h * 8 - ns0);
				__m256 r[MR];

				if (q == KT_QUANT_INT8) {
					__m256i d[MR];

					mk_i8(tw, NULL, 0, h, P, x, gs, M, d, NULL);
#pragma GCC unroll 16
					for (m = 0; m < M; m++)
						r[m] = _mm256_fmadd_ps(
							_mm256_cvtepi32_ps(d[m]),
							xs[m], _mm256_loadu_ps(
							pp + m * nsub));
				} else if (q == KT_QUANT_INT4) {
					mk_i4(tw, h, P, x, gs,
					      a->down->scales + nb * 16 +
					      h * 8 + (size_t)(c * a->kc /
					      a->group) * a->N, a->N,
					      a->group, M, r);
#pragma GCC unroll 16
					for (m = 0; m < M; m++)
						r[m] = _mm256_fmadd_ps(r[m],
							xs[m], _mm256_loadu_ps(
							pp + m * nsub));
				} else {
#pragma GCC unroll 16
					for (m = 0; m < M; m++)
						r[m] = _mm256_loadu_ps(pp +
								m * nsub);
					mk_bf16(tw, NULL, 0, h, P, x, M, r,
						NULL);
				}
#pragma GCC unroll 16
				for (m = 0; m < M; m++)
					_mm256_storeu_ps(pp + m * nsub, r[m]);
			}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		float *y = a->y + a->y_rows[i0 + m] * a->y_stride;
		__m256 w = _mm256_set1_ps(a->w[i0 + m]);
		unsigned int n;

		for (n = ns0; n < ns1; n += 8) {
			__m256 s = _mm256_loadu_ps(part + m * nsub + n - ns0);

			if (q == KT_QUANT_INT8)
				s = _mm256_mul_ps(s, _mm256_loadu_ps(
						  a->down->scales + n));
			_mm256_storeu_ps(y + n, _mm256_fmadd_ps(w, s,
					 _mm256_loadu_ps(y + n)));
		}
	}
}

static void down(const struct kern_down_args *a, enum kt_quant q)
{
	float *part = a->scratch;
	unsigned int i0, mr, ns0, ns1, lim = mr_of(q);

	for (ns0 = a->n0; ns0 < a->n1; ns0 = ns1) {
		ns1 = a->n1 - ns0 < DOWN_NSUB ? a->n1 : ns0 + DOWN_NSUB;
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < lim ? a->m - i0 : lim;
			DISPATCH_M(down_block, mr, a, q, i0, ns0, ns1, part);
		}
	}
}

void YNAME(kern_down_int8)(const struct kern_down_args *a)
{
	down(a, KT_QUANT_INT8);
}

void YNAME(kern_down_int4)(const struct kern_down_args *a)
{
	down(a, KT_QUANT_INT4);
}

void YNAME(kern_down_bf16)(const struct kern_down_args *a)
{
	down(a, KT_QUANT_BF16);
}

size_t YNAME(kern_scratch_bytes)(const struct kern_geom *g, unsigned int max_m)
{
	return sizeof(float) * MR * DOWN_NSUB;
}
