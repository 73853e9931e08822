/* SPDX-License-Identifier: MIT */
/*
 * live.h - the models of a context that ops may name. An op looks its
 * model up here and holds it while it runs, so an op naming a destroyed,
 * foreign or made-up model completes with -EINVAL instead of reading
 * freed memory, and kt_model_destroy() waits for the op that uses it.
 */
#ifndef KT_CORE_LIVE_H
#define KT_CORE_LIVE_H

#include "ktcore/core.h"

/* At the end of a model's creation: ops may name @m from now on. -ENOMEM. */
int core_live_add(struct kt_ctx *ctx, struct kt_model *m);

/*
 * First thing of kt_model_destroy(): new ops naming @m fail, and the one
 * running on it finishes first (a misuse: aborts in KT_DEBUG builds).
 * A model never added (its creation failed) is ignored.
 */
void core_live_remove(struct kt_model *m);

/* Run @fn on @sqe if sqe->model is live, holding it; else -EINVAL. */
int core_live_run(struct kt_ctx *ctx, const struct kt_sqe *sqe,
		  core_op_fn fn);

/* kt_ctx_destroy(): forget the (leaked) models still listed. */
void core_live_free(struct kt_ctx *ctx);

#endif /* KT_CORE_LIVE_H */
