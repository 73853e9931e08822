// SPDX-License-Identifier: MIT
/*
 * bench-gpu.c - `kt bench --gpu`: the GPU's measured limits (pinned copies,
 * HBM read, dense bf16 mma), then GPU-only and mixed CPU+GPU MoE ops at
 * a few token counts, each against those limits.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kt/kt.h>

#include "tools/bench.h"

#define GPU_BENCH_MAX_T	8

struct gcfg {
	uint32_t hidden, inter, experts, top_k;
	enum kt_quant methods[3];
	unsigned int n_methods;
	uint32_t tokens[GPU_BENCH_MAX_T];
	unsigned int n_tokens;
	uint32_t min_ms;
	int device;
};

struct gsrc {
	uint16_t *w;		/* one expert's gate, up, down in bf16 */
	uint32_t H, I;
};

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Every expert gets the same random matrices, shifted per expert. */
static int get_expert(void *arg, uint32_t layer, uint32_t e,
		      struct kt_expert_src *src)
{
	const struct gsrc *g = arg;
	size_t n = (size_t)g->H * g->I, off = (e * 977u) % 4096;

	src->gate = g->w + off;
	src->up = g->w + n + off;
	src->down = g->w + 2 * n + off;
	return 0;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Zipf(1.0) top-k without repeats: expert 0 hottest. */
static void route(uint64_t *s, uint32_t E, uint32_t k, uint32_t T,
		  int32_t *ids, float *w, bool zipf)
{
	double hsum = 0;
	uint32_t t, j, e;

	for (e = 1; e <= E; e++)
		hsum += 1.0 / e;
	for (t = 0; t < T; t++)
		for (j = 0; j < k; j++) {
			uint32_t pick;
			bool dup;

			do {
				if (zipf) {
					double u = (rng(s) >> 11) * 0x1p-53 *
						hsum, c = 0;

					for (pick = 0; pick < E - 1; pick++) {
						c += 1.0 / (pick + 1);
						if (c >= u)
							break;
					}
				} else {
					pick = (uint32_t)(rng(s) % E);
				}
				dup = false;
				for (e = 0; e < j; e++)
					dup |= ids[t * k + e] == (int32_t)pick;
			} while (dup);
			ids[t * k + j] = (int32_t)pick;
			w[t * k + j] = 1.0f / k;
		}
}

/* ms per op of @T tokens, averaged over at least @min_ms. */
static int time_op(struct kt_ctx *ctx, struct kt_model *m,
		   const struct gcfg *c, uint32_t T, bool zipf, double *ms,
		   uint32_t *distinct)
{
	size_t n = (size_t)T * c->hidden;
	uint16_t *x = calloc(n, 2), *y = calloc(n, 2);
	int32_t *ids = calloc((size_t)T * c->top_k, 4);
	float *w = calloc((size_t)T * c->top_k, 4);
	uint8_t *seen = calloc(c->experts, 1);
	uint64_t s = 12345;
	struct kt_moe_args a = {
		.x = x, .ids = ids, .w = w, .y = y, .tokens = T,
		.top_k = c->top_k, .x_dtype = KT_DTYPE_BF16,
		.ids_dtype = KT_DTYPE_I32, .y_dtype = KT_DTYPE_BF16,
	};
	double t0, t1;
	uint32_t iters = 0, i;
	int ret = -ENOMEM;

	if (!x || !y || !ids || !w || !seen)
		goto out;
	for (i = 0; i < n; i++)
		x[i] = 0x3f80 ^ (uint16_t)(i & 0x807f);
	route(&s, c->experts, c->top_k, T, ids, w, zipf);
	*distinct = 0;
	for (i = 0; i < T * c->top_k; i++)
		if (!seen[ids[i]]++)
			(*distinct)++;
	ret = kt_moe_forward(ctx, m, &a);	/* warm-up, staging growth */
	t0 = t1 = now_ms();
	while (!ret && (t1 - t0 < c->min_ms || iters < 5)) {
		ret = kt_moe_forward(ctx, m, &a);
		iters++;
		t1 = now_ms();
	}
	*ms = (t1 - t0) / (iters ? iters : 1);
out:
	free(x);
	free(y);
	free(ids);
	free(w);
	free(seen);
	return ret;
}

static int run_method(struct kt_ctx *ctx, const struct gcfg *c,
		      enum kt_quant q, const struct kt_gpu_limits *l)
{
	size_t n = (size_t)c->hidden * c->inter + 4096;
	struct gsrc g = { .H = c->hidden, .I = c->inter };
	struct kt_model_desc d = {
		.sz = sizeof(d), .hidden = c->hidden, .inter = c->inter,
		.n_experts = c->experts, .n_layers = 1,
		.src_dtype = KT_DTYPE_BF16, .quant = q, .group_size = 128,
		.get_expert = get_expert, .arg = &g,
	};
	struct kt_model_info mi;
	struct kt_model *m = NULL;
	uint64_t s = 7;
	unsigned int i;
	uint32_t e;
	int ret;

	g.w = malloc(3 * n * 2);
	if (!g.w)
		return -ENOMEM;
	for (i = 0; i < 3 * n; i++)
		g.w[i] = (uint16_t)(0x3c00 + (rng(&s) & 0x3ff)) ^
			 (uint16_t)(rng(&s) & 0x8000);
	ret = kt_model_create(ctx, &d, &m);
	if (ret)
		goto out;
	kt_model_get_info(m, &mi);
	for (e = 0; e < c->experts && !ret; e++)
		ret = kt_model_gpu_upload(m, 0, e);
	if (ret) {
		fprintf(stderr, "kt bench --gpu: upload: %s\n", strerror(-ret));
		goto out;
	}
	printf("%s: H %u, I %u, E %u, k %u, %.1f MiB per expert\n",
	       kt_quant_name(q), c->hidden, c->inter, c->experts, c->top_k,
	       mi.expert_bytes / 1048576.0);
	for (i = 0; i < c->n_tokens && !ret; i++) {
		uint32_t T = c->tokens[i], dist;
		double ms, gbps, tflops, roof;

		ret = time_op(ctx, m, c, T, false, &ms, &dist);
		if (ret)
			break;
		gbps = (double)dist * mi.expert_bytes / (ms * 1e6);
		tflops = 6.0 * c->hidden * c->inter * T * c->top_k /
			(ms * 1e9);
		/* the least time the op could take: its weights at the HBM
		 * rate or its products at the mma rate, whichever is longer */
		roof = fmax(gbps / l->hbm_gbps, tflops / l->bf16_tflops);
		printf("  gpu-only T=%-4u %8.3f ms  weights %7.1f GB/s (%.2f of HBM)  %7.2f TFLOPS (%.3f of bf16 mma)  roofline %.2f\n",
		       T, ms, gbps, gbps / l->hbm_gbps, tflops,
		       tflops / l->bf16_tflops, roof);
	}
	/* mixed: the hottest quarter on the GPU under zipf routing, against
	 * the same op on the CPU alone */
	for (e = c->experts / 4; e < c->experts && !ret; e++)
		ret = kt_model_gpu_evict(m, 0, e);
	for (i = 0; i < c->n_tokens && !ret; i++) {
		uint32_t T = c->tokens[i], dist;
		double ms_mixed, ms_cpu;

		ret = time_op(ctx, m, c, T, true, &ms_mixed, &dist);
		for (e = 0; e < c->experts / 4 && !ret; e++)
			ret = kt_model_gpu_evict(m, 0, e);
		if (!ret)
			ret = time_op(ctx, m, c, T, true, &ms_cpu, &dist);
		for (e = 0; e < c->experts / 4 && !ret; e++)
			ret = kt_model_gpu_upload(m, 0, e);
		if (!ret)
			printf("  mixed    T=%-4u %8.3f ms  cpu-only %8.3f ms  speedup %.2fx (zipf 1.0, hottest quarter on the GPU)\n",
			       T, ms_mixed, ms_cpu, ms_cpu / ms_mixed);
	}
out:
	if (ret)
		fprintf(stderr, "kt bench --gpu %s: %s\n", kt_quant_name(q),
			strerror(-ret));
	kt_model_destroy(m);
	free(g.w);
	return ret;
}

bool bench_gpu_wanted(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--gpu"))
			return true;
	return false;
}

static void gusage(FILE *f)
{
	fprintf(f,
		"usage: kt bench --gpu [-p PRESET] [-m int8,int4,bf16] [-T 1,32,512]\n"
		"                      [--device N] [--min-ms MS]\n"
		"  GPU limits (pinned H2D/D2H, HBM read, dense bf16 mma), then\n"
		"  GPU-only ops (every expert on the GPU) and mixed ops (the\n"
		"  hottest quarter on the GPU, zipf routing) against CPU-only.\n");
}

int bench_gpu_main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "gpu", no_argument, NULL, 'G' },
		{ "preset", required_argument, NULL, 'p' },
		{ "method", required_argument, NULL, 'm' },
		{ "tokens", required_argument, NULL, 'T' },
		{ "device", required_argument, NULL, 'd' },
		{ "min-ms", required_argument, NULL, 'M' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct gcfg c = {
		.methods = { KT_QUANT_INT8, KT_QUANT_BF16, KT_QUANT_INT4 },
		.n_methods = 3, .tokens = { 1, 32, 512 }, .n_tokens = 3,
		.min_ms = 300,
	};
	const char *preset = "qwen3-30b-a3b";
	struct kt_ctx_opts o = { .sz = sizeof(o) };
	struct kt_gpu_limits l;
	struct kt_gpu_info gi;
	struct kt_ctx *ctx;
	unsigned int i;
	int opt, ret, failed = 0;
	char *tok, *save;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "p:m:T:h", lo, NULL)) != -1) {
		switch (opt) {
		case 'G':
			break;
		case 'p':
			preset = optarg;
			break;
		case 'm':
			c.n_methods = 0;
			for (tok = strtok_r(optarg, ",", &save); tok && c.n_methods < 3;
			     tok = strtok_r(NULL, ",", &save)) {
				if (!strcmp(tok, "int8"))
					c.methods[c.n_methods++] = KT_QUANT_INT8;
				else if (!strcmp(tok, "int4"))
					c.methods[c.n_methods++] = KT_QUANT_INT4;
				else if (!strcmp(tok, "bf16"))
					c.methods[c.n_methods++] = KT_QUANT_BF16;
				else
					goto bad;
			}
			break;
		case 'T':
			c.n_tokens = 0;
			for (tok = strtok_r(optarg, ",", &save);
			     tok && c.n_tokens < GPU_BENCH_MAX_T;
			     tok = strtok_r(NULL, ",", &save)) {
				long v = strtol(tok, NULL, 10);

				if (v < 1 || v > KT_MOE_MAX_TOKENS)
					goto bad;
				c.tokens[c.n_tokens++] = (uint32_t)v;
			}
			break;
		case 'd':
			c.device = atoi(optarg);
			if (c.device < 0 || c.device > 63)
				goto bad;
			break;
		case 'M':
			c.min_ms = (uint32_t)atoi(optarg);
			break;
		case 'h':
			gusage(stdout);
			return 0;
		default:
			goto bad;
		}
	}
	for (i = 0; i < bench_n_presets; i++)
		if (!strcmp(bench_presets[i].name, preset))
			break;
	if (i == bench_n_presets)
		goto bad;
	c.hidden = bench_presets[i].hidden;
	c.inter = bench_presets[i].inter;
	c.experts = bench_presets[i].experts;
	c.top_k = bench_presets[i].top_k;
	o.gpu_mask = 1ull << c.device;
	ret = kt_ctx_create(&o, &ctx);
	if (ret) {
		struct kt_sysinfo si;

		kt_sysinfo_get(&si);
		fprintf(stderr, "kt bench --gpu: no GPU: %s (%s)\n",
			strerror(-ret), si.cuda_why[0] ? si.cuda_why :
			"see the log above");
		return 1;
	}
	kt_ctx_gpu_info(ctx, &gi);
	printf("gpu %d: %s, sm_%d%d, %u SMs, %.1f GiB; cpu: %s, %u workers\n",
	       gi.ordinal, gi.name, gi.cc_major, gi.cc_minor, gi.sms,
	       gi.total_mem / 1073741824.0, kt_isa_name(kt_ctx_isa(ctx)),
	       kt_ctx_threads(ctx));
	ret = kt_ctx_gpu_measure(ctx, &l);
	if (ret) {
		fprintf(stderr, "kt bench --gpu: %s%s%s\n", strerror(-ret),
			gi.kernels ? "" : ": ", gi.kernels ? "" : gi.why);
		kt_ctx_destroy(ctx);
		return 1;
	}
	printf("limits: H2D %.1f GB/s, D2H %.1f GB/s (pinned, 256 MiB), HBM read %.0f GB/s, bf16 mma %.1f TFLOPS\n",
	       l.h2d_gbps, l.d2h_gbps, l.hbm_gbps, l.bf16_tflops);
	for (i = 0; i < c.n_methods; i++)
		if (run_method(ctx, &c, c.methods[i], &l))
			failed = 1;
	kt_ctx_destroy(ctx);
	return failed;
bad:
	gusage(stderr);
	return 2;
}
