// SPDX-License-Identifier: MIT
/*
 * hfconfig.c - config.json parsing: which layers are MoE for Qwen-MoE
 * (decoder_sparse_step, mlp_only_layers), DeepSeek/Kimi (first_k_dense_
 * replace, moe_layer_freq) and Mixtral, the key aliases, text_config
 * nesting, FP8 block size, and clear errors for unusable configs.
 */
#include <errno.h>
#include <sys/stat.h>

#include <kt/kt.h>
#include "kt_test.h"
#include "loader/hfconfig.h"

static char dir[256];

static int load(const char *json, struct ldr_hfconfig *c)
{
	char p[300];
	FILE *f;

	snprintf(dir, sizeof(dir), "/tmp/kt-cfg-%d", (int)getpid());
	mkdir(dir, 0755);
	snprintf(p, sizeof(p), "%s/config.json", dir);
	f = fopen(p, "w");
	fputs(json, f);
	fclose(f);
	return ldr_hfconfig_load(dir, c);
}

static void cleanup(void)
{
	char p[300];

	snprintf(p, sizeof(p), "%s/config.json", dir);
	unlink(p);
	rmdir(dir);
}

TEST(qwen_sparse_step_and_mlp_only)
{
	struct ldr_hfconfig c;

	ASSERT_EQ(load("{\"model_type\":\"qwen2_moe\",\"hidden_size\":256,\"num_hidden_layers\":6,"
		       "\"num_experts\":8,\"moe_intermediate_size\":128,\"intermediate_size\":999,"
		       "\"num_experts_per_tok\":2,\"decoder_sparse_step\":2,\"mlp_only_layers\":[3]}",
		       &c), 0);
	EXPECT_EQ(c.inter, 128u);
	EXPECT_EQ(c.n_experts, 8u);
	EXPECT_EQ(c.top_k, 2u);
	/* (l + 1) % 2 == 0 -> 1, 3, 5; 3 is mlp-only */
	EXPECT_FALSE(c.is_moe[0]);
	EXPECT_TRUE(c.is_moe[1]);
	EXPECT_FALSE(c.is_moe[3]);
	EXPECT_TRUE(c.is_moe[5]);
	EXPECT_EQ(strcmp(c.arch, "qwen2_moe"), 0);
	ldr_hfconfig_free(&c);
	cleanup();
}

TEST(deepseek_dense_prefix_and_fp8_block)
{
	struct ldr_hfconfig c;

	ASSERT_EQ(load("{\"model_type\":\"kimi_k2\",\"hidden_size\":7168,\"num_hidden_layers\":5,"
		       "\"n_routed_experts\":384,\"moe_intermediate_size\":2048,"
		       "\"first_k_dense_replace\":2,\"moe_layer_freq\":1,"
		       "\"quantization_config\":{\"weight_block_size\":[64,128]}}", &c), 0);
	EXPECT_FALSE(c.is_moe[0]);
	EXPECT_FALSE(c.is_moe[1]);
	EXPECT_TRUE(c.is_moe[2]);
	EXPECT_TRUE(c.is_moe[4]);
	EXPECT_EQ(c.n_experts, 384u);
	EXPECT_EQ(c.fp8_block[0], 64u);
	EXPECT_EQ(c.fp8_block[1], 128u);
	ldr_hfconfig_free(&c);
	cleanup();
}

TEST(mixtral_and_text_config)
{
	struct ldr_hfconfig c;

	ASSERT_EQ(load("{\"model_type\":\"llava\",\"text_config\":{\"model_type\":\"mixtral\","
		       "\"hidden_size\":4096,\"num_hidden_layers\":2,\"num_local_experts\":8,"
		       "\"intermediate_size\":14336}}", &c), 0);
	EXPECT_EQ(c.hidden, 4096u);
	EXPECT_EQ(c.inter, 14336u);
	EXPECT_TRUE(c.is_moe[0] && c.is_moe[1]);
	EXPECT_EQ(strcmp(c.arch, "mixtral"), 0);
	EXPECT_EQ(c.fp8_block[0], 128u);
	ldr_hfconfig_free(&c);
	cleanup();
}

TEST(unusable_configs)
{
	static const char *const bad[] = {
		"{\"hidden_size\":256,\"num_hidden_layers\":2,\"intermediate_size\":128}",
		"{\"hidden_size\":\"256\",\"num_hidden_layers\":2,\"num_experts\":4,\"intermediate_size\":128}",
		"{\"hidden_size\":256,\"num_hidden_layers\":2,\"num_experts\":0,\"intermediate_size\":128}",
		"{\"hidden_size\":256,\"num_hidden_layers\":2,\"num_experts\":4,\"intermediate_size\":-1}",
		"[1,2]",
		"{\"hidden_size\":256,",
	};
	struct ldr_hfconfig c;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		EXPECT_EQ(load(bad[i], &c), -EINVAL);
		TH_LOG("%zu: %s", i, kt_last_error());
		EXPECT_TRUE(strstr(kt_last_error(), "config.json") != NULL);
	}
	cleanup();
	snprintf(dir, sizeof(dir), "/tmp/kt-cfg-none-%d", (int)getpid());
	EXPECT_EQ(ldr_hfconfig_load(dir, &c), -ENOENT);
}

TEST_HARNESS_MAIN
