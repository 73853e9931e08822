// SPDX-License-Identifier: MIT
/*
 * gguf-forward.c - GGUF files of each expert type, opened with
 * kt_model_open() and run with kt_moe_forward() on every kernel variant
 * the CPU has, against an f64 reference built here: weights dequantized by
 * the published block definitions (gguf-write.h), activations quantized
 * as the type's kernels define (Documentation/formats.md). Bound: rel.
 * MAE 1e-3 (only f32 summation order and rare rounding flips differ).
 * Files that mix block types (Q4_K_M: gate/up Q4_K, down Q6_K) dequantize
 * each tensor by its own type and quantize the intermediate as down's.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <kt/kt.h>
#include "kt_logged.h"
#include "kt_test.h"
#include "gguf-write.h"
#include "kt-bin.h"
#include "ktcore/core.h"

#define TOL	1e-3
#define T	7
#define K	2

/* how the reference quantizes activations, per type */
enum act_mode { ACT_Q8_0, ACT_INT4, ACT_Q8_K, ACT_BF16 };

/*
 * In place, @n values of @x: Q8_0 per 32 (scale amax/127 rounded to f16,
 * q = rint(x * 127/amax)); INT4 (kt's INT4 rule) per @grp values (the row
 * of H, or a chunk of 128) with the f32 scale amax/127; Q8_K (K-quants)
 * the same per 256 (x) or per 128 chunk (the intermediate); BF16 rounding.
 */
KT_TEST_NO_TSAN
static void act_quant(float *x, unsigned int n, enum act_mode mode,
		      unsigned int grp)
{
	unsigned int i, j;

	if (mode == ACT_BF16) {
		for (i = 0; i < n; i++)
			x[i] = gw_bf2f(gw_f2bf(x[i]));
		return;
	}
	if (mode == ACT_Q8_0)
		grp = 32;
	if (mode == ACT_Q8_K && grp > 256)
		grp = 256;
	/* a last group cut short is a padded one: its zeros change nothing */
	for (i = 0; i < n; i += grp) {
		unsigned int len = n - i < grp ? n - i : grp;
		float amax = 0, inv, s;

		for (j = 0; j < len; j++)
			amax = fmaxf(amax, fabsf(x[i + j]));
		inv = amax > 0 ? 127.0f / amax : 0;
		s = amax / 127.0f;
		if (mode == ACT_Q8_0 && s > 0)
			s = gw_h2f(gw_f2h(s));
		for (j = 0; j < len; j++)
			x[i + j] = rintf(x[i + j] * inv) * s;
	}
}

struct ref {
	const uint8_t *img;
	const struct gw_tensor *t;	/* the layer's gate, up, down */
	uint32_t H, I, E, type, type_down;
	enum act_mode mode, mode_down;
	const struct gw_tensor *bias;	/* gate, up, down biases, or NULL */
	int oai;			/* gpt-oss's clamped SwiGLU */
};

/* bias @n of expert @e of matrix @m (0 without biases) */
KT_TEST_NO_TSAN
static double bget(const struct ref *r, size_t data, int m, uint32_t e,
		   uint64_t n)
{
	float v;

	if (!r->bias)
		return 0;
	memcpy(&v, r->img + data + r->bias[m].off +
	       4 * (e * r->bias[m].ne[0] + n), 4);
	return v;
}

/* the gated activation of the architecture, in f64 */
KT_TEST_NO_TSAN
static double glu_ref(const struct ref *r, double g, double u)
{
	if (!r->oai)
		return g / (1 + exp(-g)) * u;
	g = fmin(g, 7.0);
	u = fmax(fmin(u, 7.0), -7.0);
	return g / (1 + exp(-1.702 * g)) * (u + 1);
}

/* element (n, k) of expert e of matrix m, as kt must see it */
KT_TEST_NO_TSAN
static double wget(const struct ref *r, size_t data, int m, uint32_t e,
		   uint64_t n, uint64_t k)
{
	const struct gw_tensor *t = &r->t[m];
	uint64_t Km = m == 2 ? r->I : r->H, Nm = m == 2 ? r->H : r->I;
	const uint8_t *d = r->img + data + t->off + t->bytes / r->E * e;
	uint32_t type = m == 2 ? r->type_down : r->type;
	double v = gw_get(d, type, Km, n, k);

	(void)Nm;
	/* F16 and F32 are held as BF16 (a documented rounding) */
	if (type == GW_F16 || type == GW_F32)
		v = gw_bf2f(gw_f2bf((float)v));
	return v;
}

KT_TEST_NO_TSAN
static void forward_ref_t(const struct ref *r, size_t data, const float *x,
			  const int32_t *ids, const float *w, double *y,
			  unsigned int tokens)
{
	float *xq = malloc(r->H * 4), *a = malloc(r->I * 4);
	unsigned int t, j, n, k;

	for (t = 0; t < tokens; t++) {
		memcpy(xq, x + (size_t)t * r->H, r->H * 4);
		act_quant(xq, r->H, r->mode, r->H);
		for (n = 0; n < r->H; n++)
			y[(size_t)t * r->H + n] = 0;
		for (j = 0; j < K; j++) {
			uint32_t e = (uint32_t)ids[t * K + j];

			for (n = 0; n < r->I; n++) {
				double g = bget(r, data, 0, e, n);
				double u = bget(r, data, 1, e, n);

				for (k = 0; k < r->H; k++) {
					g += wget(r, data, 0, e, n, k) * xq[k];
					u += wget(r, data, 1, e, n, k) * xq[k];
				}
				a[n] = (float)glu_ref(r, g, u);
			}
			/* the intermediate is quantized per KC = 128 chunk,
			 * as down's type needs it */
			act_quant(a, r->I, r->mode_down, 128);
			for (n = 0; n < r->H; n++) {
				double s = bget(r, data, 2, e, n);

				for (k = 0; k < r->I; k++)
					s += wget(r, data, 2, e, n, k) * a[k];
				y[(size_t)t * r->H + n] += w[t * K + j] * s;
			}
		}
	}
	free(xq);
	free(a);
}

static void forward_ref(const struct ref *r, size_t data, const float *x,
			const int32_t *ids, const float *w, double *y)
{
	forward_ref_t(r, data, x, ids, w, y, T);
}

/*
 * kt convert of the file to a .ktw: the same blobs, so the same y bits as
 * the GGUF file opened directly; a --method is refused.
 */
static void ktw_same(struct kt_test_meta *_metadata, const char *path,
		     struct gw_cfg c, const float *x, const int32_t *ids,
		     const float *w)
{
	char out[64];
	struct kt_convert_opts co = { .sz = sizeof(co), .input = path,
				      .output = out, .layer_last = -1 };
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 2,
				 .flags = KT_CTX_F_NO_PIN };
	struct kt_model *mg, *mk, *mc;
	struct kt_model_info mi;
	struct kt_ktw_info ki;
	struct kt_ctx *ctx;
	static float y1[T * 512], y2[T * 512];
	struct kt_moe_args a = {
		.x = x, .ids = ids, .w = w, .tokens = T, .top_k = K,
		.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I32,
		.y_dtype = KT_DTYPE_F32,
	};

	snprintf(out, sizeof(out), "/tmp/kt-gguf-%d.ktw", (int)getpid());
	/* a .ktw has one down type for every layer */
	if (c.down_type_last) {
		EXPECT_EQ(kt_convert(&co), -EOPNOTSUPP);
		EXPECT_NE(strstr(kt_last_error(), "open the GGUF file itself"),
			  NULL);
		EXPECT_NE(access(out, F_OK), 0);
		return;
	}
	co.quant = KT_QUANT_INT8;
	EXPECT_EQ(kt_convert(&co), -EINVAL);
	co.quant = 0;
	if (kt_convert(&co))
		TH_LOG("%s", kt_last_error());
	ASSERT_EQ(kt_convert(&co), 0);
	ASSERT_EQ(kt_ctx_create(&o, &ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, path, NULL, &mg), 0);
	ASSERT_EQ(kt_model_open(ctx, out, NULL, &mk), 0);
	ASSERT_EQ(kt_ktw_inspect(out, &ki, NULL, 0), 0);
	kt_model_get_info(mg, &mi);
	EXPECT_EQ(ki.quant, (int)mi.quant);
	EXPECT_EQ(ki.down_quant, (int)mi.down_quant);
	EXPECT_EQ(ki.expert_bytes, mi.expert_bytes);
	/* a gpt-oss file: 2.3 with the activation, own sizes and biases */
	EXPECT_EQ(ki.hidden, c.H);
	EXPECT_EQ(ki.inter, c.I);
	EXPECT_GE(ki.hidden_packed, c.H);
	EXPECT_GE(ki.inter_packed, c.I);
	EXPECT_EQ(ki.hidden_packed % 128, 0u);
	EXPECT_EQ(ki.act, mi.act);
	EXPECT_EQ(ki.act_alpha, mi.act_alpha);
	EXPECT_EQ(ki.act_limit, mi.act_limit);
	EXPECT_EQ(ki.bias, (uint32_t)!!c.bias);
	EXPECT_EQ(ki.act, (uint32_t)(strcmp(c.arch, "gpt-oss") ? KT_ACT_SILU :
				     KT_ACT_SWIGLU_OAI));
	{
		struct kt_model_info mki;

		kt_model_get_info(mk, &mki);
		EXPECT_EQ(mki.hidden, mi.hidden);
		EXPECT_EQ(mki.inter, mi.inter);
		EXPECT_EQ(mki.act, mi.act);
		EXPECT_EQ(mki.act_alpha, mi.act_alpha);
		EXPECT_EQ(mki.act_limit, mi.act_limit);
		EXPECT_EQ(mki.bias, mi.bias);
		EXPECT_EQ(mki.expert_bytes, mi.expert_bytes);
	}
	EXPECT_EQ(kt_ktw_verify(out, NULL), 0);
	a.layer = c.L - c.dense - 1;
	a.y = y1;
	ASSERT_EQ(kt_moe_forward(ctx, mg, &a), 0);
	a.y = y2;
	ASSERT_EQ(kt_moe_forward(ctx, mk, &a), 0);
	EXPECT_EQ(memcmp(y1, y2, (size_t)T * c.H * 4), 0);
	/* mapped in place (biases read beside the mapping) */
	{
		struct kt_model_opts mo = { .sz = sizeof(mo),
					    .flags = KT_MODEL_F_MMAP };

		ASSERT_EQ(kt_model_open(ctx, out, &mo, &mc), 0);
		a.y = y2;
		memset(y2, 0, sizeof(y2));
		ASSERT_EQ(kt_moe_forward(ctx, mc, &a), 0);
		EXPECT_EQ(memcmp(y1, y2, (size_t)T * c.H * 4), 0);
		kt_model_destroy(mc);
	}
	/* with a budget of one layer and a slot, through the expert cache
	 * (its slots sized by the layout, down of its own type too) */
	if (c.L - c.dense >= 2) {
		struct kt_model_opts mo = {
			.sz = sizeof(mo),
			.budget = (uint64_t)(c.E + 1) *
				  ((mi.expert_bytes + 4095) / 4096 * 4096),
		};
		unsigned int li;

		ASSERT_EQ(kt_logged(kt_model_open(ctx, out, &mo, &mc)), 0);
		for (li = 0; li < c.L - c.dense; li++) {
			a.layer = li;
			a.y = y1;
			ASSERT_EQ(kt_moe_forward(ctx, mg, &a), 0);
			a.y = y2;
			ASSERT_EQ(kt_moe_forward(ctx, mc, &a), 0);
			EXPECT_EQ(memcmp(y1, y2, (size_t)T * c.H * 4), 0);
		}
		{
			struct kt_cache_stats st;

			ASSERT_EQ(kt_model_cache_stats(mc, &st, false), 0);
			EXPECT_EQ(st.slots, c.E + 1);
			EXPECT_GT(st.misses, 0u);
		}
		kt_model_destroy(mc);
	}
	/* --layers of the last layer only: its own biases come along */
	if (c.bias && c.L - c.dense >= 2) {
		co.layer_first = (int32_t)(c.L - 1);
		co.layer_last = (int32_t)(c.L - 1);
		ASSERT_EQ(kt_convert(&co), 0);
		ASSERT_EQ(kt_model_open(ctx, out, NULL, &mc), 0);
		a.layer = c.L - c.dense - 1;
		a.y = y1;
		ASSERT_EQ(kt_moe_forward(ctx, mg, &a), 0);
		a.layer = 0;
		a.y = y2;
		ASSERT_EQ(kt_moe_forward(ctx, mc, &a), 0);
		EXPECT_EQ(memcmp(y1, y2, (size_t)T * c.H * 4), 0);
		kt_model_destroy(mc);
	}
	unlink(out);
	EXPECT_EQ(kt_model_layer_index(mk, (int32_t)(c.L - 1)),
		  (int)(c.L - c.dense - 1));
	kt_model_destroy(mg);
	kt_model_destroy(mk);
	kt_ctx_destroy(ctx);
}

/* kt's quantization of a GGUF block type that kt keeps as it is */
static enum kt_quant quant_of_gw(uint32_t type)
{
	switch (type) {
	case GW_Q8_0: return KT_QUANT_Q8_0;
	case GW_Q4_K: return KT_QUANT_Q4_K;
	case GW_Q5_K: return KT_QUANT_Q5_K;
	case GW_Q6_K: return KT_QUANT_Q6_K;
	default: return (enum kt_quant)0;
	}
}

/* every variant (those the CPU lacks are skipped), then the default */
static const enum kt_isa isas[] = {
	KT_ISA_SCALAR, KT_ISA_AVX2, KT_ISA_AVX_VNNI, KT_ISA_AVX512,
	KT_ISA_AMX, KT_ISA_AVX512BW, KT_ISA_AVX512VNNI, KT_ISA_AUTO,
};

/*
 * @c.down_type (0: c.type), held as @want_down, activations @mode_down;
 * with @c.down_type_last the last layer's down has that type, activations
 * @mode_last.
 */
static void run_layers(struct kt_test_meta *_metadata, struct gw_cfg c,
		       enum kt_quant want, enum act_mode mode,
		       enum kt_quant want_down, enum act_mode mode_down,
		       enum act_mode mode_last)
{
	struct gw_tensor t[64];
	struct gw_buf b;
	size_t n, data;
	uint64_t s = 99;
	char *path;
	float x[T * 512], w[T * K], y[T * 512];
	int32_t ids[T * K];
	double ref[T * 512], num, den;
	unsigned int i, li, tested = 0;

	ASSERT_LE(c.H, 512u);
	gw_build(&c, &b, t, &n, &data);
	path = gw_save(&b);
	ASSERT_NE(path, NULL);
	for (i = 0; i < T * c.H; i++)
		x[i] = (float)((double)(gw_rand(&s) % 20001) / 10000.0 - 1.0);
	for (i = 0; i < T * K; i++) {
		/* distinct experts per token */
		ids[i] = (int32_t)((i / K * 3 + i % K) % c.E);
		w[i] = 0.25f + (float)(gw_rand(&s) % 100) / 100.0f;
	}
	for (i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
		struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 2,
					 .flags = KT_CTX_F_NO_PIN,
					 .isa = isas[i] };
		struct kt_model_info info;
		struct kt_ctx *ctx;
		struct kt_model *m;

		if (kt_ctx_create(&o, &ctx)) {
			TH_LOG("%s: not on this CPU", kt_isa_name(isas[i]));
			continue;
		}
		ASSERT_EQ(kt_logged(kt_model_open(ctx, path, NULL, &m)), 0);
		kt_model_get_info(m, &info);
		EXPECT_EQ(info.quant, want);
		/* where down's type varies, info has layer 0's */
		EXPECT_EQ(info.down_quant, (uint32_t)want_down);
		EXPECT_EQ(info.hidden, c.H);
		EXPECT_EQ(info.inter, c.I);
		EXPECT_EQ(info.n_layers, c.L - c.dense);
		EXPECT_EQ(info.bias, (uint32_t)!!c.bias);
		for (li = 0; li < c.L - c.dense; li++) {
			struct kt_moe_args a = {
				.x = x, .ids = ids, .w = w, .y = y,
				.tokens = T, .top_k = K, .layer = li,
				.x_dtype = KT_DTYPE_F32,
				.ids_dtype = KT_DTYPE_I32,
				.y_dtype = KT_DTYPE_F32,
			};
			bool last = li == c.L - c.dense - 1;
			struct ref r = { b.p, &t[3 * li], c.H, c.I, c.E,
					 c.type, last && c.down_type_last ?
					 c.down_type_last : c.down_type ?
					 c.down_type : c.type, mode,
					 last && c.down_type_last ?
					 mode_last : mode_down,
					 c.bias ? &t[3 * (c.L - c.dense) + 1 +
						     3 * li] : NULL,
					 !strcmp(c.arch, "gpt-oss") };

			EXPECT_EQ(kt_model_layer_index(m, (int32_t)(c.dense +
							      li)), (int)li);
			EXPECT_EQ(kt_model_layer_down_quant(m, li),
				  (int)(last && c.down_type_last ?
					quant_of_gw(c.down_type_last) :
					want_down));
			ASSERT_EQ(kt_moe_forward(ctx, m, &a), 0);
			forward_ref(&r, data, x, ids, w, ref);
			num = den = 0;
			for (n = 0; n < T * c.H; n++) {
				num += fabs(y[n] - ref[n]);
				den += fabs(ref[n]);
			}
			TH_LOG("%s %s down %s layer %u: rel. MAE %.2e (bound %.0e)",
			       kt_isa_name(kt_ctx_isa(ctx)),
			       kt_quant_name(want), kt_quant_name(want_down),
			       c.dense + li, num / den, TOL);
			EXPECT_LT(num / den, TOL);
			EXPECT_GT(den, 0);
		}
		EXPECT_EQ(kt_model_layer_down_quant(m, c.L - c.dense),
			  -EINVAL);
		EXPECT_EQ(kt_model_layer_down_quant(NULL, 0), -EINVAL);
		tested++;
		kt_model_destroy(m);
		kt_ctx_destroy(ctx);
	}
	EXPECT_GT(tested, 0u);
	ktw_same(_metadata, path, c, x, ids, w);
	unlink(path);
	free(path);
	free(b.p);
}

static void run_mixed(struct kt_test_meta *_metadata, struct gw_cfg c,
		      enum kt_quant want, enum act_mode mode,
		      enum kt_quant want_down, enum act_mode mode_down)
{
	run_layers(_metadata, c, want, mode, want_down, mode_down, mode_down);
}

static void run_type(struct kt_test_meta *_metadata, struct gw_cfg c,
		     enum kt_quant want, enum act_mode mode)
{
	run_mixed(_metadata, c, want, mode, want, mode);
}

static const struct gw_cfg base = {
	.arch = "qwen3moe", .H = 256, .I = 384, .E = 5, .k = K, .L = 1,
	.seed = 11,
};

TEST(q8_0_qwen3moe)
{
	struct gw_cfg c = base;

	c.type = GW_Q8_0;
	run_type(_metadata, c, KT_QUANT_Q8_0, ACT_Q8_0);
}

/* Q4_0 is kt's INT4 with group 32: the blocks' values as they are */
TEST(q4_0_deepseek2_dense_layer_skipped)
{
	struct gw_cfg c = base;

	c.arch = "deepseek2";
	c.type = GW_Q4_0;
	c.L = 3;
	c.dense = 1;
	c.alignment = 64;
	run_type(_metadata, c, KT_QUANT_INT4, ACT_INT4);
}

/* Q4_K: H and I multiples of its super-block of 256 */
TEST(q4_k_qwen3moe)
{
	struct gw_cfg c = base;

	c.type = GW_Q4_K;
	c.H = 512;
	c.I = 256;
	c.L = 2;
	run_type(_metadata, c, KT_QUANT_Q4_K, ACT_Q8_K);
}

/* Q5_K and Q6_K: kept in their blocks as Q4_K, Q8_K activations */
TEST(q5_k_qwen2moe)
{
	struct gw_cfg c = base;

	c.arch = "qwen2moe";
	c.type = GW_Q5_K;
	c.I = 512;
	run_type(_metadata, c, KT_QUANT_Q5_K, ACT_Q8_K);
}

TEST(q6_k_qwen3moe)
{
	struct gw_cfg c = base;

	c.type = GW_Q6_K;
	c.H = 512;
	c.I = 256;
	c.L = 2;
	run_type(_metadata, c, KT_QUANT_Q6_K, ACT_Q8_K);
}

TEST(bf16_mixtral_llama)
{
	struct gw_cfg c = base;

	c.arch = "llama";
	c.no_ffl = 1;
	c.type = GW_BF16;
	run_type(_metadata, c, KT_QUANT_BF16, ACT_BF16);
}

TEST(f16_and_f32_as_bf16_qwen2moe)
{
	struct gw_cfg c = base;

	c.arch = "qwen2moe";
	c.type = GW_F16;
	run_type(_metadata, c, KT_QUANT_BF16, ACT_BF16);
	c.type = GW_F32;
	c.version = 2;
	run_type(_metadata, c, KT_QUANT_BF16, ACT_BF16);
}

/* Q4_K_M as most files store it: gate/up Q4_K, down Q6_K */
TEST(q4_k_m_gate_up_q4_k_down_q6_k)
{
	struct gw_cfg c = base;

	c.type = GW_Q4_K;
	c.down_type = GW_Q6_K;
	c.H = 512;
	c.I = 256;
	c.L = 2;
	run_mixed(_metadata, c, KT_QUANT_Q4_K, ACT_Q8_K, KT_QUANT_Q6_K,
		  ACT_Q8_K);
}

/* Q5_K_M: gate/up Q5_K, down Q6_K */
TEST(q5_k_m_gate_up_q5_k_down_q6_k)
{
	struct gw_cfg c = base;

	c.arch = "qwen2moe";
	c.type = GW_Q5_K;
	c.down_type = GW_Q6_K;
	c.I = 512;
	run_mixed(_metadata, c, KT_QUANT_Q5_K, ACT_Q8_K, KT_QUANT_Q6_K,
		  ACT_Q8_K);
}

/* different activation rules: Q8_0's per 32 for x, Q8_K's for down */
TEST(gate_up_q8_0_down_q6_k)
{
	struct gw_cfg c = base;

	c.type = GW_Q8_0;
	c.down_type = GW_Q6_K;
	c.I = 256;
	run_mixed(_metadata, c, KT_QUANT_Q8_0, ACT_Q8_0, KT_QUANT_Q6_K,
		  ACT_Q8_K);
}

/* and the other way round: the intermediate per 32 with f16 scales */
TEST(gate_up_q4_k_down_q8_0)
{
	struct gw_cfg c = base;

	c.type = GW_Q4_K;
	c.down_type = GW_Q8_0;
	c.I = 256;
	c.L = 2;
	run_mixed(_metadata, c, KT_QUANT_Q4_K, ACT_Q8_K, KT_QUANT_Q8_0,
		  ACT_Q8_0);
}

/*
 * llama.cpp's Q4_K_M: down Q6_K in some layers (use_more_bits()), Q4_K in
 * the others; each layer runs on its own down kernels.
 */
TEST(q4_k_m_down_type_by_layer)
{
	struct gw_cfg c = base;

	c.L = 3;
	c.I = 256;
	c.type = GW_Q4_K;
	c.down_type = GW_Q6_K;
	c.down_type_last = GW_Q4_K;
	run_layers(_metadata, c, KT_QUANT_Q4_K, ACT_Q8_K, KT_QUANT_Q6_K,
		   ACT_Q8_K, ACT_Q8_K);
}

/* Q8_0 gate/up, down Q8_0 then Q6_K: activations per layer's down rule */
TEST(q8_0_down_q6_k_in_last_layer)
{
	struct gw_cfg c = base;

	c.L = 2;
	c.I = 256;
	c.type = GW_Q8_0;
	c.down_type_last = GW_Q6_K;
	run_layers(_metadata, c, KT_QUANT_Q8_0, ACT_Q8_0, KT_QUANT_Q8_0,
		   ACT_Q8_0, ACT_Q8_K);
}

/*
 * gpt-oss: H and I multiples of 32 but not of 128 (padded to the tiles),
 * expert biases, the clamped SwiGLU; the blocks of each type kept.
 */
static const struct gw_cfg oss = {
	.arch = "gpt-oss", .H = 160, .I = 96, .E = 5, .k = K, .L = 2,
	.seed = 23, .bias = 1,
};

TEST(gpt_oss_q8_0_padded_with_biases)
{
	struct gw_cfg c = oss;

	c.type = GW_Q8_0;
	run_type(_metadata, c, KT_QUANT_Q8_0, ACT_Q8_0);
}

TEST(gpt_oss_q4_0_padded_with_biases)
{
	struct gw_cfg c = oss;

	c.type = GW_Q4_0;
	run_type(_metadata, c, KT_QUANT_INT4, ACT_INT4);
}

/* llama.cpp's gpt-oss files: MXFP4 experts, kept as MXFP4 */
TEST(gpt_oss_mxfp4_padded_with_biases)
{
	struct gw_cfg c = oss;

	c.type = GW_MXFP4;
	run_type(_metadata, c, KT_QUANT_MXFP4, ACT_BF16);
}

TEST(gpt_oss_bf16_padded_with_biases)
{
	struct gw_cfg c = oss;

	c.type = GW_BF16;
	run_type(_metadata, c, KT_QUANT_BF16, ACT_BF16);
}

/* biases without the gpt-oss activation (a qwen3moe file with them) */
TEST(qwen3moe_q8_0_padded_biases)
{
	struct gw_cfg c = oss;

	c.arch = "qwen3moe";
	c.type = GW_Q8_0;
	run_type(_metadata, c, KT_QUANT_Q8_0, ACT_Q8_0);
}

/* ---- down's type by layer on fake NUMA nodes ------------------------------ */

#define NT	40	/* most tokens of one op below */
#define NH	256
#define NI	512	/* four KC chunks: two on each of two nodes */

struct nfile {
	struct gw_buf b;
	struct gw_tensor t[16];
	size_t n, data;
	char *path;
};

static int nfile_make(struct nfile *f, const uint32_t *down_types,
		      uint32_t L)
{
	struct gw_cfg c = base;

	c.H = NH;
	c.I = NI;
	c.L = L;
	c.type = GW_Q4_K;
	c.down_types = down_types;
	c.seed_per_tensor = 1;
	gw_build(&c, &f->b, f->t, &f->n, &f->data);
	f->path = gw_save(&f->b);
	return f->path ? 0 : -EIO;
}

static void nfile_free(struct nfile *f)
{
	if (f->path)
		unlink(f->path);
	free(f->path);
	free(f->b.p);
}

/* A context of @nodes fake nodes (1: unsplit) and @isa, or NULL. */
static struct kt_ctx *nodes_ctx(enum kt_isa isa, unsigned int nodes)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 2 * nodes,
				 .flags = KT_CTX_F_NO_PIN, .isa = isa };
	struct kt_ctx *ctx = NULL;
	char n[12];

	snprintf(n, sizeof(n), "%u", nodes);
	if (nodes > 1)
		setenv("KT_FAKE_NUMA", n, 1);
	if (kt_ctx_create(&o, &ctx))
		ctx = NULL;
	unsetenv("KT_FAKE_NUMA");
	if (ctx && core_ctx_nodes(ctx) != nodes) {
		kt_ctx_destroy(ctx);
		ctx = NULL;
	}
	return ctx;
}

static double rel_mae(const float *y, const double *ref, size_t n)
{
	double num = 0, den = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		num += fabs(y[i] - ref[i]);
		den += fabs(ref[i]);
	}
	return den > 0 ? num / den : INFINITY;
}

/*
 * Gate/up Q4_K, down @d0 in layer 0 and @d1 in layer 1, on one node and on
 * two fake nodes, T = 1, 5, 40, every variant: each layer gives the bits
 * of a file whose down has that layer's type in both layers (the same
 * tensors otherwise) on the same node count, the f64 reference within
 * TOL, and two nodes the one node's y up to reassociation (1e-5).
 */
static void by_layer_on_nodes(struct kt_test_meta *_metadata, uint32_t d0,
			      uint32_t d1)
{
	static const unsigned int Ts[] = { 1, 5, NT };
	static double ref[3][2][NT * NH];
	static float y1[3][2][NT * NH], y[NT * NH], yu[NT * NH];
	const uint32_t mix[2] = { d0, d1 }, uni[2][2] = { { d0, d0 },
							  { d1, d1 } };
	struct nfile f[3];
	float x[NT * NH], w[NT * K];
	int32_t ids[NT * K];
	unsigned int i, ti, li, nodes, runs = 0, split = 0;
	uint64_t s = 7;

	memset(f, 0, sizeof(f));
	ASSERT_EQ(nfile_make(&f[0], mix, 2), 0);
	ASSERT_EQ(nfile_make(&f[1], uni[0], 2), 0);
	ASSERT_EQ(nfile_make(&f[2], uni[1], 2), 0);
	for (i = 0; i < NT * NH; i++)
		x[i] = (float)((double)(gw_rand(&s) % 20001) / 10000.0 - 1.0);
	for (i = 0; i < NT * K; i++) {
		ids[i] = (int32_t)((i / K * 3 + i % K) % base.E);
		w[i] = 0.25f + (float)(gw_rand(&s) % 100) / 100.0f;
	}
	for (ti = 0; ti < 3; ti++)
		for (li = 0; li < 2; li++) {
			struct ref r = { f[0].b.p, &f[0].t[3 * li], NH, NI,
					 base.E, GW_Q4_K, mix[li], ACT_Q8_K,
					 ACT_Q8_K, NULL, 0 };

			forward_ref_t(&r, f[0].data, x, ids, w, ref[ti][li],
				      Ts[ti]);
		}
	for (i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
		for (nodes = 1; nodes <= 2; nodes++) {
			struct kt_ctx *ctx = nodes_ctx(isas[i], nodes);
			struct kt_model *m[3];
			unsigned int j;

			if (!ctx) {
				TH_LOG("%s on %u nodes: not here",
				       kt_isa_name(isas[i]), nodes);
				continue;
			}
			for (j = 0; j < 3; j++)
				ASSERT_EQ(kt_logged(kt_model_open(ctx,
						f[j].path, NULL, &m[j])), 0);
			EXPECT_EQ(kt_model_layer_down_quant(m[0], 0),
				  (int)quant_of_gw(d0));
			EXPECT_EQ(kt_model_layer_down_quant(m[0], 1),
				  (int)quant_of_gw(d1));
			for (ti = 0; ti < 3; ti++)
				for (li = 0; li < 2; li++) {
					struct kt_moe_args a = {
						.x = x, .ids = ids, .w = w,
						.tokens = Ts[ti], .top_k = K,
						.layer = li,
						.x_dtype = KT_DTYPE_F32,
						.ids_dtype = KT_DTYPE_I32,
						.y_dtype = KT_DTYPE_F32,
					};
					size_t n = (size_t)Ts[ti] * NH;
					double e, e1 = 0;

					a.y = y;
					ASSERT_EQ(kt_moe_forward(ctx, m[0], &a),
						  0);
					a.y = yu;
					ASSERT_EQ(kt_moe_forward(ctx,
								 m[1 + li], &a),
						  0);
					EXPECT_EQ(memcmp(y, yu, n * 4), 0);
					e = rel_mae(y, ref[ti][li], n);
					EXPECT_LT(e, TOL);
					if (nodes == 1) {
						memcpy(y1[ti][li], y, n * 4);
					} else {
						double r1[NT * NH];
						size_t q;

						for (q = 0; q < n; q++)
							r1[q] = y1[ti][li][q];
						e1 = rel_mae(y, r1, n);
						EXPECT_LT(e1, 1e-5);
					}
					TH_LOG("%s %u node(s) T %u layer %u down %s: rel. MAE %.2e, vs 1 node %.1e",
					       kt_isa_name(kt_ctx_isa(ctx)),
					       nodes, Ts[ti], li,
					       kt_quant_name(quant_of_gw(
							mix[li])), e, e1);
					runs++;
				}
			split += nodes == 2;
			for (j = 0; j < 3; j++)
				kt_model_destroy(m[j]);
			kt_ctx_destroy(ctx);
		}
	}
	for (i = 0; i < 3; i++)
		nfile_free(&f[i]);
	EXPECT_GT(runs, 0u);
	if (!split)
		SKIP(return, "cannot split this machine into 2 fake nodes");
}

TEST_TIMEOUT(down_q4_k_then_q6_k_on_two_nodes, 300)
{
	by_layer_on_nodes(_metadata, GW_Q4_K, GW_Q6_K);
}

TEST_TIMEOUT(down_q6_k_then_q4_k_on_two_nodes, 300)
{
	by_layer_on_nodes(_metadata, GW_Q6_K, GW_Q4_K);
}

/*
 * kt_model_opts.layer_masks leaves an expert of one layer out of a GGUF
 * model (it used to be ignored there): the layer runs as with that expert
 * in the skip_mask, the other layer as unmasked, fewer bytes resident.
 */
TEST(gguf_layer_masks)
{
	const uint32_t dt[2] = { GW_Q4_K, GW_Q6_K };
	uint64_t lm[2] = { 0, 1u << 1 }, skip = 1u << 1;
	struct kt_model_opts mo = { .sz = sizeof(mo), .layer_masks = lm };
	static float y[NT * NH], y2[NT * NH];
	float x[NT * NH], w[NT * K];
	int32_t ids[NT * K];
	struct kt_model_info i0, i1;
	struct kt_model *m, *mm;
	struct kt_ctx *ctx;
	struct nfile f;
	unsigned int i, li;
	uint64_t s = 3;

	memset(&f, 0, sizeof(f));
	ASSERT_EQ(nfile_make(&f, dt, 2), 0);
	for (i = 0; i < NT * NH; i++)
		x[i] = (float)((double)(gw_rand(&s) % 20001) / 10000.0 - 1.0);
	for (i = 0; i < NT * K; i++) {
		ids[i] = (int32_t)((i / K * 3 + i % K) % base.E);
		w[i] = 0.5f;
	}
	ctx = nodes_ctx(KT_ISA_AUTO, 1);
	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(kt_model_open(ctx, f.path, NULL, &m), 0);
	ASSERT_EQ(kt_model_open(ctx, f.path, &mo, &mm), 0);
	kt_model_get_info(m, &i0);
	kt_model_get_info(mm, &i1);
	EXPECT_LT(i1.resident_bytes, i0.resident_bytes);
	for (li = 0; li < 2; li++) {
		struct kt_moe_args a = {
			.x = x, .ids = ids, .w = w, .tokens = NT, .top_k = K,
			.layer = li, .x_dtype = KT_DTYPE_F32,
			.ids_dtype = KT_DTYPE_I32, .y_dtype = KT_DTYPE_F32,
		};

		a.y = y;
		ASSERT_EQ(kt_moe_forward(ctx, mm, &a), 0);
		a.y = y2;
		a.skip_mask = li ? &skip : NULL;
		ASSERT_EQ(kt_moe_forward(ctx, m, &a), 0);
		EXPECT_EQ(memcmp(y, y2, sizeof(y)), 0);
	}
	kt_model_destroy(mm);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	nfile_free(&f);
}

/* kt inspect names each layer's down type where they vary */
TEST(inspect_down_by_layer)
{
	const uint32_t dt[5] = { GW_Q4_K, GW_Q6_K, GW_Q4_K, GW_Q4_K,
				 GW_Q6_K };
	char bin[PATH_MAX], out[64], text[4096];
	char *argv[] = { bin, "inspect", NULL, NULL };
	struct nfile f;
	size_t n;
	FILE *o;

	memset(&f, 0, sizeof(f));
	ASSERT_EQ(nfile_make(&f, dt, 5), 0);
	argv[2] = f.path;
	kt_bin(bin, sizeof(bin));
	snprintf(out, sizeof(out), "/tmp/kt-inspect-%d.txt", (int)getpid());
	EXPECT_EQ(kt_exec(argv, out), 0);
	o = fopen(out, "r");
	ASSERT_TRUE(o != NULL);
	n = fread(text, 1, sizeof(text) - 1, o);
	text[n] = '\0';
	fclose(o);
	unlink(out);
	TH_LOG("%s", text);
	EXPECT_NE(strstr(text, "quantization:  q4_k"), NULL);
	EXPECT_NE(strstr(text, ", down by layer\n"), NULL);
	EXPECT_NE(strstr(text, "down:          q4_k (layers 0, 2-3), q6_k (layers 1, 4)\n"),
		  NULL);
	nfile_free(&f);
}

TEST_HARNESS_MAIN
