// SPDX-License-Identifier: MIT
/*
 * bench-plan.c - how much model kt bench builds: the packed size of an
 * expert, and the number of layers rotated so that weights come from
 * DRAM, refused up front when even one layer cannot fit in memory.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tools/bench.h"
#include "tools/opts.h"
#include "tools/sys.h"

/**
 * bench_expert_bytes() - packed bytes of one expert, as laid out in
 *	Documentation/packed-layout.md; used to plan memory before the model
 *	exists (the report uses kt_model_get_info()).
 * @hidden: H.
 * @inter: I.
 * @q: quantization.
 * @group_size: INT4 group along K (0: 128).
 * Return: bytes; 0 for an unknown @q.
 */
uint64_t bench_expert_bytes(uint32_t hidden, uint32_t inter,
			    enum kt_quant q, uint32_t group_size)
{
	uint64_t nk = (uint64_t)hidden * inter;
	uint64_t g = group_size ? group_size : 128;

	/* the K-quants' and Q8_0's bytes are the same for each matrix */
	if (bench_method_down(q) != bench_method_quant(q))
		return bench_expert_bytes(hidden, inter,
					  bench_method_quant(q), 0) / 3 * 2 +
		       bench_expert_bytes(hidden, inter,
					  bench_method_down(q), 0) / 3;
	switch (q) {
	case KT_QUANT_INT8:
		/* three matrices of N*K bytes; one f32 scale per output row */
		return 3 * nk + 4 * (2 * (uint64_t)inter + hidden);
	case KT_QUANT_INT4:
		/* gate/up: (H/G)*I scales each, down: (I/G)*H */
		return 3 * nk / 2 + 4 * 3 * nk / g;
	case KT_QUANT_BF16:
		return 3 * 2 * nk;
	case KT_QUANT_FP8:
		/* one byte per weight; one f32 per 128x128 block */
		return 3 * nk + 4 * 3 * nk / (128 * 128);
	case KT_QUANT_Q8_0:
		/* int8 tiles; one f32 scale per 32 weights */
		return 3 * nk + 4 * 3 * nk / 32;
	case KT_QUANT_Q4_K:
		/* nibbles; per 256 two f32, per 32 two u8 */
		return 3 * nk / 2 + 3 * (8 * nk / 256 + 2 * nk / 32);
	case KT_QUANT_Q5_K:
		/* Q4_K and one more bit per weight */
		return 3 * nk * 5 / 8 + 3 * (8 * nk / 256 + 2 * nk / 32);
	case KT_QUANT_Q6_K:
		/* 6 bits; per 256 one f32, per 16 one i8 */
		return 3 * nk * 3 / 4 + 3 * (4 * nk / 256 + nk / 16);
	case KT_QUANT_MXFP4:
		/* nibbles; one E8M0 byte per 32 */
		return 3 * nk / 2 + 3 * nk / 32;
	}
	return 0;
}

/**
 * bench_plan_layers() - how many layers to rotate.
 *
 * Enough distinct weights (BENCH_ROTATE_L3 x L3) that a layer's experts
 * have left the cache when it comes round again, and at least two layers
 * so that consecutive calls never run the same layer (two routings of one
 * layer share experts: a fifth of them at 4 tokens of qwen3-30b-a3b);
 * capped by memory. Messages go to stderr.
 * @c: configuration (--layers, --mem-limit, dimensions).
 * @q: the method, for messages.
 * @expert_bytes: packed bytes of one expert.
 * @layers: the count.
 * Return: 0; -ENOMEM when one layer (or the --layers asked) cannot fit.
 */
int bench_plan_layers(const struct bench_cfg *c, enum kt_quant q,
		      uint64_t expert_bytes, uint32_t *layers)
{
	uint64_t layer_bytes = expert_bytes * c->experts;
	struct synth_cfg sc = {
		.hidden = c->hidden, .inter = c->inter, .dtype = c->src_dtype,
	};
	uint64_t avail = c->mem_limit ? c->mem_limit : sys_mem_available();
	uint64_t need_extra = synth_buffer_bytes(&sc) + BENCH_MEM_RESERVE;
	uint64_t room, fit, want;

	room = avail > need_extra ? avail - need_extra : 0;
	fit = room / layer_bytes;
	if (!fit) {
		fprintf(stderr,
			"kt bench: %s %s needs %.2f GiB for one layer of %u experts (%.1f MiB each) plus %.2f GiB of buffers, but %.2f GiB is %s; try fewer --experts, --method int4, or a smaller preset\n",
			c->preset, bench_method_name(q),
			(double)layer_bytes / (1u << 30), c->experts,
			(double)expert_bytes / (1u << 20),
			(double)need_extra / (1u << 30),
			(double)avail / (1u << 30),
			c->mem_limit ? "the --mem-limit" : "available");
		return -ENOMEM;
	}
	if (c->layers) {
		want = c->layers;
	} else {
		want = (BENCH_ROTATE_L3 * sys_l3_bytes() + layer_bytes - 1) /
		       layer_bytes;
		if (want < BENCH_MIN_LAYERS)
			want = BENCH_MIN_LAYERS;
		if (want > BENCH_MAX_LAYERS)
			want = BENCH_MAX_LAYERS;
	}
	if (want > fit) {
		if (c->layers) {
			fprintf(stderr,
				"kt bench: %u layers of %s %s take %.2f GiB, only %llu fit in %.2f GiB\n",
				c->layers, c->preset, bench_method_name(q),
				(double)(layer_bytes * c->layers) / (1u << 30),
				(unsigned long long)fit,
				(double)avail / (1u << 30));
			return -ENOMEM;
		}
		fprintf(stderr,
			"kt bench: note: only %llu layer%s of %s %s fit%s; weights may partly come from cache\n",
			(unsigned long long)fit, fit == 1 ? "" : "s", c->preset,
			bench_method_name(q), fit == 1 ? "s" : "");
		want = fit;
	}
	*layers = (uint32_t)want;
	return 0;
}

int bench_method_parse(const char *s, enum kt_quant *out)
{
	if (s && !strcmp(s, "q4_k_m")) {
		*out = BENCH_Q4_K_M;
		return 0;
	}
	if (s && !strcmp(s, "q5_k_m")) {
		*out = BENCH_Q5_K_M;
		return 0;
	}
	return opt_quant(s, out);
}

enum kt_quant bench_method_quant(enum kt_quant m)
{
	return m == BENCH_Q4_K_M ? KT_QUANT_Q4_K :
	       m == BENCH_Q5_K_M ? KT_QUANT_Q5_K : m;
}

enum kt_quant bench_method_down(enum kt_quant m)
{
	return m == BENCH_Q4_K_M || m == BENCH_Q5_K_M ? KT_QUANT_Q6_K : m;
}

const char *bench_method_name(enum kt_quant m)
{
	return m == BENCH_Q4_K_M ? "q4_k_m" : m == BENCH_Q5_K_M ? "q5_k_m" :
	       kt_quant_name(m);
}
