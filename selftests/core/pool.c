// SPDX-License-Identifier: MIT
/*
 * pool.c - the worker pools: fork-join reaches every worker exactly once
 * with the right node split, workers sleep after the spin budget and wake
 * on the next submission, shutdown under load, counters, ISA choice.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "kt_test.h"
#include "op-ctx.h"
#include "ktcore/ctx.h"

struct fork_state {
	unsigned int hits[64];
	unsigned int node_of[64];
	unsigned int n_node[64];
	unsigned int rounds;
	unsigned int ops_started;	/* fork_op calls begun */
	unsigned int ops_done;		/* and ended */
};

static void count_job(void *arg, const struct core_worker_info *w)
{
	struct fork_state *s = arg;

	__atomic_add_fetch(&s->hits[w->global], 1, __ATOMIC_RELAXED);
	s->node_of[w->global] = w->node_idx;
	s->n_node[w->global] = w->n_node;
}

static int fork_op(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	struct fork_state *s = (struct fork_state *)sqe->moe.y;
	unsigned int r;

	__atomic_add_fetch(&s->ops_started, 1, __ATOMIC_RELAXED);
	for (r = 0; r < s->rounds; r++)
		core_ctx_run(ctx, count_job, s);
	__atomic_add_fetch(&s->ops_done, 1, __ATOMIC_RELEASE);
	return 0;
}

static struct kt_ctx *make_ctx(unsigned int threads, uint32_t spin_us)
{
	return op_ctx(fork_op, threads, spin_us);
}

static int run_rounds(struct kt_ctx *ctx, struct fork_state *s,
		      unsigned int rounds)
{
	struct kt_moe_args a = { .y = s };

	s->rounds = rounds;
	return kt_moe_forward(ctx, NULL, &a);
}

TEST(fork_join_reaches_every_worker)
{
	struct kt_ctx *ctx = make_ctx(0, 0);
	struct fork_state s = { 0 };
	unsigned int i, n;

	ASSERT_NE(ctx, NULL);
	n = kt_ctx_threads(ctx);
	ASSERT_GE(n, 1u);
	ASSERT_EQ(run_rounds(ctx, &s, 1000), 0);
	for (i = 0; i < n; i++)
		EXPECT_EQ(s.hits[i], 1000u);
	kt_ctx_destroy(ctx);
}

TEST(fake_two_nodes_split)
{
	struct fork_state s = { 0 };
	struct kt_ctx *ctx;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		SKIP(return, "needs 2 CPUs to fake 2 NUMA nodes");
	setenv("KT_FAKE_NUMA", "2", 1);
	ctx = make_ctx(0, 0);
	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(core_ctx_nodes(ctx), 2u);
	ASSERT_EQ(run_rounds(ctx, &s, 10), 0);
	EXPECT_EQ(s.node_of[0], 0u);
	EXPECT_EQ(s.node_of[kt_ctx_threads(ctx) - 1], 1u);
	EXPECT_EQ(s.hits[0], 10u);
	EXPECT_EQ(s.hits[kt_ctx_threads(ctx) - 1], 10u);
	kt_ctx_destroy(ctx);
}

/* The fewest sleeps any worker of @ctx has counted. */
static uint64_t min_sleeps(struct kt_ctx *ctx)
{
	struct kt_worker_stats st;
	uint64_t min = UINT64_MAX;
	unsigned int i;

	for (i = 0; i < kt_ctx_threads(ctx); i++)
		if (!kt_ctx_worker_stats(ctx, i, &st) && st.sleeps < min)
			min = st.sleeps;
	return min;
}

/*
 * Workers go to sleep once their spin budget is spent, and the next op
 * wakes every one of them. No sleeps of our own: each round waits until
 * every worker has counted one more sleep (the test's timeout is the only
 * bound), then submits, and the op must reach every worker.
 */
TEST(sleep_then_wake)
{
	struct kt_ctx *ctx = make_ctx(2, 200);
	struct fork_state s = { 0 };
	struct kt_worker_stats st;
	uint64_t min, prev_min = 0;
	unsigned int i, round;

	ASSERT_NE(ctx, NULL);
	for (round = 0; round < 5; round++) {
		ASSERT_EQ(run_rounds(ctx, &s, 1), 0);
		do {
			sched_yield();
			min = min_sleeps(ctx);
		} while (min <= prev_min);
		prev_min = min;
	}
	ASSERT_EQ(run_rounds(ctx, &s, 1), 0);
	for (i = 0; i < kt_ctx_threads(ctx); i++) {
		ASSERT_EQ(kt_ctx_worker_stats(ctx, i, &st), 0);
		EXPECT_EQ(st.tasks, 6u);
		EXPECT_GE(st.sleeps, 5u);
		EXPECT_EQ(s.hits[i], 6u);
	}
	EXPECT_EQ(kt_ctx_worker_stats(ctx, 999, &st), -EINVAL);
	kt_ctx_destroy(ctx);
}

TEST(no_spin_sleeps_at_once)
{
	struct kt_ctx *ctx = make_ctx(2, KT_CTX_SPIN_NONE);
	struct fork_state s = { 0 };
	unsigned int r;

	ASSERT_NE(ctx, NULL);
	for (r = 0; r < 200; r++)
		ASSERT_EQ(run_rounds(ctx, &s, 3), 0);
	EXPECT_EQ(s.hits[0], 600u);
	kt_ctx_destroy(ctx);
}

/*
 * Destroy contexts whose workers are falling asleep (no spin) right as
 * the stop comes: a worker that checked the stop flag just before it was
 * set must still wake (a lost wake-up hangs kt_ctx_destroy()).
 */
TEST(destroy_as_workers_fall_asleep)
{
	struct fork_state s = { 0 };
	unsigned int r;

	for (r = 0; r < 2000; r++) {
		struct kt_ctx *ctx = make_ctx(2, KT_CTX_SPIN_NONE);

		ASSERT_NE(ctx, NULL);
		ASSERT_EQ(run_rounds(ctx, &s, 1), 0);
		kt_ctx_destroy(ctx);
	}
	EXPECT_EQ(s.hits[0], 2000u);
}

/*
 * Exit a ring and destroy the context with ops queued and one running:
 * every op that started ran its 50 fork-joins to the end on every worker
 * before kt_ring_exit() returned, and none started after it.
 */
TEST(destroy_under_load)
{
	unsigned int iter, ran = 0;

	for (iter = 0; iter < 20; iter++) {
		struct kt_ctx *ctx = make_ctx(0, iter % 2 ? 0 : 100);
		struct fork_state s = { .rounds = 50 };
		struct kt_ring ring;
		struct kt_moe_args a = { .y = &s };
		unsigned int i, n, after_exit;

		ASSERT_NE(ctx, NULL);
		n = kt_ctx_threads(ctx);
		ASSERT_EQ(kt_ring_init(ctx, 16, &ring), 0);
		for (i = 0; i < 16; i++)
			kt_prep_moe(kt_get_sqe(&ring), NULL, 0, &a, i);
		EXPECT_EQ(kt_submit(&ring), 16);
		/* leave while the first op runs, without reaping: the op in
		 * flight ends, the ones not taken yet are dropped */
		while (!__atomic_load_n(&s.ops_started, __ATOMIC_ACQUIRE))
			sched_yield();
		kt_ring_exit(&ring);
		after_exit = __atomic_load_n(&s.ops_started, __ATOMIC_ACQUIRE);
		EXPECT_EQ(__atomic_load_n(&s.ops_done, __ATOMIC_ACQUIRE),
			  after_exit);
		kt_ctx_destroy(ctx);
		EXPECT_EQ(s.ops_started, after_exit);
		EXPECT_GE(s.ops_started, 1u);
		EXPECT_LE(s.ops_started, 16u);
		for (i = 0; i < n; i++)
			EXPECT_EQ(s.hits[i], 50 * s.ops_started);
		ran += s.ops_started;
	}
	TH_LOG("%u of 320 ops ran before their ring was exited", ran);
}

static int exec_fn(struct kt_ctx *ctx, void *arg)
{
	struct fork_state *s = arg;

	core_ctx_run(ctx, count_job, s);
	return 1234;
}

TEST(exec_runs_on_leader)
{
	struct kt_ctx *ctx = make_ctx(0, 0);
	struct fork_state s = { 0 };

	ASSERT_NE(ctx, NULL);
	EXPECT_EQ(core_ctx_exec(ctx, exec_fn, &s), 1234);
	EXPECT_EQ(s.hits[0], 1u);
	kt_ctx_destroy(ctx);
}

struct exec_arg {
	struct kt_ctx *ctx;
	unsigned int *count;	/* bumped on the leader, not atomically */
	int bad;
};

static int bump_exec(struct kt_ctx *ctx, void *arg)
{
	return (int)++*(unsigned int *)arg;
}

static void *exec_thread(void *p)
{
	struct exec_arg *e = p;
	unsigned int i;

	for (i = 0; i < 500; i++)
		if (core_ctx_exec(e->ctx, bump_exec, e->count) <= 0)
			e->bad++;
	return NULL;
}

/* The private job slot serialises its callers: 4 threads x 500 plain
 * increments on the leader add up, each call gets its own result. */
TEST(exec_from_many_threads)
{
	struct kt_ctx *ctx = make_ctx(2, KT_CTX_SPIN_NONE);
	struct exec_arg e[4];
	unsigned int count = 0;
	pthread_t t[4];
	int i;

	ASSERT_NE(ctx, NULL);
	for (i = 0; i < 4; i++) {
		e[i] = (struct exec_arg){ .ctx = ctx, .count = &count };
		ASSERT_EQ(pthread_create(&t[i], NULL, exec_thread, &e[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		EXPECT_EQ(e[i].bad, 0);
	}
	EXPECT_EQ(count, 2000u);
	EXPECT_EQ(core_ctx_exec(ctx, NULL, NULL), -EINVAL);
	kt_ctx_destroy(ctx);
}

TEST(isa_choice)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 1 };
	uint32_t f = core_cpu_flags();
	struct kt_ctx *ctx = NULL;

	setenv("KT_ISA", "nonsense", 1);
	EXPECT_EQ(core_ctx_create(&o, NULL, NULL, &ctx), -EINVAL);
	setenv("KT_ISA", "scalar", 1);
	ASSERT_EQ(core_ctx_create(&o, NULL, NULL, &ctx), 0);
	EXPECT_EQ(kt_ctx_isa(ctx), KT_ISA_SCALAR);
	kt_ctx_destroy(ctx);
	unsetenv("KT_ISA");
	ASSERT_EQ(core_ctx_create(&o, NULL, NULL, &ctx), 0);
	EXPECT_EQ(kt_ctx_isa(ctx), core_isa_best(f));
	kt_ctx_destroy(ctx);
	if (!core_isa_runs(KT_ISA_AMX, f)) {
		o.isa = KT_ISA_AMX;
		EXPECT_EQ(core_ctx_create(&o, NULL, NULL, &ctx), -EOPNOTSUPP);
	}
	o.sz = 4;
	EXPECT_EQ(core_ctx_create(&o, NULL, NULL, &ctx), -EINVAL);
}

/*
 * The AVX-512 Xeons before Sapphire Rapids get a 512-bit variant: the
 * flags of Skylake-SP (no VNNI, no BF16), Cascade / Ice Lake (VNNI), Cooper
 * Lake (BF16 but no VBMI: avx512vnni) and Sapphire Rapids, and the
 * fall-back order below each.
 */
TEST(isa_choice_avx512_subsets)
{
	const uint32_t skx = KT_CPU_AVX2 | KT_CPU_FMA | KT_CPU_F16C |
			     KT_CPU_AVX512F | KT_CPU_AVX512BW |
			     KT_CPU_AVX512VL | KT_CPU_AVX512DQ;
	const uint32_t clx = skx | KT_CPU_AVX512VNNI;
	/* Cooper Lake: BF16 without VBMI, which FP8 widens with */
	const uint32_t cpx = clx | KT_CPU_AVX512BF16;
	const uint32_t spr = cpx | KT_CPU_AVX512VBMI | KT_CPU_AVX_VNNI |
			     KT_CPU_AMX_TILE | KT_CPU_AMX_INT8 |
			     KT_CPU_AMX_BF16;
	enum kt_isa isa, n = KT_ISA_AMX;
	int seen = 0;

	EXPECT_EQ(core_isa_best(skx), KT_ISA_AVX512BW);
	EXPECT_EQ(core_isa_best(clx), KT_ISA_AVX512VNNI);
	EXPECT_EQ(core_isa_best(clx & ~KT_CPU_AVX512BW), KT_ISA_AVX2);
	EXPECT_EQ(core_isa_best(spr), KT_ISA_AMX);
	EXPECT_EQ(core_isa_best(spr & ~(KT_CPU_AMX_TILE)), KT_ISA_AVX512);
	EXPECT_EQ(core_isa_best(cpx), KT_ISA_AVX512VNNI);
	EXPECT_EQ(core_isa_best(spr & ~KT_CPU_AVX512VBMI), KT_ISA_AVX512VNNI);
	EXPECT_FALSE(core_isa_runs(KT_ISA_AVX512, clx));
	EXPECT_TRUE(core_isa_runs(KT_ISA_AVX512BW, spr));
	/* every variant once, from the best down to scalar */
	for (isa = n; isa != KT_ISA_AUTO; isa = core_isa_lower(isa))
		seen |= 1 << isa;
	EXPECT_EQ(seen, (1 << KT_ISA_COUNT) - 1 - (1 << KT_ISA_AUTO));
	EXPECT_EQ(core_isa_lower(KT_ISA_AVX512), KT_ISA_AVX512VNNI);
	EXPECT_EQ(core_isa_lower(KT_ISA_AVX512VNNI), KT_ISA_AVX512BW);
	EXPECT_EQ(core_isa_lower(KT_ISA_SCALAR), KT_ISA_AUTO);
}

TEST(sysinfo_is_sane)
{
	struct kt_sysinfo si;
	unsigned int i, cores = 0;

	ASSERT_EQ(kt_sysinfo_get(&si), 0);
	ASSERT_GE(si.n_nodes, 1u);
	for (i = 0; i < si.n_nodes; i++)
		cores += si.node_cores[i];
	EXPECT_GE(cores, 1u);
	EXPECT_LE(cores, (unsigned int)sysconf(_SC_NPROCESSORS_ONLN));
	EXPECT_EQ(si.best_isa, core_isa_best(si.cpu_flags));
	EXPECT_EQ(strcmp(kt_isa_name(KT_ISA_AVX512), "avx512"), 0);
}

TEST_HARNESS_MAIN
