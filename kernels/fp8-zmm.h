/* SPDX-License-Identifier: MIT */
/*
 * fp8-zmm.h - E4M3 to bf16 on AVX-512 (VBMI): one 64-byte FP8 tile line,
 * two k pairs of 16 rows, to the two matching BF16 tile lines. Shared by
 * the AVX-512 kernels and the AMX tile kernels of FP8.
 */
#ifndef KT_KERNELS_FP8_ZMM_H
#define KT_KERNELS_FP8_ZMM_H

#include <immintrin.h>
#include <stdint.h>

/*
 * 64 E4M3 bytes (one tile line: two k pairs of 16 rows) to the bf16 of
 * both halves, exactly, by table: vpermi2b looks up the high and the low
 * byte of the bf16 of each byte's 7-bit magnitude in 128-entry tables
 * (normals (1 + m/8) 2^(e-7) are exponent e + 120, mantissa m << 4; the
 * subnormals m * 2^-9 and zero are entries like any other), the sign goes
 * to bit 7 of the high byte, and two vpermt2b interleave low and high
 * bytes into the words of each half. Six operations per line, against 13
 * for building the bytes by shifts and 16-entry lookups (gate+up at one
 * token, from L2: 70-76 -> 54-65 us per expert). The NaN encodings
 * (S.1111.111) read as +-480; checkpoints have none. VBMI (vpermi2b),
 * which every CPU with AVX512-BF16 but Cooper Lake has, is part of the
 * avx512 and amx variants (ktcore/cpu.c).
 */
#ifndef __AVX512VBMI__
#error "fp8-zmm.h needs AVX512-VBMI (-mavx512vbmi)"
#endif

struct fp8_tbl {
	/* the bf16 high and low bytes of the 128 magnitudes (vpermi2b) */
	__m512i hi0, hi1, lo0, lo1;
	/* word i of a half: low byte i, high byte i (vpermt2b) */
	__m512i even, odd;
};

/* the tables' bytes: hi[v], lo[v] the bf16 of magnitude v (0..127), then
 * the two interleaves' byte indices (64 + i: byte i of the high bytes) */
struct fp8_bytes {
	uint8_t hi[128], lo[128], even[64], odd[64];
};

static inline __attribute__((always_inline)) struct fp8_tbl fp8_tables(void)
{
	static const struct fp8_bytes b __attribute__((aligned(64))) = {
/* the bf16 of magnitude v: subnormal m * 2^-9 or normal */
#define FP8_SUB(m)	((m) == 0 ? 0 : (m) == 1 ? 0x3b00 : (m) == 2 ? 0x3b80 : \
		(m) == 3 ? 0x3bc0 : 0x3c00 | ((m) - 4) << 5)
#define FP8_BF(v)	((v) < 8 ? FP8_SUB(v) :				\
		(((v) >> 3) + 120) << 7 | ((v) & 7) << 4)
#define FP8_R8(f, v)	f(v), f(v + 1), f(v + 2), f(v + 3), f(v + 4),	\
		f(v + 5), f(v + 6), f(v + 7)
#define FP8_R64(f, v)	FP8_R8(f, v), FP8_R8(f, v + 8), FP8_R8(f, v + 16), \
		FP8_R8(f, v + 24), FP8_R8(f, v + 32), FP8_R8(f, v + 40),  \
		FP8_R8(f, v + 48), FP8_R8(f, v + 56)
#define FP8_HI(v)	(uint8_t)(FP8_BF(v) >> 8)
#define FP8_LO(v)	(uint8_t)FP8_BF(v)
#define FP8_EV(i)	(uint8_t)((i) % 2 ? 64 + (i) / 2 : (i) / 2)
#define FP8_OD(i)	(uint8_t)((i) % 2 ? 96 + (i) / 2 : 32 + (i) / 2)
		{ FP8_R64(FP8_HI, 0), FP8_R64(FP8_HI, 64) },
		{ FP8_R64(FP8_LO, 0), FP8_R64(FP8_LO, 64) },
		{ FP8_R64(FP8_EV, 0) }, { FP8_R64(FP8_OD, 0) },
#undef FP8_SUB
#undef FP8_BF
#undef FP8_R8
#undef FP8_R64
#undef FP8_HI
#undef FP8_LO
#undef FP8_EV
#undef FP8_OD
	};
	struct fp8_tbl t = {
		_mm512_load_si512(b.hi), _mm512_load_si512(b.hi + 64),
		_mm512_load_si512(b.lo), _mm512_load_si512(b.lo + 64),
		_mm512_load_si512(b.even), _mm512_load_si512(b.odd),
	};

	return t;
}

static inline __attribute__((always_inline)) void
fp8_bf16_line(const uint8_t *p, const struct fp8_tbl *t, __m512i *h0,
	      __m512i *h1)
{
	__m512i w = _mm512_loadu_si512((const void *)p);
	__m512i hi = _mm512_permutex2var_epi8(t->hi0, w, t->hi1);
	__m512i lo = _mm512_permutex2var_epi8(t->lo0, w, t->lo1);

	hi = _mm512_ternarylogic_epi32(hi, w, _mm512_set1_epi8((char)0x80),
				       0xf8);
	*h0 = _mm512_permutex2var_epi8(lo, t->even, hi);
	*h1 = _mm512_permutex2var_epi8(lo, t->odd, hi);
}

#endif /* KT_KERNELS_FP8_ZMM_H */
