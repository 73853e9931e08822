// SPDX-License-Identifier: MIT
/*
 * units.c - the helpers of the kt command in isolation: quantiles, option
 * parsing, the JSON writer (its output parsed back with jansson), and the
 * synthetic weights' determinism and spread. The tools' sources are
 * compiled into this test directly since they are not part of libkt.
 */
#include <jansson.h>

#include "tools/bench-plan.c"
#include "tools/bench-weights.c"
#include "tools/json.c"
#include "tools/opts.c"
#include "tools/stats.c"
#include "tools/sys.c"

#include "kt_test.h"

TEST(quantiles_interpolate_between_order_statistics)
{
	double v[10] = { 10, 2, 9, 1, 8, 3, 7, 4, 6, 5 };
	double one = 42;

	stats_sort(v, 10);
	ASSERT_EQ(v[0], 1);
	ASSERT_EQ(v[9], 10);
	EXPECT_NEAR(stats_quantile(v, 10, 0.5), 5.5, 1e-12);
	EXPECT_NEAR(stats_quantile(v, 10, 0.9), 9.1, 1e-12);
	EXPECT_NEAR(stats_quantile(v, 10, 0.99), 9.91, 1e-12);
	EXPECT_EQ(stats_quantile(v, 10, 0), 1);
	EXPECT_EQ(stats_quantile(v, 10, 1), 10);
	EXPECT_EQ(stats_quantile(&one, 1, 0.9), 42);
	EXPECT_TRUE(isnan(stats_quantile(v, 0, 0.5)));
}

TEST(option_values_are_strict)
{
	uint32_t l[4], u;
	uint64_t sz;
	enum kt_isa isa;
	enum kt_quant q;

	ASSERT_EQ(opt_u32_list("1,4,32,512", 1, 65536, l, 4), 4);
	EXPECT_EQ(l[0], 1);
	EXPECT_EQ(l[3], 512);
	EXPECT_EQ(opt_u32_list("1,4,32,512,2048", 1, 65536, l, 4), -EINVAL);
	EXPECT_EQ(opt_u32_list("1,,2", 1, 10, l, 4), -EINVAL);
	EXPECT_EQ(opt_u32_list("1,", 1, 10, l, 4), -EINVAL);
	EXPECT_EQ(opt_u32_list("", 1, 10, l, 4), -EINVAL);
	EXPECT_EQ(opt_u32_list("0", 1, 10, l, 4), -EINVAL);
	EXPECT_EQ(opt_u32_list("3x", 1, 10, l, 4), -EINVAL);
	EXPECT_EQ(opt_u32("-1", 0, 10, &u), -EINVAL);
	EXPECT_EQ(opt_u32("99999999999", 0, ~0u, &u), -EINVAL);

	ASSERT_EQ(opt_size("64K", &sz), 0);
	EXPECT_EQ(sz, 65536);
	ASSERT_EQ(opt_size("2G", &sz), 0);
	EXPECT_EQ(sz, 2ull << 30);
	ASSERT_EQ(opt_size("300MiB", &sz), 0);
	EXPECT_EQ(sz, 300ull << 20);
	ASSERT_EQ(opt_size("4096", &sz), 0);
	EXPECT_EQ(sz, 4096);
	EXPECT_EQ(opt_size("G", &sz), -EINVAL);
	EXPECT_EQ(opt_size("5X", &sz), -EINVAL);
	EXPECT_EQ(opt_size("5Gx", &sz), -EINVAL);
	EXPECT_EQ(opt_size("99999999999999T", &sz), -EINVAL);

	ASSERT_EQ(opt_isa("auto", &isa), 0);
	EXPECT_EQ(isa, KT_ISA_AUTO);
	ASSERT_EQ(opt_isa(kt_isa_name(KT_ISA_AVX512), &isa), 0);
	EXPECT_EQ(isa, KT_ISA_AVX512);
	EXPECT_EQ(opt_isa("avx9", &isa), -EINVAL);
	ASSERT_EQ(opt_quant("int4", &q), 0);
	EXPECT_EQ(q, KT_QUANT_INT4);
	ASSERT_EQ(opt_quant("fp8", &q), 0);
	EXPECT_EQ(q, KT_QUANT_FP8);
	EXPECT_EQ(opt_quant("fp4", &q), -EINVAL);
}

TEST(json_writer_output_parses_back)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	json_error_t jerr;
	json_t *root, *a;
	struct jw j;

	ASSERT_TRUE(f != NULL);
	jw_begin(&j, f);
	jw_str(&j, "s", "quote \" backslash \\ tab \t nl \n ctl \x01 end");
	jw_u64(&j, "u", 9007199254740993ull);	/* 2^53 + 1: no double */
	jw_i64(&j, "i", -5);
	jw_dbl(&j, "d", 0.125);
	jw_dbl(&j, "nan", NAN);
	jw_bool(&j, "b", true);
	jw_str(&j, "none", NULL);
	jw_arr(&j, "a");
	jw_u64(&j, NULL, 1);
	jw_obj(&j, NULL);
	jw_u64(&j, "x", 2);
	jw_close(&j);
	jw_close(&j);
	jw_obj(&j, "o");
	jw_arr(&j, "empty");
	jw_end(&j);	/* closes the open levels */
	fclose(f);

	ASSERT_EQ(buf[len - 1], '\n');
	EXPECT_TRUE(strchr(buf, '\n') == buf + len - 1);
	root = json_loads(buf, JSON_DECODE_ANY, &jerr);
	if (!root)
		TH_LOG("'%s': %s", buf, jerr.text);
	ASSERT_TRUE(root != NULL);
	EXPECT_EQ(strcmp(json_string_value(json_object_get(root, "s")),
			 "quote \" backslash \\ tab \t nl \n ctl \x01 end"), 0);
	EXPECT_EQ(json_integer_value(json_object_get(root, "u")),
		  9007199254740993ll);
	EXPECT_EQ(json_integer_value(json_object_get(root, "i")), -5);
	EXPECT_EQ(json_real_value(json_object_get(root, "d")), 0.125);
	EXPECT_TRUE(json_is_null(json_object_get(root, "nan")));
	EXPECT_TRUE(json_is_true(json_object_get(root, "b")));
	EXPECT_TRUE(json_is_null(json_object_get(root, "none")));
	a = json_object_get(root, "a");
	ASSERT_EQ(json_array_size(a), 2);
	EXPECT_EQ(json_integer_value(json_object_get(json_array_get(a, 1),
						     "x")), 2);
	EXPECT_TRUE(json_is_array(json_object_get(json_object_get(root, "o"),
						  "empty")));
	json_decref(root);
	free(buf);
}

static float bf16_to_f32(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/*
 * A pure function of (seed, layer, expert): the same expert comes back
 * the same whatever the order it is asked in, another expert differs,
 * and the values have the documented spread (sd 0.02 times row
 * magnitudes in [0.5, 1.5), mean square 0.02^2 * 13/12 plus outliers).
 */
TEST(synthetic_weights_are_seeded_and_spread)
{
	struct synth_cfg c = {
		.hidden = 256, .inter = 128, .n_experts = 4, .n_layers = 2,
		.dtype = KT_DTYPE_BF16, .seed = 3,
	};
	size_t n = (size_t)c.hidden * c.inter, i;
	uint16_t *first = malloc(n * 2), *again = malloc(n * 2);
	struct kt_expert_src src;
	struct synth *s;
	double sum = 0, sq = 0;
	uint32_t l, e;
	size_t same = 0;

	ASSERT_TRUE(first && again);
	ASSERT_EQ(synth_create(&c, &s), 0);
	/* in order: the helper thread makes every next one */
	for (l = 0; l < 2; l++) {
		for (e = 0; e < 4; e++) {
			ASSERT_EQ(synth_get_expert(s, l, e, &src), 0);
			if (l == 1 && e == 2)
				memcpy(first, src.down, n * 2);
		}
	}
	EXPECT_EQ(synth_get_expert(s, 2, 0, &src), -EINVAL);
	EXPECT_EQ(synth_get_expert(s, 0, 4, &src), -EINVAL);
	/* out of order, after other experts */
	ASSERT_EQ(synth_get_expert(s, 1, 2, &src), 0);
	memcpy(again, src.down, n * 2);
	EXPECT_EQ(memcmp(first, again, n * 2), 0);
	ASSERT_EQ(synth_get_expert(s, 1, 3, &src), 0);
	for (i = 0; i < n; i++) {
		float v = bf16_to_f32(((const uint16_t *)src.down)[i]);

		same += ((const uint16_t *)src.down)[i] == first[i];
		sum += v;
		sq += (double)v * v;
	}
	synth_destroy(s);
	EXPECT_LT(same, n / 50);
	EXPECT_NEAR(sum / n, 0, 0.002);
	/* 0.02^2 * (13/12) * (1 + 8/64) with 1 in 64 rows at 3x: ~4.9e-4 */
	EXPECT_GT(sqrt(sq / n), 0.017);
	EXPECT_LT(sqrt(sq / n), 0.027);
	free(first);
	free(again);
}

TEST(expert_bytes_follow_the_packed_layout)
{
	/* qwen3-30b-a3b: 3 * 2048 * 768 weights */
	EXPECT_EQ(bench_expert_bytes(2048, 768, KT_QUANT_INT8, 0),
		  3ull * 2048 * 768 + 4 * (768 + 768 + 2048));
	EXPECT_EQ(bench_expert_bytes(2048, 768, KT_QUANT_BF16, 0),
		  6ull * 2048 * 768);
	EXPECT_EQ(bench_expert_bytes(2048, 768, KT_QUANT_INT4, 64),
		  3ull * 2048 * 768 / 2 +
		  4ull * (768 * (2048 / 64) * 2 + 2048 * (768 / 64)));
}

/* The rotation: >= 4x L3 and >= 2 layers, capped by memory, or refused. */
TEST(layer_plan_follows_l3_and_memory)
{
	struct bench_cfg c = {
		.hidden = 128, .inter = 256, .experts = 8, .top_k = 2,
		.src_dtype = KT_DTYPE_BF16, .preset = "custom",
	};
	uint64_t eb = bench_expert_bytes(128, 256, KT_QUANT_INT8, 0);
	uint64_t layer = eb * 8, want;
	uint32_t layers;

	want = (4 * sys_l3_bytes() + layer - 1) / layer;
	if (want < 2)
		want = 2;
	c.mem_limit = 64ull << 30;
	ASSERT_EQ(bench_plan_layers(&c, KT_QUANT_INT8, eb, &layers), 0);
	EXPECT_EQ(layers, want);

	/* the reserve and two experts of source, then 10 layers of room */
	c.mem_limit = BENCH_MEM_RESERVE + 2 * 3 * 128 * 256 * 2 + 10 * layer;
	ASSERT_EQ(bench_plan_layers(&c, KT_QUANT_INT8, eb, &layers), 0);
	EXPECT_EQ(layers, want < 10 ? want : 10);

	c.layers = 11;
	EXPECT_EQ(bench_plan_layers(&c, KT_QUANT_INT8, eb, &layers), -ENOMEM);
	c.layers = 3;
	ASSERT_EQ(bench_plan_layers(&c, KT_QUANT_INT8, eb, &layers), 0);
	EXPECT_EQ(layers, 3);

	c.layers = 0;
	c.mem_limit = BENCH_MEM_RESERVE + layer - 1;
	EXPECT_EQ(bench_plan_layers(&c, KT_QUANT_INT8, eb, &layers), -ENOMEM);
}

TEST_HARNESS_MAIN
