// SPDX-License-Identifier: MIT
/*
 * ctx.c - the context: options, ISA choice, the leader's ring service loop,
 * and the synchronous helpers built on an internal ring.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ktcore/ctx.h"

#define DEFAULT_SPIN_NS (50ull * 1000 * 1000)

static int op_dispatch(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	if (sqe->opcode == CORE_OP_EXEC) {
		int (*fn)(struct kt_ctx *, void *) =
			(int (*)(struct kt_ctx *, void *))sqe->reserved[0];

		return fn(ctx, (void *)sqe->reserved[1]);
	}
	if (sqe->opcode >= KT_OP_COUNT)
		return -EINVAL;
	if (!ctx->handlers[sqe->opcode])
		return sqe->opcode == KT_OP_NOP ? 0 : -EOPNOTSUPP;
	return ctx->handlers[sqe->opcode](ctx, sqe);
}

static void post_cqe(struct core_ring_slot *r, uint64_t user_data, int res)
{
	struct kt_ring_shared *sh = r->sh;
	uint32_t tail = sh->cq_tail;
	struct kt_cqe *cqe = &r->cqes[tail & (r->cq_entries - 1)];

	cqe->user_data = user_data;
	cqe->res = res;
	cqe->flags = 0;
	/* release: pairs with the submitter's acquire of cq_tail (W4) */
	kt_store_release(&sh->cq_tail, tail + 1);
	/* full barrier: pairs with kt_ring_wait_cq()'s barrier between
	 * setting cq_waiting and rereading cq_tail (W6) */
	kt_smp_mb();
	if (kt_load_relaxed(&sh->cq_waiting))
		core_futex_wake(&sh->cq_tail, 1);
	int efd = __atomic_load_n(&r->eventfd, __ATOMIC_ACQUIRE);

	if (efd >= 0) {
		uint64_t one = 1;

		if (write(efd, &one, sizeof(one)) < 0) {
			/* a full eventfd counter still wakes epoll */
		}
	}
}

/* Run what one ring has queued, as far as its CQ has room. */
static unsigned int serve_ring(struct kt_ctx *ctx, struct core_ring_slot *r)
{
	struct kt_ring_shared *sh = r->sh;
	uint32_t head = sh->sq_head;
	/* acquire: pairs with kt_submit()'s release of sq_tail (W2) */
	uint32_t tail = kt_load_acquire(&sh->sq_tail);
	unsigned int n = 0;

	while (head != tail) {
		struct kt_sqe sqe;

		/* acquire: pairs with kt_cqe_seen()'s release of cq_head (W5) */
		if (sh->cq_tail - kt_load_acquire(&sh->cq_head) >=
		    r->cq_entries)
			break;
		sqe = r->sqes[head & (r->sq_entries - 1)];
		head++;
		/* release: pairs with kt_get_sqe()'s acquire of sq_head (W1);
		 * the entry was copied, so the submitter may reuse it */
		kt_store_release(&sh->sq_head, head);
		post_cqe(r, sqe.user_data, op_dispatch(ctx, &sqe));
		n++;
	}
	return n;
}

/* Whether a ring has entries; inside an odd epoch like a serving pass. */
static bool rings_pending(struct kt_ctx *ctx)
{
	bool pending = false;
	unsigned int i;

	__atomic_add_fetch(&ctx->ring_epoch, 1, __ATOMIC_SEQ_CST);
	for (i = 0; i < CORE_MAX_RINGS && !pending; i++) {
		struct core_ring_slot *r =
			__atomic_load_n(&ctx->rings[i], __ATOMIC_SEQ_CST);

		pending = r && kt_load_relaxed(&r->sh->sq_tail) !=
			       r->sh->sq_head;
	}
	__atomic_add_fetch(&ctx->ring_epoch, 1, __ATOMIC_SEQ_CST);
	return pending;
}

void core_leader_loop(struct core_worker *w)
{
	struct kt_ctx *ctx = w->ctx;
	uint64_t t0 = core_now_ns();
	unsigned int spins = 0;

	for (;;) {
		unsigned int i, n = 0;

		/* odd epoch: a pass is reading ring slots (see ring_detach) */
		__atomic_add_fetch(&ctx->ring_epoch, 1, __ATOMIC_SEQ_CST);
		for (i = 0; i < CORE_MAX_RINGS; i++) {
			struct core_ring_slot *r =
				__atomic_load_n(&ctx->rings[i], __ATOMIC_SEQ_CST);

			if (r)
				n += serve_ring(ctx, r);
		}
		__atomic_add_fetch(&ctx->ring_epoch, 1, __ATOMIC_SEQ_CST);
		if (n) {
			t0 = core_now_ns();
			continue;
		}
		if (kt_load_acquire(&ctx->stop))
			break;
		kt_cpu_relax();
		if (++spins % 64)
			continue;
		uint64_t now = core_now_ns();

		if (now - t0 < ctx->spin_ns)
			continue;
		uint32_t seq = kt_load_relaxed(&ctx->wake_seq);

		kt_store_release(&ctx->workers_asleep, 1);
		/* full barrier: pairs with kt_submit()'s barrier between
		 * publishing sq_tail and reading workers_asleep (W3) */
		kt_smp_mb();
		if (!rings_pending(ctx) && !kt_load_relaxed(&ctx->stop)) {
			core_stat_add(&w->sleeps, 1);
			core_futex_wait(&ctx->wake_seq, seq);
		}
		kt_store_release(&ctx->workers_asleep, 0);
		core_stat_add(&w->spin_ns, now - t0);
		t0 = core_now_ns();
	}
}

static unsigned int cpus_allowed(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 1;
	return (unsigned int)CPU_COUNT(&set);
}

static int ctx_pick_isa(struct kt_ctx *ctx, enum kt_isa want,
			bool (*available)(enum kt_isa))
{
	const char *env = getenv("KT_ISA");
	int isa;

	if (env && *env && core_isa_parse(env, &want)) {
		core_log(ctx, KT_LOG_ERROR,
			 "KT_ISA=%s is unknown; use scalar, avx2, avxvnni, avx512, amx or auto",
			 env);
		return -EINVAL;
	}
	if (want != KT_ISA_AUTO) {
		if (!core_isa_runs(want, ctx->cpu_flags)) {
			core_log(ctx, KT_LOG_ERROR,
				 "ISA %s was asked for but this CPU cannot run it (see 'kt info')",
				 kt_isa_name(want));
			return -EOPNOTSUPP;
		}
		if (available && !available(want)) {
			core_log(ctx, KT_LOG_ERROR,
				 "ISA %s has no kernels in this build",
				 kt_isa_name(want));
			return -EOPNOTSUPP;
		}
		ctx->isa = want;
		return 0;
	}
	for (isa = core_isa_best(ctx->cpu_flags); isa != KT_ISA_SCALAR;
	     isa = core_isa_lower((enum kt_isa)isa))
		if (core_isa_runs((enum kt_isa)isa, ctx->cpu_flags) &&
		    (!available || available((enum kt_isa)isa)))
			break;
	ctx->isa = (enum kt_isa)isa;
	return 0;
}

int core_ctx_create(const struct kt_ctx_opts *opts,
		    const core_op_fn handlers[KT_OP_COUNT],
		    bool (*isa_available)(enum kt_isa isa),
		    struct kt_ctx **out)
{
	struct kt_ctx_opts o = { .sz = sizeof(o) };
	const char *env_threads = getenv("KT_THREADS");
	struct kt_ctx *ctx;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (opts) {
		if (opts->sz < offsetof(struct kt_ctx_opts, flags) ||
		    opts->sz > 65536)
			return -EINVAL;
		memcpy(&o, opts, opts->sz < sizeof(o) ? opts->sz : sizeof(o));
	}
	if (o.isa < KT_ISA_AUTO || o.isa >= KT_ISA_COUNT)
		return -EINVAL;
	ctx = aligned_alloc(64, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	memset(ctx, 0, sizeof(*ctx));
	ctx->log_fn = o.log_fn;
	ctx->log_arg = o.log_arg;
	ctx->cpu_flags = core_cpu_flags();
	if (handlers)
		memcpy(ctx->handlers, handlers, sizeof(ctx->handlers));
	ctx->spin_ns = o.spin_us == KT_CTX_SPIN_NONE ? 0 :
		       o.spin_us ? o.spin_us * 1000ull : DEFAULT_SPIN_NS;
	pthread_mutex_init(&ctx->rings_lock, NULL);
	pthread_mutex_init(&ctx->sync_lock, NULL);
	ret = ctx_pick_isa(ctx, o.isa, isa_available);
	if (ret)
		goto err_free;
	if (env_threads && *env_threads && !o.threads)
		o.threads = (uint32_t)strtoul(env_threads, NULL, 10);
	ret = core_topo_discover(&ctx->topo, &o, o.threads);
	if (ret) {
		core_log(ctx, KT_LOG_ERROR, "NUMA topology: %s", strerror(-ret));
		goto err_free;
	}
	if (o.flags & KT_CTX_F_NO_PIN) {
		unsigned int n, i;

		for (n = 0; n < ctx->topo.n_nodes; n++)
			for (i = 0; i < ctx->topo.n_cpus[n]; i++)
				ctx->topo.cpus[n][i] = -1;
	}
	ret = core_pool_start(ctx);
	if (ret)
		goto err_topo;
	ctx->cpus_busy = ctx->n_workers >= cpus_allowed();
	ret = kt_ring_init(ctx, 2, &ctx->sync_ring);
	if (ret)
		goto err_pool;
	core_log(ctx, KT_LOG_INFO, "context: isa %s, %u workers on %u node(s)",
		 kt_isa_name(ctx->isa), ctx->n_workers, ctx->topo.n_nodes);
	*out = ctx;
	return 0;

err_pool:
	core_pool_stop(ctx);
err_topo:
	core_topo_free(&ctx->topo);
err_free:
	free(ctx);
	return ret;
}

KT_EXPORT void kt_ctx_destroy(struct kt_ctx *ctx)
{
	if (!ctx)
		return;
	kt_ring_exit(&ctx->sync_ring);
	core_pool_stop(ctx);
	if (ctx->priv_free)
		ctx->priv_free(ctx->priv);
	core_topo_free(&ctx->topo);
	pthread_mutex_destroy(&ctx->rings_lock);
	pthread_mutex_destroy(&ctx->sync_lock);
	free(ctx);
}

/* Submit one prepared entry on the internal ring and wait for it. */
static int sync_submit(struct kt_ctx *ctx, const struct kt_sqe *tmpl)
{
	struct kt_ring *ring = &ctx->sync_ring;
	struct kt_sqe *sqe;
	struct kt_cqe *cqe;
	int ret;

	pthread_mutex_lock(&ctx->sync_lock);
	sqe = kt_get_sqe(ring);
	if (!sqe) {
		ret = -EAGAIN;	/* cannot happen: one op at a time */
		goto out;
	}
	*sqe = *tmpl;
	kt_submit(ring);
	ret = kt_wait_cqe(ring, &cqe);
	if (!ret) {
		ret = cqe->res;
		kt_cqe_seen(ring);
	}
out:
	pthread_mutex_unlock(&ctx->sync_lock);
	return ret;
}

int core_ctx_exec(struct kt_ctx *ctx, int (*fn)(struct kt_ctx *, void *),
		  void *arg)
{
	struct kt_sqe sqe = { .opcode = CORE_OP_EXEC };

	sqe.reserved[0] = (uint64_t)(uintptr_t)fn;
	sqe.reserved[1] = (uint64_t)(uintptr_t)arg;
	return sync_submit(ctx, &sqe);
}

KT_EXPORT int kt_moe_forward(struct kt_ctx *ctx, struct kt_model *m,
			     const struct kt_moe_args *args)
{
	struct kt_sqe sqe;

	if (!ctx || !args)
		return -EINVAL;
	memset(&sqe, 0, sizeof(sqe));
	kt_prep_moe(&sqe, m, args->layer, args, 0);
	return sync_submit(ctx, &sqe);
}

KT_EXPORT enum kt_isa kt_ctx_isa(const struct kt_ctx *ctx)
{
	return ctx->isa;
}

KT_EXPORT unsigned int kt_ctx_threads(const struct kt_ctx *ctx)
{
	return ctx->n_workers;
}

KT_EXPORT int kt_ctx_worker_stats(const struct kt_ctx *ctx, unsigned int idx,
				  struct kt_worker_stats *st)
{
	const struct core_worker *w;

	if (!ctx || !st || idx >= ctx->n_workers)
		return -EINVAL;
	w = &ctx->workers[idx];
	memset(st, 0, sizeof(*st));
	st->node = w->info.node;
	st->cpu = w->cpu;
	st->busy_ns = __atomic_load_n(&w->busy_ns, __ATOMIC_RELAXED);
	st->spin_ns = __atomic_load_n(&w->spin_ns, __ATOMIC_RELAXED);
	st->sleeps = __atomic_load_n(&w->sleeps, __ATOMIC_RELAXED);
	st->tasks = __atomic_load_n(&w->tasks, __ATOMIC_RELAXED);
	return 0;
}

unsigned int core_ctx_nodes(const struct kt_ctx *ctx)
{
	return ctx->topo.n_nodes;
}

int core_ctx_node_id(const struct kt_ctx *ctx, unsigned int node_idx)
{
	return ctx->topo.node_id[node_idx];
}

unsigned int core_ctx_node_threads(const struct kt_ctx *ctx,
				   unsigned int node_idx)
{
	return ctx->topo.n_cpus[node_idx];
}

void *core_ctx_priv(const struct kt_ctx *ctx)
{
	return ctx->priv;
}

void core_ctx_set_priv(struct kt_ctx *ctx, void *priv, void (*fn)(void *))
{
	ctx->priv = priv;
	ctx->priv_free = fn;
}
