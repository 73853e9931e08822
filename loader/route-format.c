// SPDX-License-Identifier: MIT
/*
 * route-format.c - the check of a routing statistics file (route-format.h):
 * size, magic, version, geometry and CRC32C, before a counter is copied.
 */
#include <errno.h>
#include <string.h>

#include "kernels/crc32c.h"
#include "loader/error.h"
#include "loader/route-format.h"

int ldr_route_parse(const char *name, const void *buf, size_t len,
		    uint64_t file_size, uint32_t nl, uint32_t ne,
		    uint64_t *counts)
{
	const uint8_t *b = buf;
	uint64_t n = (uint64_t)nl * ne, want = ldr_route_file_size(n);
	struct ldr_route_hdr h;
	uint32_t tail[2];

	if (len < LDR_ROUTE_HDR || file_size < LDR_ROUTE_HDR)
		return ldr_err(-EINVAL, "%s: not a routing statistics file (too small)",
			       name);
	memcpy(&h, b, sizeof(h));
	if (memcmp(h.magic, LDR_ROUTE_MAGIC, 8))
		return ldr_err(-EINVAL, "%s: bad magic (not a routing statistics file)",
			       name);
	if (h.major != LDR_ROUTE_MAJOR || h.header_size != LDR_ROUTE_HDR ||
	    h.reserved)
		return ldr_err(-EINVAL, "%s: version %u.%u, header %u bytes: not supported",
			       name, h.major, h.minor, h.header_size);
	/* the caller's geometry bounds everything read below */
	if (h.n_layers != nl || h.n_experts != ne)
		return ldr_err(-EINVAL, "%s: %u layers x %u experts, the model has %u x %u",
			       name, h.n_layers, h.n_experts, nl, ne);
	if (file_size != want || len != want)
		return ldr_err(-EINVAL, "%s: %llu bytes, expected %llu", name,
			       (unsigned long long)file_size,
			       (unsigned long long)want);
	memcpy(tail, b + LDR_ROUTE_HDR + n * 8, sizeof(tail));
	if (tail[0] != kern_crc32c(kern_crc32c(0, b, LDR_ROUTE_HDR),
				   b + LDR_ROUTE_HDR, n * 8) || tail[1])
		return ldr_err(-EINVAL, "%s: checksum mismatch", name);
	memcpy(counts, b + LDR_ROUTE_HDR, n * 8);
	return 0;
}
