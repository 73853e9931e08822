/* SPDX-License-Identifier: MIT */
/*
 * op-ctx.h - a context whose KT_OP_MOE runs a test's own handler, for the
 * ring and pool tests that need no kernels.
 */
#ifndef KT_SELFTESTS_CORE_OP_CTX_H
#define KT_SELFTESTS_CORE_OP_CTX_H

#include <kt/kt.h>
#include "ktcore/core.h"

static inline struct kt_ctx *op_ctx(core_op_fn moe, unsigned int threads,
				    uint32_t spin_us)
{
	const core_op_fn h[KT_OP_COUNT] = { [KT_OP_MOE] = moe };
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = threads,
				 .spin_us = spin_us };
	struct kt_ctx *ctx = NULL;

	if (core_ctx_create(&o, h, NULL, &ctx))
		return NULL;
	return ctx;
}

#endif /* KT_SELFTESTS_CORE_OP_CTX_H */
