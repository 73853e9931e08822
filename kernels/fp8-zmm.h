/* SPDX-License-Identifier: MIT */
/*
 * fp8-zmm.h - E4M3 to bf16 on AVX-512 (BW): 32 packed FP8 bytes, one k
 * pair of 16 rows, to the 32 bf16 of the matching BF16 tile line. Shared
 * by the AVX-512 kernels and the AMX tile kernels of FP8.
 */
#ifndef KT_KERNELS_FP8_ZMM_H
#define KT_KERNELS_FP8_ZMM_H

#include <immintrin.h>
#include <stdint.h>

/*
 * bf16 of the E4M3 subnormals m * 2^-9 (m = 0..7), indexed by the low five
 * bits of the byte, which are m when the exponent field is 0.
 */
static inline __m512i fp8_sub_table(void)
{
	return _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
				0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3c60, 0x3c40,
				0x3c20, 0x3c00, 0x3bc0, 0x3b80, 0x3b00, 0);
}

/*
 * 32 E4M3 bytes to their bf16 values, exactly: a normal (1 + m/8) 2^(e-7)
 * is the bf16 with exponent e + 120 and mantissa m << 4, a subnormal comes
 * from the table, the sign moves from bit 7 to bit 15. The NaN encodings
 * (S.1111.111) read as +-480; checkpoints have none.
 */
static inline __attribute__((always_inline)) __m512i
fp8_bf16(const uint8_t *p, __m512i tbl)
{
	__m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const void *)p));
	__m512i mag = _mm512_and_si512(_mm512_slli_epi16(w, 4),
				       _mm512_set1_epi16(0x07f0));
	__m512i sub = _mm512_permutexvar_epi16(w, tbl);
	__mmask32 nrm = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x78));
	__m512i r = _mm512_mask_add_epi16(sub, nrm, mag,
					  _mm512_set1_epi16(0x3c00));

	/* r | (w << 8 & 0x8000) */
	return _mm512_ternarylogic_epi32(r, _mm512_slli_epi16(w, 8),
					 _mm512_set1_epi16((short)0x8000),
					 0xf8);
}

#endif /* KT_KERNELS_FP8_ZMM_H */
