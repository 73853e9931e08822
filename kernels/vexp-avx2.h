/* SPDX-License-Identifier: MIT */
/*
 * vexp-avx2.h - exp and SiLU on 8 f32 lanes for the fused gate+up of the 256-bit
 * variants (error bound: Documentation/kernels.md).
 */
#ifndef KT_KERNELS_VEXP_AVX2_H
#define KT_KERNELS_VEXP_AVX2_H

#include <immintrin.h>

#include "kernels/kern.h"

/*
 * exp(x) = 2^n e^r as in vexp-avx512.h; without vscalefps, 2^n is built in
 * two factors (n = 128 near 88.7 is not one normal float) and the range
 * ends are set by hand: +inf above 88.72, 0 below -87.3 (no denormals).
 */
static inline __m256 kern_exp_avx2(__m256 x)
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

/* silu(g) * u = g / (1 + exp(-g)) * u, as kern_silu_f32() defines it. */
static inline __m256 kern_silu_mul_avx2(__m256 g, __m256 u)
{
	__m256 e = kern_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));

	return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(
				_mm256_set1_ps(1.0f), e)), u);
}


/*
 * kern_glu_f32() on the 8 output rows n .. n + 7: biases, then the
 * activation; @e NULL is silu(g) * u.
 */
static inline __m256 kern_glu_ext_avx2(const struct kern_glu *e, unsigned int n,
				     __m256 g, __m256 u)
{
	const __m256 one = _mm256_set1_ps(1.0f);
	__m256 lim, d;

	if (e->gate_bias)
		g = _mm256_add_ps(g, _mm256_loadu_ps(e->gate_bias + n));
	if (e->up_bias)
		u = _mm256_add_ps(u, _mm256_loadu_ps(e->up_bias + n));
	if (e->act != KT_ACT_SWIGLU_OAI)
		return kern_silu_mul_avx2(g, u);
	lim = _mm256_set1_ps(e->limit);
	g = _mm256_min_ps(g, lim);
	u = _mm256_max_ps(_mm256_min_ps(u, lim), _mm256_sub_ps(_mm256_setzero_ps(), lim));
	d = _mm256_add_ps(one, kern_exp_avx2(_mm256_mul_ps(
			_mm256_set1_ps(-e->alpha), g)));
	return _mm256_mul_ps(_mm256_div_ps(g, d), _mm256_add_ps(u, one));
}

static inline __attribute__((always_inline)) __m256
kern_glu_avx2(const struct kern_glu *e, unsigned int n, __m256 g, __m256 u)
{
	if (__builtin_expect(!e, 1))
		return kern_silu_mul_avx2(g, u);
	return kern_glu_ext_avx2(e, n, g, u);
}

#endif /* KT_KERNELS_VEXP_AVX2_H */
