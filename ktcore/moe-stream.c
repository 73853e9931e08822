// SPDX-License-Identifier: MIT
/*
 * moe-stream.c - placeholder
 */
#include <errno.h>

#include "ktcore/ctx.h"
#include "ktcore/moe-gpu.h"

KT_EXPORT int kt_moe_stream_submit(struct kt_ctx *ctx, struct kt_model *m,
				   const struct kt_moe_args *args, void *stream,
				   const volatile uint32_t *tokens_word)
{
	return -EOPNOTSUPP;
}

KT_EXPORT int kt_moe_stream_sync(struct kt_ctx *ctx, void *stream)
{
	return -EINVAL;
}

KT_EXPORT int kt_ctx_gpu_last_error(const struct kt_ctx *ctx)
{
	return 0;
}
