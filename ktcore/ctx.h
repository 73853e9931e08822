/* SPDX-License-Identifier: MIT */
/*
 * ctx.h - the context's insides, shared by the files of ktcore only:
 * topology, workers, the fork-join job slot, registered rings.
 */
#ifndef KT_CORE_CTX_H
#define KT_CORE_CTX_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ktcore/core.h"

#define CORE_MAX_RINGS 64
#define CORE_MAX_CPUS 4096
#define CORE_OP_EXEC 0xff	/* private opcode of core_ctx_exec() */
#define CORE_STOP_LEADER 1	/* leader finishes its op and exits */
#define CORE_STOP_WORKERS 2	/* then the other workers exit */

struct core_topo {
	unsigned int n_nodes;
	int node_id[KT_MAX_NODES];
	unsigned int n_cpus[KT_MAX_NODES];	/* physical cores used */
	int *cpus[KT_MAX_NODES];		/* one CPU per physical core */
	bool fake;				/* split by KT_FAKE_NUMA */
};

struct core_worker {
	struct kt_ctx *ctx;
	pthread_t thread;
	int cpu;
	uint32_t job_seq_start;
	struct core_worker_info info;
	/* counters, written by the worker only (relaxed) */
	uint64_t busy_ns;
	uint64_t spin_ns;
	uint64_t sleeps;
	uint64_t tasks;
} __attribute__((aligned(64)));

struct core_ring_slot {
	struct kt_ring_shared *sh;
	struct kt_sqe *sqes;
	struct kt_cqe *cqes;
	uint32_t sq_entries;
	uint32_t cq_entries;
	int eventfd;
};

struct kt_ctx {
	enum kt_isa isa;
	uint32_t cpu_flags;
	uint64_t spin_ns;
	kt_log_fn log_fn;
	void *log_arg;
	core_op_fn handlers[KT_OP_COUNT];

	struct core_topo topo;
	unsigned int n_workers;
	bool cpus_busy;		/* a worker on every CPU we may use */
	struct core_worker *workers;

	/* fork-join: the leader publishes a job by bumping job_seq */
	core_job_fn job_fn;
	void *job_arg;
	uint32_t job_seq __attribute__((aligned(64)));
	uint32_t job_sleepers;
	uint32_t job_pending __attribute__((aligned(64)));

	/* ring service: the leader polls, submitters wake it */
	uint32_t workers_asleep __attribute__((aligned(64)));
	uint32_t wake_seq;
	uint64_t ring_epoch __attribute__((aligned(64)));
	struct core_ring_slot *rings[CORE_MAX_RINGS];
	pthread_mutex_t rings_lock;	/* ring init/exit only */
	uint32_t stop;

	/* kt_moe_forward() and core_ctx_exec() share one internal ring */
	pthread_mutex_t sync_lock;
	struct kt_ring sync_ring;

	void *priv;
	void (*priv_free)(void *);

	uint32_t mem_warned;	/* memory fallbacks told once (mem.c) */
};

int core_topo_discover(struct core_topo *t, const struct kt_ctx_opts *o,
		       unsigned int threads);
void core_topo_free(struct core_topo *t);

int core_pool_start(struct kt_ctx *ctx);
void core_pool_stop(struct kt_ctx *ctx);
/* the leader's ring service loop, run by worker 0 */
void core_leader_loop(struct core_worker *w);
/* kt_ring_init() with every index starting at @start (tests wrap-around) */
int core_ring_init_at(struct kt_ctx *ctx, unsigned int entries,
		      struct kt_ring *ring, uint32_t start);
/* bump a worker counter: single writer, read concurrently (relaxed) */
void core_stat_add(uint64_t *c, uint64_t v);
int core_futex_wait(uint32_t *addr, uint32_t val);
void core_futex_wake(uint32_t *addr, int n);

#endif /* KT_CORE_CTX_H */
