/* SPDX-License-Identifier: MIT */
/*
 * crc-ref.h - bitwise CRC32C for the tests: independent of the library's
 * table and SSE4.2 code, so it can check them and reseal edited files.
 */
#ifndef KT_SELFTESTS_LOADER_CRC_REF_H
#define KT_SELFTESTS_LOADER_CRC_REF_H

#include <stddef.h>
#include <stdint.h>

static inline uint32_t crc32c_bits(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	int k;

	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
	}
	return ~crc;
}

#endif /* KT_SELFTESTS_LOADER_CRC_REF_H */
