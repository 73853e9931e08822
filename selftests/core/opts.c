// SPDX-License-Identifier: MIT
/*
 * opts.c - options structs that grow: an older caller's shorter struct, a
 * newer caller's longer one, reserved fields and unknown flags; the log
 * level set through kt_ctx_opts rather than only through KT_LOG.
 */
#include <errno.h>
#include <stdlib.h>

#include "kt_test.h"
#include "ktcore/ctx.h"

/* A caller built against a future kt_ctx_opts with one more field. */
struct future_opts {
	struct kt_ctx_opts o;
	uint64_t new_field;
};

TEST(opts_sz_older_and_newer_callers)
{
	struct future_opts f;
	struct kt_ctx_opts o, got;
	struct kt_ctx *ctx = NULL;

	memset(&o, 0x7f, sizeof(o));	/* past sz: must not be read */
	o.sz = offsetof(struct kt_ctx_opts, flags);
	o.threads = 1;
	o.n_nodes = 0;
	o.isa = KT_ISA_AUTO;
	o.spin_us = 0;
	o.log_fn = NULL;
	o.log_arg = NULL;
	ASSERT_EQ(CORE_OPTS_GET(&got, &o, log_arg), 0);
	EXPECT_EQ(got.sz, sizeof(got));
	EXPECT_EQ(got.threads, 1u);
	EXPECT_EQ(got.flags, 0u);	/* the tail the caller lacks is 0 */
	EXPECT_EQ(got.log_level, 0u);
	ASSERT_EQ(kt_ctx_create(&o, &ctx), 0);
	EXPECT_EQ(kt_ctx_threads(ctx), 1u);
	kt_ctx_destroy(ctx);

	o.sz = offsetof(struct kt_ctx_opts, log_arg);	/* older than any */
	EXPECT_EQ(kt_ctx_create(&o, &ctx), -EINVAL);
	EXPECT_EQ(CORE_OPTS_GET(&got, &o, log_arg), -EINVAL);

	memset(&f, 0, sizeof(f));
	f.o.sz = sizeof(f);
	f.o.threads = 1;
	ASSERT_EQ(kt_ctx_create(&f.o, &ctx), 0);	/* unknown tail zero */
	kt_ctx_destroy(ctx);
	f.new_field = 1;
	EXPECT_EQ(kt_ctx_create(&f.o, &ctx), -EINVAL);	/* would be ignored */
	EXPECT_EQ(CORE_OPTS_GET(&got, NULL, log_arg), 0);
	EXPECT_EQ(got.sz, sizeof(got));
	EXPECT_EQ(got.threads, 0u);
}

static unsigned int n_info, n_debug;

static void count_levels(void *arg, enum kt_log_level level, const char *msg)
{
	if (level == KT_LOG_INFO)
		n_info++;
	if (level == KT_LOG_DEBUG)
		n_debug++;
}

TEST(opts_reserved_flags_and_level_checked)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 1,
				 .log_fn = count_levels };
	struct kt_ctx *ctx = NULL;

	o.reserved[11] = 1;
	EXPECT_EQ(kt_ctx_create(&o, &ctx), -EINVAL);
	o.reserved[11] = 0;
	o.flags = 1u << 30;
	EXPECT_EQ(kt_ctx_create(&o, &ctx), -EINVAL);
	o.flags = 0;
	o.log_level = KT_CTX_LOG_LEVEL(KT_LOG_DEBUG) + 1;
	EXPECT_EQ(kt_ctx_create(&o, &ctx), -EINVAL);
	o.log_level = KT_CTX_LOG_LEVEL(KT_LOG_DEBUG);
	ASSERT_EQ(kt_ctx_create(&o, &ctx), 0);
	kt_ctx_destroy(ctx);
}

/*
 * An embedder asks for info messages from code: the callback gets them
 * even though KT_LOG says error; without the field KT_LOG still rules.
 */
TEST(log_level_from_opts_beats_env)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 1,
				 .log_fn = count_levels,
				 .log_level = KT_CTX_LOG_LEVEL(KT_LOG_INFO) };
	struct kt_ctx *ctx = NULL;

	/* forked child: the level KT_LOG gives is read once per process */
	setenv("KT_LOG", "error", 1);
	ASSERT_EQ(kt_ctx_create(&o, &ctx), 0);
	EXPECT_GE(n_info, 1u);	/* "context: isa ..., workers" */
	EXPECT_EQ(n_debug, 0u);
	core_log(ctx, KT_LOG_DEBUG, "not shown");
	core_log(ctx, KT_LOG_INFO, "shown");
	EXPECT_EQ(n_debug, 0u);
	EXPECT_GE(n_info, 2u);
	kt_ctx_destroy(ctx);

	n_info = 0;
	o.log_level = 0;	/* unset: KT_LOG=error filters info out */
	ASSERT_EQ(kt_ctx_create(&o, &ctx), 0);
	core_log(ctx, KT_LOG_INFO, "hidden");
	EXPECT_EQ(n_info, 0u);
	kt_ctx_destroy(ctx);
}

TEST(version_is_the_header_version)
{
	char want[32];

	EXPECT_EQ(kt_version(), (unsigned int)KT_VERSION_CODE);
	snprintf(want, sizeof(want), "%d.%d.%d", KT_VERSION_MAJOR,
		 KT_VERSION_MINOR, KT_VERSION_PATCH);
	EXPECT_EQ(strcmp(kt_version_string(), want), 0);
	EXPECT_GE(kt_version(), (unsigned int)KT_VERSION(0, 1, 0));
}

TEST_HARNESS_MAIN
