// SPDX-License-Identifier: MIT
/*
 * op-table.c - kt_ctx_create(): a context whose op table runs the MoE
 * executor and whose ISA has a kernel variant compiled in.
 */
#include <errno.h>

#include "kernels/kern.h"
#include "ktcore/cache.h"
#include "ktcore/core.h"
#include "ktcore/live.h"
#include "ktcore/moe.h"
#include "ktcore/moe-gpu.h"

bool core_isa_has_kernels(enum kt_isa isa)
{
	return kern_ops_get(isa) != NULL;
}

/*
 * The ops that name a model hold it while they run (live.h). A MoE op
 * splits off the experts on the GPU; the rest go to core_moe_op().
 */
static int moe_op(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	return core_live_run(ctx, sqe, core_moe_gpu_op);
}

static int prefetch_op(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	return core_live_run(ctx, sqe, core_cache_prefetch_op);
}

KT_EXPORT int kt_ctx_create(const struct kt_ctx_opts *opts,
			    struct kt_ctx **out)
{
	static const core_op_fn handlers[KT_OP_COUNT] = {
		[KT_OP_NOP] = NULL,	/* core answers NOP itself */
		[KT_OP_MOE] = moe_op,
		[KT_OP_PREFETCH] = prefetch_op,
	};

	return core_ctx_create(opts, handlers, core_isa_has_kernels, out);
}
