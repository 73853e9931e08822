/* SPDX-License-Identifier: MIT */
/*
 * crc32c.h - CRC32C (Castagnoli), the checksum of .ktw blobs: the SSE4.2
 * crc32 instruction when the CPU has it, a table otherwise.
 */
#ifndef KT_KERNELS_CRC32C_H
#define KT_KERNELS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/*
 * Continue a CRC32C over @len bytes at @buf. Start with @crc = 0; the value
 * returned is the finished CRC (pre/post inversion are done inside), so
 * kern_crc32c(kern_crc32c(0, a, n), b, m) == kern_crc32c(0, a||b, n + m).
 */
uint32_t kern_crc32c(uint32_t crc, const void *buf, size_t len);

/* The portable table version, always built; the oracle for the tests. */
uint32_t kern_crc32c_sw(uint32_t crc, const void *buf, size_t len);

#endif /* KT_KERNELS_CRC32C_H */
