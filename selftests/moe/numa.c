// SPDX-License-Identifier: MIT
/*
 * numa.c - the intermediate dimension split over NUMA nodes: shares that
 * differ by at most one KC chunk; y on 2 to 4 (fake) nodes equal to one
 * node's up to the f32 reassociation of the per-node partial sums, and the
 * same bits on every run with the same node count.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt_test.h"
#include "kernels/layout.h"
#include "kernels/pack.h"
#include "ktcore/core.h"
#include "model.h"

/* I of the bench presets: qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3. */
static const unsigned int preset_inter[] = { 768, 1536, 2048 };

TEST(shares_differ_by_at_most_one_chunk)
{
	unsigned int p, n, j;

	for (p = 0; p < sizeof(preset_inter) / sizeof(preset_inter[0]); p++)
		for (n = 1; n <= KT_MAX_NODES; n++) {
			unsigned int I = preset_inter[p], lo = I, hi = 0;
			unsigned int end = 0;

			for (j = 0; j < n; j++) {
				unsigned int i0, i1;

				kern_node_slice(I, KERN_DOWN_CHUNK, n, j, &i0, &i1);
				ASSERT_EQ(i0, end);	/* back to back */
				ASSERT_EQ(i0 % KERN_DOWN_CHUNK, 0);
				end = i1;
				if (i1 - i0 < lo)
					lo = i1 - i0;
				if (i1 - i0 > hi)
					hi = i1 - i0;
			}
			ASSERT_EQ(end, I);	/* everything covered */
			ASSERT_LE(hi - lo, KERN_DOWN_CHUNK);
		}
}

FIXTURE(fake_nodes)
{
	struct tmodel t;
	float *x, *w;
	int32_t *ids;
	unsigned int T, k;
};

FIXTURE_VARIANT(fake_nodes)
{
	enum kt_quant quant;
	unsigned int inter;
};

FIXTURE_VARIANT_ADD(fake_nodes, int8_i768)
{
	.quant = KT_QUANT_INT8, .inter = 768,
};

FIXTURE_VARIANT_ADD(fake_nodes, int4_i1536)
{
	.quant = KT_QUANT_INT4, .inter = 1536,
};

FIXTURE_VARIANT_ADD(fake_nodes, bf16_i2048)
{
	.quant = KT_QUANT_BF16, .inter = 2048,
};

FIXTURE_VARIANT_ADD(fake_nodes, int8_i2048)
{
	.quant = KT_QUANT_INT8, .inter = 2048,
};

FIXTURE_SETUP(fake_nodes)
{
	struct tu_rng r = { 77 };
	unsigned int i;

	/* small H and E: the split depends on I only */
	tm_init(&self->t, 128, variant->inter, 6, 1, KT_DTYPE_F32, 5);
	self->T = 9;
	self->k = 4;
	self->x = malloc((size_t)self->T * self->t.H * 4);
	self->w = malloc((size_t)self->T * self->k * 4);
	self->ids = malloc((size_t)self->T * self->k * 4);
	ASSERT_TRUE(self->x && self->w && self->ids);
	for (i = 0; i < self->T * self->t.H; i++)
		self->x[i] = (float)(2.0 * tu_unif(&r) - 1.0);
	for (i = 0; i < self->T * self->k; i++) {
		self->ids[i] = (int32_t)((i * 5 + i / self->k) % self->t.E);
		self->w[i] = (float)(0.25 + tu_unif(&r));
	}
}

FIXTURE_TEARDOWN(fake_nodes)
{
	tm_free(&self->t);
	free(self->x);
	free(self->w);
	free(self->ids);
}

/* y on @nodes fake nodes (0: the real topology), or -errno. */
static int run_on(FIXTURE_DATA(fake_nodes) *self, enum kt_quant q,
		  unsigned int nodes, float *y)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .spin_us = 50,
				 .flags = KT_CTX_F_NO_PIN };
	struct kt_moe_args a = {
		.x = self->x, .x_dtype = KT_DTYPE_F32,
		.ids = self->ids, .ids_dtype = KT_DTYPE_I32, .w = self->w,
		.y = y, .y_dtype = KT_DTYPE_F32,
		.tokens = self->T, .top_k = self->k,
	};
	struct kt_model *m;
	struct kt_ctx *ctx;
	char n[12];	/* any unsigned int */
	int ret;

	if (nodes) {
		snprintf(n, sizeof(n), "%u", nodes);
		setenv("KT_FAKE_NUMA", n, 1);
	} else {
		unsetenv("KT_FAKE_NUMA");
	}
	ret = kt_ctx_create(&o, &ctx);
	unsetenv("KT_FAKE_NUMA");
	if (ret)
		return ret;
	if (nodes && core_ctx_nodes(ctx) != nodes) {
		kt_ctx_destroy(ctx);
		return -ENODEV;
	}
	ret = tm_create(&self->t, ctx, q, 0, &m);
	if (!ret) {
		ret = kt_moe_forward(ctx, m, &a);
		kt_model_destroy(m);
	}
	kt_ctx_destroy(ctx);
	return ret;
}

/*
 * One node sums each token's down products over all of I in one f32 chain;
 * n nodes sum n sub-chains, then the partials in node order. The results
 * differ by rounding only (a few ulps of the largest |y|); bitwise equality
 * would need a partial y per KC chunk (Documentation/layers.md).
 */
#define REASSOC_TOL	1e-5

TEST_F(fake_nodes, one_to_four_nodes)
{
	size_t bytes = (size_t)self->T * self->t.H * 4, i;
	float *y1 = calloc(1, bytes), *yn = calloc(1, bytes);
	float *yr = calloc(1, bytes);
	unsigned int nodes;
	double amax = 0, dmax;

	ASSERT_TRUE(y1 && yn && yr);
	ASSERT_EQ(run_on(self, variant->quant, 1, y1), 0);
	for (i = 0; i < bytes / 4; i++)
		amax = fmax(amax, fabs(y1[i]));
	ASSERT_GT(amax, 0.0);
	for (nodes = 2; nodes <= 4; nodes++) {
		memset(yn, 0xff, bytes);
		ASSERT_EQ(run_on(self, variant->quant, nodes, yn), 0);
		dmax = 0;
		for (i = 0; i < bytes / 4; i++)
			dmax = fmax(dmax, fabs((double)yn[i] - y1[i]));
		TH_LOG("%u nodes: max |y - y(1 node)| = %.3g of max |y| %.3g",
		       nodes, dmax, amax);
		EXPECT_LE(dmax, REASSOC_TOL * amax);
		/* the same node count twice: the same bits */
		ASSERT_EQ(run_on(self, variant->quant, nodes, yr), 0);
		EXPECT_EQ(memcmp(yn, yr, bytes), 0);
	}
	free(y1);
	free(yn);
	free(yr);
}

TEST_HARNESS_MAIN
