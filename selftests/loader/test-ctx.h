/* SPDX-License-Identifier: MIT */
/*
 * test-ctx.h - a small context for the loader tests (two workers at most,
 * so that CI machines with few cores are not oversubscribed).
 */
#ifndef KT_SELFTESTS_LOADER_TEST_CTX_H
#define KT_SELFTESTS_LOADER_TEST_CTX_H

#include <kt/kt.h>

static inline int test_ctx(struct kt_ctx **ctx)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 2,
				 .flags = KT_CTX_F_NO_PIN };

	return kt_ctx_create(&o, ctx);
}

#endif /* KT_SELFTESTS_LOADER_TEST_CTX_H */
