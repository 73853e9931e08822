// SPDX-License-Identifier: MIT
/*
 * variants.c - every SIMD kernel variant the CPU runs (AVX2, AVX-VNNI,
 * AVX-512, AMX) against the scalar oracle, for INT8, INT4 (each group
 * size), BF16, MXFP4 and the GGUF blocks; tolerances in check.h.
 */
#include "kt_test.h"
#include "isa-variants.h"
#include "simd/check.h"
#include "ktcore/core.h"
#include "kernels/mxfp4.h"
#include "kernels/simd.h"

/* Whether this CPU runs @isa: cpuid, XCR0 and the AMX permission agree. */
static int cpu_runs(enum kt_isa isa)
{
	return core_isa_runs(isa, core_cpu_flags());
}

/*
 * ops.c reaches the variants through weak references, which do not pull
 * their objects out of libkt.a; these strong ones do.
 */
const struct kern_ops *const sc_linked[] = {
	&kern_ops_avx2,
	&kern_ops_avxvnni,
	&kern_ops_avx512,
};

static const struct sc_case cases[] = {
	{ .T = 1 },
	{ .T = 3 },
	{ .T = 17 },
	{ .T = 33 },
	{ .T = 300 },		/* one expert with every token: two calls */
	{ .T = 5, .n0 = 128, .n1 = 384, .dn0 = 256, .dn1 = 512 },
	{ .T = 9, .c0 = 1, .c1 = 2 },	/* one NUMA node's chunk */
	{ .T = 2, .n0 = 496, .n1 = 512, .dn0 = 16, .dn1 = 32 },
};

static double tol_of(enum kt_quant q, enum kt_isa isa)
{
	return sc_tol(q, kern_mxfp4_int16(isa));
}

/*
 * All cases on two geometries: I = 512 (four chunks of KC) and I = 640 (five
 * chunks, so a chunk range need not start at 0), T = 300 on the first. The
 * GGUF blocks' rows are whole super-blocks of 256: their second I is 768.
 */
static int check_ops(struct kt_test_meta *_metadata, enum kt_isa isa,
		     const struct kern_ops *ops, enum kt_quant q,
		     unsigned int group)
{
	const struct kern_quant_ops *v = kern_quant_ops_get(ops, q);
	static const unsigned int geo[][2] = { { 512, 512 }, { 256, 640 } };
	unsigned int gi, ci, I;

	if (!cpu_runs(isa)) {
		SKIP(return 0, "CPU lacks %s", kt_isa_name(isa));
	}
	if (!v) {
		SKIP(return 0, "%s has no %s kernels", kt_isa_name(isa),
		     kt_quant_name(q));
	}
	for (gi = 0; gi < 2; gi++) {
		struct sc_expert e;

		I = gi && kern_quant_is_gguf(q) ? 768 : geo[gi][1];
		ASSERT_EQ(sc_expert_make(&e, q, geo[gi][0], I, group, 42 + gi),
			  0);
		for (ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
			struct sc_case c = cases[ci];
			double err;

			/* the 300-token case once, and not for GGUF (isa.c
			 * splits their calls): the oracle is slow */
			if (c.n1 > e.l.inter || c.dn1 > e.l.hidden ||
			    c.c1 > e.l.inter / e.l.kc ||
			    ((gi || kern_quant_is_gguf(q)) && c.T > 256))
				continue;
			err = sc_run(v, &e, &c, 1000 + ci);
			if (err < 0 || err > tol_of(q, isa) / 10)
				TH_LOG("%s %s g%u H%u I%u T%u: rel err %.3g",
				       kt_isa_name(isa), kt_quant_name(q),
				       group, e.l.hidden, e.l.inter, c.T, err);
			EXPECT_GE(err, 0.0);
			EXPECT_LE(err, tol_of(q, isa));
		}
		free(e.blob);
	}
	return 0;
}

FIXTURE(isa) {
	const struct kern_ops *ops;
};

/*
 * @isa: the variant whose CPU features the test needs.
 * @ops: the table to test; NULL: kern_ops_get(@isa).
 */
FIXTURE_VARIANT(isa) {
	enum kt_isa isa;
	const struct kern_ops *ops;
};

KT_SIMD_VARIANTS(isa);
/*
 * The AVX-VNNI body with EVEX vpdpbusd: runs where AVX-512 does, so that
 * the AVX-VNNI data flow is checked on CPUs without AVX-VNNI too.
 */
FIXTURE_VARIANT_ADD(isa, avxvnni_body_evex) {
	.isa = KT_ISA_AVX512, .ops = &kern_ops_avxvnni_evex,
};

FIXTURE_SETUP(isa)
{
	self->ops = variant->ops ? variant->ops : kern_ops_get(variant->isa);
}

FIXTURE_TEARDOWN(isa)
{
}

TEST_F(isa, int8) { check_ops(_metadata, variant->isa, self->ops, KT_QUANT_INT8, 0); }
TEST_F(isa, int4_g32) { check_ops(_metadata, variant->isa, self->ops, KT_QUANT_INT4, 32); }
TEST_F(isa, int4_g64) { check_ops(_metadata, variant->isa, self->ops, KT_QUANT_INT4, 64); }
TEST_F(isa, int4_g128) { check_ops(_metadata, variant->isa, self->ops, KT_QUANT_INT4, 128); }
TEST_F(isa, bf16) { check_ops(_metadata, variant->isa, self->ops, KT_QUANT_BF16, 0); }
TEST_F(isa, mxfp4) { check_ops(_metadata, variant->isa, self->ops, KT_QUANT_MXFP4, 0); }
TEST_F(isa, q8_0) { check_ops(_metadata, variant->isa, self->ops, KT_QUANT_Q8_0, 0); }
TEST_F(isa, q4_k) { check_ops(_metadata, variant->isa, self->ops, KT_QUANT_Q4_K, 0); }
TEST_F(isa, q5_k) { check_ops(_metadata, variant->isa, self->ops, KT_QUANT_Q5_K, 0); }
TEST_F(isa, q6_k) { check_ops(_metadata, variant->isa, self->ops, KT_QUANT_Q6_K, 0); }

TEST_HARNESS_MAIN
