// SPDX-License-Identifier: MIT
/*
 * limits.c - kt_ctx_measure_read_bw() and kt_ctx_measure_peak(): the
 * kernels' measurement loops run on every worker, timed together.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kern.h"
#include "ktcore/core.h"
#include "ktcore/mem.h"

#define LIMITS_BW_BYTES		(1ull << 30)
#define LIMITS_BW_MS		500
#define LIMITS_PEAK_MS		300
/* Peak rounds between clock reads: long enough that reading the clock
 * costs nothing, short enough to stop near the deadline. */
#define LIMITS_PEAK_ITERS	(1u << 16)

/*
 * What the workers of one timed run add up: work done (bytes or
 * multiply-adds), the latest end, and a sink that keeps the loops' results
 * alive. The rate is work / (latest end - start).
 */
struct tally {
	uint64_t start_ns;
	uint64_t stop_ns;
	uint64_t work;
	uint64_t end_ns;
	uint64_t sink;
};

static void tally_add(struct tally *t, uint64_t work, uint64_t sink,
		      uint64_t now)
{
	uint64_t end = __atomic_load_n(&t->end_ns, __ATOMIC_RELAXED);

	__atomic_fetch_add(&t->work, work, __ATOMIC_RELAXED);
	__atomic_fetch_add(&t->sink, sink, __ATOMIC_RELAXED);
	while (end < now && !__atomic_compare_exchange_n(&t->end_ns, &end, now,
			false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* Run @fn on every worker until @ms from now, counting from zero. */
static void tally_run(struct kt_ctx *ctx, struct tally *t, core_job_fn fn,
		      void *job, uint32_t ms)
{
	t->work = 0;
	t->end_ns = 0;
	t->start_ns = core_now_ns();
	t->stop_ns = t->start_ns + (uint64_t)ms * 1000000ull;
	core_ctx_run(ctx, fn, job);
}

/* Work per nanosecond of the last run. */
static double tally_rate(const struct tally *t)
{
	return (double)t->work /
	       (double)(t->end_ns > t->start_ns ? t->end_ns - t->start_ns : 1);
}

struct bw_node {
	uint8_t *buf;
	size_t bytes;
};

struct bw_job {
	struct bw_node node[KT_MAX_NODES];
	kern_read_fn read;
	struct tally t;		/* work: bytes read */
	int fill;		/* first pass: write the pages (first touch) */
	uint32_t ms;
};

/* A worker's share of its node's buffer, in whole KiB. */
static void bw_share(const struct bw_job *j, const struct core_worker_info *w,
		     uint8_t **p, size_t *len)
{
	size_t kib = j->node[w->node_idx].bytes >> 10;
	size_t lo = kib * w->id / w->n_node;
	size_t hi = kib * (w->id + 1) / w->n_node;

	*p = j->node[w->node_idx].buf + (lo << 10);
	*len = (hi - lo) << 10;
}

static void bw_worker(void *arg, const struct core_worker_info *w)
{
	struct bw_job *j = arg;
	uint64_t done = 0, sink = 0, now;
	uint8_t *p;
	size_t len;

	bw_share(j, w, &p, &len);
	if (j->fill) {
		/* non-zero data on pages this worker owns: reading untouched
		 * anonymous memory would read the shared zero page */
		memset(p, 0x5a, len);
		return;
	}
	if (!len)
		return;
	do {
		sink += j->read(p, len);
		done += len;
		now = core_now_ns();
	} while (now < j->t.stop_ns);
	tally_add(&j->t, done, sink, now);
}

static int bw_exec_fn(struct kt_ctx *ctx, void *arg)
{
	struct bw_job *j = arg;

	j->fill = 1;
	core_ctx_run(ctx, bw_worker, j);
	j->fill = 0;
	/* one untimed pass warms the TLB and the page tables */
	tally_run(ctx, &j->t, bw_worker, j, 0);
	tally_run(ctx, &j->t, bw_worker, j, j->ms);
	return 0;
}

KT_EXPORT int kt_ctx_measure_read_bw(struct kt_ctx *ctx, size_t bytes,
				     uint32_t ms, double *gbps)
{
	unsigned int n_nodes = core_ctx_nodes(ctx), threads = 0, i;
	struct bw_job *j;
	int ret = 0;

	if (!gbps)
		return -EINVAL;
	if (!bytes)
		bytes = LIMITS_BW_BYTES;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->read = kern_read_for(kt_ctx_isa(ctx));
	j->ms = ms ? ms : LIMITS_BW_MS;
	for (i = 0; i < n_nodes; i++)
		threads += core_ctx_node_threads(ctx, i);
	for (i = 0; i < n_nodes; i++) {
		size_t nb = bytes / threads * core_ctx_node_threads(ctx, i);

		nb = (nb + 4095) & ~(size_t)4095;
		j->node[i].bytes = nb;
		j->node[i].buf = core_node_alloc(ctx, core_ctx_node_id(ctx, i), nb);
		if (!j->node[i].buf) {
			ret = -ENOMEM;
			goto free_bufs;
		}
	}
	ret = core_ctx_exec(ctx, bw_exec_fn, j);
	if (!ret)
		*gbps = tally_rate(&j->t);
free_bufs:
	for (i = 0; i < n_nodes; i++)
		if (j->node[i].buf)
			core_node_free(j->node[i].buf, j->node[i].bytes);
	free(j);
	return ret;
}

struct peak_job {
	kern_peak_fn fn;
	struct tally t;		/* work: multiply-adds */
	uint32_t ms;
};

static void peak_worker(void *arg, const struct core_worker_info *w)
{
	struct peak_job *j = arg;
	uint64_t macs = 0, sink = 0, now;

	do {
		macs += j->fn(LIMITS_PEAK_ITERS, &sink);
		now = core_now_ns();
	} while (now < j->t.stop_ns);
	tally_add(&j->t, macs, sink, now);
}

static int peak_exec_fn(struct kt_ctx *ctx, void *arg)
{
	struct peak_job *j = arg;

	/* a short untimed run lifts the clocks and, for AMX, the power
	 * license, as the timed run will see them */
	tally_run(ctx, &j->t, peak_worker, j, 20);
	tally_run(ctx, &j->t, peak_worker, j, j->ms);
	return 0;
}

KT_EXPORT int kt_ctx_measure_peak(struct kt_ctx *ctx, enum kt_quant q,
				  uint32_t ms, double *tops)
{
	struct peak_job j = { .ms = ms ? ms : LIMITS_PEAK_MS };
	int ret;

	if (!tops || (q != KT_QUANT_INT8 && q != KT_QUANT_INT4 &&
		      q != KT_QUANT_BF16 && q != KT_QUANT_FP8))
		return -EINVAL;
	j.fn = kern_peak_for(kt_ctx_isa(ctx), q);
	ret = core_ctx_exec(ctx, peak_exec_fn, &j);
	if (ret)
		return ret;
	/* 2 ops per multiply-add; per ns is G, / 1e3 is T */
	*tops = 2.0 * tally_rate(&j.t) / 1e3;
	return 0;
}
