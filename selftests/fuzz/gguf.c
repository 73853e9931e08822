// SPDX-License-Identifier: MIT
/*
 * gguf.c - fuzz the GGUF parser (header, metadata, tensor table, offsets)
 * on a file image; every tensor it accepts must lie inside the image and
 * every lookup helper must stay in it (ASan checks the reads).
 */
#include <stdlib.h>
#include <string.h>

#include "loader/gguf.h"

#define FUZZ_NAME "gguf"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ldr_gguf g = { .path = "fuzz.gguf", .fd = -1, .size = size };
	volatile uint8_t sink = 0;
	uint64_t i, v;
	char buf[64];
	uint8_t *img = malloc(size ? size : 1);

	if (!img)
		return 0;
	memcpy(img, data, size);
	g.base = img;
	if (!ldr_gguf_parse(&g)) {
		for (i = 0; i < g.n_tensors; i++) {
			const struct ldr_gguf_tensor *t = &g.t[i];

			sink ^= t->data[0] ^ t->data[t->nbytes - 1];
			sink ^= (uint8_t)t->name.p[t->name.len - 1];
		}
		for (i = 0; i < g.n_kv; i++)
			sink ^= (uint8_t)g.kv[i].key.p[g.kv[i].key.len - 1];
		if (!ldr_gguf_get_uint(&g, "general.alignment", ~0ull, &v))
			sink ^= (uint8_t)v;
		if (!ldr_gguf_get_str(&g, "general.architecture", buf,
				      sizeof(buf)))
			sink ^= (uint8_t)buf[0];
		ldr_gguf_get_uint(&g, "qwen3moe.expert_count", ~0ull, &v);
		ldr_gguf_tensor(&g, "blk.0.ffn_gate_exps.weight");
	}
	(void)sink;
	ldr_gguf_release(&g);
	free(img);
	return 0;
}
