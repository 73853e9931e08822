// SPDX-License-Identifier: MIT
/*
 * limits.c - kt_ctx_measure_read_bw() and kt_ctx_measure_peak() run on the
 * workers of every variant the CPU has and give plausible numbers.
 */
#include <errno.h>
#include <math.h>

#include "kt_test.h"
#include "ktcore/core.h"

static struct kt_ctx *ctx_of(enum kt_isa isa)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .isa = isa, .threads = 2 };
	struct kt_ctx *ctx = NULL;

	if (core_ctx_create(&o, NULL, NULL, &ctx))
		return NULL;
	return ctx;
}

/*
 * Bounds that a wrong unit or a lost loop would miss: a read bandwidth
 * between 0.1 GB/s and 10 TB/s, a peak between 1 GOPS and 1 POPS.
 */
static void check_isa(struct kt_test_meta *_metadata, enum kt_isa isa)
{
	struct kt_ctx *ctx;
	double gbps = 0, tops = 0;

	if (!core_isa_runs(isa, core_cpu_flags()))
		SKIP(return, "CPU lacks %s", kt_isa_name(isa));
	ctx = ctx_of(isa);
	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(kt_ctx_measure_read_bw(ctx, 64 << 20, 50, &gbps), 0);
	TH_LOG("%s read %.1f GB/s", kt_isa_name(isa), gbps);
	EXPECT_GT(gbps, 0.1);
	EXPECT_LT(gbps, 1e4);
	ASSERT_EQ(kt_ctx_measure_peak(ctx, KT_QUANT_INT8, 30, &tops), 0);
	TH_LOG("%s int8 peak %.3f TOPS", kt_isa_name(isa), tops);
	EXPECT_GT(tops, 1e-3);
	EXPECT_LT(tops, 1e3);
	ASSERT_EQ(kt_ctx_measure_peak(ctx, KT_QUANT_BF16, 30, &tops), 0);
	TH_LOG("%s bf16 peak %.3f TOPS", kt_isa_name(isa), tops);
	EXPECT_GT(tops, 1e-3);
	EXPECT_LT(tops, 1e3);
	EXPECT_EQ(kt_ctx_measure_peak(ctx, (enum kt_quant)99, 10, &tops),
		  -EINVAL);
	kt_ctx_destroy(ctx);
}

TEST(scalar) { check_isa(_metadata, KT_ISA_SCALAR); }
TEST(avx2) { check_isa(_metadata, KT_ISA_AVX2); }
TEST(avxvnni) { check_isa(_metadata, KT_ISA_AVX_VNNI); }
TEST(avx512) { check_isa(_metadata, KT_ISA_AVX512); }
TEST(amx) { check_isa(_metadata, KT_ISA_AMX); }
TEST(avx512vnni) { check_isa(_metadata, KT_ISA_AVX512VNNI); }
TEST(avx512bw) { check_isa(_metadata, KT_ISA_AVX512BW); }

TEST_HARNESS_MAIN
