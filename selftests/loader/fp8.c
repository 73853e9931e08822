// SPDX-License-Identifier: MIT
/*
 * fp8.c - FP8 (E4M3) experts end to end: an FP8 checkpoint written here
 * (its values decoded by ckpt.h's own E4M3 definition) converted with
 * --method fp8 keeps every weight exactly; kt_moe_forward() on it matches
 * an f64 forward over the source weights within 0.005 (rel. MAE) on every
 * kernel variant the CPU runs; so does a per-channel FP8 checkpoint
 * (weight_scale [N, 1]); BF16 sources are quantized per 128x128 block;
 * checkpoints kt cannot keep as they are are refused by name.
 */
#include "kt_test.h"
#include "ckpt.h"
#include "kernels/pack.h"
#include "ktcore/core.h"
#include "ktcore/model.h"
#include "test-ctx.h"

static void tmpdir(char *buf, size_t n, const char *tag)
{
	snprintf(buf, n, "/tmp/kt-fp8-%s-%d", tag, (int)getpid());
	tck_rmdir(buf);
}

static int convert(struct tck *c, const char *dir, char *out, size_t n)
{
	struct kt_convert_opts o = { .sz = sizeof(o), .input = dir,
				     .output = out, .quant = KT_QUANT_FP8,
				     .layer_last = -1, .threads = 2 };
	int ret;

	snprintf(out, n, "%s/m.ktw", dir);
	ret = tck_write(c, dir);
	if (!ret)
		ret = kt_convert(&o);
	return ret;
}

/* kt_moe_forward() of layer @li on @isa against the f64 reference. */
static double forward_err(struct kt_test_meta *_metadata, struct tck *c,
			  const char *ktw, uint32_t li, enum kt_isa isa,
			  bool bf16_x)
{
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 2,
				  .flags = KT_CTX_F_NO_PIN, .isa = isa };
	const uint32_t T = 7, K = c->top_k;
	struct tck_src rs = { c, li };
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	uint64_t seed = 31 + li;
	float *x, *w, *y;
	uint16_t *xb;
	int32_t *ids;
	double *ref, err;
	uint32_t i;

	if (kt_ctx_create(&co, &ctx))
		return -1;	/* the CPU lacks @isa */
	x = malloc((size_t)T * c->hidden * 4);
	xb = malloc((size_t)T * c->hidden * 2);
	y = malloc((size_t)T * c->hidden * 4);
	ids = malloc((size_t)T * K * 4);
	w = malloc((size_t)T * K * 4);
	ref = malloc((size_t)T * c->hidden * sizeof(double));
	for (i = 0; i < T * c->hidden; i++) {
		x[i] = tck_uniform(&seed);
		xb[i] = tck_bf16(x[i]);
		if (bf16_x)
			x[i] = tck_from_bf16(xb[i]);
	}
	for (i = 0; i < T * K; i++) {
		ids[i] = (int32_t)(tck_rand(&seed) % c->n_experts);
		w[i] = (tck_uniform(&seed) + 1.0f) * 0.5f;
	}
	ids[2] = -1;
	EXPECT_EQ(kt_model_open(ctx, ktw, NULL, &m), 0);
	if (m) {
		struct kt_moe_args a = {
			.x = bf16_x ? (void *)xb : (void *)x, .ids = ids,
			.w = w, .y = y, .tokens = T, .top_k = K,
			.layer = li,
			.x_dtype = bf16_x ? KT_DTYPE_BF16 : KT_DTYPE_F32,
			.ids_dtype = KT_DTYPE_I32, .y_dtype = KT_DTYPE_F32 };

		EXPECT_EQ(kt_moe_forward(ctx, m, &a), 0);
	}
	tck_forward_ref(c->hidden, c->inter, c->n_experts, T, K, x, ids, w,
			tck_src_get, &rs, ref);
	err = tck_rel_mae(ref, y, (size_t)T * c->hidden);
	TH_LOG("%s layer %d: rel. MAE %.5f", kt_isa_name(kt_ctx_isa(ctx)),
	       c->moe_ids[li], err);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	free(x);
	free(xb);
	free(y);
	free(ids);
	free(w);
	free(ref);
	return err;
}

/* The checkpoint's E4M3 bytes and block scales are kept: no rounding. */
TEST(fp8_kept_exactly)
{
	struct tck c = TCK(TCK_DEEPSEEK, TCK_FP8, 256, 384, 4, 3, 2, 2, 41);
	struct kern_pack_layout lay;
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	struct kt_ktw_info info;
	char d[256], out[300];
	uint32_t l, e, id, n, k, bad = 0;

	tmpdir(d, sizeof(d), "keep");
	ASSERT_EQ(convert(&c, d, out, sizeof(out)), 0);
	ASSERT_EQ(kt_ktw_inspect(out, &info, NULL, 0), 0);
	EXPECT_EQ(info.quant, KT_QUANT_FP8);
	EXPECT_EQ(info.group_size, 128u);
	EXPECT_GE(info.version_minor, 1u);	/* 2.1 added FP8 */
	/* one byte per weight and one f32 per 128x128 block */
	EXPECT_EQ(info.expert_bytes, 3ull * 256 * 384 + 3 * 64);
	ASSERT_EQ(kt_ktw_verify(out, NULL), 0);
	ASSERT_EQ(test_ctx(&ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, out, NULL, &m), 0);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_FP8, 256, 384, 128, &lay), 0);
	for (l = 0; l < c.n_moe; l++)
		for (e = 0; e < c.n_experts; e++) {
			const struct core_expert *ex = core_model_expert(m, l, e);

			for (id = 0; id < 3; id++) {
				uint32_t N = id == 2 ? 256 : 384;
				uint32_t K = id == 2 ? 384 : 256;
				const float *src = tck_mat(&c, l, e, (int)id);

				for (n = 0; n < N; n++)
					for (k = 0; k < K; k++)
						bad += kern_pack_get(&lay, id,
							ex->gate.tiles, n, k) !=
						       src[(size_t)n * K + k];
			}
		}
	EXPECT_EQ(bad, 0u);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	tck_free(&c);
	tck_rmdir(d);
}

/* Every variant (scalar included) within the 0.005. */
TEST(fp8_forward_every_isa)
{
	struct tck c = TCK(TCK_DEEPSEEK, TCK_FP8, 384, 256, 6, 3, 3, 1, 42);
	char d[256], out[300];
	int isa, ran = 0;

	tmpdir(d, sizeof(d), "fwd");
	ASSERT_EQ(convert(&c, d, out, sizeof(out)), 0);
	for (isa = KT_ISA_SCALAR; isa < KT_ISA_COUNT; isa++) {
		double err;
		uint32_t li;

		for (li = 0; li < c.n_moe; li++) {
			err = forward_err(_metadata, &c, out, li,
					  (enum kt_isa)isa, li & 1);
			if (err < 0)
				break;
			ran++;
			EXPECT_LT(err, 0.005);
		}
	}
	EXPECT_GT(ran, 0);
	tck_free(&c);
	tck_rmdir(d);
}

/* BF16 weights are quantized to E4M3 per 128x128 block (~3.6% rms). */
TEST(bf16_source_quantized)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 256, 256, 4, 1, 2, 1, 43);
	char d[256], out[300];
	double err;

	tmpdir(d, sizeof(d), "q");
	ASSERT_EQ(convert(&c, d, out, sizeof(out)), 0);
	err = forward_err(_metadata, &c, out, 0, KT_ISA_AUTO, false);
	EXPECT_GE(err, 0);
	EXPECT_LT(err, 0.06);
	tck_free(&c);
	tck_rmdir(d);
}

static void patch_file(const char *path, const char *from, const char *to)
{
	FILE *f = fopen(path, "r+b");
	char buf[65536];
	size_t n;
	char *p;

	if (!f)
		return;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	p = memmem(buf, n, from, strlen(from));
	if (p) {
		fseek(f, p - buf, SEEK_SET);
		fwrite(to, 1, strlen(to), f);
	}
	fclose(f);
}

/* Convert @dir with --method fp8 expecting failure naming @what. */
static void expect_fail(struct kt_test_meta *_metadata, const char *dir,
			const char *what)
{
	char out[600];
	struct kt_convert_opts o = { .sz = sizeof(o), .input = dir,
				     .output = out, .quant = KT_QUANT_FP8,
				     .layer_last = -1, .threads = 2 };
	int ret;

	snprintf(out, sizeof(out), "%s/out.ktw", dir);
	ret = kt_convert(&o);
	TH_LOG("error: %s", kt_last_error());
	ASSERT_EQ(ret, -EINVAL);
	EXPECT_TRUE(strstr(kt_last_error(), what) != NULL);
	EXPECT_NE(access(out, F_OK), 0);
}

TEST(other_block_size_refused)
{
	struct tck c = TCK(TCK_DEEPSEEK, TCK_FP8, 256, 128, 2, 2, 2, 1, 44);
	char d[256], p[300];

	tmpdir(d, sizeof(d), "blk");
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(p, sizeof(p), "%s/config.json", d);
	patch_file(p, "[128, 128]", "[ 64, 128]");
	expect_fail(_metadata, d, "keeps 128x128 block scales only");
	tck_free(&c);
	tck_rmdir(d);
}

TEST(scale_shape_refused)
{
	struct tck c = TCK(TCK_DEEPSEEK, TCK_FP8, 256, 128, 2, 2, 2, 1, 45);
	char d[256], p[300];

	tmpdir(d, sizeof(d), "shp");
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(p, sizeof(p), "%s/model.safetensors", d);
	/* gate scales are [I/128][H/128] = [1, 2]: same bytes, transposed */
	patch_file(p, "\"shape\":[1,2]", "\"shape\":[2,1]");
	expect_fail(_metadata, d, "weight_scale_inv: shape [2, 1], expected [1, 2]");
	tck_free(&c);
	tck_rmdir(d);
}

/* ---- per-channel FP8: F8_E4M3 weights with weight_scale [N, 1] ---- */

struct pc {
	uint32_t H, I, E;
	uint64_t seed;
	float *w;	/* [E][3][I*H] exact values fp8 * scale */
};

static float *pc_mat(const struct pc *c, uint32_t e, int m)
{
	return c->w + ((size_t)e * 3 + (size_t)m) * c->I * c->H;
}

static double pc_get(void *arg, uint32_t e, int m, uint32_t n, uint32_t k)
{
	const struct pc *c = arg;

	return pc_mat(c, e, m)[(size_t)n * (m == 2 ? c->I : c->H) + k];
}

static int pc_write(struct pc *c, const char *dir)
{
	static const char *const mn[3] = { "gate_proj", "up_proj", "down_proj" };
	uint64_t seed = c->seed;
	struct tck_list l = { 0 };
	char path[512], name[200];
	uint32_t e, n, k;
	size_t i;
	int m, ret;
	FILE *f;

	mkdir(dir, 0755);
	c->w = malloc((size_t)c->E * 3 * c->I * c->H * sizeof(float));
	for (e = 0; e < c->E; e++)
		for (m = 0; m < 3; m++) {
			uint32_t N = m == 2 ? c->H : c->I;
			uint32_t K = m == 2 ? c->I : c->H;
			uint8_t *q = malloc((size_t)N * K);
			float *s = malloc((size_t)N * 4);
			float *w = pc_mat(c, e, m);

			for (n = 0; n < N; n++) {
				s[n] = 1e-4f * (1.0f + (float)(tck_rand(&seed) %
								100));
				for (k = 0; k < K; k++) {
					/* any byte but the NaNs S.1111.111 */
					uint8_t b = (uint8_t)tck_rand(&seed);

					if ((b & 0x7f) == 0x7f)
						b--;
					q[(size_t)n * K + k] = b;
					w[(size_t)n * K + k] =
						tck_fp8_value(b) * s[n];
				}
			}
			snprintf(name, sizeof(name),
				 "model.layers.0.mlp.experts.%u.%s.weight", e,
				 mn[m]);
			tck_add(&l, name, "F8_E4M3", N, K, q, (size_t)N * K);
			snprintf(name, sizeof(name),
				 "model.layers.0.mlp.experts.%u.%s.weight_scale",
				 e, mn[m]);
			tck_add(&l, name, "F32", N, 1, s, (size_t)N * 4);
		}
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	ret = tck_write_st(path, &l, 0, 1);
	for (i = 0; i < l.n; i++)
		free(l.t[i].data);
	free(l.t);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	f = fopen(path, "w");
	if (!f)
		return -errno;
	fprintf(f, "{\"model_type\": \"qwen3_moe\", \"hidden_size\": %u,\n"
		" \"moe_intermediate_size\": %u, \"num_experts\": %u,\n"
		" \"num_experts_per_tok\": 2, \"num_hidden_layers\": 1}\n",
		c->H, c->I, c->E);
	fclose(f);
	return ret;
}

/* kt_moe_forward() of @ktw on @isa against pc_get's f64 forward. */
static double pc_forward(struct kt_test_meta *_metadata, struct pc *c,
			 const char *ktw, enum kt_isa isa)
{
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 2,
				  .flags = KT_CTX_F_NO_PIN, .isa = isa };
	const uint32_t T = 40, K = 2;	/* 20 tokens per expert: AMX tiles */
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	float *x, *w, *y;
	int32_t *ids;
	double *ref, err;
	uint64_t seed = 77;
	uint32_t i;

	if (kt_ctx_create(&co, &ctx))
		return -1;
	x = malloc((size_t)T * c->H * 4);
	y = malloc((size_t)T * c->H * 4);
	ids = malloc((size_t)T * K * 4);
	w = malloc((size_t)T * K * 4);
	ref = malloc((size_t)T * c->H * sizeof(double));
	for (i = 0; i < T * c->H; i++)
		x[i] = tck_uniform(&seed);
	for (i = 0; i < T * K; i++) {
		ids[i] = (int32_t)(tck_rand(&seed) % c->E);
		w[i] = 0.5f;
	}
	EXPECT_EQ(kt_model_open(ctx, ktw, NULL, &m), 0);
	if (m) {
		struct kt_moe_args a = { .x = x, .ids = ids, .w = w, .y = y,
					 .tokens = T, .top_k = K, .layer = 0,
					 .x_dtype = KT_DTYPE_F32,
					 .ids_dtype = KT_DTYPE_I32,
					 .y_dtype = KT_DTYPE_F32 };

		EXPECT_EQ(kt_moe_forward(ctx, m, &a), 0);
	}
	tck_forward_ref(c->H, c->I, c->E, T, K, x, ids, w, pc_get, c, ref);
	err = tck_rel_mae(ref, y, (size_t)T * c->H);
	TH_LOG("%s: rel. MAE %.5f", kt_isa_name(kt_ctx_isa(ctx)), err);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	free(x);
	free(y);
	free(ids);
	free(w);
	free(ref);
	return err;
}

TEST(per_channel_kept_exactly)
{
	struct pc c = { 256, 384, 4, 46, NULL };
	struct kt_convert_opts o = { .sz = sizeof(o), .quant = KT_QUANT_FP8,
				     .layer_last = -1, .threads = 2 };
	struct kern_pack_layout lay;
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	struct kt_ktw_info info;
	char d[256], out[300];
	uint32_t e, id, n, k, bad = 0;
	int isa, ret;

	tmpdir(d, sizeof(d), "pc");
	ASSERT_EQ(pc_write(&c, d), 0);
	snprintf(out, sizeof(out), "%s/m.ktw", d);
	o.input = d;
	o.output = out;
	ret = kt_convert(&o);
	if (ret)
		TH_LOG("kt_convert: %s", kt_last_error());
	ASSERT_EQ(ret, 0);
	ASSERT_EQ(kt_ktw_inspect(out, &info, NULL, 0), 0);
	EXPECT_EQ(info.quant, KT_QUANT_FP8);
	EXPECT_EQ(info.group_size, KT_GROUP_CHANNEL);
	ASSERT_EQ(test_ctx(&ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, out, NULL, &m), 0);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_FP8, c.H, c.I, KT_GROUP_CHANNEL,
				   &lay), 0);
	for (e = 0; e < c.E; e++)
		for (id = 0; id < 3; id++) {
			const struct core_expert *ex = core_model_expert(m, 0, e);
			uint32_t N = id == 2 ? c.H : c.I, K = id == 2 ? c.I : c.H;

			for (n = 0; n < N; n++)
				for (k = 0; k < K; k++)
					bad += kern_pack_get(&lay, id,
						ex->gate.tiles, n, k) !=
					       pc_mat(&c, e, (int)id)[(size_t)n *
								      K + k];
		}
	EXPECT_EQ(bad, 0u);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	for (isa = KT_ISA_SCALAR; isa < KT_ISA_COUNT; isa++) {
		double err = pc_forward(_metadata, &c, out, (enum kt_isa)isa);

		if (err >= 0)
			EXPECT_LT(err, 0.005);
	}
	/* another method dequantizes per row first */
	o.quant = KT_QUANT_INT8;
	ASSERT_EQ(kt_convert(&o), 0);
	EXPECT_LT(pc_forward(_metadata, &c, out, KT_ISA_AUTO), 0.04);
	free(c.w);
	tck_rmdir(d);
}

TEST(fp8_model_create)
{
	/* kt_model_create() quantizes f32 weights per block the same way */
	struct kern_pack_layout l;

	ASSERT_EQ(kern_pack_layout(KT_QUANT_FP8, 256, 128, 0, &l), 0);
	EXPECT_EQ(l.group, 128u);
	EXPECT_EQ(l.kt, 64u);
	EXPECT_EQ(kern_pack_layout(KT_QUANT_FP8, 256, 128, 64, &l), -EINVAL);
}

TEST_HARNESS_MAIN
