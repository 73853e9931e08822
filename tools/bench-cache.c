// SPDX-License-Identifier: MIT
/*
 * bench-cache.c - `kt bench --write-model FILE` writes a synthetic preset
 * to disk; `kt bench --model FILE --budget SIZE` runs decode and prefill
 * on it through the expert cache (or `--load mmap`, page faults reading),
 * with uniform or zipf routing. Documentation/cache.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <kt/kt.h>

#include "tools/bench.h"
#include "tools/opts.h"

struct bc_cfg {
	const char *preset;
	enum kt_quant quant;
	uint32_t layers;
	const char *write_model;
	uint32_t distinct;
	const char *model;
	uint64_t budget;
	double budget_frac;	/* --budget 25%: of the model */
	double zipf;		/* 0: uniform */
	bool mmap;
	uint32_t prefetch;
	uint32_t halflife;	/* ops; 0: the library's default */
	bool lru;
	uint32_t tokens[8];
	unsigned int n_tokens;
	uint32_t seconds;
	uint32_t warm_seconds;
	uint32_t threads;
	uint64_t seed;
	uint32_t top_k;
	uint32_t hidden, inter, experts;	/* override the preset */
};

static const char *const usage_text =
"usage: kt bench --preset NAME --method M --layers N --write-model FILE.ktw\n"
"       kt bench --model FILE.ktw [--budget SIZE|PCT%] [--routing R] ...\n"
"  --distinct N       experts packed from distinct weights when writing (64)\n"
"  --budget SIZE      memory for experts: bytes (K/M/G) or a share (25%)\n"
"  --routing R        uniform or zipf:S (default zipf:1.0)\n"
"  --load HOW         cache (default) or mmap (page faults read the file)\n"
"  --prefetch N       read layer L+1's N likeliest experts during layer L\n"
"  --policy P         lfu (frequency with ageing, default) or lru\n"
"  --halflife N       lfu ageing, in ops (default: 64 x layers)\n"
"  -T, --tokens LIST  tokens per op (default 1,128: decode and prefill)\n"
"  --seconds S        timed run per case (default 10)\n"
"  --warmup S         untimed run first, to fill the cache (default 5)\n"
"  --topk K           experts per token (default: the file's, else 8)\n"
"  --hidden H, --inter I, --experts E   override the preset when writing\n";

bool bench_cache_wanted(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--write-model") ||
		    !strcmp(argv[i], "--model") ||
		    !strncmp(argv[i], "--write-model=", 14) ||
		    !strncmp(argv[i], "--model=", 8))
			return true;
	return false;
}

enum {
	O_WRITE = 300, O_MODEL, O_BUDGET, O_ROUTING, O_LOAD, O_PREFETCH,
	O_POLICY, O_SECONDS, O_WARM, O_DISTINCT, O_LAYERS, O_SEED, O_TOPK,
	O_HIDDEN, O_INTER, O_EXPERTS, O_HALFLIFE,
};

static const struct option bc_opts[] = {
	{ "preset", required_argument, NULL, 'p' },
	{ "method", required_argument, NULL, 'm' },
	{ "layers", required_argument, NULL, O_LAYERS },
	{ "write-model", required_argument, NULL, O_WRITE },
	{ "distinct", required_argument, NULL, O_DISTINCT },
	{ "model", required_argument, NULL, O_MODEL },
	{ "budget", required_argument, NULL, O_BUDGET },
	{ "routing", required_argument, NULL, O_ROUTING },
	{ "load", required_argument, NULL, O_LOAD },
	{ "prefetch", required_argument, NULL, O_PREFETCH },
	{ "policy", required_argument, NULL, O_POLICY },
	{ "halflife", required_argument, NULL, O_HALFLIFE },
	{ "tokens", required_argument, NULL, 'T' },
	{ "seconds", required_argument, NULL, O_SECONDS },
	{ "warmup", required_argument, NULL, O_WARM },
	{ "threads", required_argument, NULL, 't' },
	{ "seed", required_argument, NULL, O_SEED },
	{ "topk", required_argument, NULL, O_TOPK },
	{ "hidden", required_argument, NULL, O_HIDDEN },
	{ "inter", required_argument, NULL, O_INTER },
	{ "experts", required_argument, NULL, O_EXPERTS },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int bc_parse(int argc, char **argv, struct bc_cfg *c)
{
	int opt;

	memset(c, 0, sizeof(*c));
	c->preset = "qwen3-30b-a3b";
	c->quant = KT_QUANT_INT8;
	c->distinct = 64;
	c->zipf = 1.0;
	c->tokens[0] = 1;
	c->tokens[1] = 128;
	c->n_tokens = 2;
	c->seconds = 10;
	c->warm_seconds = 5;
	c->seed = 1;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "p:m:T:t:h", bc_opts, NULL)) != -1) {
		char *end;

		switch (opt) {
		case 'p': c->preset = optarg; break;
		case 'm':
			if (opt_quant(optarg, &c->quant))
				goto bad;
			break;
		case O_LAYERS:
			if (opt_u32(optarg, 1, 4096, &c->layers))
				goto bad;
			break;
		case O_WRITE: c->write_model = optarg; break;
		case O_DISTINCT:
			if (opt_u32(optarg, 0, 1u << 22, &c->distinct))
				goto bad;
			break;
		case O_MODEL: c->model = optarg; break;
		case O_BUDGET:
			if (optarg[strlen(optarg) - 1] == '%') {
				c->budget_frac = strtod(optarg, &end) / 100.0;
				if (*end != '%' || c->budget_frac <= 0)
					goto bad;
			} else if (opt_size(optarg, &c->budget)) {
				goto bad;
			}
			break;
		case O_ROUTING:
			if (!strcmp(optarg, "uniform"))
				c->zipf = 0;
			else if (!strncmp(optarg, "zipf:", 5))
				c->zipf = strtod(optarg + 5, NULL);
			else
				goto bad;
			break;
		case O_LOAD:
			if (strcmp(optarg, "cache") && strcmp(optarg, "mmap"))
				goto bad;
			c->mmap = !strcmp(optarg, "mmap");
			break;
		case O_PREFETCH:
			if (opt_u32(optarg, 0, 65536, &c->prefetch))
				goto bad;
			break;
		case O_POLICY:
			if (strcmp(optarg, "lfu") && strcmp(optarg, "lru"))
				goto bad;
			c->lru = !strcmp(optarg, "lru");
			break;
		case O_HALFLIFE:
			if (opt_u32(optarg, 1, UINT32_MAX, &c->halflife))
				goto bad;
			break;
		case 'T':
			if (opt_u32_list(optarg, 1, 8192, c->tokens, 8) <= 0)
				goto bad;
			c->n_tokens = (unsigned int)opt_u32_list(optarg, 1, 8192,
								  c->tokens, 8);
			break;
		case O_SECONDS:
			if (opt_u32(optarg, 1, 3600, &c->seconds))
				goto bad;
			break;
		case O_WARM:
			if (opt_u32(optarg, 0, 3600, &c->warm_seconds))
				goto bad;
			break;
		case 't':
			if (opt_u32(optarg, 1, 4096, &c->threads))
				goto bad;
			break;
		case O_SEED:
			if (opt_u64(optarg, &c->seed))
				goto bad;
			break;
		case O_TOPK:
			if (opt_u32(optarg, 1, KT_MOE_MAX_TOPK, &c->top_k))
				goto bad;
			break;
		case O_HIDDEN:
		case O_INTER:
			if (opt_u32(optarg, 128, 1u << 20, opt == O_HIDDEN ?
				    &c->hidden : &c->inter))
				goto bad;
			break;
		case O_EXPERTS:
			if (opt_u32(optarg, 1, 65536, &c->experts))
				goto bad;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 1;
		default:
			goto bad;
		}
	}
	return 0;
bad:
	fprintf(stderr, "kt bench: bad option or value%s%s\n",
		optarg ? ": " : "", optarg ? optarg : "");
	fputs(usage_text, stderr);
	return -EINVAL;
}

static void progress(void *arg, uint64_t done, uint64_t total)
{
	static int last = -1;
	int pct = (int)(done * 100 / total);

	if (pct != last)
		fprintf(stderr, "\rwriting: %d%%", pct);
	last = pct;
}

/* A GGUF file (by its magic) or a checkpoint folder: no .ktw header. */
static bool is_other_model(const char *path)
{
	struct stat st;
	char magic[4];
	FILE *f;
	bool gguf;

	if (stat(path, &st))
		return false;
	if (S_ISDIR(st.st_mode))
		return true;
	f = fopen(path, "rb");
	if (!f)
		return false;
	gguf = fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
	fclose(f);
	return gguf;
}

static int write_model(const struct bc_cfg *c)
{
	const struct bench_preset *p = NULL;
	struct kt_ktw_synth o = { .sz = sizeof(o) };
	unsigned int i;
	int ret;

	for (i = 0; i < bench_n_presets; i++)
		if (!strcmp(bench_presets[i].name, c->preset))
			p = &bench_presets[i];
	if (!p) {
		fprintf(stderr, "kt bench: unknown preset '%s'\n", c->preset);
		return 2;
	}
	if (p->act != KT_ACT_SILU || p->bias) {
		fprintf(stderr, "kt bench: --write-model writes silu experts without biases; %s's are not\n",
			p->name);
		return 2;
	}
	o.path = c->write_model;
	o.quant = c->quant;
	o.hidden = p->hidden;
	o.inter = p->inter;
	o.n_experts = p->experts;
	o.n_layers = c->layers ? c->layers : 4;
	o.top_k = c->top_k ? c->top_k : p->top_k;
	if (c->hidden)
		o.hidden = c->hidden;
	if (c->inter)
		o.inter = c->inter;
	if (c->experts)
		o.n_experts = c->experts;
	o.seed = c->seed;
	o.distinct = c->distinct;
	if (isatty(2))
		o.progress = progress;
	ret = kt_ktw_write_synth(&o);
	if (o.progress)
		fprintf(stderr, "\n");
	if (ret) {
		fprintf(stderr, "kt bench: %s\n", kt_last_error());
		return 1;
	}
	printf("wrote %s: %s %s, %u layers x %u experts\n", c->write_model,
	       p->name, kt_quant_name(c->quant), o.n_layers, o.n_experts);
	return 0;
}

/* ---- routing ---- */

struct router {
	uint32_t E, k, L;
	double *cdf;		/* [E] over ranks */
	uint32_t *perm;		/* [L][E] rank -> expert, per layer */
	uint64_t s;
};

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int router_init(struct router *r, uint32_t E, uint32_t k, uint32_t L,
		       double zipf, uint64_t seed)
{
	uint32_t i, l;
	double sum = 0;

	r->E = E;
	r->k = k;
	r->L = L;
	r->s = seed * 2654435761u + 7;
	r->cdf = malloc(E * sizeof(*r->cdf));
	r->perm = malloc((size_t)L * E * sizeof(*r->perm));
	if (!r->cdf || !r->perm)
		return -ENOMEM;
	for (i = 0; i < E; i++) {
		sum += 1.0 / pow(i + 1.0, zipf);
		r->cdf[i] = sum;
	}
	for (i = 0; i < E; i++)
		r->cdf[i] /= sum;
	/* each layer has its own hot experts */
	for (l = 0; l < L; l++) {
		uint32_t *p = r->perm + (size_t)l * E;

		for (i = 0; i < E; i++)
			p[i] = i;
		for (i = E - 1; i > 0; i--) {
			uint32_t j = (uint32_t)(rng(&r->s) % (i + 1)), t = p[i];

			p[i] = p[j];
			p[j] = t;
		}
	}
	return 0;
}

static void route(struct router *r, uint32_t layer, uint32_t T, int32_t *ids,
		  float *w)
{
	uint32_t t, j, q;

	for (t = 0; t < T; t++) {
		for (j = 0; j < r->k; j++) {
			int32_t e;

			do {
				double u = (double)(rng(&r->s) >> 11) /
					   (double)(1ull << 53);
				uint32_t lo = 0, hi = r->E - 1;

				while (lo < hi) {
					uint32_t mid = (lo + hi) / 2;

					if (r->cdf[mid] < u)
						lo = mid + 1;
					else
						hi = mid;
				}
				e = (int32_t)r->perm[(size_t)layer * r->E + lo];
				for (q = 0; q < j; q++)
					if (ids[t * r->k + q] == e)
						break;
			} while (q < j);
			ids[t * r->k + j] = e;
			w[t * r->k + j] = 1.0f / (float)r->k;
		}
	}
}

/* Bytes this process made the block layer read (page faults included). */
static uint64_t proc_read_bytes(void)
{
	unsigned long long v = 0;
	char line[128];
	FILE *f = fopen("/proc/self/io", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "read_bytes: %llu", &v) == 1)
			break;
	fclose(f);
	return v;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One pass over every layer for @T tokens: what a decode step does. */
static int step(struct kt_ctx *ctx, struct kt_model *m, struct router *r,
		uint32_t T, float *x, float *y, int32_t *ids, float *w)
{
	struct kt_moe_args a = {
		.x = x, .ids = ids, .w = w, .y = y, .tokens = T,
		.top_k = r->k, .x_dtype = KT_DTYPE_F32,
		.ids_dtype = KT_DTYPE_I32, .y_dtype = KT_DTYPE_F32,
	};
	uint32_t l;
	int ret;

	for (l = 0; l < r->L; l++) {
		route(r, l, T, ids, w);
		a.layer = l;
		ret = kt_moe_forward(ctx, m, &a);
		if (ret)
			return ret;
	}
	return 0;
}

static void drop_cache(const char *path)
{
	int fd = open(path, O_RDONLY);

	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

static int run_model(const struct bc_cfg *c)
{
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = c->threads };
	struct kt_model_opts mo = { .sz = sizeof(mo) };
	struct kt_ktw_info ki;
	struct kt_model_info mi;
	struct kt_ctx *ctx = NULL;
	struct kt_model *m = NULL;
	struct router r = { 0 };
	float *x = NULL, *y = NULL, *w = NULL;
	int32_t *ids = NULL;
	uint64_t model_bytes;
	char routing[32];
	uint32_t tmax = 0, k;
	unsigned int i;
	int ret;

	/* a GGUF file or a checkpoint folder is read whole at open */
	memset(&ki, 0, sizeof(ki));
	if (kt_ktw_inspect(c->model, &ki, NULL, 0) && !is_other_model(c->model)) {
		fprintf(stderr, "kt bench: %s\n", kt_last_error());
		return 1;
	}
	if (!ki.n_layers && (c->budget_frac || c->budget || c->mmap)) {
		fprintf(stderr, "kt bench: %s: --budget and --mmap need a .ktw (kt convert makes one)\n",
			c->model);
		return 1;
	}
	model_bytes = (uint64_t)ki.n_layers * ki.n_experts *
		      ((ki.expert_bytes + 4095) / 4096 * 4096);
	mo.budget = c->budget_frac ? (uint64_t)(c->budget_frac * model_bytes) :
		    c->budget;
	mo.flags = c->mmap ? KT_MODEL_F_MMAP : 0;
	mo.cache_flags = c->lru ? KT_CACHE_F_LRU : 0;
	mo.prefetch_next = c->prefetch;
	mo.halflife = c->halflife;
	k = c->top_k ? c->top_k : ki.top_k ? ki.top_k : 8;
	drop_cache(c->model);	/* both modes start cold */
	ret = kt_ctx_create(&co, &ctx);
	if (ret) {
		fprintf(stderr, "kt bench: context: %s\n", strerror(-ret));
		return 1;
	}
	ret = kt_model_open(ctx, c->model, &mo, &m);
	if (ret) {
		fprintf(stderr, "kt bench: %s\n", kt_last_error());
		ret = 1;
		goto out;
	}
	kt_model_get_info(m, &mi);
	if (!model_bytes)
		model_bytes = mi.resident_bytes;
	if (k > mi.n_experts)
		k = mi.n_experts;
	for (i = 0; i < c->n_tokens; i++)
		if (c->tokens[i] > tmax)
			tmax = c->tokens[i];
	x = malloc(sizeof(float) * tmax * mi.hidden);
	y = malloc(sizeof(float) * tmax * mi.hidden);
	ids = malloc(sizeof(int32_t) * tmax * k);
	w = malloc(sizeof(float) * tmax * k);
	if (!x || !y || !ids || !w ||
	    router_init(&r, mi.n_experts, k, mi.n_layers, c->zipf, c->seed)) {
		ret = 1;
		goto out;
	}
	for (i = 0; i < tmax * mi.hidden; i++)
		x[i] = (float)((int)(rng(&r.s) % 2001) - 1000) / 1000.0f;
	if (c->zipf)
		snprintf(routing, sizeof(routing), "zipf:%.2f", c->zipf);
	else
		snprintf(routing, sizeof(routing), "uniform");
	printf("model %s: %u layers x %u experts, %.2f GiB; load %s, budget %.2f GiB (%.0f%%), routing %s, top-%u, prefetch %u, policy %s, half-life %u ops\n",
	       c->model, mi.n_layers, mi.n_experts, model_bytes / 1073741824.0,
	       c->mmap ? "mmap" : "cache", mi.resident_bytes / 1073741824.0,
	       100.0 * mi.resident_bytes / model_bytes, routing, k,
	       c->prefetch, c->lru ? "lru" : "lfu",
	       c->halflife ? c->halflife : 64 * mi.n_layers);
	for (i = 0; i < c->n_tokens; i++) {
		uint32_t T = c->tokens[i];
		struct kt_cache_stats st;
		double t0, t1;
		uint64_t steps = 0, rb0;

		t0 = now_s();
		while (now_s() - t0 < c->warm_seconds) {
			ret = step(ctx, m, &r, T, x, y, ids, w);
			if (ret)
				break;
		}
		kt_model_cache_stats(m, &st, true);
		rb0 = proc_read_bytes();
		t0 = now_s();
		while (!ret && (t1 = now_s()) - t0 < c->seconds) {
			ret = step(ctx, m, &r, T, x, y, ids, w);
			steps++;
		}
		t1 = now_s();
		if (ret) {
			fprintf(stderr, "kt bench: op failed: %s\n", strerror(-ret));
			ret = 1;
			goto out;
		}
		kt_model_cache_stats(m, &st, true);
		if (c->mmap) {
			/* no cache counters: what the page faults read */
			st.bytes_read = proc_read_bytes() - rb0;
			st.hits = st.misses = 0;
		}
		{
			double tokens = (double)steps * T, wall = t1 - t0;
			double hit = st.hits + st.misses ?
				(double)st.hits / (st.hits + st.misses) : 1.0;
			char hs[16] = "    -";	/* mmap: no counters */

			if (!c->mmap)
				snprintf(hs, sizeof(hs), "%5.1f%%", 100 * hit);
			printf("%s T=%-4u tokens/s %9.2f  steps %llu  hit %s  read/token %8.2f MiB  disk %7.1f MB/s (busy %5.1f%%, %.1f MB/s while busy)  io-wait %5.1f%%  prefetch-hits %llu\n",
			       c->mmap ? "mmap " : "cache", T, tokens / wall,
			       (unsigned long long)steps, hs,
			       tokens ? st.bytes_read / tokens / 1048576.0 : 0,
			       st.bytes_read / wall / 1e6,
			       100.0 * st.io_ns / (wall * 1e9),
			       st.io_ns ? st.bytes_read * 1e3 / st.io_ns : 0.0,
			       st.op_ns ? 100.0 * st.io_wait_ns / st.op_ns : 0.0,
			       (unsigned long long)st.prefetch_hits);
		}
	}
	ret = 0;
out:
	free(r.cdf);
	free(r.perm);
	free(x);
	free(y);
	free(ids);
	free(w);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	return ret;
}

int bench_cache_main(int argc, char **argv)
{
	struct bc_cfg c;
	int ret = bc_parse(argc, argv, &c);

	if (ret > 0)
		return 0;
	if (ret)
		return 2;
	if (c.write_model)
		return write_model(&c);
	return run_model(&c);
}
