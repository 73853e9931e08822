/* SPDX-License-Identifier: MIT */
/*
 * vexp-avx512.h - exp and SiLU on 16 f32 lanes for the fused gate+up of
 * the AVX-512 and AMX variants (error bound: Documentation/kernels.md).
 */
#ifndef KT_KERNELS_VEXP_AVX512_H
#define KT_KERNELS_VEXP_AVX512_H

#include <immintrin.h>

#include "kernels/kern.h"

/*
 * exp(x) = 2^n * e^r with n = round(x / ln2), r = x - n ln2 in
 * [-ln2/2, ln2/2] (ln2 split in two so that r is exact to ~1 ulp), e^r by
 * its degree 7 Taylor polynomial (truncation < 5e-9 relative), and 2^n
 * applied by vscalefps, which saturates to 0 and +inf by itself.
 */
static inline __m512 kern_exp_avx512(__m512 x)
{
	const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
	const __m512 ln2_hi = _mm512_set1_ps(0.693145751953125f);
	const __m512 ln2_lo = _mm512_set1_ps(1.428606765330187e-06f);
	__m512 n, r, p;

	x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)),
			  _mm512_set1_ps(-104.0f));
	n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
				 _MM_FROUND_TO_NEAREST_INT |
				 _MM_FROUND_NO_EXC);
	r = _mm512_fnmadd_ps(n, ln2_hi, x);
	r = _mm512_fnmadd_ps(n, ln2_lo, r);
	p = _mm512_set1_ps(1.0f / 5040);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, n);
}

/* silu(g) * u = g / (1 + exp(-g)) * u, as kern_silu_f32() defines it. */
static inline __m512 kern_silu_mul_avx512(__m512 g, __m512 u)
{
	__m512 e = kern_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));

	return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(
				_mm512_set1_ps(1.0f), e)), u);
}


/*
 * kern_glu_f32() on the 16 output rows n .. n + 15: biases, then the
 * activation; @e NULL is silu(g) * u.
 */
static inline __m512 kern_glu_ext_avx512(const struct kern_glu *e, unsigned int n,
				     __m512 g, __m512 u)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	__m512 lim, d;

	if (e->gate_bias)
		g = _mm512_add_ps(g, _mm512_loadu_ps(e->gate_bias + n));
	if (e->up_bias)
		u = _mm512_add_ps(u, _mm512_loadu_ps(e->up_bias + n));
	if (e->act != KT_ACT_SWIGLU_OAI)
		return kern_silu_mul_avx512(g, u);
	lim = _mm512_set1_ps(e->limit);
	g = _mm512_min_ps(g, lim);
	u = _mm512_max_ps(_mm512_min_ps(u, lim), _mm512_sub_ps(_mm512_setzero_ps(), lim));
	d = _mm512_add_ps(one, kern_exp_avx512(_mm512_mul_ps(
			_mm512_set1_ps(-e->alpha), g)));
	return _mm512_mul_ps(_mm512_div_ps(g, d), _mm512_add_ps(u, one));
}

static inline __attribute__((always_inline)) __m512
kern_glu_avx512(const struct kern_glu *e, unsigned int n, __m512 g, __m512 u)
{
	if (__builtin_expect(!e, 1))
		return kern_silu_mul_avx512(g, u);
	return kern_glu_ext_avx512(e, n, g, u);
}

#endif /* KT_KERNELS_VEXP_AVX512_H */
