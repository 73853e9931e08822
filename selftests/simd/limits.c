// SPDX-License-Identifier: MIT
/*
 * limits.c - kt_ctx_measure_read_bw() and kt_ctx_measure_peak() run on the
 * workers of every variant the CPU has and give plausible numbers.
 */
#include <errno.h>
#include <math.h>

#include "kt_test.h"
#include "isa-variants.h"
#include "ktcore/core.h"

static struct kt_ctx *ctx_of(enum kt_isa isa)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .isa = isa, .threads = 2 };
	struct kt_ctx *ctx = NULL;

	if (core_ctx_create(&o, NULL, NULL, &ctx))
		return NULL;
	return ctx;
}

FIXTURE(limits) {
	struct kt_ctx *ctx;
};

FIXTURE_VARIANT(limits) {
	enum kt_isa isa;
};

FIXTURE_VARIANT_ADD(limits, scalar) { .isa = KT_ISA_SCALAR };
KT_SIMD_VARIANTS(limits);

FIXTURE_SETUP(limits)
{
	if (!core_isa_runs(variant->isa, core_cpu_flags()))
		SKIP(return, "CPU lacks %s", kt_isa_name(variant->isa));
	self->ctx = ctx_of(variant->isa);
	ASSERT_NE(self->ctx, NULL);
}

FIXTURE_TEARDOWN(limits)
{
	kt_ctx_destroy(self->ctx);
}

/*
 * Bounds that a wrong unit or a lost loop would miss, wide enough for a
 * machine shared with other work: a read bandwidth between 0.01 GB/s and
 * 10 TB/s, a peak between 10 MOPS and 1 POPS.
 */
TEST_F(limits, plausible)
{
	const char *name = kt_isa_name(variant->isa);
	double gbps = 0, tops = 0;

	ASSERT_EQ(kt_ctx_measure_read_bw(self->ctx, 64 << 20, 50, &gbps), 0);
	TH_LOG("%s read %.1f GB/s", name, gbps);
	EXPECT_GT(gbps, 0.01);
	EXPECT_LT(gbps, 1e4);
	ASSERT_EQ(kt_ctx_measure_peak(self->ctx, KT_QUANT_INT8, 30, &tops), 0);
	TH_LOG("%s int8 peak %.3f TOPS", name, tops);
	EXPECT_GT(tops, 1e-5);
	EXPECT_LT(tops, 1e3);
	ASSERT_EQ(kt_ctx_measure_peak(self->ctx, KT_QUANT_BF16, 30, &tops), 0);
	TH_LOG("%s bf16 peak %.3f TOPS", name, tops);
	EXPECT_GT(tops, 1e-5);
	EXPECT_LT(tops, 1e3);
	EXPECT_EQ(kt_ctx_measure_peak(self->ctx, (enum kt_quant)99, 10, &tops),
		  -EINVAL);
}

TEST_HARNESS_MAIN
