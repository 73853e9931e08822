// SPDX-License-Identifier: MIT
/*
 * hf-gptoss.c - kt_model_open() on GPT-OSS checkpoint folders (the BF16
 * and the MXFP4 releases, H 160 and I 96 padded to 256 x 128): the op
 * against an f64 reference of the checkpoint's own tensors (gate and up
 * de-interleaved, biases, the clamped SwiGLU); every quantization the
 * folder may be packed to; kt convert and every corrupt folder refused.
 * Budgets of rel. MAE as selftests/loader/forward.c's: BF16 and MXFP4 kept
 * 0.005, INT8 0.04, INT4 g128 0.25; FP8 0.1 and MXFP4 from BF16 0.35 (the
 * uniform test weights are the worst case of a 4-bit float grid).
 */
#include <sys/stat.h>

#include "kt_test.h"
#include "ckpt.h"
#include "test-ctx.h"

#define H_	160
#define I_	96
#define E_	4
#define L_	2

static struct tck_oss oss(int mxfp4, int f32_bias, float limit, uint64_t seed)
{
	return (struct tck_oss){ .hidden = H_, .inter = I_, .n_experts = E_,
				 .n_layers = L_, .top_k = 2, .mxfp4 = mxfp4,
				 .f32_bias = f32_bias, .limit = limit,
				 .seed = seed };
}

static void dir_of(char *d, size_t len, const char *tag)
{
	snprintf(d, len, "/tmp/kt-gptoss-%s-%d", tag, (int)getpid());
}

/*
 * The op on every layer for T = 1, 7 and 33 (x bf16-exact, given as bf16;
 * some ids out of range) against tck_oss_ref(): the worst rel. MAE, or
 * -1 when an op failed. @clamped counts reference gates past the limit.
 */
static double worst_err(struct kt_ctx *ctx, struct kt_model *m,
			const struct tck_oss *c, double lim)
{
	static const uint32_t Ts[] = { 1, 7, 33 };
	const uint32_t K = 2;
	double worst = 0;
	uint32_t l, ti, i;

	for (l = 0; l < c->n_layers; l++)
		for (ti = 0; ti < 3; ti++) {
			uint32_t T = Ts[ti];
			uint64_t seed = 11 + l * 977 + T;
			uint16_t *xb = malloc((size_t)T * H_ * 2);
			float *x = malloc((size_t)T * H_ * 4);
			float *w = malloc((size_t)T * K * 4);
			float *y = malloc((size_t)T * H_ * 4);
			double *ref = malloc((size_t)T * H_ * 8), err;
			int32_t *ids = malloc((size_t)T * K * 4);
			struct kt_moe_args a = {
				.x = xb, .ids = ids, .w = w, .y = y, .tokens = T,
				.top_k = K, .layer = l, .x_dtype = KT_DTYPE_BF16,
				.ids_dtype = KT_DTYPE_I32,
				.y_dtype = KT_DTYPE_F32 };
			int ret;

			for (i = 0; i < T * H_; i++) {
				xb[i] = tck_bf16(tck_uniform(&seed));
				x[i] = tck_from_bf16(xb[i]);
			}
			for (i = 0; i < T * K; i++) {
				/* one id in nine skipped (-1 or E) */
				uint32_t r = (uint32_t)(tck_rand(&seed) % 9);

				ids[i] = r < E_ ? (int32_t)r : r == 8 ? -1 :
					 r == 7 ? E_ : (int32_t)(r % E_);
				w[i] = 0.25f + 0.75f * (tck_uniform(&seed) + 1) / 2;
			}
			ret = kt_moe_forward(ctx, m, &a);
			tck_oss_ref(c, l, lim, T, K, x, ids, w, ref);
			err = ret ? -1 : tck_rel_mae(ref, y, (size_t)T * H_);
			if (err < 0 || err > worst)
				worst = err;
			free(xb);
			free(x);
			free(w);
			free(y);
			free(ref);
			free(ids);
			if (err < 0)
				return err;
		}
	return worst;
}

/* How many of layer 0's gate and up sums pass @lim for some x (a check
 * that the test data exercises the clamp). */
static unsigned int clamps(const struct tck_oss *c, double lim)
{
	uint64_t seed = 5;
	unsigned int n, k, e, hit = 0;
	float x[H_];

	for (k = 0; k < H_; k++)
		x[k] = tck_uniform(&seed);
	for (e = 0; e < E_; e++)
		for (n = 0; n < I_; n++) {
			double g = tck_oss_bias(c, 0, e)[n];
			double u = tck_oss_bias(c, 0, e)[I_ + n];

			for (k = 0; k < H_; k++) {
				g += tck_oss_mat(c, 0, e, 0)[n * H_ + k] * x[k];
				u += tck_oss_mat(c, 0, e, 1)[n * H_ + k] * x[k];
			}
			hit += (g > lim) + (fabs(u) > lim);
		}
	return hit;
}

/*
 * Write @c, open it with @quant (0: the folder's own), expect @expect_quant
 * and a worst rel. MAE within @tol.
 */
static void open_and_compare(struct kt_test_meta *_metadata, struct tck_oss *c,
			     const char *tag, int quant, int expect_quant,
			     double tol)
{
	struct kt_model_opts mo = { .sz = sizeof(mo), .quant = quant };
	double lim = c->limit ? c->limit : 7.0, err;
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	struct kt_model_info mi;
	struct tck_list l;
	char d[256];

	dir_of(d, sizeof(d), tag);
	tck_oss_build(c, &l);
	ASSERT_EQ(tck_oss_write(c, d, &l, NULL), 0);
	tck_list_free(&l);
	ASSERT_EQ(test_ctx(&ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, d, &mo, &m), 0);
	kt_model_get_info(m, &mi);
	EXPECT_EQ((int)mi.quant, expect_quant);
	/* the model's own sizes; packed as 256 x 128 */
	EXPECT_EQ(mi.hidden, (uint32_t)H_);
	EXPECT_EQ(mi.inter, (uint32_t)I_);
	EXPECT_EQ(mi.n_experts, (uint32_t)E_);
	EXPECT_EQ(mi.n_layers, (uint32_t)L_);
	EXPECT_EQ(mi.act, (uint32_t)KT_ACT_SWIGLU_OAI);
	EXPECT_TRUE(mi.bias != 0);
	EXPECT_TRUE(fabs(mi.act_limit - lim) < 1e-6);
	EXPECT_TRUE(fabs(mi.act_alpha - 1.702) < 1e-6);
	err = worst_err(ctx, m, c, lim);
	TH_LOG("%s: %s, rel. MAE %.5f (tolerance %.3f), %u of layer 0's gate/up sums past the limit %.1f",
	       tag, kt_quant_name(mi.quant), err, tol, clamps(c, lim), lim);
	EXPECT_TRUE(err >= 0 && err < tol);
	EXPECT_TRUE(clamps(c, lim) > 0);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	tck_oss_free(c);
	tck_rmdir(d);
}

TEST(bf16_release)
{
	struct tck_oss c = oss(0, 0, 0, 1);

	open_and_compare(_metadata, &c, "bf16", 0, KT_QUANT_BF16, 0.005);
}

/* F32 biases, a limit of its own (5.5) */
TEST(bf16_release_f32_bias_limit)
{
	struct tck_oss c = oss(0, 1, 5.5f, 2);

	open_and_compare(_metadata, &c, "bf16-lim", 0, KT_QUANT_BF16, 0.005);
}

TEST(bf16_release_int8)
{
	struct tck_oss c = oss(0, 0, 7.0f, 3);

	open_and_compare(_metadata, &c, "bf16-int8", KT_QUANT_INT8,
			 KT_QUANT_INT8, 0.04);
}

TEST(bf16_release_int4)
{
	struct tck_oss c = oss(0, 0, 7.0f, 4);

	open_and_compare(_metadata, &c, "bf16-int4", KT_QUANT_INT4,
			 KT_QUANT_INT4, 0.25);
}

TEST(bf16_release_fp8)
{
	struct tck_oss c = oss(0, 0, 7.0f, 5);

	open_and_compare(_metadata, &c, "bf16-fp8", KT_QUANT_FP8,
			 KT_QUANT_FP8, 0.1);
}

TEST(bf16_release_mxfp4)
{
	struct tck_oss c = oss(0, 0, 7.0f, 6);

	open_and_compare(_metadata, &c, "bf16-mx", KT_QUANT_MXFP4,
			 KT_QUANT_MXFP4, 0.35);
}

TEST(mxfp4_release)
{
	struct tck_oss c = oss(1, 0, 0, 7);

	open_and_compare(_metadata, &c, "mx", 0, KT_QUANT_MXFP4, 0.005);
}

TEST(mxfp4_release_f32_bias_limit)
{
	struct tck_oss c = oss(1, 1, 6.0f, 8);

	open_and_compare(_metadata, &c, "mx-lim", 0, KT_QUANT_MXFP4, 0.005);
}

/* MXFP4 values are exact in bf16: packed as BF16 they give the same op */
TEST(mxfp4_release_bf16)
{
	struct tck_oss c = oss(1, 0, 7.0f, 9);

	open_and_compare(_metadata, &c, "mx-bf16", KT_QUANT_BF16,
			 KT_QUANT_BF16, 0.005);
}

TEST(mxfp4_release_int8)
{
	struct tck_oss c = oss(1, 0, 7.0f, 10);

	open_and_compare(_metadata, &c, "mx-int8", KT_QUANT_INT8,
			 KT_QUANT_INT8, 0.04);
}

/* y of @m for fixed inputs, every layer, into @y [L_][T][H_]. */
static void run_all(struct kt_test_meta *_metadata, struct kt_ctx *ctx,
		    struct kt_model *m, float *y)
{
	enum { T = 5, K = 2 };
	float x[T * H_], w[T * K];
	int32_t ids[T * K];
	uint64_t seed = 9;
	unsigned int i, li;

	for (i = 0; i < T * H_; i++)
		x[i] = tck_uniform(&seed);
	for (i = 0; i < T * K; i++) {
		ids[i] = (int32_t)((i / K + i % K * 3) % E_);
		w[i] = 0.5f + 0.1f * (float)(i % 3);
	}
	for (li = 0; li < L_; li++) {
		struct kt_moe_args a = {
			.x = x, .ids = ids, .w = w, .y = y + li * T * H_,
			.tokens = T, .top_k = K, .layer = li,
			.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I32,
			.y_dtype = KT_DTYPE_F32,
		};

		ASSERT_EQ(kt_moe_forward(ctx, m, &a), 0);
	}
}

/*
 * kt convert of a GPT-OSS folder: a .ktw 2.3 with the activation, the
 * padding and the bias section; it gives the folder's y bits, resident
 * and with a budget below its size (the expert cache).
 */
static void convert_same(struct kt_test_meta *_metadata, int mx,
			 const char *tag)
{
	struct tck_oss c = oss(mx, 0, 6.5f, 11);
	struct kt_convert_opts co = { .sz = sizeof(co), .layer_last = -1,
				      .threads = 2 };
	struct kt_model_opts mo = { .sz = sizeof(mo) };
	static float y0[L_ * 5 * H_], y1[L_ * 5 * H_];
	struct kt_model *mf, *mk;
	struct kt_ctx *ctx = NULL;
	struct kt_model_info fi, ki;
	struct tck_list l;
	char d[256], ktw[300];

	dir_of(d, sizeof(d), tag);
	snprintf(ktw, sizeof(ktw), "%s.ktw", d);
	tck_oss_build(&c, &l);
	ASSERT_EQ(tck_oss_write(&c, d, &l, NULL), 0);
	tck_list_free(&l);
	tck_oss_free(&c);
	co.input = d;
	co.output = ktw;
	if (kt_convert(&co))
		TH_LOG("%s", kt_last_error());
	ASSERT_EQ(kt_convert(&co), 0);
	ASSERT_EQ(test_ctx(&ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, d, NULL, &mf), 0);
	ASSERT_EQ(kt_model_open(ctx, ktw, NULL, &mk), 0);
	kt_model_get_info(mf, &fi);
	kt_model_get_info(mk, &ki);
	EXPECT_EQ(ki.quant, fi.quant);
	EXPECT_EQ(ki.hidden, (uint32_t)H_);
	EXPECT_EQ(ki.inter, (uint32_t)I_);
	EXPECT_EQ(ki.act, (uint32_t)KT_ACT_SWIGLU_OAI);
	EXPECT_TRUE(ki.act_limit == 6.5f);
	EXPECT_EQ(ki.bias, 1u);
	run_all(_metadata, ctx, mf, y0);
	run_all(_metadata, ctx, mk, y1);
	EXPECT_EQ(memcmp(y0, y1, sizeof(y0)), 0);
	kt_model_destroy(mk);
	/* one layer's worth of slots: experts read on demand */
	mo.budget = (ki.expert_bytes + 4095) / 4096 * 4096 * E_;
	if (kt_model_open(ctx, ktw, &mo, &mk))
		TH_LOG("budget %llu: %s", (unsigned long long)mo.budget,
		       kt_last_error());
	ASSERT_EQ(kt_model_open(ctx, ktw, &mo, &mk), 0);
	memset(y1, 0, sizeof(y1));
	run_all(_metadata, ctx, mk, y1);
	EXPECT_EQ(memcmp(y0, y1, sizeof(y0)), 0);
	kt_model_destroy(mk);
	kt_model_destroy(mf);
	kt_ctx_destroy(ctx);
	unlink(ktw);
	tck_rmdir(d);
}

TEST(convert_bf16_release_same_bits)
{
	convert_same(_metadata, 0, "conv");
}

TEST(convert_mxfp4_release_same_bits)
{
	convert_same(_metadata, 1, "conv-mx");
}

/* ---- corrupt folders ------------------------------------------------------ */

enum bad_kind {
	BAD_SHAPE,	/* @name's shape made @nd dims @dims (its bytes) */
	BAD_DTYPE,	/* @name's dtype string replaced by @s (same size) */
	BAD_MISSING,	/* @name left out */
	BAD_BYTE,	/* byte @v of @name set to 255 */
};

struct bad {
	const char *tag;
	int mxfp4;
	enum bad_kind kind;
	const char *name;
	unsigned int nd;
	uint64_t dims[4];
	uint64_t v;
	const char *s;
	const char *extra;	/* config.json keys; NULL: none */
	int expect;
	const char *msg;	/* in kt_last_error() */
};

static void check_bad(struct kt_test_meta *_metadata, const struct bad *b)
{
	struct tck_oss c = oss(b->mxfp4, 0, 7.0f, 21);
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	struct tck_tensor *t = NULL;
	struct tck_list l;
	char d[256];
	int ret;

	dir_of(d, sizeof(d), b->tag);
	tck_oss_build(&c, &l);
	if (b->name) {
		t = tck_find(&l, b->name);
		ASSERT_TRUE(t != NULL);
	}
	switch (b->kind) {
	case BAD_SHAPE:
		if (t) {
			t->ndim = b->nd;
			memcpy(t->shape, b->dims, sizeof(t->shape));
		}
		break;
	case BAD_DTYPE:
		if (t)
			t->dtype = b->s;
		break;
	case BAD_MISSING:
		if (t) {
			free(t->data);
			*t = l.t[--l.n];
		}
		break;
	case BAD_BYTE:
		if (t)
			((uint8_t *)t->data)[b->v] = 255;
		break;
	}
	ASSERT_EQ(tck_oss_write(&c, d, &l, b->extra), 0);
	tck_list_free(&l);
	tck_oss_free(&c);
	ASSERT_EQ(test_ctx(&ctx), 0);
	ret = kt_model_open(ctx, d, NULL, &m);
	TH_LOG("%s: %d: %s", b->tag, ret, kt_last_error());
	EXPECT_EQ(ret, b->expect);
	EXPECT_TRUE(m == NULL);
	if (b->msg)
		EXPECT_TRUE(strstr(kt_last_error(), b->msg) != NULL);
	if (m)
		kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	tck_rmdir(d);
}

#define GU	"model.layers.1.mlp.experts.gate_up_proj"
#define DN	"model.layers.1.mlp.experts.down_proj"

static const struct bad bads[] = {
	/* the BF16 release */
	{ "gu-transposed", 0, BAD_SHAPE, GU, 3, { E_, 2 * I_, H_ },
	  .expect = -EINVAL,
	  .msg = GU ": shape [4, 192, 160], expected [4, 160, 192]" },
	{ "gu-dtype", 0, BAD_DTYPE, GU, .s = "I16", .expect = -EINVAL,
	  .msg = GU ": unsupported dtype I16" },
	{ "dn-missing", 0, BAD_MISSING, DN, .expect = -EINVAL,
	  .msg = "missing tensor " DN },
	{ "gu-bias-missing", 0, BAD_MISSING, GU "_bias", .expect = -EINVAL,
	  .msg = "missing tensor " GU "_bias" },
	{ "dn-bias-shape", 0, BAD_SHAPE, DN "_bias", 2, { 8, H_ / 2 },
	  .expect = -EINVAL,
	  .msg = DN "_bias: shape [8, 80], expected [4, 160]" },
	{ "dn-bias-1d", 0, BAD_SHAPE, DN "_bias", 1, { E_ * H_ },
	  .expect = -EINVAL,
	  .msg = DN "_bias: shape [640], expected [4, 160]" },
	/* bytes that do not fit the shape: the safetensors reader's */
	{ "dn-bytes", 0, BAD_SHAPE, DN, 3, { E_, I_, H_ + 1 },
	  .expect = -EINVAL, .msg = "bytes of data for shape" },
	{ "bias-dtype", 0, BAD_DTYPE, GU "_bias", .s = "U16",
	  .expect = -EINVAL, .msg = GU "_bias: unsupported dtype U16" },
	{ "experts-count", 0, BAD_SHAPE, DN, 3, { 2, 2 * I_, H_ },
	  .expect = -EINVAL, .msg = DN ": shape [2, 192, 160]" },
	/* the MXFP4 release */
	{ "blocks-shape", 1, BAD_SHAPE, GU "_blocks", 4, { E_, 2 * I_, 10, 8 },
	  .expect = -EINVAL,
	  .msg = GU "_blocks: shape [4, 192, 10, 8], expected [4, 192, 5, 16]" },
	{ "blocks-3d", 1, BAD_SHAPE, DN "_blocks", 3, { E_, H_, I_ / 2 },
	  .expect = -EINVAL,
	  .msg = DN "_blocks: shape [4, 160, 48], expected [4, 160, 3, 16]" },
	{ "blocks-dtype", 1, BAD_DTYPE, DN "_blocks", .s = "I8",
	  .expect = -EINVAL, .msg = DN "_blocks: dtype I8, expected U8" },
	{ "scales-missing", 1, BAD_MISSING, DN "_scales", .expect = -EINVAL,
	  .msg = "missing tensor " DN "_scales" },
	{ "scales-shape", 1, BAD_SHAPE, GU "_scales", 3, { E_, I_, 10 },
	  .expect = -EINVAL,
	  .msg = GU "_scales: shape [4, 96, 10], expected [4, 192, 5]" },
	{ "blocks-missing", 1, BAD_MISSING, GU "_blocks", .expect = -EINVAL,
	  .msg = "missing tensor " GU "_blocks" },
	{ "mx-bias-missing", 1, BAD_MISSING, DN "_bias", .expect = -EINVAL,
	  .msg = "missing tensor " DN "_bias" },
	/* expert 3's last down row, block 1: E8M0 NaN */
	{ "scale-nan", 1, BAD_BYTE, DN "_scales", .v = 4 * H_ * 3 - 2,
	  .expect = -EINVAL, .msg = "scale 255 is E8M0's NaN" },
	/* config.json */
	{ "limit-negative", 0, BAD_MISSING, NULL, .extra = "\"swiglu_limit\": -1",
	  .expect = -EOPNOTSUPP, .msg = "swiglu_limit" },
	{ "limit-zero", 0, BAD_MISSING, NULL, .extra = "\"swiglu_limit\": 0",
	  .expect = -EOPNOTSUPP, .msg = "swiglu_limit" },
	{ "limit-string", 0, BAD_MISSING, NULL, .extra = "\"swiglu_limit\": \"inf\"",
	  .expect = -EOPNOTSUPP, .msg = "swiglu_limit" },
	{ "quant-fp8", 0, BAD_MISSING, NULL,
	  .extra = "\"quantization_config\": {\"quant_method\": \"fp8\"}",
	  .expect = -EOPNOTSUPP, .msg = "quant_method \"fp8\"" },
	/* config says MXFP4, the folder holds the BF16 release */
	{ "mx-config-bf16", 0, BAD_MISSING, NULL,
	  .extra = "\"quantization_config\": {\"quant_method\": \"mxfp4\"}",
	  .expect = -EINVAL, .msg = "gate_up_proj_blocks" },
	/* and the other way round */
	{ "bf16-config-mx", 1, BAD_MISSING, NULL,
	  .extra = "\"quantization_config\": {}",
	  .expect = -EINVAL, .msg = "missing tensor model.layers.0.mlp.experts.gate_up_proj" },
};

TEST(corrupt_refused)
{
	size_t i;

	for (i = 0; i < sizeof(bads) / sizeof(bads[0]); i++)
		check_bad(_metadata, &bads[i]);
}

/* Not multiples of 32, or another model_type with MXFP4: refused. */
static void check_cfg(struct kt_test_meta *_metadata, const char *tag,
		      const char *json, int expect, const char *msg)
{
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	char d[256], p[300];
	FILE *f;

	dir_of(d, sizeof(d), tag);
	tck_rmdir(d);
	mkdir(d, 0755);
	snprintf(p, sizeof(p), "%s/config.json", d);
	f = fopen(p, "w");
	ASSERT_TRUE(f != NULL);
	fputs(json, f);
	fclose(f);
	ASSERT_EQ(test_ctx(&ctx), 0);
	EXPECT_EQ(kt_model_open(ctx, d, NULL, &m), expect);
	TH_LOG("%s: %s", tag, kt_last_error());
	EXPECT_TRUE(strstr(kt_last_error(), msg) != NULL);
	kt_ctx_destroy(ctx);
	tck_rmdir(d);
}

TEST(config_refused)
{
	check_cfg(_metadata, "h48",
		  "{\"model_type\": \"gpt_oss\", \"hidden_size\": 2888, \"intermediate_size\": 2880,"
		  " \"num_local_experts\": 32, \"num_hidden_layers\": 24}",
		  -EOPNOTSUPP, "multiples of 32");
	check_cfg(_metadata, "i16",
		  "{\"model_type\": \"gpt_oss\", \"hidden_size\": 2880, \"intermediate_size\": 2896,"
		  " \"num_local_experts\": 32, \"num_hidden_layers\": 24}",
		  -EOPNOTSUPP, "multiples of 32");
	check_cfg(_metadata, "mx-qwen",
		  "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 2048, \"moe_intermediate_size\": 768,"
		  " \"num_experts\": 128, \"num_hidden_layers\": 48,"
		  " \"quantization_config\": {\"quant_method\": \"mxfp4\"}}",
		  -EOPNOTSUPP, "model_type gpt_oss only");
}

TEST_HARNESS_MAIN
