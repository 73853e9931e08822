// SPDX-License-Identifier: MIT
/*
 * ctx-api.c - kt_ctx_create(): a ktcore context whose op table runs the
 * kernels' MoE executor and whose ISA has a kernel variant compiled in.
 */
#include <errno.h>

#include "kernels/kern.h"
#include "kernels/moe.h"
#include "ktcore/core.h"

bool kern_isa_available(enum kt_isa isa)
{
	return kern_ops_get(isa) != NULL;
}

KT_EXPORT int kt_ctx_create(const struct kt_ctx_opts *opts,
			    struct kt_ctx **out)
{
	static const core_op_fn handlers[KT_OP_COUNT] = {
		[KT_OP_NOP] = NULL,	/* core answers NOP itself */
		[KT_OP_MOE] = kern_moe_op,
	};

	return core_ctx_create(opts, handlers, kern_isa_available, out);
}
