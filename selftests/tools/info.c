// SPDX-License-Identifier: MIT
/*
 * info.c - `kt info`: text report, JSON that parses and agrees with
 * kt_sysinfo_get(), and refusal of unknown options.
 */
#include <jansson.h>

#include <kt/kt.h>

#include "kt_test.h"
#include "run.h"

TEST(info_text)
{
	struct kt_run r;

	RUN_KT(&r, "info");
	EXPECT_EQ(r.status, 0);
	EXPECT_TRUE(strstr(r.out, "\nisa:") != NULL);
	EXPECT_TRUE(strstr(r.out, "\nnuma:") != NULL);
	EXPECT_TRUE(strstr(r.out, "\nhugepages:") != NULL);
	EXPECT_TRUE(strstr(r.out, "\nio_uring:") != NULL);
	EXPECT_TRUE(strstr(r.out, "\ncuda:") != NULL);
	kt_run_free(&r);
}

TEST(info_json_matches_sysinfo)
{
	struct kt_sysinfo si;
	json_error_t jerr;
	json_t *root, *v;
	struct kt_run r;
	size_t i;

	RUN_KT(&r, "info", "--json");
	ASSERT_EQ(r.status, 0);
	/* one line: a single object followed by a newline */
	ASSERT_TRUE(strchr(r.out, '\n') == r.out + strlen(r.out) - 1);
	root = json_loads(r.out, 0, &jerr);
	if (!root)
		TH_LOG("line %d: %s", jerr.line, jerr.text);
	ASSERT_TRUE(root != NULL);
	ASSERT_EQ(kt_sysinfo_get(&si), 0);

	v = json_object_get(json_object_get(root, "isa"), "best");
	ASSERT_TRUE(json_is_string(v));
	EXPECT_EQ(strcmp(json_string_value(v), kt_isa_name(si.best_isa)), 0);
	v = json_object_get(json_object_get(root, "isa"), "chosen");
	EXPECT_TRUE(json_is_string(v));

	v = json_object_get(json_object_get(root, "cpu"), "flags");
	ASSERT_TRUE(json_is_array(v));
	/* a flag listed for every bit set, none for the others */
	EXPECT_EQ(json_array_size(v),
		  (size_t)__builtin_popcount(si.cpu_flags));
	if (si.cpu_flags & KT_CPU_AVX2) {
		bool found = false;

		for (i = 0; i < json_array_size(v); i++)
			found |= !strcmp(json_string_value(
				json_array_get(v, i)), "avx2");
		EXPECT_TRUE(found);
	}

	v = json_object_get(root, "numa");
	ASSERT_TRUE(json_is_array(v));
	EXPECT_EQ(json_array_size(v), (size_t)si.n_nodes);
	for (i = 0; i < json_array_size(v) && i < si.n_nodes; i++)
		EXPECT_EQ(json_integer_value(json_object_get(
			json_array_get(v, i), "cores")),
			  (json_int_t)si.node_cores[i]);

	v = json_object_get(root, "hugepages");
	ASSERT_TRUE(json_is_array(v));
	EXPECT_EQ(json_array_size(v), (size_t)si.n_hpage_sizes);

	v = json_object_get(root, "io_uring");
	ASSERT_TRUE(json_is_boolean(v));
	EXPECT_EQ(json_is_true(v), si.io_uring);

	v = json_object_get(json_object_get(root, "cuda"), "driver");
	ASSERT_TRUE(json_is_boolean(v));
	EXPECT_EQ(json_is_true(v), si.cuda_driver);
	EXPECT_TRUE(json_is_integer(json_object_get(
		json_object_get(root, "cuda"), "devices")));
	EXPECT_GT(json_integer_value(json_object_get(root, "l3_bytes")), 0);
	json_decref(root);
	kt_run_free(&r);
}

TEST(info_forced_isa_is_reported)
{
	struct kt_run r;

	/* scalar runs everywhere, so a forced scalar context must be built */
	setenv("KT_ISA", "scalar", 1);
	RUN_KT(&r, "info", "--json");
	ASSERT_EQ(r.status, 0);
	EXPECT_TRUE(strstr(r.out, "\"chosen\":\"scalar\"") != NULL);
	EXPECT_TRUE(strstr(r.out, "\"env\":\"scalar\"") != NULL);
	kt_run_free(&r);
}

TEST(info_rejects_unknown_options)
{
	struct kt_run r;

	RUN_KT(&r, "info", "--bogus");
	EXPECT_EQ(r.status, 2);
	EXPECT_TRUE(strstr(r.err, "usage") != NULL);
	kt_run_free(&r);
	RUN_KT(&r, "info", "extra");
	EXPECT_EQ(r.status, 2);
	kt_run_free(&r);
}

TEST(commands_are_listed)
{
	struct kt_run r;

	RUN_KT(&r, "--help");
	EXPECT_EQ(r.status, 0);
	EXPECT_TRUE(strstr(r.out, "\n  info ") != NULL);
	EXPECT_TRUE(strstr(r.out, "\n  bench ") != NULL);
	kt_run_free(&r);
	RUN_KT(&r, "bench", "--help");
	EXPECT_EQ(r.status, 0);
	EXPECT_TRUE(strstr(r.out, "qwen3-30b-a3b") != NULL);
	EXPECT_TRUE(strstr(r.out, "deepseek-v3") != NULL);
	EXPECT_TRUE(strstr(r.out, "mixtral-8x7b") != NULL);
	kt_run_free(&r);
}

TEST_HARNESS_MAIN
