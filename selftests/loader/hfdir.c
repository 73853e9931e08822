// SPDX-License-Identifier: MIT
/*
 * hfdir.c - kt_model_open() on a Hugging Face checkpoint folder: the MoE
 * op on the model packed at load is bitwise the op on the same checkpoint
 * converted to a .ktw (BF16, F16 and FP8 sources; every method); a folder
 * with a missing or truncated shard, a misshapen, missing or mistyped
 * tensor is refused by name and creates nothing. With KT_HFDIR_BENCH=1
 * also times first op after open of the folder against the .ktw.
 */
#include <time.h>
#include <sys/stat.h>

#include "kt_test.h"
#include "ckpt.h"
#include "test-ctx.h"

struct prog {
	unsigned int calls;
	uint64_t done, total;
	int bad;	/* done went backwards */
};

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
	struct prog *p = arg;

	p->bad |= done < p->done || done > total;
	p->calls++;
	p->done = done;
	p->total = total;
}

/* y of layer @li for T tokens; fixed inputs (seeded by @li, @T). */
static int run_op(struct kt_ctx *ctx, struct kt_model *m, uint32_t li,
		  uint32_t T, float *y)
{
	struct kt_model_info mi;
	uint64_t seed = 7 + li * 131 + T;
	uint32_t K = 2, i;
	float *x, *w;
	int32_t *ids;
	int ret;

	kt_model_get_info(m, &mi);
	x = malloc((size_t)T * mi.hidden * 4);
	w = malloc((size_t)T * K * 4);
	ids = malloc((size_t)T * K * 4);
	for (i = 0; i < T * mi.hidden; i++)
		x[i] = tck_uniform(&seed);
	for (i = 0; i < T * K; i++) {
		ids[i] = (int32_t)(tck_rand(&seed) % mi.n_experts);
		w[i] = 0.5f + 0.5f * tck_uniform(&seed);
	}
	{
		struct kt_moe_args a = {
			.x = x, .ids = ids, .w = w, .y = y, .tokens = T,
			.top_k = K, .layer = li, .x_dtype = KT_DTYPE_F32,
			.ids_dtype = KT_DTYPE_I32, .y_dtype = KT_DTYPE_F32 };

		ret = kt_moe_forward(ctx, m, &a);
	}
	free(x);
	free(w);
	free(ids);
	return ret;
}

/*
 * Write @c to a folder, convert it with @quant/@group to a .ktw, open both
 * (the folder with @open_quant) and compare every layer's op bit for bit.
 */
static void same_as_ktw(struct kt_test_meta *_metadata, struct tck *c,
			const char *tag, int quant, uint32_t group,
			int open_quant, int expect_quant)
{
	struct kt_convert_opts co = { .sz = sizeof(co), .quant = quant,
				      .group_size = group, .layer_last = -1,
				      .threads = 2 };
	struct prog pr = { 0 };
	struct kt_model_opts mo = { .sz = sizeof(mo), .quant = open_quant,
				    .group_size = group,
				    .progress = on_progress,
				    .progress_arg = &pr };
	struct kt_model *mk = NULL, *md = NULL;
	struct kt_model_info ik, id;
	struct kt_ctx *ctx = NULL;
	const uint32_t Ts[] = { 1, 9, 40 };
	char d[256], ktw[300];
	uint32_t n_moe, li, t;
	float *yk, *yd;

	snprintf(d, sizeof(d), "/tmp/kt-hfdir-%s-%d", tag, (int)getpid());
	snprintf(ktw, sizeof(ktw), "%s.ktw", d);
	ASSERT_EQ(tck_convert(c, d, &co, ktw), 0);
	n_moe = c->n_moe;
	ASSERT_EQ(test_ctx(&ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, ktw, NULL, &mk), 0);
	ASSERT_EQ(kt_model_open(ctx, d, &mo, &md), 0);
	kt_model_get_info(mk, &ik);
	kt_model_get_info(md, &id);
	EXPECT_EQ((int)id.quant, expect_quant);
	EXPECT_EQ(ik.quant, id.quant);
	EXPECT_EQ(ik.group_size, id.group_size);
	EXPECT_EQ(ik.hidden, id.hidden);
	EXPECT_EQ(ik.inter, id.inter);
	EXPECT_EQ(ik.n_layers, id.n_layers);
	EXPECT_EQ(ik.n_experts, id.n_experts);
	EXPECT_EQ(ik.expert_bytes, id.expert_bytes);
	EXPECT_EQ(ik.resident_bytes, id.resident_bytes);
	/* one call per layer, ending at every expert */
	EXPECT_EQ(pr.calls, n_moe);
	EXPECT_EQ(pr.done, (uint64_t)n_moe * id.n_experts);
	EXPECT_EQ(pr.total, pr.done);
	EXPECT_EQ(pr.bad, 0);
	for (li = 0; li < n_moe; li++) {
		ASSERT_EQ(kt_model_layer_index(md, c->moe_ids[li]), (int)li);
		for (t = 0; t < sizeof(Ts) / sizeof(Ts[0]); t++) {
			size_t n = (size_t)Ts[t] * id.hidden;

			yk = calloc(n, 4);
			yd = calloc(n, 4);
			EXPECT_EQ(run_op(ctx, mk, li, Ts[t], yk), 0);
			EXPECT_EQ(run_op(ctx, md, li, Ts[t], yd), 0);
			EXPECT_EQ(memcmp(yk, yd, n * 4), 0);
			if (memcmp(yk, yd, n * 4))
				TH_LOG("%s: layer %u T %u differs", tag, li,
				       Ts[t]);
			free(yk);
			free(yd);
		}
	}
	TH_LOG("%s: %s g%u, %u layers: the op is bitwise the .ktw's", tag,
	       kt_quant_name(id.quant), id.group_size, n_moe);
	kt_model_destroy(mk);
	kt_model_destroy(md);
	kt_ctx_destroy(ctx);
	tck_rmdir(d);
	unlink(ktw);
}

TEST(bf16_default_is_bf16)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 256, 4, 2, 2, 2, 11);

	same_as_ktw(_metadata, &c, "bf16", KT_QUANT_BF16, 0, 0, KT_QUANT_BF16);
}

TEST(bf16_to_int8)
{
	/* odd seed: every tensor unaligned in its shard */
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 256, 4, 2, 2, 3, 13);

	same_as_ktw(_metadata, &c, "int8", KT_QUANT_INT8, 0, KT_QUANT_INT8,
		    KT_QUANT_INT8);
}

TEST(f16_mixtral_to_int4_g32)
{
	struct tck c = TCK(TCK_MIXTRAL, TCK_F16, 256, 128, 3, 2, 2, 1, 14);

	same_as_ktw(_metadata, &c, "int4", KT_QUANT_INT4, 32, KT_QUANT_INT4,
		    KT_QUANT_INT4);
}

TEST(fp8_default_is_fp8)
{
	struct tck c = TCK(TCK_DEEPSEEK, TCK_FP8, 256, 128, 4, 3, 2, 2, 15);

	same_as_ktw(_metadata, &c, "fp8", KT_QUANT_FP8, 0, 0, KT_QUANT_FP8);
}

TEST(fp8_to_bf16)
{
	struct tck c = TCK(TCK_DEEPSEEK, TCK_FP8, 128, 256, 3, 2, 2, 1, 16);

	same_as_ktw(_metadata, &c, "fp8-bf16", KT_QUANT_BF16, 0, KT_QUANT_BF16,
		    KT_QUANT_BF16);
}

/* Masked experts take no memory; a .ktw opened for another quant fails. */
TEST(masks_and_quant_check)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 4, 2, 2, 1, 17);
	struct kt_convert_opts co = { .sz = sizeof(co), .quant = KT_QUANT_INT8,
				      .layer_last = -1, .threads = 1 };
	uint64_t mask = 1u << 2;
	struct kt_model_opts mo = { .sz = sizeof(mo), .expert_mask = &mask };
	struct kt_model *m = NULL;
	struct kt_model_info mi;
	struct kt_ctx *ctx = NULL;
	char d[256], ktw[300];
	float *y;

	snprintf(d, sizeof(d), "/tmp/kt-hfdir-mask-%d", (int)getpid());
	snprintf(ktw, sizeof(ktw), "%s.ktw", d);
	ASSERT_EQ(tck_convert(&c, d, &co, ktw), 0);
	ASSERT_EQ(test_ctx(&ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, d, &mo, &m), 0);
	kt_model_get_info(m, &mi);
	EXPECT_EQ(mi.resident_bytes, 2 * 3 * mi.expert_bytes);
	y = calloc(9 * 128, 4);
	EXPECT_EQ(run_op(ctx, m, 1, 9, y), 0);
	free(y);
	kt_model_destroy(m);
	m = NULL;
	mo.expert_mask = NULL;
	mo.quant = KT_QUANT_INT4;
	EXPECT_EQ(kt_model_open(ctx, ktw, &mo, &m), -EINVAL);
	EXPECT_EQ(m, NULL);
	EXPECT_NE(strstr(kt_last_error(), "int8"), NULL);
	TH_LOG("%s", kt_last_error());
	/* the cache needs a .ktw */
	mo.quant = 0;
	mo.budget = 1;
	EXPECT_EQ(kt_model_open(ctx, d, &mo, &m), -EOPNOTSUPP);
	EXPECT_EQ(m, NULL);
	kt_ctx_destroy(ctx);
	tck_rmdir(d);
	unlink(ktw);
}

/* @ret and a message that names @what; no model. */
static void refused(struct kt_test_meta *_metadata, struct kt_ctx *ctx,
		    const char *dir, int want, const char *what)
{
	struct kt_model_opts mo = { .sz = sizeof(mo) };
	struct kt_model *m = NULL;
	int ret = kt_model_open(ctx, dir, &mo, &m);

	TH_LOG("%d: %s", ret, kt_last_error());
	EXPECT_EQ(ret, want);
	EXPECT_EQ(m, NULL);
	EXPECT_NE(strstr(kt_last_error(), what), NULL);
	kt_model_destroy(m);
}

static void write_ckpt(struct kt_test_meta *_metadata, struct tck *c,
		       const char *d)
{
	tck_rmdir(d);
	ASSERT_EQ(tck_write(c, d), 0);
	tck_free(c);
}

TEST(missing_shard)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 2, 2, 2, 2, 21);
	struct kt_ctx *ctx = NULL;
	char d[256], p[300];

	snprintf(d, sizeof(d), "/tmp/kt-hfdir-noshard-%d", (int)getpid());
	write_ckpt(_metadata, &c, d);
	snprintf(p, sizeof(p), "%s/model-00002-of-00002.safetensors", d);
	ASSERT_EQ(unlink(p), 0);
	ASSERT_EQ(test_ctx(&ctx), 0);
	refused(_metadata, ctx, d, -ENOENT, "model-00002-of-00002");
	kt_ctx_destroy(ctx);
	tck_rmdir(d);
}

TEST(truncated_shard)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 2, 2, 2, 2, 22);
	struct kt_ctx *ctx = NULL;
	char d[256], p[300];
	struct stat st;

	snprintf(d, sizeof(d), "/tmp/kt-hfdir-trunc-%d", (int)getpid());
	write_ckpt(_metadata, &c, d);
	snprintf(p, sizeof(p), "%s/model-00001-of-00002.safetensors", d);
	ASSERT_EQ(stat(p, &st), 0);
	ASSERT_EQ(truncate(p, st.st_size - 100), 0);
	ASSERT_EQ(test_ctx(&ctx), 0);
	refused(_metadata, ctx, d, -EINVAL, "model-00001-of-00002");
	kt_ctx_destroy(ctx);
	tck_rmdir(d);
}

/* config.json of a Qwen checkpoint with other sizes */
static void qwen_config(const char *d, uint32_t H, uint32_t I, uint32_t E,
			uint32_t L)
{
	char p[300];
	FILE *f;

	snprintf(p, sizeof(p), "%s/config.json", d);
	f = fopen(p, "w");
	fprintf(f, "{\"model_type\": \"qwen3_moe\", \"hidden_size\": %u, \"moe_intermediate_size\": %u,\n"
		" \"num_experts\": %u, \"num_experts_per_tok\": 2, \"num_hidden_layers\": %u}\n",
		H, I, E, L);
	fclose(f);
}

TEST(wrong_shape_and_missing_tensor)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 2, 2, 2, 1, 23);
	struct kt_ctx *ctx = NULL;
	char d[256];

	snprintf(d, sizeof(d), "/tmp/kt-hfdir-shape-%d", (int)getpid());
	write_ckpt(_metadata, &c, d);
	ASSERT_EQ(test_ctx(&ctx), 0);
	qwen_config(d, 128, 256, 2, 2);
	refused(_metadata, ctx, d, -EINVAL,
		"model.layers.0.mlp.experts.0.gate_proj.weight: shape [128, 128], expected [256, 128]");
	qwen_config(d, 128, 128, 3, 2);
	refused(_metadata, ctx, d, -EINVAL,
		"missing tensor model.layers.0.mlp.experts.2.gate_proj.weight");
	qwen_config(d, 128, 128, 2, 2);
	{
		struct kt_model_opts mo = { .sz = sizeof(mo) };
		struct kt_model *m = NULL;

		EXPECT_EQ(kt_model_open(ctx, d, &mo, &m), 0);
		kt_model_destroy(m);
	}
	kt_ctx_destroy(ctx);
	tck_rmdir(d);
}

TEST(bad_dtype)
{
	struct tck c = TCK(TCK_QWEN, TCK_F32, 128, 128, 2, 2, 2, 1, 24);
	const char *key = "\"model.layers.1.mlp.experts.1.up_proj.weight\":{\"dtype\":\"";
	struct kt_ctx *ctx = NULL;
	char d[256], p[300], *h, *at;
	uint64_t hl;
	FILE *f;

	snprintf(d, sizeof(d), "/tmp/kt-hfdir-dtype-%d", (int)getpid());
	write_ckpt(_metadata, &c, d);
	/* F32 -> I32 in the header: same size, a dtype kt does not pack */
	snprintf(p, sizeof(p), "%s/model.safetensors", d);
	f = fopen(p, "r+b");
	ASSERT_NE(f, NULL);
	ASSERT_EQ(fread(&hl, 8, 1, f), 1u);
	h = calloc(1, hl + 1);
	ASSERT_EQ(fread(h, 1, hl, f), hl);
	at = strstr(h, key);
	ASSERT_NE(at, NULL);
	at += strlen(key);
	ASSERT_EQ(memcmp(at, "F32", 3), 0);
	at[0] = 'I';
	ASSERT_EQ(fseek(f, 8, SEEK_SET), 0);
	ASSERT_EQ(fwrite(h, 1, hl, f), hl);
	fclose(f);
	free(h);
	ASSERT_EQ(test_ctx(&ctx), 0);
	refused(_metadata, ctx, d, -EINVAL,
		"model.layers.1.mlp.experts.1.up_proj.weight: unsupported dtype I32");
	kt_ctx_destroy(ctx);
	tck_rmdir(d);
}

/*
 * Time to first op, folder against .ktw (KT_HFDIR_BENCH=1; a
 * Qwen3-30B-A3B-shaped layer pair by default: KT_HFDIR_BENCH_E experts).
 * No assertion on the times: the numbers are printed.
 */
static double first_op(struct kt_test_meta *_metadata, struct kt_ctx *ctx,
		       const char *path, const struct kt_model_opts *mo)
{
	struct kt_model *m = NULL;
	struct timespec a, b;
	float *y = calloc(2048, 4);

	clock_gettime(CLOCK_MONOTONIC, &a);
	EXPECT_EQ(kt_model_open(ctx, path, mo, &m), 0);
	if (m)
		EXPECT_EQ(run_op(ctx, m, 0, 1, y), 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	kt_model_destroy(m);
	free(y);
	return (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
}

TEST_TIMEOUT(time_to_first_op, 1200)
{
	const char *on = getenv("KT_HFDIR_BENCH"), *ne = getenv("KT_HFDIR_BENCH_E");
	uint32_t E = ne ? (uint32_t)atoi(ne) : 32;
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 2048, 768, E, 2, 8, 2, 25);
	const int methods[] = { KT_QUANT_INT8, KT_QUANT_BF16 };
	struct kt_ctx_opts xo = { .sz = sizeof(xo) };
	struct kt_ctx *ctx = NULL;
	struct timespec a, b;
	char d[256], ktw[300];
	unsigned int q;
	int r;

	if (!on || strcmp(on, "1"))
		SKIP(return, "set KT_HFDIR_BENCH=1 to time first op (writes %u MB)",
		     E * 2 * 3 * 2048 * 768 * 2 >> 20);
	snprintf(d, sizeof(d), "/tmp/kt-hfdir-bench-%d", (int)getpid());
	snprintf(ktw, sizeof(ktw), "%s.ktw", d);
	tck_rmdir(d);
	ASSERT_EQ(tck_write(&c, d), 0);
	tck_free(&c);
	ASSERT_EQ(kt_ctx_create(&xo, &ctx), 0);
	for (q = 0; q < 2; q++) {
		struct kt_convert_opts co = { .sz = sizeof(co),
					      .quant = methods[q],
					      .layer_last = -1,
					      .input = d, .output = ktw };
		struct kt_model_opts mo = { .sz = sizeof(mo),
					    .quant = methods[q] };
		double conv, tk[3], td[3];

		clock_gettime(CLOCK_MONOTONIC, &a);
		ASSERT_EQ(kt_convert(&co), 0);
		clock_gettime(CLOCK_MONOTONIC, &b);
		conv = (double)(b.tv_sec - a.tv_sec) +
		       (b.tv_nsec - a.tv_nsec) / 1e9;
		/* alternating, warm page cache for both */
		for (r = 0; r < 3; r++) {
			td[r] = first_op(_metadata, ctx, d, &mo);
			tk[r] = first_op(_metadata, ctx, ktw, &mo);
		}
		TH_LOG("H 2048, I 768, %u experts x 2 layers, BF16 -> %s, %u workers: kt convert %.2f s once",
		       E, kt_quant_name((enum kt_quant)methods[q]),
		       kt_ctx_threads(ctx), conv);
		for (r = 0; r < 3; r++)
			TH_LOG("  run %d: open folder + first op %.3f s, open .ktw + first op %.3f s (%.1fx)",
			       r, td[r], tk[r], td[r] / tk[r]);
		unlink(ktw);
	}
	kt_ctx_destroy(ctx);
	tck_rmdir(d);
}

TEST_HARNESS_MAIN
