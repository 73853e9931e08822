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

#define CORE_MAX_RINGS KT_RING_MAX_PER_CTX
#define CORE_MAX_CPUS 4096
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

/*
 * The private job slot: kt_moe_forward() and core_ctx_exec() hand the
 * leader one job at a time here, never through a ring, so no SQE field
 * of any ring can name a function to call.
 */
struct core_sync_job {
	int (*fn)(struct kt_ctx *ctx, void *arg);	/* or NULL: run @sqe */
	void *arg;
	struct kt_sqe sqe;
	int res;
};

struct kt_ctx {
	enum kt_isa isa;
	uint32_t cpu_flags;
	uint64_t spin_ns;
	kt_log_fn log_fn;
	void *log_arg;
	int log_level;		/* KT_LOG_*: from the opts, else KT_LOG */
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
	/* odd while a leader pass may hold ring slots; a futex word */
	uint32_t ring_epoch __attribute__((aligned(64)));
	uint32_t epoch_waiters;		/* kt_ring_exit() sleeps on ring_epoch */
	struct core_ring_slot *rings[CORE_MAX_RINGS];
	pthread_mutex_t rings_lock;	/* ring init/exit only */
	uint32_t stop;

	/* the private job slot (struct core_sync_job); sync_lock serialises
	 * its users, sync_posted and sync_done count jobs */
	pthread_mutex_t sync_lock;
	uint32_t sync_posted __attribute__((aligned(64)));
	uint32_t sync_done __attribute__((aligned(64)));
	uint32_t sync_waiting;		/* the poster sleeps on sync_done */
	uint32_t sync_spin;		/* polls before it sleeps */
	struct core_sync_job sync_job;

	void *priv;
	void (*priv_free)(void *);

	/* the models ops may name (live.c) */
	pthread_mutex_t live_lock;
	pthread_cond_t live_idle;	/* an op finished on a model */
	struct core_live_model *live;
	unsigned int n_live, live_cap;

	struct core_gpu *gpu;	/* NULL: CPU only (ktcore/moe-gpu.h) */

	uint32_t mem_warned;	/* memory fallbacks told once (mem.c) */
};

int core_topo_discover(struct core_topo *t, const struct kt_ctx_opts *o,
		       unsigned int threads);
void core_topo_free(struct core_topo *t);

int core_pool_start(struct kt_ctx *ctx);
void core_pool_stop(struct kt_ctx *ctx);
/* bump a worker counter: single writer, read concurrently (relaxed) */
void core_stat_add(uint64_t *c, uint64_t v);

/* ring.c: the consumer half, run by the leader (worker 0) */
void core_leader_loop(struct core_worker *w);
/* hand the leader one private job and wait for its result */
int core_sync_run(struct kt_ctx *ctx, const struct core_sync_job *job);
/* at kt_ctx_destroy(), after the workers stopped: cut off user rings */
void core_rings_orphan(struct kt_ctx *ctx);
/* kt_wait_cqe()'s polls before it sleeps, on rings of @ctx */
uint32_t core_ring_default_spin(const struct kt_ctx *ctx);
/* kt_ring_init() with every index starting at @start (tests wrap-around) */
int core_ring_init_at(struct kt_ctx *ctx, unsigned int entries,
		      struct kt_ring *ring, uint32_t start);

#endif /* KT_CORE_CTX_H */
