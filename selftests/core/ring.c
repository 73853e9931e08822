// SPDX-License-Identifier: MIT
/*
 * ring.c - the submission/completion rings: full and empty, wrap-around of
 * the free-running indices, 64 rings on one context, two submitting
 * threads under stress, eventfd signalling, the consumer's checks of every
 * field, detached rings, timeouts, and regressions named after their bugs.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>

#include "kt_test.h"
#include "op-ctx.h"
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
	return op_ctx(echo_op, threads, spin_us);
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
				__kt_cpu_relax();
			prep_echo(sqe, round * 2 + i);
		}
		kt_submit(&ring);
		if (round == 1)
			while (__kt_load_acquire(&ring.sh->cq_tail) != 4)
				__kt_cpu_relax();
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

TEST(bad_args)
{
	struct kt_ctx *ctx = echo_ctx(1, 0);
	struct kt_ring extra;

	ASSERT_NE(ctx, NULL);
	EXPECT_EQ(kt_ring_init(ctx, 0, &extra), -EINVAL);
	EXPECT_EQ(kt_ring_init(ctx, 3, &extra), -EINVAL);
	EXPECT_EQ(kt_ring_init(ctx, 65536, &extra), -EINVAL);
	EXPECT_EQ(kt_ring_init(NULL, 4, &extra), -EINVAL);
	EXPECT_EQ(kt_ring_register_eventfd(&extra, -5), -EINVAL);
	kt_ring_exit(&extra);	/* zeroed by the failed init: no-op */
	kt_ctx_destroy(ctx);
}

static int count_exec(struct kt_ctx *ctx, void *arg)
{
	return ++*(int *)arg;
}

/*
 * Regression: the header promised 64 rings per context, but the context's
 * own synchronous ring took a slot and the 64th kt_ring_init() was -EBUSY.
 */
TEST(regress_64_rings_per_ctx_only_63_fit)
{
	struct kt_ctx *ctx = echo_ctx(1, 0);
	struct kt_ring rings[KT_RING_MAX_PER_CTX];
	struct kt_ring extra;
	struct kt_cqe *cqe;
	unsigned int i;
	int runs = 0;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(KT_RING_MAX_PER_CTX, 64);
	for (i = 0; i < KT_RING_MAX_PER_CTX; i++)
		ASSERT_EQ(kt_ring_init(ctx, 1, &rings[i]), 0);
	EXPECT_EQ(kt_ring_init(ctx, 1, &extra), -EBUSY);
	/* the private path still works with every slot taken, and so does
	 * the last ring */
	EXPECT_EQ(core_ctx_exec(ctx, count_exec, &runs), 1);
	kt_prep_nop(kt_get_sqe(&rings[63]), 63);
	kt_submit(&rings[63]);
	ASSERT_EQ(kt_wait_cqe(&rings[63], &cqe), 0);
	EXPECT_EQ(cqe->user_data, 63);
	EXPECT_EQ(cqe->res, 0);
	kt_cqe_seen(&rings[63]);
	for (i = 0; i < KT_RING_MAX_PER_CTX; i++)
		kt_ring_exit(&rings[i]);
	ASSERT_EQ(kt_ring_init(ctx, 1, &extra), 0);
	kt_ring_exit(&extra);
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

/* ---- the consumer's checks ------------------------------------------------ */

static char last_log[512];
static unsigned int n_logs;

static void keep_log(void *arg, enum kt_log_level level, const char *msg)
{
	snprintf(last_log, sizeof(last_log), "%s", msg);
	n_logs++;
}

static struct kt_ctx *debug_ctx(void)
{
	const core_op_fn h[KT_OP_COUNT] = { [KT_OP_MOE] = echo_op };
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 1,
				 .log_fn = keep_log,
				 .log_level = KT_CTX_LOG_LEVEL(KT_LOG_DEBUG) };
	struct kt_ctx *ctx = NULL;

	if (core_ctx_create(&o, h, NULL, &ctx))
		return NULL;
	return ctx;
}

/* Submit @sqe as is; the completion's res. */
static int run_raw(struct kt_ring *ring, const struct kt_sqe *tmpl)
{
	struct kt_cqe *cqe;
	struct kt_sqe *sqe = kt_get_sqe(ring);
	int res;

	if (!sqe)
		return -ENOSPC;
	*sqe = *tmpl;
	kt_submit(ring);
	if (kt_wait_cqe(ring, &cqe))
		return -ENOSPC;
	res = cqe->res;
	kt_cqe_seen(ring);
	return res;
}

static int worker_calls;

static int note_call(struct kt_ctx *ctx, void *arg)
{
	__atomic_add_fetch(&worker_calls, 1, __ATOMIC_RELAXED);
	return 0;
}

/*
 * Regression: opcode 0xff (the old private CORE_OP_EXEC) made the leader
 * call sqe->reserved[0] with reserved[1], from any user ring; a stray
 * 0x4141... there killed the process with SIGSEGV.
 */
TEST(regress_opcode_0xff_calls_reserved_as_function)
{
	struct kt_ctx *ctx = echo_ctx(1, 0);
	struct kt_ring ring;
	struct kt_sqe sqe;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(kt_ring_init(ctx, 2, &ring), 0);
	kt_prep_nop(&sqe, 1);
	sqe.opcode = 0xff;
	sqe.reserved[0] = 0x4141414141414141ull;
	sqe.reserved[1] = 0x4242424242424242ull;
	EXPECT_EQ(run_raw(&ring, &sqe), -EINVAL);
	/* a real function there is not called either */
	sqe.reserved[0] = (uint64_t)(uintptr_t)note_call;
	sqe.reserved[1] = 0;
	EXPECT_EQ(run_raw(&ring, &sqe), -EINVAL);
	kt_prep_nop(&sqe, 2);
	sqe.opcode = 0xff;
	EXPECT_EQ(run_raw(&ring, &sqe), -EINVAL);
	EXPECT_EQ(worker_calls, 0);
	kt_ring_exit(&ring);
	kt_ctx_destroy(ctx);
}

/* Each field no op may set: the op fails with -EINVAL, and the debug log
 * names the field. */
TEST(nonzero_reserved_pad_and_flags_are_rejected)
{
	struct kt_ctx *ctx = debug_ctx();
	struct kt_ring ring;
	struct kt_sqe sqe;
	struct kt_moe_args a = { .tokens = 1, .top_k = 7 };
	static const char want[][20] = {
		"pad[0]", "pad[5]", "reserved[0]", "reserved[2]",
		"flags", "opcode", "moe.pad0", "moe.pad1",
		"moe.reserved[0]", "moe.reserved[1]", "moe.flags",
		"NOP has a model", "NOP has moe",
	};
	unsigned int i;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(kt_ring_init(ctx, 2, &ring), 0);
	kt_prep_moe(&sqe, NULL, 0, &a, 1);
	EXPECT_EQ(run_raw(&ring, &sqe), 1);	/* the clean entry works */
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		kt_prep_moe(&sqe, NULL, 0, &a, 100 + i);
		switch (i) {
		case 0: sqe.pad[0] = 1; break;
		case 1: sqe.pad[5] = 0x80; break;
		case 2: sqe.reserved[0] = 1; break;
		case 3: sqe.reserved[2] = 1ull << 63; break;
		case 4: sqe.flags = 1; break;
		case 5: sqe.opcode = KT_OP_COUNT; break;
		case 6: sqe.moe.pad0 = 1; break;
		case 7: sqe.moe.pad1 = 1; break;
		case 8: sqe.moe.reserved[0] = 1; break;
		case 9: sqe.moe.reserved[1] = 1; break;
		case 10: sqe.moe.flags = 1u << 31; break;
		case 11:
			kt_prep_nop(&sqe, 100 + i);
			sqe.model = (struct kt_model *)&sqe;
			break;
		case 12:
			kt_prep_nop(&sqe, 100 + i);
			sqe.moe.tokens = 1;
			break;
		}
		last_log[0] = 0;
		EXPECT_EQ(run_raw(&ring, &sqe), -EINVAL);
		if (!strstr(last_log, want[i]))
			TH_LOG("case %u: log \"%s\" does not name %s", i,
			       last_log, want[i]);
		EXPECT_NE(strstr(last_log, want[i]), NULL);
	}
	kt_ring_exit(&ring);
	kt_ctx_destroy(ctx);
}

/* The same checks guard kt_moe_forward(), which runs without a ring. */
TEST(moe_forward_checks_reserved)
{
	struct kt_ctx *ctx = echo_ctx(1, 0);
	struct kt_moe_args a = { .tokens = 3, .top_k = 0 };

	ASSERT_NE(ctx, NULL);
	EXPECT_EQ(kt_moe_forward(ctx, NULL, &a), 3);
	a.reserved[1] = 5;
	EXPECT_EQ(kt_moe_forward(ctx, NULL, &a), -EINVAL);
	a.reserved[1] = 0;
	a.flags = 1u << 31;	/* no such flag (2 is KT_MOE_F_DEVICE) */
	EXPECT_EQ(kt_moe_forward(ctx, NULL, &a), -EINVAL);
	kt_ctx_destroy(ctx);
}

/* Every prep helper writes every byte of the entry (a reused slot keeps
 * no stale bytes). */
TEST(prep_writes_every_field)
{
	struct kt_moe_args a = { .tokens = 9, .top_k = 2, .flags = 1,
				 .x_dtype = 1 };
	struct kt_sqe sqe, want;
	unsigned char *p = (unsigned char *)&sqe;
	unsigned int i;

	memset(&sqe, 0xa5, sizeof(sqe));
	kt_prep_nop(&sqe, 77);
	EXPECT_EQ(sqe.opcode, KT_OP_NOP);
	EXPECT_EQ(sqe.user_data, 77);
	for (i = 0; i < sizeof(sqe); i++)
		if (i < offsetof(struct kt_sqe, user_data) ||
		    i >= offsetof(struct kt_sqe, model))
			ASSERT_EQ(p[i], i == 0 ? KT_OP_NOP : 0);

	memset(&want, 0, sizeof(want));
	want.opcode = KT_OP_MOE;
	want.user_data = 78;
	want.model = (struct kt_model *)&a;
	want.moe = a;
	want.moe.layer = 3;
	memset(&sqe, 0x5a, sizeof(sqe));
	kt_prep_moe(&sqe, (struct kt_model *)&a, 3, &a, 78);
	EXPECT_EQ(memcmp(&sqe, &want, sizeof(sqe)), 0);
}

/* ---- detached rings --------------------------------------------------------- */

/*
 * Regression: kt_wait_cqe() on a ring after kt_ring_exit() dereferenced
 * NULL in kt_peek_cqe(), though the header documented -EINVAL.
 */
TEST(regress_wait_cqe_after_ring_exit_derefs_null)
{
	struct kt_ctx *ctx = echo_ctx(1, 0);
	struct kt_ring ring;
	struct kt_cqe *cqe;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(kt_ring_init(ctx, 2, &ring), 0);
	kt_ring_exit(&ring);
	EXPECT_EQ(kt_wait_cqe(&ring, &cqe), -EINVAL);
	EXPECT_EQ(kt_peek_cqe(&ring, &cqe), -EINVAL);
	EXPECT_EQ(kt_wait_cqe_timeout(&ring, &cqe, 1000), -EINVAL);
	EXPECT_EQ(kt_submit(&ring), -EINVAL);
	ASSERT_NULL(kt_get_sqe(&ring));
	EXPECT_EQ(kt_ring_register_eventfd(&ring, -1), -EINVAL);
	kt_ring_exit(&ring);	/* twice: nothing happens */
	kt_ctx_destroy(ctx);
}

/*
 * Regression: kt_ring_exit() after kt_ctx_destroy() read the freed
 * context. The context now cuts its rings off when destroyed; the ring's
 * own memory is freed by kt_ring_exit() (ASan checks both).
 */
TEST(regress_ring_exit_after_ctx_destroy_use_after_free)
{
	struct kt_ctx *ctx = debug_ctx();
	struct kt_ring ring;
	struct kt_cqe *cqe;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(kt_ring_init(ctx, 2, &ring), 0);
	kt_prep_nop(kt_get_sqe(&ring), 5);
	kt_submit(&ring);
	ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
	kt_cqe_seen(&ring);
	n_logs = 0;
	kt_ctx_destroy(ctx);
	EXPECT_EQ(n_logs, 1u);
	EXPECT_NE(strstr(last_log, "kt_ring_exit"), NULL);
	EXPECT_EQ(kt_wait_cqe(&ring, &cqe), -EINVAL);
	EXPECT_EQ(kt_peek_cqe(&ring, &cqe), -EAGAIN);
	kt_ring_exit(&ring);
	ASSERT_NULL(ring.sh);
	ASSERT_NULL(ring.ctx);
}

TEST(wait_cqe_timeout)
{
	struct kt_ctx *ctx = echo_ctx(1, KT_CTX_SPIN_NONE);
	struct kt_ring ring;
	struct kt_cqe *cqe;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(kt_ring_init(ctx, 2, &ring), 0);
	EXPECT_EQ(kt_wait_cqe_timeout(&ring, &cqe, 0), -ETIME);
	EXPECT_EQ(kt_wait_cqe_timeout(&ring, &cqe, 1000 * 1000), -ETIME);
	kt_ring_set_spin(&ring, 0);
	EXPECT_EQ(kt_wait_cqe_timeout(&ring, &cqe, 1000), -ETIME);
	kt_prep_nop(kt_get_sqe(&ring), 11);
	kt_submit(&ring);
	/* a generous bound: the point is the result, not the time */
	ASSERT_EQ(kt_wait_cqe_timeout(&ring, &cqe, 60ull * 1000000000), 0);
	EXPECT_EQ(cqe->user_data, 11);
	kt_cqe_seen(&ring);
	EXPECT_EQ(kt_wait_cqe_timeout(NULL, &cqe, 0), -EINVAL);
	kt_ring_exit(&ring);
	kt_ctx_destroy(ctx);
}

/* ---- kt_ring_exit() sleeps while an op runs ------------------------------ */

static uint32_t op_started, op_release, op_finished, exit_entered;
static pid_t exit_tid;

static int block_op(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	__atomic_store_n(&op_started, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&op_release, __ATOMIC_ACQUIRE))
		usleep(1000);
	__atomic_store_n(&op_finished, 1, __ATOMIC_RELEASE);
	return 0;
}

static void *exit_thread(void *p)
{
	struct kt_ring *ring = p;

	__atomic_store_n(&exit_tid, (pid_t)syscall(SYS_gettid),
			 __ATOMIC_RELEASE);
	__atomic_store_n(&exit_entered, 1, __ATOMIC_RELEASE);
	kt_ring_exit(ring);
	/* the op had ended when exit returned */
	return (void *)(uintptr_t)__atomic_load_n(&op_finished,
						  __ATOMIC_ACQUIRE);
}

/* The scheduler state of thread @tid: 'R' running or runnable, 'S'... */
static char thread_state(pid_t tid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return '?';
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : '?';
}

/*
 * kt_ring_exit() waits for the op the leader runs, asleep: the old exit
 * polled the epoch for as long as the op ran. The test waits (without a
 * time limit of its own) until the exiting thread sleeps while the op is
 * still blocked; a polling exit never sleeps and the test times out.
 */
TEST_TIMEOUT(ring_exit_sleeps_while_op_runs, 60)
{
	const core_op_fn h[KT_OP_COUNT] = { [KT_OP_MOE] = block_op };
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 1 };
	struct kt_moe_args a = { 0 };
	struct kt_ctx *ctx = NULL;
	struct kt_ring ring;
	pthread_t t;
	void *saw_finished;

	if (access("/proc/self/task", R_OK))
		SKIP(return, "no /proc/self/task to read thread states");
	ASSERT_EQ(core_ctx_create(&o, h, NULL, &ctx), 0);
	ASSERT_EQ(kt_ring_init(ctx, 2, &ring), 0);
	kt_prep_moe(kt_get_sqe(&ring), NULL, 0, &a, 1);
	kt_submit(&ring);
	while (!__atomic_load_n(&op_started, __ATOMIC_ACQUIRE))
		sched_yield();
	ASSERT_EQ(pthread_create(&t, NULL, exit_thread, &ring), 0);
	while (!__atomic_load_n(&exit_entered, __ATOMIC_ACQUIRE))
		sched_yield();
	while (thread_state(__atomic_load_n(&exit_tid, __ATOMIC_ACQUIRE)) !=
	       'S')
		usleep(1000);
	EXPECT_EQ(__atomic_load_n(&op_finished, __ATOMIC_ACQUIRE), 0u);
	__atomic_store_n(&op_release, 1, __ATOMIC_RELEASE);
	ASSERT_EQ(pthread_join(t, &saw_finished), 0);
	EXPECT_EQ((uintptr_t)saw_finished, 1u);
	ASSERT_NULL(ring.sh);
	kt_ctx_destroy(ctx);
}

TEST_HARNESS_MAIN
