/* SPDX-License-Identifier: MIT */
/*
 * fp8-zmm.h - E4M3 to bf16 on AVX-512 (BW): one 64-byte FP8 tile line,
 * two k pairs of 16 rows, to the two matching BF16 tile lines. Shared by
 * the AVX-512 kernels and the AMX tile kernels of FP8.
 */
#ifndef KT_KERNELS_FP8_ZMM_H
#define KT_KERNELS_FP8_ZMM_H

#include <immintrin.h>
#include <stdint.h>

/*
 * 64 E4M3 bytes (one tile line: two k pairs of 16 rows) to the bf16 of
 * both halves, exactly, built byte by byte. A normal (1 + m/8) 2^(e-7) is
 * the bf16 with exponent e + 120 and mantissa m << 4: its low byte is
 * (e & 1) << 7 | m << 4, the byte shifted by 4; its high byte is
 * (e >> 1) + 60, a lookup by bits 4..6. A subnormal m * 2^-9 (e = 0) takes
 * both bytes from lookups by m. The sign moves to bit 7 of the high byte.
 * The NaN encodings (S.1111.111) read as +-480; checkpoints have none.
 * The qword shuffle first puts bytes 0..31 in the low halves of the four
 * lanes and 32..63 in the high ones, so that the in-lane byte interleave
 * gives the words in order. About 6 operations per 32 weights, against 9
 * for widening to words first and fixing subnormals with a word permute.
 */
struct fp8_tbl {
	__m512i hi, sub_hi, sub_lo;	/* vpshufb tables, one per lane */
};

static inline struct fp8_tbl fp8_tables(void)
{
	struct fp8_tbl t = {
		_mm512_broadcast_i32x4(_mm_setr_epi8(60, 61, 62, 63, 64, 65,
						     66, 67, 0, 0, 0, 0, 0, 0,
						     0, 0)),
		/* m * 2^-9: 0, 2^-9, 2^-8 (1, 1.5), 2^-7 (1 .. 1.75) */
		_mm512_broadcast_i32x4(_mm_setr_epi8(0, 0x3b, 0x3b, 0x3b, 0x3c,
						     0x3c, 0x3c, 0x3c, 0, 0, 0,
						     0, 0, 0, 0, 0)),
		_mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, (char)0x80,
						     (char)0xc0, 0, 0x20, 0x40,
						     0x60, 0, 0, 0, 0, 0, 0, 0,
						     0)),
	};

	return t;
}

static inline __attribute__((always_inline)) void
fp8_bf16_line(const uint8_t *p, const struct fp8_tbl *t, __m512i *h0,
	      __m512i *h1)
{
	const __m512i seven = _mm512_set1_epi8(7);
	__m512i w = _mm512_permutexvar_epi64(
		_mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0),
		_mm512_loadu_si512((const void *)p));
	__m512i lo = _mm512_and_si512(_mm512_slli_epi16(w, 4),
				      _mm512_set1_epi8((char)0xf0));
	__m512i hi = _mm512_shuffle_epi8(t->hi, _mm512_and_si512(
		_mm512_srli_epi16(w, 4), seven));
	__mmask64 sub = _mm512_testn_epi8_mask(w, _mm512_set1_epi8(0x78));
	__m512i m = _mm512_and_si512(w, seven);

	hi = _mm512_mask_shuffle_epi8(hi, sub, t->sub_hi, m);
	lo = _mm512_mask_shuffle_epi8(lo, sub, t->sub_lo, m);
	/* hi | (w & 0x80) */
	hi = _mm512_ternarylogic_epi32(hi, w, _mm512_set1_epi8((char)0x80),
				       0xf8);
	*h0 = _mm512_unpacklo_epi8(lo, hi);
	*h1 = _mm512_unpackhi_epi8(lo, hi);
}

#endif /* KT_KERNELS_FP8_ZMM_H */
