// SPDX-License-Identifier: MIT
/*
 * pool.c - the worker pools: fork-join reaches every worker exactly once
 * with the right node split, workers sleep after the spin budget and wake
 * on the next submission, shutdown under load, counters, ISA choice.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "kt_test.h"
#include "ktcore/ctx.h"

struct fork_state {
	unsigned int hits[64];
	unsigned int node_of[64];
	unsigned int n_node[64];
	unsigned int rounds;
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

	for (r = 0; r < s->rounds; r++)
		core_ctx_run(ctx, count_job, s);
	return 0;
}

static struct kt_ctx *make_ctx(unsigned int threads, uint32_t spin_us)
{
	const core_op_fn h[KT_OP_COUNT] = { [KT_OP_MOE] = fork_op };
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = threads,
				 .spin_us = spin_us };
	struct kt_ctx *ctx = NULL;

	if (core_ctx_create(&o, h, NULL, &ctx))
		return NULL;
	return ctx;
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

TEST(sleep_then_wake)
{
	struct kt_ctx *ctx = make_ctx(2, 200);
	struct fork_state s = { 0 };
	struct kt_worker_stats st;
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	uint64_t sleeps = 0;
	unsigned int i, round;

	ASSERT_NE(ctx, NULL);
	for (round = 0; round < 5; round++) {
		ASSERT_EQ(run_rounds(ctx, &s, 1), 0);
		nanosleep(&ts, NULL);	/* longer than the 200 us budget */
	}
	for (i = 0; i < kt_ctx_threads(ctx); i++) {
		ASSERT_EQ(kt_ctx_worker_stats(ctx, i, &st), 0);
		EXPECT_EQ(st.tasks, 5u);
		sleeps += st.sleeps;
	}
	EXPECT_GE(sleeps, 4u);
	EXPECT_EQ(s.hits[0], 5u);
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

TEST(destroy_under_load)
{
	unsigned int iter;

	for (iter = 0; iter < 20; iter++) {
		struct kt_ctx *ctx = make_ctx(0, iter % 2 ? 0 : 100);
		struct fork_state s = { .rounds = 50 };
		struct kt_ring ring;
		struct kt_moe_args a = { .y = &s };
		unsigned int i;

		ASSERT_NE(ctx, NULL);
		ASSERT_EQ(kt_ring_init(ctx, 16, &ring), 0);
		for (i = 0; i < 16; i++)
			kt_prep_moe(kt_get_sqe(&ring), NULL, 0, &a, i);
		kt_submit(&ring);
		/* leave without reaping: the op in flight ends, the rest drop */
		kt_ring_exit(&ring);
		kt_ctx_destroy(ctx);
	}
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
 * The AVX-512 Xeons before Cooper Lake get a 512-bit variant: the flags of
 * Skylake-SP (no VNNI, no BF16), Cascade / Ice Lake (VNNI) and Sapphire
 * Rapids, and the fall-back order below each.
 */
TEST(isa_choice_avx512_subsets)
{
	const uint32_t skx = KT_CPU_AVX2 | KT_CPU_FMA | KT_CPU_F16C |
			     KT_CPU_AVX512F | KT_CPU_AVX512BW |
			     KT_CPU_AVX512VL | KT_CPU_AVX512DQ;
	const uint32_t clx = skx | KT_CPU_AVX512VNNI;
	const uint32_t spr = clx | KT_CPU_AVX512BF16 | KT_CPU_AVX_VNNI |
			     KT_CPU_AMX_TILE | KT_CPU_AMX_INT8 |
			     KT_CPU_AMX_BF16;
	enum kt_isa isa, n = KT_ISA_AMX;
	int seen = 0;

	EXPECT_EQ(core_isa_best(skx), KT_ISA_AVX512BW);
	EXPECT_EQ(core_isa_best(clx), KT_ISA_AVX512VNNI);
	EXPECT_EQ(core_isa_best(clx & ~KT_CPU_AVX512BW), KT_ISA_AVX2);
	EXPECT_EQ(core_isa_best(spr), KT_ISA_AMX);
	EXPECT_EQ(core_isa_best(spr & ~(KT_CPU_AMX_TILE)), KT_ISA_AVX512);
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
