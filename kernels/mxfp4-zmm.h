/* SPDX-License-Identifier: MIT */
/*
 * mxfp4-zmm.h - MXFP4 to bf16 and E8M0 to f32 on AVX-512 (BW): one 32-byte
 * line of a packed tile (4 k of 16 rows) to the two bf16 tile lines it
 * stands for, and 16 rows' scales of one group. Shared by the AVX-512 and
 * the AMX kernels of MXFP4.
 */
#ifndef KT_KERNELS_MXFP4_ZMM_H
#define KT_KERNELS_MXFP4_ZMM_H

#include <immintrin.h>
#include <stdint.h>

/*
 * The bf16 bits of E2M1 code i & 15 at word i (0..31): vpermw reads the
 * low five bits of each index, so a byte's low nibble indexes it with the
 * high nibble's lowest bit along, and the table repeats.
 */
static inline __m512i mx_bf16_table(void)
{
	return _mm512_set_epi16(
		(short)0xc0c0, (short)0xc080, (short)0xc040, (short)0xc000,
		(short)0xbfc0, (short)0xbf80, (short)0xbf00, (short)0x8000,
		0x40c0, 0x4080, 0x4040, 0x4000, 0x3fc0, 0x3f80, 0x3f00, 0,
		(short)0xc0c0, (short)0xc080, (short)0xc040, (short)0xc000,
		(short)0xbfc0, (short)0xbf80, (short)0xbf00, (short)0x8000,
		0x40c0, 0x4080, 0x4040, 0x4000, 0x3fc0, 0x3f80, 0x3f00, 0);
}

/*
 * 32 bytes of a tile line to its two bf16 lines, exactly: *@lo holds k
 * pair 2L (the low nibbles: row n's pair in 32-bit lane n), *@hi pair
 * 2L + 1 (the high nibbles).
 */
static inline __attribute__((always_inline)) void
mx_bf16(const uint8_t *p, __m512i tbl, __m512i *lo, __m512i *hi)
{
	__m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const void *)p));

	*lo = _mm512_permutexvar_epi16(w, tbl);
	*hi = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), tbl);
}

/*
 * 16 E8M0 bytes to 2^(e - 127) in f32, exactly: the exponent field e,
 * except e = 0, the subnormal 2^-127 (bit 22). e = 255 (refused by the
 * packer) would read as +inf.
 */
static inline __attribute__((always_inline)) __m512
mx_scale16(const uint8_t *p)
{
	__m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)p));
	__m512i b = _mm512_slli_epi32(e, 23);

	b = _mm512_mask_mov_epi32(b, _mm512_testn_epi32_mask(e, e),
				  _mm512_set1_epi32(0x00400000));
	return _mm512_castsi512_ps(b);
}

#endif /* KT_KERNELS_MXFP4_ZMM_H */
