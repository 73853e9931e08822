// SPDX-License-Identifier: MIT
/*
 * pool.c - the worker pools: one pinned worker per physical core of each
 * node. Workers busy-poll (PAUSE) for the next job, then sleep on a futex
 * once the spin budget is spent. Worker 0 is the leader: it serves the
 * rings and forks every job out to the others (core_ctx_run).
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "ktcore/ctx.h"
#include "ktcore/futex.h"

uint64_t core_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void core_stat_add(uint64_t *c, uint64_t v)
{
	/* single writer: a relaxed store is enough for concurrent readers */
	__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + v,
			 __ATOMIC_RELAXED);
}

static void run_job(struct core_worker *w, core_job_fn fn, void *arg)
{
	uint64_t t0 = core_now_ns();

	fn(arg, &w->info);
	core_stat_add(&w->busy_ns, core_now_ns() - t0);
	core_stat_add(&w->tasks, 1);
}

void core_ctx_run(struct kt_ctx *ctx, core_job_fn fn, void *arg)
{
	uint32_t seq;

	if (ctx->n_workers > 1) {
		ctx->job_fn = fn;
		ctx->job_arg = arg;
		__atomic_store_n(&ctx->job_pending, ctx->n_workers - 1,
				 __ATOMIC_RELAXED);
		seq = ctx->job_seq + 1;
		/* release: pairs with the workers' acquire of job_seq (P1),
		 * publishing job_fn, job_arg and job_pending */
		__kt_store_release(&ctx->job_seq, seq);
		/* full barrier: pairs with a worker's barrier between counting
		 * itself a sleeper and rereading job_seq (P2) */
		__kt_smp_mb();
		if (__kt_load_relaxed(&ctx->job_sleepers))
			core_futex_wake(&ctx->job_seq, INT_MAX);
	}
	run_job(&ctx->workers[0], fn, arg);
	/* acquire: pairs with each worker's release of job_pending (P3), so
	 * everything the job wrote is visible to the leader */
	while (__kt_load_acquire(&ctx->job_pending))
		__kt_cpu_relax();
}

/* A non-leader worker: wait for jobs until the context stops. */
static void worker_loop(struct core_worker *w)
{
	struct kt_ctx *ctx = w->ctx;
	/* the value before any worker started: a job published before this
	 * thread got here must still count as new */
	uint32_t seen = w->job_seq_start;

	for (;;) {
		uint64_t t0 = core_now_ns(), now = t0;
		uint32_t seq;
		unsigned int i = 0;

		/* acquire: pairs with the leader's release of job_seq (P1) */
		while ((seq = __kt_load_acquire(&ctx->job_seq)) == seen &&
		       __kt_load_relaxed(&ctx->stop) < CORE_STOP_WORKERS) {
			__kt_cpu_relax();
			if (++i % 256)
				continue;
			now = core_now_ns();
			if (now - t0 < ctx->spin_ns)
				continue;
			__atomic_add_fetch(&ctx->job_sleepers, 1,
					   __ATOMIC_RELAXED);
			/* full barrier: pairs with the leader's barrier after
			 * publishing job_seq (P2) */
			__kt_smp_mb();
			if (__kt_load_relaxed(&ctx->job_seq) == seen &&
			    __kt_load_relaxed(&ctx->stop) < CORE_STOP_WORKERS) {
				core_stat_add(&w->sleeps, 1);
				core_futex_wait(&ctx->job_seq, seen);
			}
			__atomic_sub_fetch(&ctx->job_sleepers, 1,
					   __ATOMIC_RELAXED);
			t0 = now = core_now_ns();
		}
		core_stat_add(&w->spin_ns, core_now_ns() - t0);
		/* stopped: core_pool_stop() also bumps job_seq, which is what
		 * a sleeper's futex word can see */
		if (__kt_load_acquire(&ctx->stop) >= CORE_STOP_WORKERS)
			return;
		seen = seq;
		run_job(w, ctx->job_fn, ctx->job_arg);
		/* release: pairs with the leader's acquire of job_pending (P3) */
		__atomic_sub_fetch(&ctx->job_pending, 1, __ATOMIC_RELEASE);
	}
}

static void *worker_main(void *p)
{
	struct core_worker *w = p;

	if (w->cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(w->cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			core_log(w->ctx, KT_LOG_WARN,
				 "cannot pin worker %u to CPU %d: %m",
				 w->info.global, w->cpu);
	}
	if (w->info.global == 0)
		core_leader_loop(w);
	else
		worker_loop(w);
	return NULL;
}

int core_pool_start(struct kt_ctx *ctx)
{
	unsigned int n, i, k = 0;
	int ret;

	for (n = 0, ctx->n_workers = 0; n < ctx->topo.n_nodes; n++)
		ctx->n_workers += ctx->topo.n_cpus[n];
	ctx->workers = aligned_alloc(64, ctx->n_workers * sizeof(*ctx->workers));
	if (!ctx->workers)
		return -ENOMEM;
	for (n = 0; n < ctx->topo.n_nodes; n++) {
		for (i = 0; i < ctx->topo.n_cpus[n]; i++, k++) {
			struct core_worker *w = &ctx->workers[k];

			*w = (struct core_worker){ .ctx = ctx,
				.job_seq_start = ctx->job_seq };
			w->cpu = ctx->topo.cpus[n][i];
			w->info = (struct core_worker_info){
				.node_idx = n, .node = ctx->topo.node_id[n],
				.id = i, .n_node = ctx->topo.n_cpus[n],
				.global = k };
		}
	}
	for (k = 0; k < ctx->n_workers; k++) {
		ret = -pthread_create(&ctx->workers[k].thread, NULL,
				      worker_main, &ctx->workers[k]);
		if (ret)
			goto err_stop;
	}
	return 0;

err_stop:
	ctx->n_workers = k;
	core_pool_stop(ctx);
	return ret;
}

void core_pool_stop(struct kt_ctx *ctx)
{
	unsigned int k;

	__kt_store_release(&ctx->stop, CORE_STOP_LEADER);
	__kt_smp_mb();
	__atomic_add_fetch(&ctx->wake_seq, 1, __ATOMIC_RELAXED);
	core_futex_wake(&ctx->wake_seq, INT_MAX);
	core_futex_wake(&ctx->job_seq, INT_MAX);
	/* the leader stops first: it may still be forking a job out */
	if (ctx->n_workers)
		pthread_join(ctx->workers[0].thread, NULL);
	__kt_store_release(&ctx->stop, CORE_STOP_WORKERS);
	/*
	 * A worker that read stop just before it changed may be on its way
	 * into futex_wait(job_seq, seen): the stop flag is not its futex
	 * word, so a wake alone could come first and be lost. Changing
	 * job_seq makes that wait return at once; no job is pending (the
	 * leader has stopped) and the workers check stop before any job.
	 */
	__atomic_add_fetch(&ctx->job_seq, 1, __ATOMIC_RELEASE);
	__kt_smp_mb();
	core_futex_wake(&ctx->job_seq, INT_MAX);
	for (k = 1; k < ctx->n_workers; k++)
		pthread_join(ctx->workers[k].thread, NULL);
	free(ctx->workers);
	ctx->workers = NULL;
	ctx->n_workers = 0;
}
