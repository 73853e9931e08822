// SPDX-License-Identifier: MIT
/*
 * ggml-bench.c - llama.cpp's ggml on one MoE layer, for scripts/ggml-bench.sh
 * to put next to `kt bench` on the same GGUF file: `write` makes the file
 * with ggml's quantizers and gguf writer, `run` times ggml's own CPU graph
 * of build_moe_ffn (selftests/ggml/ggml-dl.h). Not part of the library.
 *
 *   ggml-bench write FILE TYPE[/DOWN] [-L layers] [--hidden H --inter I
 *                    --experts E --topk K]        (default Qwen3-30B-A3B)
 *   ggml-bench run FILE [-T 1,512] [-t 2] [--min-time MS] [--seed N]
 *                  [--no-threadpool]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "selftests/ggml/ggml-dl.h"

static int type_of(const char *s)
{
	static const struct { const char *n; int t; } tab[] = {
		{ "q8_0", GG_Q8_0 }, { "q4_0", GG_Q4_0 }, { "q4_k", GG_Q4_K },
		{ "q5_k", GG_Q5_K }, { "q6_k", GG_Q6_K }, { "bf16", GG_BF16 },
		{ "f16", GG_F16 },
	};
	unsigned int i;

	for (i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
		if (!strcasecmp(s, tab[i].n))
			return tab[i].t;
	return -1;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * The file, as gg_write_moe() but with DISTINCT random experts per matrix
 * repeated over all E experts of every layer: quantizing 100M-element
 * layers with ggml's reference quantizers would take minutes, and the
 * timing depends on the bytes, not on which values they hold.
 */
#define DISTINCT 8

static int write_file(const struct gg *g, const struct gg_moe_cfg *c,
		      const char *path)
{
	static const char *const mat[3] = { "gate", "up", "down" };
	size_t per = (size_t)c->H * c->I, mem = (1 << 20);
	struct gg_init_params ip;
	struct ggml_context *ctx;
	struct gguf_context *gf = g->gguf_init_empty();
	float *src = malloc(per * sizeof(float));
	uint8_t *pool[3] = { NULL, NULL, NULL };
	uint64_t s = c->seed * 0x9e3779b97f4a7c15ull + 1;
	uint32_t l, m, e;
	size_t i, eb[3];
	int ret = -EIO;

	for (m = 0; m < 3; m++) {
		int type = m == 2 ? c->type_down : c->type;

		eb[m] = g->row_size(type, m == 2 ? c->I : c->H) *
			(m == 2 ? c->H : c->I);
		mem += c->L * (g->tensor_overhead() + eb[m] * c->E + 64);
	}
	ip = (struct gg_init_params){ mem, NULL, false };
	ctx = g->init(ip);
	if (!ctx || !gf || !src)
		goto out;
	for (m = 0; m < 3; m++) {
		int type = m == 2 ? c->type_down : c->type;
		int64_t K = m == 2 ? c->I : c->H, N = m == 2 ? c->H : c->I;

		pool[m] = malloc(eb[m] * DISTINCT);
		if (!pool[m])
			goto out;
		for (e = 0; e < DISTINCT; e++) {
			for (i = 0; i < per; i++)
				src[i] = gg_uniform(&s);
			g->quantize_chunk(type, src, pool[m] + eb[m] * e, 0,
					  N, K, NULL);
		}
	}
	g->gguf_set_val_str(gf, "general.architecture", "qwen3moe");
	g->gguf_set_val_str(gf, "general.name", "kt ggml-bench");
	g->gguf_set_val_u32(gf, "qwen3moe.block_count", c->L);
	g->gguf_set_val_u32(gf, "qwen3moe.embedding_length", c->H);
	g->gguf_set_val_u32(gf, "qwen3moe.expert_feed_forward_length", c->I);
	g->gguf_set_val_u32(gf, "qwen3moe.expert_count", c->E);
	g->gguf_set_val_u32(gf, "qwen3moe.expert_used_count", c->k);
	for (l = 0; l < c->L; l++)
		for (m = 0; m < 3; m++) {
			int type = m == 2 ? c->type_down : c->type;
			int64_t K = m == 2 ? c->I : c->H;
			int64_t N = m == 2 ? c->H : c->I;
			struct ggml_tensor *t;
			char name[64];

			t = g->new_tensor_3d(ctx, type, K, N, c->E);
			if (!t)
				goto out;
			snprintf(name, sizeof(name), "blk.%u.ffn_%s_exps.weight",
				 l, mat[m]);
			g->set_name(t, name);
			for (e = 0; e < c->E; e++)
				memcpy((uint8_t *)g->get_data(t) + eb[m] * e,
				       pool[m] + eb[m] * ((e + l) % DISTINCT),
				       eb[m]);
			g->gguf_add_tensor(gf, t);
		}
	if (g->gguf_write_to_file(gf, path, false))
		ret = 0;
out:
	for (m = 0; m < 3; m++)
		free(pool[m]);
	free(src);
	if (gf)
		g->gguf_free(gf);
	if (ctx)
		g->free(ctx);
	return ret;
}

/* uniform routing: k distinct experts per token, weights 1/k (kt bench's) */
static void route(int32_t *ids, float *w, uint32_t T, uint32_t k, uint32_t E,
		  uint64_t *s)
{
	uint32_t t, j, q;

	for (t = 0; t < T; t++)
		for (j = 0; j < k; j++) {
			int32_t e;

			do {
				e = (int32_t)(gg_rand(s) % E);
				for (q = 0; q < j; q++)
					if (ids[t * k + q] == e)
						break;
			} while (q < j);
			ids[t * k + j] = e;
			w[t * k + j] = 1.0f / (float)k;
		}
}

static int run(const struct gg *g, const char *path, const uint32_t *Ts,
	       unsigned int nT, int threads, bool pool, double min_ms,
	       uint64_t seed)
{
	struct ggml_context *wctx = NULL, *ctx = NULL;
	struct gg_gguf_init_params gp = { false, &wctx };
	struct gguf_context *gf;
	struct ggml_backend *be;
	struct ggml_threadpool *tp = NULL;
	struct ggml_tensor *gt;
	uint32_t H, I, E, k, L = 0;
	uint64_t s = seed * 2654435761u + 7;
	unsigned int n;
	double t0 = now_ms();

	gf = g->gguf_init_from_file(path, gp);
	if (!gf) {
		fprintf(stderr, "ggml-bench: cannot read %s\n", path);
		return 1;
	}
	{
		static const char *const key[4] = {
			"qwen3moe.embedding_length",
			"qwen3moe.expert_feed_forward_length",
			"qwen3moe.expert_count", "qwen3moe.expert_used_count",
		};
		uint32_t *val[4] = { &H, &I, &E, &k };
		unsigned int i;

		for (i = 0; i < 4; i++) {
			int64_t id = g->gguf_find_key(gf, key[i]);

			if (id < 0) {
				fprintf(stderr, "ggml-bench: %s has no %s\n",
					path, key[i]);
				return 1;
			}
			*val[i] = g->gguf_get_val_u32(gf, id);
		}
	}
	while (1) {
		char name[64];

		snprintf(name, sizeof(name), "blk.%u.ffn_gate_exps.weight", L);
		if (!g->get_tensor(wctx, name))
			break;
		L++;
	}
	gt = g->get_tensor(wctx, "blk.0.ffn_gate_exps.weight");
	if (!L || !gt) {
		fprintf(stderr, "ggml-bench: no MoE layers in %s\n", path);
		return 1;
	}
	be = g->backend_cpu_init();
	g->backend_cpu_set_n_threads(be, threads);
	/* a threadpool that lives across calls, as llama-cli and llama-bench
	 * attach one (without, each compute starts and joins its threads) */
	if (pool) {
		union gg_threadpool_params tpp;

		g->threadpool_params_init(&tpp, threads);
		tp = g->threadpool_new(&tpp);
		if (!tp) {
			fprintf(stderr, "ggml-bench: no threadpool\n");
			return 1;
		}
		g->backend_cpu_set_threadpool(be, tp);
	}
	printf("ggml %s (%s) cpu %s: %s, %u layers, H %u I %u E %u k %u, "
	       "%d threads%s, loaded in %.0f ms\n", g->version(), g->commit(),
	       g->cpu_name, path, L, H, I, E, k, threads,
	       tp ? " (threadpool)" : "", now_ms() - t0);
	for (n = 0; n < nT; n++) {
		uint32_t T = Ts[n], l;
		size_t mem = (size_t)L * (16 * (size_t)(H + I) * k * T * 4 +
					  64 * g->tensor_overhead()) +
			     (size_t)L * g->graph_overhead_custom(64, false) +
			     ((size_t)T * (H + 2 * k) * 4) + (16u << 20);
		struct gg_init_params ip = { mem, NULL, false };
		struct ggml_cgraph **graph = calloc(L, sizeof(*graph));
		struct ggml_tensor *x, *ids, *w;
		double *ms;
		unsigned int it = 0, cap = 64, warm;

		ctx = g->init(ip);
		ms = malloc(cap * sizeof(*ms));
		if (!ctx || !graph || !ms)
			return 1;
		x = g->new_tensor_2d(ctx, GG_F32, H, T);
		ids = g->new_tensor_2d(ctx, GG_I32, k, T);
		w = g->new_tensor_2d(ctx, GG_F32, k, T);
		for (l = 0; l < H * T; l++)
			((float *)g->get_data(x))[l] =
				(float)((int)(gg_rand(&s) % 2001) - 1000) / 1000.0f;
		/* one graph per layer, built once */
		for (l = 0; l < L; l++) {
			struct ggml_tensor *m[3];
			static const char *const nm[3] = { "gate", "up",
							   "down" };
			unsigned int i;

			for (i = 0; i < 3; i++) {
				char name[64];

				snprintf(name, sizeof(name),
					 "blk.%u.ffn_%s_exps.weight", l, nm[i]);
				m[i] = g->get_tensor(wctx, name);
			}
			graph[l] = g->new_graph_custom(ctx, 64, false);
			g->build_forward_expand(graph[l],
				gg_moe_layer(g, ctx, m[0], m[1], m[2], x, ids,
					     w, H, k, T));
		}
		/* layers in rotation, new routing each call (untimed) */
		t0 = now_ms();
		for (warm = 0; warm < 2 || it < 3 || now_ms() - t0 < min_ms;) {
			double a;

			route(g->get_data(ids), g->get_data(w), T, k, E, &s);
			a = now_ms();
			if (g->backend_graph_compute(be, graph[(warm + it) % L])) {
				fprintf(stderr, "ggml-bench: compute failed\n");
				return 1;
			}
			a = now_ms() - a;
			if (warm < 2) {
				warm++;
				t0 = now_ms();
				continue;
			}
			if (it == cap) {
				cap *= 2;
				ms = realloc(ms, cap * sizeof(*ms));
				if (!ms)
					return 1;
			}
			ms[it++] = a;
		}
		qsort(ms, it, sizeof(*ms), cmp_d);
		printf("ggml T=%-4u median %9.3f ms/layer  (min %.3f, %u calls)\n",
		       T, ms[it / 2], ms[0], it);
		free(ms);
		free(graph);
		g->free(ctx);
	}
	g->backend_free(be);
	if (tp)
		g->threadpool_free(tp);
	g->free(wctx);
	g->gguf_free(gf);
	return 0;
}

static int parse_list(const char *s, uint32_t *out, unsigned int max)
{
	unsigned int n = 0;
	char *end;

	while (*s && n < max) {
		unsigned long v = strtoul(s, &end, 10);

		if (end == s || !v || v > 65536)
			return -1;
		out[n++] = (uint32_t)v;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return (int)n;
}

static int usage(void)
{
	fprintf(stderr,
		"usage: ggml-bench write FILE TYPE[/DOWN] [-L N] [--hidden H]"
		" [--inter I] [--experts E] [--topk K]\n"
		"       ggml-bench run FILE [-T 1,512] [-t 2] [--min-time MS]"
		" [--seed N] [--no-threadpool]\n"
		"  TYPE: q8_0 q4_0 q4_k q5_k q6_k bf16 f16; q4_k/q6_k is Q4_K_M\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct gg g;
	char why[512];
	int i;

	if (argc < 3)
		return usage();
	if (gg_open(&g, why, sizeof(why))) {
		fprintf(stderr, "ggml-bench: %s\n", why);
		return 1;
	}
	if (!strcmp(argv[1], "write")) {
		struct gg_moe_cfg c = { .H = 2048, .I = 768, .E = 128, .k = 8,
					.L = 4, .seed = 1 };
		char *slash;

		if (argc < 4)
			return usage();
		slash = strchr(argv[3], '/');
		if (slash)
			*slash++ = '\0';
		c.type = type_of(argv[3]);
		c.type_down = slash ? type_of(slash) : c.type;
		if (c.type < 0 || c.type_down < 0)
			return usage();
		for (i = 4; i + 1 < argc; i += 2) {
			uint32_t v = (uint32_t)strtoul(argv[i + 1], NULL, 10);

			if (!strcmp(argv[i], "-L"))
				c.L = v;
			else if (!strcmp(argv[i], "--hidden"))
				c.H = v;
			else if (!strcmp(argv[i], "--inter"))
				c.I = v;
			else if (!strcmp(argv[i], "--experts"))
				c.E = v;
			else if (!strcmp(argv[i], "--topk"))
				c.k = v;
			else
				return usage();
		}
		if (write_file(&g, &c, argv[2])) {
			fprintf(stderr, "ggml-bench: writing %s failed\n",
				argv[2]);
			return 1;
		}
		printf("ggml-bench: wrote %s: %s/%s, %u layers, H %u I %u E %u "
		       "k %u (gguf_write_to_file)\n", argv[2],
		       g.type_name(c.type), g.type_name(c.type_down), c.L,
		       c.H, c.I, c.E, c.k);
		return 0;
	}
	if (!strcmp(argv[1], "run")) {
		uint32_t Ts[16] = { 1, 512 };
		int nT = 2, threads = 2;
		double min_ms = 2000;
		uint64_t seed = 1;
		bool pool = true;

		for (i = 3; i < argc; i += 2) {
			if (!strcmp(argv[i], "--no-threadpool")) {
				pool = false;
				i--;
			} else if (i + 1 == argc) {
				return usage();
			} else if (!strcmp(argv[i], "-T"))
				nT = parse_list(argv[i + 1], Ts, 16);
			else if (!strcmp(argv[i], "-t"))
				threads = atoi(argv[i + 1]);
			else if (!strcmp(argv[i], "--min-time"))
				min_ms = atof(argv[i + 1]);
			else if (!strcmp(argv[i], "--seed"))
				seed = strtoull(argv[i + 1], NULL, 10);
			else
				return usage();
		}
		if (nT <= 0 || threads <= 0)
			return usage();
		return run(&g, argv[2], Ts, (unsigned int)nT, threads, pool,
			   min_ms, seed);
	}
	return usage();
}
