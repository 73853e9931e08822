/* SPDX-License-Identifier: MIT */
/*
 * vec.h - the width layer: one name per vector operation on 512-bit
 * (VEC_BITS 512) or 256-bit lanes, so that the bodies that differ only in
 * width (moe-vec.h, limits-vec.h) are written once. Included by the per-ISA
 * files, each compiled with its own -m flags, after defining VEC_BITS and
 * VEC_ISA (the suffix of the names they define), and VEC_VNNI where the
 * int8 dots are not the width's usual ones: 512 bits without VNNI
 * (Skylake-SP), 256 bits with AVX-VNNI.
 */
#ifndef KT_KERNELS_VEC_H
#define KT_KERNELS_VEC_H

/* the int8 and int16 dots: vpdpbusd / vpdpwssd (1) or vpmaddubsw and
 * vpmaddwd (0), whose u8 * s8 pairs the caller keeps within int16 */
#ifndef VEC_VNNI
#define VEC_VNNI	(VEC_BITS == 512)
#endif

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define AI __attribute__((always_inline)) static inline
#define VCAT_(a, b) a##_##b
#define VCAT(a, b) VCAT_(a, b)
/* name##_##VEC_ISA: the per-ISA symbol of a body written once */
#define VNAME(name) VCAT(name, VEC_ISA)

AI int32_t ld32(const void *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

#if VEC_BITS == 512

#include "kernels/vexp-avx512.h"

typedef __m512 vf;
typedef __m512i vi;
#define VF_LANES	16

#define vf_load(p)		_mm512_loadu_ps(p)
#define vf_store(p, v)		_mm512_storeu_ps(p, v)
#define vf_set1(x)		_mm512_set1_ps(x)
#define vf_bcast(p)		_mm512_set1_ps(*(p))	/* {1to16} */
#define vf_zero()		_mm512_setzero_ps()
#define vf_add(a, b)		_mm512_add_ps(a, b)
#define vf_sub(a, b)		_mm512_sub_ps(a, b)
#define vf_mul(a, b)		_mm512_mul_ps(a, b)
#define vf_div(a, b)		_mm512_div_ps(a, b)
#define vf_max(a, b)		_mm512_max_ps(a, b)
#define vf_abs(a)		_mm512_abs_ps(a)
#define vf_fmadd(a, b, c)	_mm512_fmadd_ps(a, b, c)
#define vf_exp(x)		kern_exp_avx512(x)
#define vf_silu_mul(g, u)	kern_silu_mul_avx512(g, u)
#define vf_glu(e, n, g, u)	kern_glu_avx512(e, n, g, u)
#define vf_hmax(v)		_mm512_reduce_max_ps(v)
#define vf_cvt_i32(v)		_mm512_cvtps_epi32(v)

#define vi_zero()		_mm512_setzero_si512()
#define vi_load(p)		_mm512_loadu_si512(p)
#define vi_load_a(p)		_mm512_load_si512(p)
#define vi_xor(a, b)		_mm512_xor_si512(a, b)
#define vi_and(a, b)		_mm512_and_si512(a, b)
#define vi_srli32(a, n)		_mm512_srli_epi32(a, n)
#define vi_add32(a, b)		_mm512_add_epi32(a, b)
#define vi_set1_8(x)		_mm512_set1_epi8(x)
#define vi_set1_32(x)		_mm512_set1_epi32(x)
#define vi_hadd32(v)		_mm512_reduce_add_epi32(v)
#define vi_or(a, b)		_mm512_or_si512(a, b)
#define vi_sub32(a, b)		_mm512_sub_epi32(a, b)
#define vi_mullo32(a, b)	_mm512_mullo_epi32(a, b)
#define vi_slli16(a, n)		_mm512_slli_epi16(a, n)
#define vi_srli16(a, n)		_mm512_srli_epi16(a, n)
#define vi_slli32(a, n)		_mm512_slli_epi32(a, n)
#define vf_cvt_f32(v)		_mm512_cvtepi32_ps(v)
#define vf_fmsub(a, b, c)	_mm512_fmsub_ps(a, b, c)
#define vf_fnmadd(a, b, c)	_mm512_fnmadd_ps(a, b, c)
#if VEC_VNNI
/* @acc + the dots of the 4 u8 of @u with the 4 s8 of @s per int32 */
#define vi_dot_u8s8(acc, u, s)	_mm512_dpbusd_epi32(acc, u, s)
/* @acc + the dots of the int16 pairs of @a and @b per int32 */
#define vi_dot_i16(acc, a, b)	_mm512_dpwssd_epi32(acc, a, b)
#else
#define vi_dot_u8s8(acc, u, s)						\
	_mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s),\
						_mm512_set1_epi16(1)))
#define vi_dot_i16(acc, a, b)						\
	_mm512_add_epi32(acc, _mm512_madd_epi16(a, b))
#endif
/* @acc + the int16 pair sums of u8 @u times s8 @s (vpmaddubsw), which
 * the caller keeps within int16; then int16 pairs of @v added to @acc in
 * int32 (vpmaddwd by ones) */
#define vi_dot_u8s8_16(acc, u, s)					\
	_mm512_add_epi16(acc, _mm512_maddubs_epi16(u, s))
#define vi_fold16(acc, v)						\
	_mm512_add_epi32(acc, _mm512_madd_epi16(v, _mm512_set1_epi16(1)))

/* VF_LANES int16 pairs (@p[i], @p[16 + i]) of uint8 (@sgn 0) or int8 */
AI vi vi_load_pairs8(const void *p, int sgn)
{
	const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12,
					     27, 11, 26, 10, 25, 9, 24, 8,
					     23, 7, 22, 6, 21, 5, 20, 4,
					     19, 3, 18, 2, 17, 1, 16, 0);
	__m256i v = _mm256_loadu_si256(p);

	return _mm512_permutexvar_epi16(idx, sgn ? _mm512_cvtepi8_epi16(v) :
						   _mm512_cvtepu8_epi16(v));
}

/* VF_LANES bf16 at @p widened to f32 (a bf16 is the high half of one). */
AI vf vf_load_bf16(const void *p)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
		_mm256_loadu_si256(p)), 16));
}

/* VF_LANES int8 at @p sign-extended to int32. */
AI vi vi_load_i8(const void *p)
{
	return _mm512_cvtepi8_epi32(_mm_loadu_si128(p));
}

/* VF_LANES uint8 at @p zero-extended to int32. */
AI vi vi_load_u8(const void *p)
{
	return _mm512_cvtepu8_epi32(_mm_loadu_si128(p));
}

/* The VF_LANES int32 of @v (all within int8) stored as int8 at @p. */
AI void vi_store_i8(void *p, vi v)
{
	_mm_storeu_si128(p, _mm512_cvtsepi32_epi8(v));
}

/* The low 16 bits of the VF_LANES int32 of @v stored at @p. */
AI void vi_store_lo16(void *p, vi v)
{
	_mm256_storeu_si256(p, _mm512_cvtepi32_epi16(v));
}

#elif VEC_BITS == 256

#include "kernels/vexp-avx2.h"

typedef __m256 vf;
typedef __m256i vi;
#define VF_LANES	8

#define vf_load(p)		_mm256_loadu_ps(p)
#define vf_store(p, v)		_mm256_storeu_ps(p, v)
#define vf_set1(x)		_mm256_set1_ps(x)
/*
 * *@p in every lane, as vpbroadcastd: vbroadcastss from memory took an FMA
 * pipe slot as well on Zen 3 (20 FMAs and 10 broadcasts from L1: 13.5
 * TSC ticks, 8.8 with vpbroadcastd, the FMAs' own bound).
 */
#define vf_bcast(p)		_mm256_castsi256_ps(_mm256_set1_epi32(ld32(p)))
#define vf_zero()		_mm256_setzero_ps()
#define vf_add(a, b)		_mm256_add_ps(a, b)
#define vf_sub(a, b)		_mm256_sub_ps(a, b)
#define vf_mul(a, b)		_mm256_mul_ps(a, b)
#define vf_div(a, b)		_mm256_div_ps(a, b)
#define vf_max(a, b)		_mm256_max_ps(a, b)
#define vf_abs(a)		_mm256_and_ps(a, _mm256_castsi256_ps(	\
					_mm256_set1_epi32(0x7fffffff)))
#define vf_fmadd(a, b, c)	_mm256_fmadd_ps(a, b, c)
#define vf_exp(x)		kern_exp_avx2(x)
#define vf_silu_mul(g, u)	kern_silu_mul_avx2(g, u)
#define vf_glu(e, n, g, u)	kern_glu_avx2(e, n, g, u)
#define vf_cvt_i32(v)		_mm256_cvtps_epi32(v)

#define vi_zero()		_mm256_setzero_si256()
#define vi_load(p)		_mm256_loadu_si256((const void *)(p))
#define vi_load_a(p)		_mm256_load_si256((const void *)(p))
#define vi_xor(a, b)		_mm256_xor_si256(a, b)
#define vi_and(a, b)		_mm256_and_si256(a, b)
#define vi_srli32(a, n)		_mm256_srli_epi32(a, n)
#define vi_add32(a, b)		_mm256_add_epi32(a, b)
#define vi_set1_8(x)		_mm256_set1_epi8(x)
#define vi_set1_32(x)		_mm256_set1_epi32(x)
#define vi_or(a, b)		_mm256_or_si256(a, b)
#define vi_sub32(a, b)		_mm256_sub_epi32(a, b)
#define vi_mullo32(a, b)	_mm256_mullo_epi32(a, b)
#define vi_slli16(a, n)		_mm256_slli_epi16(a, n)
#define vi_srli16(a, n)		_mm256_srli_epi16(a, n)
#define vi_slli32(a, n)		_mm256_slli_epi32(a, n)
#define vf_cvt_f32(v)		_mm256_cvtepi32_ps(v)
#define vf_fmsub(a, b, c)	_mm256_fmsub_ps(a, b, c)
#define vf_fnmadd(a, b, c)	_mm256_fnmadd_ps(a, b, c)
#if VEC_VNNI
/* AVX-VNNI, VEX-encoded */
#define vi_dot_u8s8(acc, u, s)	_mm256_dpbusd_avx_epi32(acc, u, s)
#define vi_dot_i16(acc, a, b)	_mm256_dpwssd_avx_epi32(acc, a, b)
#else
/* vpmaddubsw then vpmaddwd by ones: the caller keeps each pair of u8 * s8
 * products within int16 */
#define vi_dot_u8s8(acc, u, s)						\
	_mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),\
						_mm256_set1_epi16(1)))
#define vi_dot_i16(acc, a, b)						\
	_mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#endif
#define vi_dot_u8s8_16(acc, u, s)					\
	_mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s))
#define vi_fold16(acc, v)						\
	_mm256_add_epi32(acc, _mm256_madd_epi16(v, _mm256_set1_epi16(1)))

AI vi vi_load_pairs8(const void *p, int sgn)
{
	__m128i v = _mm_unpacklo_epi8(_mm_loadl_epi64(p),
				      _mm_loadl_epi64((const __m128i *)
						      ((const uint8_t *)p + 16)));

	return sgn ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
}

AI float vf_hmax(vf v)
{
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(v),
			      _mm256_extractf128_ps(v, 1));

	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

AI int32_t vi_hadd32(vi v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v),
				  _mm256_extracti128_si256(v, 1));

	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}

AI vf vf_load_bf16(const void *p)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(
		_mm_loadu_si128(p)), 16));
}

AI vi vi_load_i8(const void *p)
{
	return _mm256_cvtepi8_epi32(_mm_loadl_epi64(p));
}

AI vi vi_load_u8(const void *p)
{
	return _mm256_cvtepu8_epi32(_mm_loadl_epi64(p));
}

AI void vi_store_i8(void *p, vi v)
{
	__m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v),
				    _mm256_extracti128_si256(v, 1));

	_mm_storel_epi64(p, _mm_packs_epi16(w, w));
}

AI void vi_store_lo16(void *p, vi v)
{
	/* the values fit 16 bits unsigned: packus keeps them */
	_mm_storeu_si128(p, _mm_packus_epi32(_mm256_castsi256_si128(v),
					     _mm256_extracti128_si256(v, 1)));
}

#else
#error "VEC_BITS must be 512 or 256"
#endif

/* @n bf16 at @p widened to f32 at @f (@n a multiple of VF_LANES). */
AI void vf_widen_bf16(float *f, const uint8_t *p, unsigned int n)
{
	unsigned int k;

	for (k = 0; k < n; k += VF_LANES)
		vf_store(f + k, vf_load_bf16(p + 2 * k));
}

/* The same for @M rows at x[m], to rows of @n f32 from @f on. */
AI void vf_widen_bf16_rows(float *f, const uint8_t *const *x, const int M,
			   unsigned int n)
{
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		vf_widen_bf16(f + (size_t)m * n, x[m], n);
}

/*
 * Accumulators per token and row slice in the f32 FMA bodies (fp8-vec.h,
 * mxfp4-vec.h), k mod 4 or its parity, while @mr tokens' worth fit in
 * registers: one token at 512 bits has one slice, whose single chain of
 * four FMAs per line waited on their latency (16 cycles a line, against
 * 10 for widening an FP8 line).
 */
#define VF_CHAINS(M, SS, mr)						\
	((M) * (SS) * 4 <= (mr) && VEC_BITS == 512 ? 4 :		\
	 (M) * (SS) * 2 <= (mr) ? 2 : 1)

/* The sum of @ch chains a[0 .. ch - 1], in that order. */
AI vf vf_sum_chains(const vf *a, const int ch)
{
	vf r = a[0];
	int c;

#pragma GCC unroll 4
	for (c = 1; c < ch; c++)
		r = vf_add(r, a[c]);
	return r;
}

/* The bits of @v folded by xor: no arithmetic, so wrapped sums are fine. */
AI uint64_t vi_fold64(vi v)
{
	uint64_t r = 0, w;
	size_t i;

	for (i = 0; i < sizeof(v); i += 8) {
		memcpy(&w, (const char *)&v + i, 8);
		r ^= w;
	}
	return r;
}

/*
 * Matrices a kernel body streams at once: one, two on the same activations
 * (gate and up of the same rows), or two each on its own (MK_TWO_OWN_X:
 * down's consecutive chunks in decode, two DRAM streams).
 */
enum { MK_ONE, MK_TWO, MK_TWO_OWN_X };

#endif /* KT_KERNELS_VEC_H */
