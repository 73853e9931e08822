// SPDX-License-Identifier: MIT
/*
 * npy.c - fuzz the .npy header parser of kt forward (tools/npy.c, built
 * into this harness: tools/ is not part of libkt). An accepted header
 * must lie inside the input and describe a shape whose size fits.
 */
#include <stdlib.h>

#include "tools/npy.c"

#define FUZZ_NAME "npy"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct npy a;
	char msg[256];
	uint64_t elems = 1;
	uint32_t i;
	int off;

	off = npy_parse(data, size, &a, msg, sizeof(msg));
	if (off < 0)
		return 0;
	if ((size_t)off > size || !a.esz || a.ndim > 4)
		abort();
	for (i = 0; i < a.ndim; i++)
		elems *= a.shape[i];
	if (elems * a.esz != a.bytes)
		abort();
	return 0;
}
