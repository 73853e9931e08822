// SPDX-License-Identifier: MIT
/*
 * bench-nop.c - `kt bench --op nop`: the submit -> completion round trip of
 * an op that does nothing, which is the ring's and the workers' overhead,
 * one at a time (latency) and in full-ring batches (throughput).
 */
#include <errno.h>
#include <stdlib.h>

#include "tools/bench.h"
#include "tools/stats.h"

#define NOP_WARMUP	1000
#define NOP_MIN_ITERS	1000
#define NOP_MAX_ITERS	200000
#define NOP_RING	64

static int nop_once(struct kt_ring *ring, uint64_t tag)
{
	struct kt_sqe *sqe = kt_get_sqe(ring);
	struct kt_cqe *cqe;
	int ret;

	if (!sqe)
		return -EAGAIN;
	kt_prep_nop(sqe, tag);
	kt_submit(ring);
	ret = kt_wait_cqe(ring, &cqe);
	if (ret)
		return ret;
	ret = cqe->res;
	kt_cqe_seen(ring);
	return ret < 0 ? ret : 0;
}

/* Fill the SQ, publish once, reap every completion. */
static int nop_batch(struct kt_ring *ring, uint32_t n)
{
	struct kt_cqe *cqe;
	uint32_t i;
	int ret = 0;

	for (i = 0; i < n; i++) {
		struct kt_sqe *sqe = kt_get_sqe(ring);

		if (!sqe)
			return -EAGAIN;
		kt_prep_nop(sqe, i);
	}
	kt_submit(ring);
	for (i = 0; i < n; i++) {
		int r = kt_wait_cqe(ring, &cqe);

		if (r)
			return r;
		if (cqe->res < 0 && !ret)
			ret = cqe->res;
		kt_cqe_seen(ring);
	}
	return ret;
}

/**
 * bench_nop_run() - time NOP round trips on a ring of @ctx.
 * @ctx: context.
 * @cfg: --iters (0: about --min-time) and --warmup.
 * @res: filled.
 * Return: 0; -ENOMEM; or the ring's error.
 */
int bench_nop_run(struct kt_ctx *ctx, const struct bench_cfg *cfg,
		  struct bench_nop *res)
{
	struct kt_ring ring;
	uint32_t cap = cfg->iters ? cfg->iters : NOP_MAX_ITERS;
	uint32_t i, n = 0, batches = 0;
	uint64_t start, t;
	double *samples;
	int ret;

	samples = malloc(cap * sizeof(*samples));
	if (!samples)
		return -ENOMEM;
	ret = kt_ring_init(ctx, NOP_RING, &ring);
	if (ret)
		goto free_samples;
	/* only the leader serves a NOP: polling fits unless asked not to */
	res->sleeps = cfg->wait == BENCH_WAIT_SLEEP;
	/* either mode is explicit: the ring's default depends on the CPUs */
	kt_ring_set_spin(&ring, res->sleeps ? 0 : UINT32_MAX);
	for (i = 0; i < NOP_WARMUP; i++) {
		ret = nop_once(&ring, i);
		if (ret)
			goto exit_ring;
	}
	start = stats_now_ns();
	while (n < cap) {
		uint64_t t0, t1;

		if (!cfg->iters && n >= NOP_MIN_ITERS &&
		    stats_now_ns() - start >= cfg->min_ms * 1000000ull)
			break;
		t0 = stats_now_ns();
		ret = nop_once(&ring, n);
		t1 = stats_now_ns();
		if (ret)
			goto exit_ring;
		samples[n++] = (double)(t1 - t0) * 1e-3;
	}
	stats_sort(samples, n);
	res->iters = n;
	res->median_us = stats_quantile(samples, n, 0.5);
	res->p90_us = stats_quantile(samples, n, 0.9);
	res->p99_us = stats_quantile(samples, n, 0.99);
	res->min_us = samples[0];

	/* throughput: as many full-ring batches as round trips above */
	res->batch = NOP_RING;
	start = stats_now_ns();
	do {
		ret = nop_batch(&ring, NOP_RING);
		if (ret)
			goto exit_ring;
		batches++;
		t = stats_now_ns() - start;
	} while ((uint64_t)batches * NOP_RING < n);
	res->batch_mops = (double)batches * NOP_RING / ((double)t * 1e-9) *
			  1e-6;

exit_ring:
	kt_ring_exit(&ring);
free_samples:
	free(samples);
	return ret;
}
