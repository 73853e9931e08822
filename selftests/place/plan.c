// SPDX-License-Identifier: MIT
/*
 * plan.c - kt_place_plan(): each strategy places the experts it promises
 * (uniform, frequency per layer and over the model, front-loading, seeded
 * random), bad options are refused, and a routing statistics file reads
 * back through kt_route_file_read().
 */
#include <sys/stat.h>

#include <kt/kt.h>

#include "kt_test.h"

#define L 4
#define E 70		/* two words per layer, the second partly used */
#define W KT_PLACE_WORDS(E)

static bool on(const uint64_t *m, unsigned int l, unsigned int e)
{
	return m[l * W + e / 64] >> (e % 64) & 1;
}

static unsigned int layer_count(const uint64_t *m, unsigned int l)
{
	unsigned int e, n = 0;

	for (e = 0; e < E; e++)
		n += on(m, l, e);
	return n;
}

TEST(uniform_same_spread_set_per_layer)
{
	struct kt_place_opts o = { .sz = sizeof(o), .strategy = KT_PLACE_UNIFORM,
				   .n_layers = L, .n_experts = E, .per_layer = 7 };
	uint64_t m[L * W];
	unsigned int l, e;

	ASSERT_EQ(kt_place_plan(&o, m), 7 * L);
	for (l = 0; l < L; l++) {
		EXPECT_EQ(layer_count(m, l), 7u);
		for (e = 0; e < E; e++)
			EXPECT_EQ(on(m, l, e), on(m, 0, e));
	}
	/* spread: ids 0, 10, 20, ... 60 */
	for (e = 0; e < E; e++)
		EXPECT_EQ(on(m, 0, e), e % 10 == 0);
	/* a ratio instead of a count */
	o.per_layer = 0;
	o.ratio = 0.5f;
	ASSERT_EQ(kt_place_plan(&o, m), 35 * L);
	o.ratio = 0.0f;
	ASSERT_EQ(kt_place_plan(&o, m), 0);
	EXPECT_EQ(m[0] | m[1], 0u);
}

TEST(frequency_takes_the_hottest)
{
	struct kt_place_opts o = { .sz = sizeof(o),
				   .strategy = KT_PLACE_FREQUENCY,
				   .n_layers = L, .n_experts = E,
				   .per_layer = 3 };
	uint64_t c[L * E], m[L * W];
	unsigned int l, e;

	for (l = 0; l < L; l++)
		for (e = 0; e < E; e++)
			c[l * E + e] = (e * 7 + l * 13) % E;	/* a permutation */
	c[1 * E + 5] = c[1 * E + 6] = 1000;	/* a tie: both in */
	EXPECT_EQ(kt_place_plan(&o, m), -EINVAL);	/* counts required */
	o.counts = c;
	ASSERT_EQ(kt_place_plan(&o, m), 3 * L);
	for (l = 0; l < L; l++) {
		uint64_t worst_in = UINT64_MAX, best_out = 0;

		EXPECT_EQ(layer_count(m, l), 3u);
		for (e = 0; e < E; e++) {
			if (on(m, l, e) && c[l * E + e] < worst_in)
				worst_in = c[l * E + e];
			if (!on(m, l, e) && c[l * E + e] > best_out)
				best_out = c[l * E + e];
		}
		EXPECT_GE(worst_in, best_out);
	}
	EXPECT_TRUE(on(m, 1, 5));
	EXPECT_TRUE(on(m, 1, 6));
	/* equal counts everywhere: ties go to the lower ids */
	memset(c, 0, sizeof(c));
	ASSERT_EQ(kt_place_plan(&o, m), 3 * L);
	EXPECT_EQ(m[0], 7u);
	EXPECT_EQ(m[W], 7u);
}

TEST(frequency_over_the_whole_model)
{
	struct kt_place_opts o = { .sz = sizeof(o),
				   .strategy = KT_PLACE_FREQUENCY,
				   .n_layers = L, .n_experts = E, .total = 5 };
	uint64_t c[L * E] = { 0 }, m[L * W];

	/* the five hottest are all in layer 2 and one in layer 3 */
	c[2 * E + 1] = 90;
	c[2 * E + 2] = 80;
	c[2 * E + 69] = 70;
	c[2 * E + 3] = 60;
	c[3 * E + 0] = 50;
	c[0 * E + 0] = 40;
	o.counts = c;
	ASSERT_EQ(kt_place_plan(&o, m), 5);
	EXPECT_EQ(layer_count(m, 0), 0u);
	EXPECT_EQ(layer_count(m, 1), 0u);
	EXPECT_EQ(layer_count(m, 2), 4u);
	EXPECT_TRUE(on(m, 2, 69));
	EXPECT_TRUE(on(m, 3, 0));
}

TEST(front_loading_fills_layers_in_order)
{
	struct kt_place_opts o = { .sz = sizeof(o),
				   .strategy = KT_PLACE_FRONT_LOADING,
				   .n_layers = L, .n_experts = E,
				   .per_layer = 40 };
	uint64_t c[L * E] = { 0 }, m[L * W];
	unsigned int e;

	/* 160 experts: layers 0 and 1 whole (140), 20 of layer 2 */
	ASSERT_EQ(kt_place_plan(&o, m), 160);
	EXPECT_EQ(layer_count(m, 0), (unsigned int)E);
	EXPECT_EQ(layer_count(m, 1), (unsigned int)E);
	EXPECT_EQ(layer_count(m, 2), 20u);
	EXPECT_EQ(layer_count(m, 3), 0u);
	for (e = 0; e < 20; e++)
		EXPECT_TRUE(on(m, 2, e));
	/* with counts, the partial layer takes its hottest */
	c[2 * E + 50] = 9;
	o.counts = c;
	ASSERT_EQ(kt_place_plan(&o, m), 160);
	EXPECT_TRUE(on(m, 2, 50));
	EXPECT_FALSE(on(m, 2, 19));
	/* a budget beyond the model places all of it */
	o.total = 1000;
	ASSERT_EQ(kt_place_plan(&o, m), L * E);
	/* bits past E stay clear */
	EXPECT_EQ(m[1] >> (E - 64), 0u);
}

TEST(random_is_seeded_and_distinct)
{
	struct kt_place_opts o = { .sz = sizeof(o), .strategy = KT_PLACE_RANDOM,
				   .n_layers = L, .n_experts = E,
				   .per_layer = 9, .seed = 42 };
	uint64_t a[L * W], b[L * W];
	unsigned int l;

	ASSERT_EQ(kt_place_plan(&o, a), 9 * L);
	ASSERT_EQ(kt_place_plan(&o, b), 9 * L);
	EXPECT_EQ(memcmp(a, b, sizeof(a)), 0);
	for (l = 0; l < L; l++)
		EXPECT_EQ(layer_count(a, l), 9u);
	/* layers differ, and another seed gives another plan */
	EXPECT_NE(memcmp(a, a + W, W * 8), 0);
	o.seed = 43;
	ASSERT_EQ(kt_place_plan(&o, b), 9 * L);
	EXPECT_NE(memcmp(a, b, sizeof(a)), 0);
	/* all of a layer */
	o.per_layer = E;
	ASSERT_EQ(kt_place_plan(&o, b), E * L);
	EXPECT_EQ(layer_count(b, 3), (unsigned int)E);
}

TEST(bad_options)
{
	struct kt_place_opts o = { .sz = sizeof(o), .strategy = KT_PLACE_UNIFORM,
				   .n_layers = L, .n_experts = E };
	uint64_t m[L * W];

	EXPECT_EQ(kt_place_plan(NULL, m), -EINVAL);
	EXPECT_EQ(kt_place_plan(&o, NULL), -EINVAL);
	o.per_layer = E + 1;
	EXPECT_EQ(kt_place_plan(&o, m), -EINVAL);
	o.per_layer = 0;
	o.ratio = 1.5f;
	EXPECT_EQ(kt_place_plan(&o, m), -EINVAL);
	o.ratio = 0.0f;
	o.strategy = KT_PLACE_COUNT;
	EXPECT_EQ(kt_place_plan(&o, m), -EINVAL);
	o.strategy = KT_PLACE_UNIFORM;
	o.reserved[3] = 1;
	EXPECT_EQ(kt_place_plan(&o, m), -EINVAL);
	o.reserved[3] = 0;
	o.sz = 4;
	EXPECT_EQ(kt_place_plan(&o, m), -EINVAL);
}

TEST(strategy_names)
{
	int s;

	for (s = 0; s < KT_PLACE_COUNT; s++)
		EXPECT_EQ(kt_place_strategy_parse(kt_place_strategy_name(
				(enum kt_place_strategy)s)), s);
	EXPECT_EQ(kt_place_strategy_parse("front-loading"),
		  KT_PLACE_FRONT_LOADING);
	EXPECT_EQ(kt_place_strategy_parse("hot"), -EINVAL);
	EXPECT_EQ(kt_place_strategy_parse(NULL), -EINVAL);
	EXPECT_EQ(strcmp(kt_place_strategy_name(KT_PLACE_COUNT), "?"), 0);
}

/* Counters saved by a model read back without one, and plan from them. */
TEST(route_file_read)
{
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 1,
				  .flags = KT_CTX_F_NO_PIN };
	char dir[64], ktw[96], rf[96];
	struct kt_ktw_synth s = { .sz = sizeof(s), .quant = KT_QUANT_INT8,
				  .hidden = 128, .inter = 128, .n_experts = 8,
				  .n_layers = 2, .top_k = 2, .seed = 3 };
	struct kt_moe_args a = { 0 };
	struct kt_ctx *ctx;
	struct kt_model *m;
	float x[128] = { 0 }, y[128], w[2] = { 0.5f, 0.5f };
	int32_t ids[2] = { 6, 1 };
	uint64_t c[16], want[8];

	snprintf(dir, sizeof(dir), "/tmp/kt-plan-%d", (int)getpid());
	ASSERT_EQ(mkdir(dir, 0700), 0);
	snprintf(ktw, sizeof(ktw), "%s/m.ktw", dir);
	snprintf(rf, sizeof(rf), "%s/r.route", dir);
	s.path = ktw;
	ASSERT_EQ(kt_ktw_write_synth(&s), 0);
	ASSERT_EQ(kt_ctx_create(&co, &ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, ktw, NULL, &m), 0);
	a = (struct kt_moe_args){ .x = x, .ids = ids, .w = w, .y = y,
				  .tokens = 1, .top_k = 2, .layer = 1,
				  .ids_dtype = KT_DTYPE_I32 };
	ASSERT_EQ(kt_moe_forward(ctx, m, &a), 0);
	ASSERT_EQ(kt_moe_forward(ctx, m, &a), 0);
	ASSERT_EQ(kt_model_route_save(m, rf), 0);
	ASSERT_EQ(kt_route_file_read(rf, 2, 8, c), 0);
	ASSERT_EQ(kt_model_route_counts(m, 1, want), 0);
	EXPECT_EQ(memcmp(c + 8, want, sizeof(want)), 0);
	EXPECT_EQ(c[8 + 6], 2u);
	EXPECT_EQ(c[0], 0u);
	/* another geometry, a missing file */
	EXPECT_EQ(kt_route_file_read(rf, 2, 9, c), -EINVAL);
	EXPECT_EQ(kt_route_file_read(ktw, 2, 8, c), -EINVAL);
	EXPECT_EQ(kt_route_file_read("/nonexistent/r", 2, 8, c), -ENOENT);
	{
		struct kt_place_opts o = { .sz = sizeof(o),
					   .strategy = KT_PLACE_FREQUENCY,
					   .n_layers = 2, .n_experts = 8,
					   .per_layer = 2, .counts = c };
		uint64_t pm[2];

		ASSERT_EQ(kt_place_plan(&o, pm), 4);
		EXPECT_EQ(pm[1], (1u << 1) | (1u << 6));
	}
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	unlink(rf);
	unlink(ktw);
	rmdir(dir);
}

TEST_HARNESS_MAIN
