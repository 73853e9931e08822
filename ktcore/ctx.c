// SPDX-License-Identifier: MIT
/*
 * ctx.c - the context: options, ISA choice, its life, and the synchronous
 * calls that run on the leader through the private job slot (ring.c).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "ktcore/ctx.h"
#include "ktcore/live.h"
#include "ktcore/moe-gpu.h"

#define DEFAULT_SPIN_NS (50ull * 1000 * 1000)

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

/* The options, checked; KT_THREADS and KT_LOG fill what they leave 0. */
static int ctx_read_opts(const struct kt_ctx_opts *opts, struct kt_ctx_opts *o)
{
	const char *env_threads = getenv("KT_THREADS");
	unsigned int i;
	int ret;

	ret = CORE_OPTS_GET(o, opts, log_arg);
	if (ret)
		return ret;
	if (o->isa < KT_ISA_AUTO || o->isa >= KT_ISA_COUNT ||
	    (o->flags & ~KT_CTX_F_ALL) ||
	    o->log_level > KT_CTX_LOG_LEVEL(KT_LOG_DEBUG))
		return -EINVAL;
	for (i = 0; i < sizeof(o->reserved) / sizeof(o->reserved[0]); i++)
		if (o->reserved[i])
			return -EINVAL;
	if (env_threads && *env_threads && !o->threads)
		o->threads = (uint32_t)strtoul(env_threads, NULL, 10);
	return 0;
}

int core_ctx_create(const struct kt_ctx_opts *opts,
		    const core_op_fn handlers[KT_OP_COUNT],
		    bool (*isa_available)(enum kt_isa isa),
		    struct kt_ctx **out)
{
	struct kt_ctx_opts o;
	struct kt_ctx *ctx;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	ret = ctx_read_opts(opts, &o);
	if (ret)
		return ret;
	ctx = aligned_alloc(64, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	memset(ctx, 0, sizeof(*ctx));
	ctx->log_fn = o.log_fn;
	ctx->log_arg = o.log_arg;
	ctx->log_level = o.log_level ? (int)o.log_level - 1 : core_log_level();
	ctx->cpu_flags = core_cpu_flags();
	if (handlers)
		memcpy(ctx->handlers, handlers, sizeof(ctx->handlers));
	ctx->spin_ns = o.spin_us == KT_CTX_SPIN_NONE ? 0 :
		       o.spin_us ? o.spin_us * 1000ull : DEFAULT_SPIN_NS;
	pthread_mutex_init(&ctx->rings_lock, NULL);
	pthread_mutex_init(&ctx->sync_lock, NULL);
	pthread_mutex_init(&ctx->live_lock, NULL);
	pthread_cond_init(&ctx->live_idle, NULL);
	ret = ctx_pick_isa(ctx, o.isa, isa_available);
	if (ret)
		goto err_free;
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
	ret = core_gpu_open(ctx, o.gpu_mask);
	if (ret)
		goto err_topo;
	ret = core_pool_start(ctx);
	if (ret)
		goto err_gpu;
	ctx->cpus_busy = ctx->n_workers >= cpus_allowed();
	ctx->sync_spin = core_ring_default_spin(ctx);
	core_log(ctx, KT_LOG_INFO, "context: isa %s, %u workers on %u node(s)",
		 kt_isa_name(ctx->isa), ctx->n_workers, ctx->topo.n_nodes);
	*out = ctx;
	return 0;

err_gpu:
	core_gpu_close(ctx);
err_topo:
	core_topo_free(&ctx->topo);
err_free:
	pthread_mutex_destroy(&ctx->rings_lock);
	pthread_mutex_destroy(&ctx->sync_lock);
	pthread_mutex_destroy(&ctx->live_lock);
	pthread_cond_destroy(&ctx->live_idle);
	free(ctx);
	return ret;
}

KT_EXPORT void kt_ctx_destroy(struct kt_ctx *ctx)
{
	if (!ctx)
		return;
	/* the stream helper runs CPU parts through the workers: first */
	core_gpu_stream_free(ctx);
	core_pool_stop(ctx);
	core_rings_orphan(ctx);
	if (ctx->priv_free)
		ctx->priv_free(ctx->priv);
	core_gpu_close(ctx);
	core_topo_free(&ctx->topo);
	core_live_free(ctx);
	pthread_mutex_destroy(&ctx->rings_lock);
	pthread_mutex_destroy(&ctx->sync_lock);
	pthread_mutex_destroy(&ctx->live_lock);
	pthread_cond_destroy(&ctx->live_idle);
	free(ctx);
}

int core_ctx_exec(struct kt_ctx *ctx, int (*fn)(struct kt_ctx *, void *),
		  void *arg)
{
	struct core_sync_job job = { .fn = fn, .arg = arg };

	if (!ctx || !fn)
		return -EINVAL;
	return core_sync_run(ctx, &job);
}

KT_EXPORT int kt_moe_forward(struct kt_ctx *ctx, struct kt_model *m,
			     const struct kt_moe_args *args)
{
	struct core_sync_job job = { .fn = NULL };

	if (!ctx || !args)
		return -EINVAL;
	/* the op goes through the same checks as one from a ring */
	kt_prep_moe(&job.sqe, m, args->layer, args, 0);
	return core_sync_run(ctx, &job);
}

KT_EXPORT unsigned int kt_version(void)
{
	return KT_VERSION_CODE;
}

#define KT_STR_(x) #x
#define KT_STR(x) KT_STR_(x)

KT_EXPORT const char *kt_version_string(void)
{
	return KT_STR(KT_VERSION_MAJOR) "." KT_STR(KT_VERSION_MINOR) "."
	       KT_STR(KT_VERSION_PATCH);
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
