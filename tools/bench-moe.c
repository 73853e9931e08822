// SPDX-License-Identifier: MIT
/*
 * bench-moe.c - the timing loop of one MoE case: every call runs a
 * different layer (rotation, so weights come from DRAM) with a fresh
 * seeded routing drawn before the clock starts, uniform over the experts.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench.h"
#include "tools/stats.h"
#include "tools/sys.h"

/* A case ends once it has enough samples, or early when calls are slow. */
#define BENCH_MAX_SAMPLES	100000
#define BENCH_SLOW_MIN_ITERS	3

struct bench_moe {
	struct kt_ctx *ctx;
	struct kt_model *m;
	const struct bench_cfg *cfg;
	struct kt_model_info info;
	struct kt_ring ring;
	bool ring_ok;
	bool sleeps;
	uint64_t rng;
	uint32_t next_layer;
	uint64_t *seen;			/* bitmap of E: experts hit by a call */
	double *samples;
};

static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n) without modulo bias worth mentioning (n < 2^32). */
static inline uint32_t rng_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(((rng_next(s) >> 32) * (uint64_t)n) >> 32);
}

/**
 * bench_moe_create() - state for timing MoE cases of @m.
 * @ctx: context of @m.
 * @m: model.
 * @cfg: configuration; must outlive the result.
 * @out: receives the state.
 * Return: 0; -ENOMEM; or kt_ring_init()'s error.
 */
int bench_moe_create(struct kt_ctx *ctx, struct kt_model *m,
		     const struct bench_cfg *cfg, struct bench_moe **out)
{
	struct bench_moe *b;
	int ret;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->ctx = ctx;
	b->m = m;
	b->cfg = cfg;
	kt_model_get_info(m, &b->info);
	b->rng = cfg->seed * 0x9e3779b97f4a7c15ull + 0x1234567ull;
	if (!b->rng)
		b->rng = 1;
	b->seen = calloc((b->info.n_experts + 63) / 64, sizeof(uint64_t));
	b->samples = malloc(BENCH_MAX_SAMPLES * sizeof(double));
	if (!b->seen || !b->samples) {
		ret = -ENOMEM;
		goto free_b;
	}
	if (!cfg->use_forward) {
		ret = kt_ring_init(ctx, 8, &b->ring);
		if (ret)
			goto free_b;
		b->ring_ok = true;
		b->sleeps = bench_wait_sleeps(cfg, kt_ctx_threads(ctx));
		kt_ring_set_spin(&b->ring, b->sleeps ? 0 : UINT32_MAX);
	}
	*out = b;
	return 0;

free_b:
	free(b->samples);
	free(b->seen);
	free(b);
	return ret;
}

/**
 * bench_wait_sleeps() - whether the bench thread should sleep on the CQ
 *	rather than poll it.
 *
 * A polling submitter is one more busy thread: when the workers already
 * occupy every usable CPU it takes a core from one of them, which the
 * scheduler gives back only a time slice later (milliseconds). Sleeping
 * costs a futex wake per call (microseconds) instead.
 * @cfg: --wait.
 * @threads: workers of the context.
 * Return: true to sleep.
 */
bool bench_wait_sleeps(const struct bench_cfg *cfg, unsigned int threads)
{
	if (cfg->wait != BENCH_WAIT_AUTO)
		return cfg->wait == BENCH_WAIT_SLEEP;
	return threads + 1 > sys_cpus_usable();
}

/**
 * bench_moe_sleeps() - whether this bench's ring sleeps on the CQ.
 * @b: state.
 * Return: true when kt_wait_cqe() does not poll.
 */
bool bench_moe_sleeps(const struct bench_moe *b)
{
	return b->sleeps;
}

/**
 * bench_moe_destroy() - release the state and its ring.
 * @b: state, may be NULL.
 */
void bench_moe_destroy(struct bench_moe *b)
{
	if (!b)
		return;
	if (b->ring_ok)
		kt_ring_exit(&b->ring);
	free(b->samples);
	free(b->seen);
	free(b);
}

/*
 * A router's output: k distinct experts per token, uniform over E, and
 * weights that sum to 1 as after a top-k softmax. Returns the number of
 * distinct experts the call touches.
 */
static uint32_t draw_routing(struct bench_moe *b, int32_t *ids, float *w,
			     uint32_t tokens)
{
	uint32_t e_count = b->info.n_experts, k = b->cfg->top_k;
	uint32_t t, j, i, distinct = 0;

	memset(b->seen, 0, (e_count + 63) / 64 * sizeof(uint64_t));
	for (t = 0; t < tokens; t++) {
		int32_t *row = ids + (size_t)t * k;
		float *wr = w + (size_t)t * k, sum = 0;

		for (j = 0; j < k; j++) {
			uint32_t e;

			/* rejection keeps the k ids of a token distinct */
			for (;;) {
				e = rng_below(&b->rng, e_count);
				for (i = 0; i < j && (uint32_t)row[i] != e; i++)
					;
				if (i == j)
					break;
			}
			row[j] = (int32_t)e;
			wr[j] = 0.05f + (float)(rng_next(&b->rng) >> 40) *
				(1.0f / 16777216.0f);
			sum += wr[j];
			if (!(b->seen[e / 64] & (1ull << (e % 64)))) {
				b->seen[e / 64] |= 1ull << (e % 64);
				distinct++;
			}
		}
		for (j = 0; j < k; j++)
			wr[j] /= sum;
	}
	return distinct;
}

static int submit_one(struct bench_moe *b, const struct kt_moe_args *args,
		      uint64_t tag)
{
	struct kt_sqe *sqe;
	struct kt_cqe *cqe;
	int ret;

	if (b->cfg->use_forward)
		return kt_moe_forward(b->ctx, b->m, args);
	sqe = kt_get_sqe(&b->ring);
	if (!sqe)
		return -EAGAIN;	/* one op in flight at a time: cannot be full */
	kt_prep_moe(sqe, b->m, args->layer, args, tag);
	kt_submit(&b->ring);
	ret = kt_wait_cqe(&b->ring, &cqe);
	if (ret)
		return ret;
	ret = cqe->res;
	kt_cqe_seen(&b->ring);
	return ret < 0 ? ret : 0;
}

/*
 * One call on the next layer of the rotation with a fresh routing, drawn
 * into @ids and @w (which @args points at) before the clock starts. @us gets the submit -> completion
 * time, @distinct the experts the routing touches.
 */
static int timed_call(struct bench_moe *b, struct kt_moe_args *args,
		      int32_t *ids, float *w, double *us, uint32_t *distinct)
{
	uint64_t t0, t1;
	int ret;

	*distinct = draw_routing(b, ids, w, args->tokens);
	args->layer = b->next_layer;
	b->next_layer = (b->next_layer + 1) % b->info.n_layers;
	t0 = stats_now_ns();
	ret = submit_one(b, args, args->layer);
	t1 = stats_now_ns();
	*us = (double)(t1 - t0) * 1e-3;
	return ret;
}

static bool case_done(const struct bench_cfg *cfg, uint32_t n,
		      uint64_t elapsed_ns)
{
	uint64_t ms = elapsed_ns / 1000000;

	if (cfg->iters)
		return n >= cfg->iters;
	if (n >= BENCH_MAX_SAMPLES)
		return true;
	if (n >= cfg->min_iters && ms >= cfg->min_ms)
		return true;
	return n >= BENCH_SLOW_MIN_ITERS && ms >= cfg->max_ms;
}

/**
 * bench_moe_run() - time one case: warm-up calls, then calls until
 *	case_done(), each on the next layer with a fresh routing.
 * @b: state.
 * @tokens: T of every call.
 * @l: limits for the roofline ratio.
 * @res: filled.
 * Return: 0; -ENOMEM; or the error of a failed op.
 */
int bench_moe_run(struct bench_moe *b, uint32_t tokens,
		  const struct bench_limits *l, struct bench_case *res)
{
	const struct bench_cfg *cfg = b->cfg;
	size_t xy = (size_t)tokens * b->info.hidden;
	size_t esz = cfg->io_dtype == KT_DTYPE_BF16 ? 2 : 4;
	uint32_t k = cfg->top_k, n = 0, i, distinct;
	uint64_t start, distinct_sum = 0;
	struct kt_moe_args args;
	void *x, *y;
	int32_t *ids;
	float *w;
	double s, us, peak, t_mem, t_cmp;
	int ret = -ENOMEM;

	x = malloc(xy * esz);
	y = malloc(xy * esz);
	ids = malloc((size_t)tokens * k * sizeof(*ids));
	w = malloc((size_t)tokens * k * sizeof(*w));
	if (!x || !y || !ids || !w)
		goto free_bufs;
	/* hidden states of unit variance, as after a norm layer */
	if (esz == 2)
		synth_fill_bf16(x, xy, cfg->seed ^ tokens, 1.0f);
	else
		synth_fill_f32(x, xy, cfg->seed ^ tokens, 1.0f);

	memset(&args, 0, sizeof(args));
	args.x = x;
	args.ids = ids;
	args.w = w;
	args.y = y;
	args.tokens = tokens;
	args.top_k = k;
	args.x_dtype = (uint8_t)cfg->io_dtype;
	args.y_dtype = (uint8_t)cfg->io_dtype;
	args.ids_dtype = KT_DTYPE_I32;

	for (i = 0; i < cfg->warmup; i++) {
		ret = timed_call(b, &args, ids, w, &us, &distinct);
		if (ret)
			goto free_bufs;
	}
	start = stats_now_ns();
	do {
		ret = timed_call(b, &args, ids, w, &us, &distinct);
		if (ret)
			goto free_bufs;
		b->samples[n++] = us;
		distinct_sum += distinct;
	} while (!case_done(cfg, n, stats_now_ns() - start));

	stats_sort(b->samples, n);
	memset(res, 0, sizeof(*res));
	res->tokens = tokens;
	res->iters = n;
	res->median_us = stats_quantile(b->samples, n, 0.5);
	res->p90_us = stats_quantile(b->samples, n, 0.9);
	res->p99_us = stats_quantile(b->samples, n, 0.99);
	res->min_us = b->samples[0];
	res->experts_touched = (double)distinct_sum / n;
	res->bytes = (uint64_t)(res->experts_touched *
				(double)b->info.expert_bytes + 0.5);
	/* gate, up and down: one multiply-add (2 ops) per weight per slot */
	res->ops = 2ull * 3 * b->info.hidden * b->info.inter *
		   (uint64_t)tokens * k;
	s = res->median_us * 1e-6;
	res->gbps = (double)res->bytes / s * 1e-9;
	res->tops = (double)res->ops / s * 1e-12;
	peak = bench_limits_peak(l, b->info.quant);
	t_mem = (double)res->bytes / (l->read_gbps * 1e9);
	t_cmp = (double)res->ops / (peak * 1e12);
	res->compute_bound = t_cmp > t_mem;
	res->roofline_us = (res->compute_bound ? t_cmp : t_mem) * 1e6;
	res->roofline = res->roofline_us / res->median_us;
	ret = 0;

free_bufs:
	free(w);
	free(ids);
	free(y);
	free(x);
	return ret;
}
