// SPDX-License-Identifier: MIT
/*
 * ring.c - the submission/completion rings: full and empty, wrap-around of
 * the free-running indices, many rings on one context, two submitting
 * threads under stress, eventfd signalling, bad arguments.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>

#include "kt_test.h"
#include "ktcore/ctx.h"

/* Echo handler: a MOE op completes with its token count, checking that the
 * entry arrived intact. */
static int echo_op(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	if (sqe->moe.top_k != (uint32_t)(sqe->user_data * 7))
		return -EIO;
	return (int)sqe->moe.tokens;
}

static struct kt_ctx *echo_ctx(unsigned int threads, uint32_t spin_us)
{
	const core_op_fn h[KT_OP_COUNT] = { [KT_OP_MOE] = echo_op };
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = threads,
				 .spin_us = spin_us };
	struct kt_ctx *ctx = NULL;

	if (core_ctx_create(&o, h, NULL, &ctx))
		return NULL;
	return ctx;
}

static void prep_echo(struct kt_sqe *sqe, uint64_t ud)
{
	struct kt_moe_args a = { .tokens = (uint32_t)(ud & 0xffff),
				 .top_k = (uint32_t)(ud * 7) };

	kt_prep_moe(sqe, NULL, 0, &a, ud);
}

TEST(full_and_empty)
{
	struct kt_ctx *ctx = echo_ctx(2, 0);
	struct kt_ring ring;
	struct kt_cqe *cqe;
	unsigned int i;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(kt_ring_init(ctx, 4, &ring), 0);
	ASSERT_EQ(kt_peek_cqe(&ring, &cqe), -EAGAIN);
	for (i = 0; i < 4; i++) {
		struct kt_sqe *sqe = kt_get_sqe(&ring);

		ASSERT_NE(sqe, NULL);
		prep_echo(sqe, i + 1);
	}
	ASSERT_NULL(kt_get_sqe(&ring));
	ASSERT_EQ(kt_submit(&ring), 4);
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
		EXPECT_EQ(cqe->user_data, i + 1);
		EXPECT_EQ(cqe->res, (int)(i + 1));
		kt_cqe_seen(&ring);
	}
	ASSERT_EQ(kt_peek_cqe(&ring, &cqe), -EAGAIN);
	ASSERT_NE(kt_get_sqe(&ring), NULL);
	kt_ring_exit(&ring);
	kt_ctx_destroy(ctx);
}

/* The worker stops taking entries while the CQ is full; none are lost. */
TEST(cq_full_holds_back)
{
	struct kt_ctx *ctx = echo_ctx(1, 0);
	struct kt_ring ring;
	struct kt_cqe *cqe;
	unsigned int i, round;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(kt_ring_init(ctx, 2, &ring), 0);
	/* 3 rounds of 2 entries without reaping: CQ (4) fills after 2 */
	for (round = 0; round < 3; round++) {
		for (i = 0; i < 2; i++) {
			struct kt_sqe *sqe;

			while (!(sqe = kt_get_sqe(&ring)))
				kt_cpu_relax();
			prep_echo(sqe, round * 2 + i);
		}
		kt_submit(&ring);
		if (round == 1)
			while (kt_load_acquire(&ring.sh->cq_tail) != 4)
				kt_cpu_relax();
	}
	for (i = 0; i < 6; i++) {
		ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
		EXPECT_EQ(cqe->user_data, i);
		kt_cqe_seen(&ring);
	}
	kt_ring_exit(&ring);
	kt_ctx_destroy(ctx);
}

TEST(wraparound_near_uint32_max)
{
	struct kt_ctx *ctx = echo_ctx(2, 0);
	struct kt_ring ring;
	struct kt_cqe *cqe;
	uint64_t next = 0, done = 0;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(core_ring_init_at(ctx, 8, &ring, UINT32_MAX - 11), 0);
	while (done < 100) {
		struct kt_sqe *sqe;

		while (next < 100 && (sqe = kt_get_sqe(&ring)))
			prep_echo(sqe, next++);
		kt_submit(&ring);
		ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
		ASSERT_EQ(cqe->user_data, done);
		ASSERT_EQ(cqe->res, (int)(done & 0xffff));
		kt_cqe_seen(&ring);
		done++;
	}
	/* the indices went past 2^32 and wrapped */
	EXPECT_LT(ring.sh->sq_head, 200u);
	kt_ring_exit(&ring);
	kt_ctx_destroy(ctx);
}

TEST(many_rings_one_ctx)
{
	struct kt_ctx *ctx = echo_ctx(2, 0);
	struct kt_ring rings[16];
	struct kt_cqe *cqe;
	unsigned int i, j;

	ASSERT_NE(ctx, NULL);
	for (i = 0; i < 16; i++)
		ASSERT_EQ(kt_ring_init(ctx, 4, &rings[i]), 0);
	for (i = 0; i < 16; i++) {
		for (j = 0; j < 3; j++)
			prep_echo(kt_get_sqe(&rings[i]), i * 100 + j);
		kt_submit(&rings[i]);
	}
	for (i = 0; i < 16; i++) {
		for (j = 0; j < 3; j++) {
			ASSERT_EQ(kt_wait_cqe(&rings[i], &cqe), 0);
			EXPECT_EQ(cqe->user_data, i * 100 + j);
			kt_cqe_seen(&rings[i]);
		}
	}
	for (i = 0; i < 16; i++)
		kt_ring_exit(&rings[i]);
	kt_ctx_destroy(ctx);
}

TEST(ring_limit_and_bad_args)
{
	struct kt_ctx *ctx = echo_ctx(1, 0);
	struct kt_ring rings[CORE_MAX_RINGS];
	struct kt_ring extra;
	unsigned int i;

	ASSERT_NE(ctx, NULL);
	EXPECT_EQ(kt_ring_init(ctx, 0, &extra), -EINVAL);
	EXPECT_EQ(kt_ring_init(ctx, 3, &extra), -EINVAL);
	EXPECT_EQ(kt_ring_init(ctx, 65536, &extra), -EINVAL);
	EXPECT_EQ(kt_ring_init(NULL, 4, &extra), -EINVAL);
	EXPECT_EQ(kt_ring_register_eventfd(&extra, -5), -EINVAL);
	/* the context's own synchronous ring takes one slot */
	for (i = 0; i < CORE_MAX_RINGS - 1; i++)
		ASSERT_EQ(kt_ring_init(ctx, 1, &rings[i]), 0);
	EXPECT_EQ(kt_ring_init(ctx, 1, &extra), -EBUSY);
	for (i = 0; i < CORE_MAX_RINGS - 1; i++)
		kt_ring_exit(&rings[i]);
	kt_ring_exit(&extra);	/* zeroed by the failed init: no-op */
	kt_ctx_destroy(ctx);
}

struct stress_arg {
	struct kt_ctx *ctx;
	uint64_t n;
	uint64_t base;
	int errors;
};

static void *stress_thread(void *p)
{
	struct stress_arg *a = p;
	struct kt_ring ring;
	uint64_t sent = 0, got = 0;

	if (kt_ring_init(a->ctx, 64, &ring)) {
		a->errors++;
		return NULL;
	}
	while (got < a->n) {
		struct kt_sqe *sqe;
		struct kt_cqe *cqe;

		while (sent < a->n && (sqe = kt_get_sqe(&ring)))
			prep_echo(sqe, a->base + sent++);
		kt_submit(&ring);
		while (!kt_peek_cqe(&ring, &cqe)) {
			uint64_t ud = a->base + got;

			if (cqe->user_data != ud ||
			    cqe->res != (int)(ud & 0xffff))
				a->errors++;
			kt_cqe_seen(&ring);
			got++;
		}
	}
	kt_ring_exit(&ring);
	return NULL;
}

TEST(two_thread_stress)
{
	struct kt_ctx *ctx = echo_ctx(2, 0);
	struct stress_arg a[2] = {
		{ .n = 200000, .base = 0 },
		{ .n = 200000, .base = 1ull << 32 },
	};
	pthread_t t[2];
	int i;

	ASSERT_NE(ctx, NULL);
	for (i = 0; i < 2; i++) {
		a[i].ctx = ctx;
		ASSERT_EQ(pthread_create(&t[i], NULL, stress_thread, &a[i]), 0);
	}
	for (i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		EXPECT_EQ(a[i].errors, 0);
	}
	kt_ctx_destroy(ctx);
}

TEST(eventfd_signals_completion)
{
	struct kt_ctx *ctx = echo_ctx(1, 0);
	struct kt_ring ring;
	struct kt_cqe *cqe;
	struct pollfd pfd;
	uint64_t v;
	int efd = eventfd(0, EFD_CLOEXEC);

	ASSERT_NE(ctx, NULL);
	ASSERT_GE(efd, 0);
	ASSERT_EQ(kt_ring_init(ctx, 2, &ring), 0);
	ASSERT_EQ(kt_ring_register_eventfd(&ring, efd), 0);
	kt_prep_nop(kt_get_sqe(&ring), 42);
	kt_submit(&ring);
	pfd = (struct pollfd){ .fd = efd, .events = POLLIN };
	ASSERT_EQ(poll(&pfd, 1, 10000), 1);
	ASSERT_EQ(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
	EXPECT_EQ(v, 1);
	ASSERT_EQ(kt_peek_cqe(&ring, &cqe), 0);
	EXPECT_EQ(cqe->user_data, 42);
	EXPECT_EQ(cqe->res, 0);
	kt_cqe_seen(&ring);
	kt_ring_exit(&ring);
	close(efd);
	kt_ctx_destroy(ctx);
}

TEST(unknown_opcode)
{
	struct kt_ctx *ctx = echo_ctx(1, 0);
	struct kt_ring ring;
	struct kt_cqe *cqe;
	struct kt_sqe *sqe;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(kt_ring_init(ctx, 2, &ring), 0);
	sqe = kt_get_sqe(&ring);
	kt_prep_nop(sqe, 9);
	sqe->opcode = 77;
	kt_submit(&ring);
	ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
	EXPECT_EQ(cqe->res, -EINVAL);
	kt_cqe_seen(&ring);
	kt_ring_exit(&ring);
	kt_ctx_destroy(ctx);
}

TEST_HARNESS_MAIN
