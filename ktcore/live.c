// SPDX-License-Identifier: MIT
/*
 * live.c - the registry of a context's models (live.h): a short array
 * under a mutex. Ops take it twice each, a few dozen nanoseconds against
 * the microseconds of the smallest MoE op.
 */
#include <errno.h>
#include <stdlib.h>

#include "ktcore/ctx.h"
#include "ktcore/live.h"
#include "ktcore/model.h"

struct core_live_model {
	const struct kt_model *m;
	uint32_t busy;		/* ops running on it */
};

static struct core_live_model *find(struct kt_ctx *ctx,
				    const struct kt_model *m)
{
	unsigned int i;

	for (i = 0; i < ctx->n_live; i++)
		if (ctx->live[i].m == m)
			return &ctx->live[i];
	return NULL;
}

int core_live_add(struct kt_ctx *ctx, struct kt_model *m)
{
	int ret = 0;

	pthread_mutex_lock(&ctx->live_lock);
	if (ctx->n_live == ctx->live_cap) {
		unsigned int cap = ctx->live_cap ? 2 * ctx->live_cap : 8;
		struct core_live_model *v = realloc(ctx->live,
						    cap * sizeof(*v));

		if (!v) {
			ret = -ENOMEM;
			goto out;
		}
		ctx->live = v;
		ctx->live_cap = cap;
	}
	ctx->live[ctx->n_live++] = (struct core_live_model){ m, 0 };
out:
	pthread_mutex_unlock(&ctx->live_lock);
	return ret;
}

void core_live_remove(struct kt_model *m)
{
	struct kt_ctx *ctx = m ? m->ctx : NULL;
	struct core_live_model *e;

	if (!ctx)
		return;
	pthread_mutex_lock(&ctx->live_lock);
	e = find(ctx, m);
	if (e && e->busy) {
		core_misuse(ctx, "kt_model_destroy() on a model with an op running: complete every op on it first");
		while (e->busy) {
			pthread_cond_wait(&ctx->live_idle, &ctx->live_lock);
			e = find(ctx, m);	/* the array may have moved */
		}
	}
	if (e)
		*e = ctx->live[--ctx->n_live];
	pthread_mutex_unlock(&ctx->live_lock);
}

int core_live_run(struct kt_ctx *ctx, const struct kt_sqe *sqe,
		  core_op_fn fn)
{
	const struct kt_model *m = sqe->model;
	struct core_live_model *e;
	int ret;

	pthread_mutex_lock(&ctx->live_lock);
	e = m ? find(ctx, m) : NULL;
	if (e)
		e->busy++;
	pthread_mutex_unlock(&ctx->live_lock);
	if (!e) {
		core_log(ctx, KT_LOG_ERROR, "op names model %p, which is not a live model of this context (destroyed, of another context, or never created)",
			 (const void *)m);
		return -EINVAL;
	}
	ret = fn(ctx, sqe);
	pthread_mutex_lock(&ctx->live_lock);
	e = find(ctx, m);
	if (!--e->busy)
		pthread_cond_broadcast(&ctx->live_idle);
	pthread_mutex_unlock(&ctx->live_lock);
	return ret;
}

void core_live_free(struct kt_ctx *ctx)
{
	free(ctx->live);
	ctx->live = NULL;
	ctx->n_live = ctx->live_cap = 0;
}
