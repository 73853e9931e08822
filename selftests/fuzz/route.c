// SPDX-License-Identifier: MIT
/*
 * route.c - fuzz the routing statistics file check (loader/route-format.c).
 * The first two bytes pick the caller's geometry (1-8 layers, 1-64
 * experts), the rest is the file. An accepted file must be exactly the
 * size its geometry gives, and its counters must be what it holds.
 */
#include <stdlib.h>
#include <string.h>

#include "loader/route-format.h"

#define FUZZ_NAME "route"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t counts[8 * 64];
	uint32_t nl, ne;

	if (size < 2)
		return 0;
	nl = 1 + data[0] % 8;
	ne = 1 + data[1] % 64;
	if (ldr_route_parse("fuzz", data + 2, size - 2, size - 2, nl, ne,
			    counts))
		return 0;
	if (size - 2 != ldr_route_file_size((uint64_t)nl * ne) ||
	    memcmp(counts, data + 2 + LDR_ROUTE_HDR, 8ull * nl * ne))
		abort();
	return 0;
}
