// SPDX-License-Identifier: MIT
/*
 * safetensors.c - fuzz the safetensors validator (header length, JSON
 * header, dtypes, shapes, data_offsets, overlaps) on a file image; every
 * tensor it accepts must lie inside the image (ASan checks the reads).
 */
#include <stdlib.h>
#include <string.h>

#include "loader/safetensors.h"

#define FUZZ_NAME "safetensors"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ldr_st_file f = { .path = "fuzz.safetensors", .fd = -1,
				 .size = size };
	volatile uint8_t sink = 0;
	size_t i;

	f.map = malloc(size ? size : 1);
	if (!f.map)
		return 0;
	memcpy(f.map, data, size);
	if (!ldr_st_parse(&f)) {
		for (i = 0; i < f.n_tensors; i++) {
			const struct ldr_st_tensor *t = &f.tensors[i];

			if (t->len)
				sink ^= t->data[0] ^ t->data[t->len - 1];
			sink ^= (uint8_t)strlen(t->name);
		}
	}
	(void)sink;
	free(f.tensors);
	free(f.names);
	free(f.map);
	return 0;
}
