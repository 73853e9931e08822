// SPDX-License-Identifier: MIT
/*
 * limits.c - the machine's limits as kt's kernels see them: STREAM-like
 * read bandwidth and register-resident compute peak, on every worker.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ktcore/core.h"
#include "kernels/simd.h"

#define LIMITS_BW_BYTES		(1ull << 30)
#define LIMITS_BW_MS		500
#define LIMITS_PEAK_MS		300
/* Peak rounds between clock reads: long enough that reading the clock
 * costs nothing, short enough to stop near the deadline. */
#define LIMITS_PEAK_ITERS	(1u << 16)

/* Four streams of 8-byte loads; the compiler may widen them. */
uint64_t kern_read_scalar(const void *p, size_t bytes)
{
	const uint64_t *q = p;
	size_t n = bytes / 32, i;
	uint64_t a = 0, b = 0, c = 0, d = 0;

	for (i = 0; i < n; i++) {
		a ^= q[i];
		b ^= q[n + i];
		c ^= q[2 * n + i];
		d ^= q[3 * n + i];
	}
	return a ^ b ^ c ^ d;
}

/* The empty asm hides the loop invariance of the products from the
 * compiler, so every multiply-add is executed. */
uint64_t kern_peak_int8_scalar(uint64_t iters, uint64_t *sink)
{
	/* unsigned: the sums wrap by design, which signed types may not */
	uint32_t a0 = 1, a1 = 2, a2 = 3, a3 = 4, x = 3, y = 5;
	uint64_t i;

	for (i = 0; i < iters; i++) {
		__asm__ volatile("" : "+r"(x), "+r"(y));
		a0 += x * y;
		a1 += x * a0;
		a2 += y * x;
		a3 += y * y;
	}
	*sink += (uint64_t)(a0 ^ a1 ^ a2 ^ a3);
	return iters * 4;
}

uint64_t kern_peak_bf16_scalar(uint64_t iters, uint64_t *sink)
{
	float a0 = 0, a1 = 0, a2 = 0, a3 = 0, x = 1.0001f, y = 0.9999f;
	uint64_t i;

	for (i = 0; i < iters; i++) {
		__asm__ volatile("" : "+x"(x), "+x"(y));
		a0 += x * y;
		a1 += x * x;
		a2 += y * x;
		a3 += y * y;
	}
	*sink += (uint64_t)(a0 + a1 + a2 + a3);
	return iters * 4;
}

typedef uint64_t (*read_fn)(const void *p, size_t bytes);
typedef uint64_t (*peak_fn)(uint64_t iters, uint64_t *sink);

struct bw_node {
	uint8_t *buf;
	size_t bytes;
};

struct bw_job {
	struct bw_node node[KT_MAX_NODES];
	read_fn read;
	uint64_t start_ns;
	uint64_t stop_ns;
	uint64_t bytes;		/* summed over workers, atomically */
	uint64_t end_ns;	/* latest end over workers */
	uint64_t sink;
	int fill;		/* first pass: write the pages (first touch) */
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
	} while (now < j->stop_ns);
	__atomic_fetch_add(&j->bytes, done, __ATOMIC_RELAXED);
	__atomic_fetch_add(&j->sink, sink, __ATOMIC_RELAXED);
	uint64_t end = __atomic_load_n(&j->end_ns, __ATOMIC_RELAXED);
	while (end < now && !__atomic_compare_exchange_n(&j->end_ns, &end, now,
			false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

struct bw_exec {
	struct bw_job *job;
	uint32_t ms;
};

static int bw_exec_fn(struct kt_ctx *ctx, void *arg)
{
	struct bw_exec *e = arg;
	struct bw_job *j = e->job;

	j->fill = 1;
	core_ctx_run(ctx, bw_worker, j);
	j->fill = 0;
	/* one untimed pass warms the TLB and the page tables */
	j->start_ns = core_now_ns();
	j->stop_ns = j->start_ns;
	core_ctx_run(ctx, bw_worker, j);
	j->bytes = 0;
	j->end_ns = 0;
	j->start_ns = core_now_ns();
	j->stop_ns = j->start_ns + (uint64_t)e->ms * 1000000ull;
	core_ctx_run(ctx, bw_worker, j);
	return 0;
}

static read_fn pick_read(enum kt_isa isa)
{
	switch (isa) {
	case KT_ISA_AMX:
	case KT_ISA_AVX512:
		return kern_read_avx512;
	case KT_ISA_AVX_VNNI:
	case KT_ISA_AVX2:
		return kern_read_avx2;
	default:
		return kern_read_scalar;
	}
}

KT_EXPORT int kt_ctx_measure_read_bw(struct kt_ctx *ctx, size_t bytes,
				     uint32_t ms, double *gbps)
{
	unsigned int n_nodes = core_ctx_nodes(ctx), threads = 0, i;
	struct bw_exec e = { .ms = ms ? ms : LIMITS_BW_MS };
	struct bw_job *j;
	int ret = 0;

	if (!gbps)
		return -EINVAL;
	if (!bytes)
		bytes = LIMITS_BW_BYTES;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->read = pick_read(kt_ctx_isa(ctx));
	for (i = 0; i < n_nodes; i++)
		threads += core_ctx_node_threads(ctx, i);
	for (i = 0; i < n_nodes; i++) {
		size_t nb = bytes / threads * core_ctx_node_threads(ctx, i);

		nb = (nb + 4095) & ~(size_t)4095;
		j->node[i].bytes = nb;
		j->node[i].buf = core_node_alloc(core_ctx_node_id(ctx, i), nb);
		if (!j->node[i].buf) {
			ret = -ENOMEM;
			goto free_bufs;
		}
	}
	e.job = j;
	ret = core_ctx_exec(ctx, bw_exec_fn, &e);
	if (!ret) {
		uint64_t ns = j->end_ns > j->start_ns ?
			      j->end_ns - j->start_ns : 1;

		*gbps = (double)j->bytes / (double)ns;
	}
free_bufs:
	for (i = 0; i < n_nodes; i++)
		if (j->node[i].buf)
			core_node_free(j->node[i].buf, j->node[i].bytes);
	free(j);
	return ret;
}

struct peak_job {
	peak_fn fn;
	uint64_t start_ns;
	uint64_t stop_ns;
	uint64_t macs;		/* summed over workers */
	uint64_t end_ns;	/* latest end over workers */
	uint64_t sink;
};

static void peak_worker(void *arg, const struct core_worker_info *w)
{
	struct peak_job *j = arg;
	uint64_t macs = 0, sink = 0, now;

	do {
		macs += j->fn(LIMITS_PEAK_ITERS, &sink);
		now = core_now_ns();
	} while (now < j->stop_ns);
	__atomic_fetch_add(&j->macs, macs, __ATOMIC_RELAXED);
	__atomic_fetch_add(&j->sink, sink, __ATOMIC_RELAXED);
	uint64_t end = __atomic_load_n(&j->end_ns, __ATOMIC_RELAXED);
	while (end < now && !__atomic_compare_exchange_n(&j->end_ns, &end, now,
			false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

struct peak_exec {
	struct peak_job *job;
	uint32_t ms;
};

static int peak_exec_fn(struct kt_ctx *ctx, void *arg)
{
	struct peak_exec *e = arg;
	struct peak_job *j = e->job;

	/* a short untimed run lifts the clocks and, for AMX, the power
	 * license, as the timed run will see them */
	j->start_ns = core_now_ns();
	j->stop_ns = j->start_ns + 20 * 1000000ull;
	core_ctx_run(ctx, peak_worker, j);
	j->macs = 0;
	j->end_ns = 0;
	j->start_ns = core_now_ns();
	j->stop_ns = j->start_ns + (uint64_t)e->ms * 1000000ull;
	core_ctx_run(ctx, peak_worker, j);
	return 0;
}

static peak_fn pick_peak(enum kt_isa isa, enum kt_quant q)
{
	bool bf16 = q == KT_QUANT_BF16;

	switch (isa) {
	case KT_ISA_AMX:
		return bf16 ? kern_peak_bf16_amx : kern_peak_int8_amx;
	case KT_ISA_AVX512:
		return bf16 ? kern_peak_bf16_avx512 : kern_peak_int8_avx512;
	case KT_ISA_AVX_VNNI:
		return bf16 ? kern_peak_bf16_avx2 : kern_peak_int8_avxvnni;
	case KT_ISA_AVX2:
		return bf16 ? kern_peak_bf16_avx2 : kern_peak_int8_avx2;
	default:
		return bf16 ? kern_peak_bf16_scalar : kern_peak_int8_scalar;
	}
}

KT_EXPORT int kt_ctx_measure_peak(struct kt_ctx *ctx, enum kt_quant q,
				  uint32_t ms, double *tops)
{
	struct peak_job j = { 0 };
	struct peak_exec e = { .job = &j, .ms = ms ? ms : LIMITS_PEAK_MS };
	int ret;

	if (!tops || (q != KT_QUANT_INT8 && q != KT_QUANT_INT4 &&
		      q != KT_QUANT_BF16))
		return -EINVAL;
	j.fn = pick_peak(kt_ctx_isa(ctx), q);
	ret = core_ctx_exec(ctx, peak_exec_fn, &e);
	if (ret)
		return ret;
	*tops = 2.0 * (double)j.macs /
		(double)(j.end_ns > j.start_ns ? j.end_ns - j.start_ns : 1) /
		1e3;
	return 0;
}
