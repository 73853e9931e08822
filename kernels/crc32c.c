// SPDX-License-Identifier: MIT
/*
 * crc32c.c - CRC32C for .ktw blob checksums. Three interleaved crc32q
 * streams hide the instruction's 3-cycle latency; the streams are joined
 * with a carry-less multiply by x^(8*len) mod P (computed by squaring).
 */
#include <stdbool.h>
#include <string.h>

#include "kernels/crc32c.h"

#define CRC32C_POLY_REV 0x82f63b78u	/* reflected Castagnoli polynomial */

static uint32_t crc_table[8][256];
static bool crc_table_ready;

static void crc_table_init(void)
{
	uint32_t i, j, c;

	for (i = 0; i < 256; i++) {
		c = i;
		for (j = 0; j < 8; j++)
			c = (c >> 1) ^ (CRC32C_POLY_REV & (0u - (c & 1)));
		crc_table[0][i] = c;
	}
	for (i = 0; i < 256; i++)
		for (j = 1; j < 8; j++)
			crc_table[j][i] = (crc_table[j - 1][i] >> 8) ^
					  crc_table[0][crc_table[j - 1][i] & 0xff];
	__atomic_store_n(&crc_table_ready, true, __ATOMIC_RELEASE);
}

/* Raw (no inversion) table update, slicing by 8. */
static uint32_t crc_sw_raw(uint32_t c, const uint8_t *p, size_t n)
{
	if (!__atomic_load_n(&crc_table_ready, __ATOMIC_ACQUIRE))
		crc_table_init();	/* idempotent: racing callers write the same */
	while (n && ((uintptr_t)p & 7)) {
		c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
		n--;
	}
	while (n >= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		v ^= c;
		c = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^
		    crc_table[5][(v >> 16) & 0xff] ^
		    crc_table[4][(v >> 24) & 0xff] ^
		    crc_table[3][(v >> 32) & 0xff] ^
		    crc_table[2][(v >> 40) & 0xff] ^
		    crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][v >> 56];
		p += 8;
		n -= 8;
	}
	while (n--)
		c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
	return c;
}

uint32_t kern_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	return ~crc_sw_raw(~crc, buf, len);
}

/* GF(2) product of two reflected 32-bit polynomials, reduced mod P. */
static uint32_t gf_mul(uint32_t a, uint32_t b)
{
	uint32_t r = 0;
	int i;

	for (i = 0; i < 32; i++) {
		if (b & 0x80000000u)
			r ^= a;
		b <<= 1;
		a = (a >> 1) ^ (CRC32C_POLY_REV & (0u - (a & 1)));
	}
	return r;
}

/* x^(8*n) mod P in reflected form: the operator that appends n zero bytes. */
static uint32_t x_pow_8n(size_t n)
{
	uint32_t r = 0x80000000u;	/* x^0 */
	uint32_t sq = 0x00800000u;	/* x^8 */

	while (n) {
		if (n & 1)
			r = gf_mul(r, sq);
		sq = gf_mul(sq, sq);
		n >>= 1;
	}
	return r;
}

#if defined(__x86_64__)
#define STREAM 8192	/* bytes per stream and round: 3 x 8 KiB */

__attribute__((target("sse4.2")))
static uint32_t crc_hw_raw(uint32_t c, const uint8_t *p, size_t n)
{
	static uint32_t shift_once;	/* x^(8*STREAM) mod P, computed once */
	uint32_t shift = __atomic_load_n(&shift_once, __ATOMIC_RELAXED);
	uint64_t c0 = c;

	/* idempotent: racing callers store the same value */
	if (!shift) {
		shift = x_pow_8n(STREAM);
		__atomic_store_n(&shift_once, shift, __ATOMIC_RELAXED);
	}
	while (n && ((uintptr_t)p & 7)) {
		c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
		n--;
	}
	while (n >= 3 * STREAM) {
		uint64_t c1 = 0, c2 = 0, v0, v1, v2;
		const uint8_t *e = p + STREAM;

		for (; p < e; p += 8) {
			memcpy(&v0, p, 8);
			memcpy(&v1, p + STREAM, 8);
			memcpy(&v2, p + 2 * STREAM, 8);
			c0 = __builtin_ia32_crc32di(c0, v0);
			c1 = __builtin_ia32_crc32di(c1, v1);
			c2 = __builtin_ia32_crc32di(c2, v2);
		}
		/* crc(A||B) = crc(A) * x^(8|B|) + crc(B) for raw CRCs with
		 * B's stream started from zero */
		c0 = gf_mul((uint32_t)c0, shift) ^ c1;
		c0 = gf_mul((uint32_t)c0, shift) ^ c2;
		p += 2 * STREAM;
		n -= 3 * STREAM;
	}
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c0 = __builtin_ia32_crc32di(c0, v);
	}
	while (n--)
		c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
	return (uint32_t)c0;
}

uint32_t kern_crc32c(uint32_t crc, const void *buf, size_t len)
{
	static int have_hw_once = -1;
	int have_hw = __atomic_load_n(&have_hw_once, __ATOMIC_RELAXED);

	/* idempotent: racing callers store the same value */
	if (have_hw < 0) {
		have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
		__atomic_store_n(&have_hw_once, have_hw, __ATOMIC_RELAXED);
	}
	if (have_hw)
		return ~crc_hw_raw(~crc, buf, len);
	return ~crc_sw_raw(~crc, buf, len);
}
#else
uint32_t kern_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return ~crc_sw_raw(~crc, buf, len);
}
#endif
