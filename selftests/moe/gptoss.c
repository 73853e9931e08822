// SPDX-License-Identifier: MIT
/*
 * gptoss.c - experts as GPT-OSS has them: sizes that are multiples of 32
 * but not of the tiles (padded by kt with zero weights), biases on gate,
 * up and down, and the clamped SwiGLU (KT_ACT_SWIGLU_OAI). A padded model
 * must give the bits of the same model padded by hand, on every variant;
 * the activation and biases must match an f64 reference.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <kt/kt.h>

#include "kt_test.h"
#include "isa-variants.h"
#include "kernels/util.h"
#include "kernels/fp.h"

/* One layer's experts as f32 with their biases; rows @H wide. */
struct oss {
	unsigned int H, I, E;
	float *w;	/* [E][3][H * I]: gate [I][H], up [I][H], down [H][I] */
	float *b;	/* [E][2I + H]: gate, up, down biases */
};

static float *oss_mat(const struct oss *o, unsigned int e, unsigned int id)
{
	return o->w + ((size_t)e * 3 + id) * o->H * o->I;
}

static float *oss_bias(const struct oss *o, unsigned int e)
{
	return o->b + (size_t)e * (2 * o->I + o->H);
}

static int oss_get(void *arg, uint32_t layer, uint32_t e,
		   struct kt_expert_src *src)
{
	const struct oss *o = arg;

	src->gate = oss_mat(o, e, 0);
	src->up = oss_mat(o, e, 1);
	src->down = oss_mat(o, e, 2);
	src->gate_bias = oss_bias(o, e);
	src->up_bias = oss_bias(o, e) + o->I;
	src->down_bias = oss_bias(o, e) + 2 * o->I;
	return 0;
}

/* Weights large enough that gate and up often pass the limit of 7. */
static void oss_init(struct oss *o, unsigned int H, unsigned int I,
		     unsigned int E, uint64_t seed)
{
	struct tu_rng r = { seed };
	size_t i, nb = (size_t)E * (2 * I + H);

	o->H = H;
	o->I = I;
	o->E = E;
	o->w = malloc((size_t)E * 3 * H * I * 4);
	o->b = malloc(nb * 4);
	for (i = 0; i < (size_t)E * 3; i++)
		tu_fill_weights(&r, o->w + i * H * I, i % 3 == 2 ? H : I,
				i % 3 == 2 ? I : H);
	for (i = 0; i < (size_t)E * 3 * H * I; i++)
		o->w[i] = kern_bf16_to_f32(kern_f32_to_bf16(o->w[i] * 8));
	tu_fill_normal(&r, o->b, nb, 2.0);
}

/* @o zero-padded to @H x @I. */
static void oss_pad(const struct oss *o, unsigned int H, unsigned int I,
		    struct oss *p)
{
	unsigned int e, id, r;

	p->H = H;
	p->I = I;
	p->E = o->E;
	p->w = calloc((size_t)o->E * 3 * H * I, 4);
	p->b = calloc((size_t)o->E * (2 * I + H), 4);
	for (e = 0; e < o->E; e++) {
		for (id = 0; id < 3; id++) {
			unsigned int rows = id < 2 ? o->I : o->H;
			unsigned int cols = id < 2 ? o->H : o->I;
			unsigned int pc = id < 2 ? H : I;

			for (r = 0; r < rows; r++)
				memcpy(oss_mat(p, e, id) + (size_t)r * pc,
				       oss_mat(o, e, id) + (size_t)r * cols,
				       (size_t)cols * 4);
		}
		memcpy(oss_bias(p, e), oss_bias(o, e), (size_t)o->I * 4);
		memcpy(oss_bias(p, e) + I, oss_bias(o, e) + o->I,
		       (size_t)o->I * 4);
		memcpy(oss_bias(p, e) + 2 * I, oss_bias(o, e) + 2 * o->I,
		       (size_t)o->H * 4);
	}
}

static void oss_free(struct oss *o)
{
	free(o->w);
	free(o->b);
}

static int oss_create(struct kt_ctx *ctx, struct oss *o, enum kt_quant q,
		      unsigned int group, struct kt_model **m)
{
	struct kt_model_desc d = {
		.sz = sizeof(d), .hidden = o->H, .inter = o->I,
		.n_experts = o->E, .n_layers = 1, .src_dtype = KT_DTYPE_F32,
		.quant = q, .group_size = group, .get_expert = oss_get,
		.arg = o, .act = KT_ACT_SWIGLU_OAI,
		.desc_flags = KT_DESC_F_BIAS,
	};

	return kt_model_create(ctx, &d, m);
}

/* GPT-OSS's expert in f64: y += wt * (down . glu(x) + bd). */
static void oss_ref_expert(const struct oss *o, unsigned int e,
			   const double *x, double wt, double *y)
{
	const float *gm = oss_mat(o, e, 0), *um = oss_mat(o, e, 1);
	const float *dm = oss_mat(o, e, 2), *b = oss_bias(o, e);
	double *a = malloc(sizeof(double) * o->I);
	unsigned int i, h;

	for (i = 0; i < o->I; i++) {
		double g = b[i], u = b[o->I + i];

		for (h = 0; h < o->H; h++) {
			g += (double)gm[(size_t)i * o->H + h] * x[h];
			u += (double)um[(size_t)i * o->H + h] * x[h];
		}
		g = fmin(g, KT_SWIGLU_OAI_LIMIT);
		u = fmax(fmin(u, KT_SWIGLU_OAI_LIMIT), -KT_SWIGLU_OAI_LIMIT);
		a[i] = g / (1.0 + exp(-(double)KT_SWIGLU_OAI_ALPHA * g)) *
		       (u + 1.0);
	}
	for (h = 0; h < o->H; h++) {
		double s = b[2 * o->I + h];

		for (i = 0; i < o->I; i++)
			s += (double)dm[(size_t)h * o->I + i] * a[i];
		y[h] += wt * s;
	}
	free(a);
}

static int run_op(struct kt_ctx *ctx, struct kt_model *m, const float *x,
		  const int32_t *ids, const float *w, unsigned int T,
		  unsigned int k, float *y)
{
	struct kt_moe_args a = {
		.x = x, .ids = ids, .w = w, .y = y, .tokens = T, .top_k = k,
		.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I32,
		.y_dtype = KT_DTYPE_F32,
	};

	return kt_moe_forward(ctx, m, &a);
}

static void routing(struct tu_rng *r, unsigned int T, unsigned int k,
		    unsigned int E, int32_t *ids, float *w)
{
	unsigned int t, s;

	for (t = 0; t < T; t++)
		for (s = 0; s < k; s++) {
			ids[t * k + s] = (int32_t)((t * 7 + s * 3 +
					 (tu_next(r) % 2)) % E);
			w[t * k + s] = (float)(0.2 + 0.8 * tu_unif(r));
		}
}

FIXTURE(oss) {
	struct kt_ctx *ctx;
};

FIXTURE_VARIANT(oss) {
	enum kt_isa isa;
};

FIXTURE_VARIANT_ADD(oss, scalar) { .isa = KT_ISA_SCALAR };
KT_SIMD_VARIANTS(oss);

FIXTURE_SETUP(oss)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 2,
				 .spin_us = 200, .flags = KT_CTX_F_NO_PIN,
				 .isa = variant->isa };
	int ret = kt_ctx_create(&o, &self->ctx);

	if (ret == -EOPNOTSUPP)
		SKIP(return, "the CPU does not run %s",
		     kt_isa_name(variant->isa));
	ASSERT_EQ(ret, 0);
}

FIXTURE_TEARDOWN(oss)
{
	kt_ctx_destroy(self->ctx);
}

/*
 * H 160, I 96 (packed 256 x 128) against the same experts padded by hand:
 * the zero rows and columns must change no bit of y, for every token
 * count and quantization the geometry allows.
 */
TEST_F(oss, padded_is_padded_by_hand)
{
	static const struct { enum kt_quant q; unsigned int g; } qs[] = {
		{ KT_QUANT_INT8, 0 }, { KT_QUANT_INT4, 32 },
		{ KT_QUANT_BF16, 0 }, { KT_QUANT_FP8, 0 },
	};
	static const unsigned int Ts[] = { 1, 5, 40 };
	const unsigned int H = 160, I = 96, E = 6, k = 2;
	struct tu_rng r = { 7 };
	struct oss o, p;
	float *x, *xp, *w, *y, *yp;
	int32_t *ids;
	unsigned int qi, ti, t;

	oss_init(&o, H, I, E, 11);
	oss_pad(&o, 256, 128, &p);
	x = malloc(40 * H * 4);
	xp = calloc(40 * 256, 4);
	y = malloc(40 * H * 4);
	yp = malloc(40 * 256 * 4);
	w = malloc(40 * k * 4);
	ids = malloc(40 * k * 4);
	tu_fill_normal(&r, x, 40 * H, 1.0);
	for (t = 0; t < 40; t++)
		memcpy(xp + t * 256, x + t * H, H * 4);
	routing(&r, 40, k, E, ids, w);
	for (qi = 0; qi < sizeof(qs) / sizeof(qs[0]); qi++) {
		struct kt_model *m, *mp;
		struct kt_model_info info;

		ASSERT_EQ(oss_create(self->ctx, &o, qs[qi].q, qs[qi].g, &m), 0);
		ASSERT_EQ(oss_create(self->ctx, &p, qs[qi].q, qs[qi].g, &mp), 0);
		kt_model_get_info(m, &info);
		EXPECT_EQ(info.hidden, H);
		EXPECT_EQ(info.inter, I);
		EXPECT_EQ(info.act, KT_ACT_SWIGLU_OAI);
		EXPECT_EQ(info.bias, 1);
		EXPECT_TRUE(info.act_alpha == KT_SWIGLU_OAI_ALPHA);
		EXPECT_TRUE(info.act_limit == KT_SWIGLU_OAI_LIMIT);
		for (ti = 0; ti < sizeof(Ts) / sizeof(Ts[0]); ti++) {
			unsigned int T = Ts[ti], bad = 0;

			ASSERT_EQ(run_op(self->ctx, m, x, ids, w, T, k, y), 0);
			ASSERT_EQ(run_op(self->ctx, mp, xp, ids, w, T, k, yp),
				  0);
			for (t = 0; t < T; t++)
				bad += memcmp(y + t * H, yp + t * 256,
					      H * 4) != 0;
			if (bad)
				TH_LOG("%s T %u: %u rows differ",
				       kt_quant_name(qs[qi].q), T, bad);
			EXPECT_EQ(bad, 0);
		}
		kt_model_destroy(m);
		kt_model_destroy(mp);
	}
	free(x);
	free(xp);
	free(y);
	free(yp);
	free(w);
	free(ids);
	oss_free(&o);
	oss_free(&p);
}

/*
 * The clamped SwiGLU and the biases against f64 on exact (bf16) weights;
 * what is left is the bf16 rounding of x and of the intermediate.
 */
static void check_reference(struct kt_test_meta *_metadata,
			    struct kt_ctx *ctx, unsigned int I)
{
	const unsigned int H = 288, E = 4, k = 2, T = 9;
	struct tu_rng r = { 5 };
	struct kt_model *m;
	struct oss o;
	float x[9 * 288], w[9 * 2], y[9 * 288];
	double xd[288], *ref, *yd;
	int32_t ids[9 * 2];
	unsigned int t, s, h, clamped = 0;

	oss_init(&o, H, I, E, 3);
	tu_fill_normal(&r, x, T * H, 1.0);
	for (t = 0; t < T * H; t++)
		x[t] = kern_bf16_to_f32(kern_f32_to_bf16(x[t]));
	routing(&r, T, k, E, ids, w);
	ASSERT_EQ(oss_create(ctx, &o, KT_QUANT_BF16, 0, &m), 0);
	ASSERT_EQ(run_op(ctx, m, x, ids, w, T, k, y), 0);
	ref = calloc((size_t)T * H, sizeof(double));
	yd = malloc(sizeof(double) * T * H);
	for (t = 0; t < T; t++) {
		for (h = 0; h < H; h++)
			xd[h] = x[t * H + h];
		for (s = 0; s < k; s++)
			oss_ref_expert(&o, ids[t * k + s], xd, w[t * k + s],
				       ref + (size_t)t * H);
	}
	/* the weights reach the clamp: some gate pre-activations pass 7 */
	for (h = 0; h < I; h++) {
		double g = oss_bias(&o, 0)[h];

		for (s = 0; s < H; s++)
			g += (double)oss_mat(&o, 0, 0)[(size_t)h * H + s] * x[s];
		clamped += g > KT_SWIGLU_OAI_LIMIT;
	}
	EXPECT_GT(clamped, 0);
	for (t = 0; t < T * H; t++)
		yd[t] = y[t];
	EXPECT_LT(tu_rel_mae(yd, ref, (size_t)T * H), 0.005);
	kt_model_destroy(m);
	free(ref);
	free(yd);
	oss_free(&o);
}

TEST_F(oss, swiglu_and_biases_match_reference)
{
	check_reference(_metadata, self->ctx, 160);
}

/*
 * Two (fake) nodes and one KC chunk (I 96 packs as 128): the first node
 * has no slice and runs no down call; the node that has one adds down's
 * biases, once.
 */
TEST(two_nodes_bias_once)
{
	static const unsigned int Is[] = { 96, 288 };
	struct kt_ctx *ctx;
	unsigned int i;

	setenv("KT_FAKE_NUMA", "2", 1);
	if (kt_ctx_create(NULL, &ctx))
		SKIP(return, "cannot split this machine into 2 fake nodes");
	for (i = 0; i < 2; i++)
		check_reference(_metadata, ctx, Is[i]);
	kt_ctx_destroy(ctx);
}

TEST_F(oss, descriptor_checks)
{
	struct oss o;
	struct kt_model *m = NULL;
	struct kt_model_desc d;

	oss_init(&o, 64, 32, 2, 1);
	d = (struct kt_model_desc){
		.sz = sizeof(d), .hidden = 64, .inter = 32, .n_experts = 2,
		.n_layers = 1, .src_dtype = KT_DTYPE_F32,
		.quant = KT_QUANT_INT8, .get_expert = oss_get, .arg = &o,
		.act = KT_ACT_SWIGLU_OAI, .desc_flags = KT_DESC_F_BIAS,
	};
#define BADD(stmt) do { struct kt_model_desc b = d; stmt; \
		EXPECT_EQ(kt_model_create(self->ctx, &b, &m), -EINVAL); \
	} while (0)
	BADD(b.hidden = 48);
	BADD(b.inter = 40);
	BADD(b.act = 2);
	BADD(b.desc_flags = 2);
	BADD(b.act = KT_ACT_SILU; b.act_limit = 7.0f);
	BADD(b.act_alpha = -1.0f);
	BADD(b.act_limit = NAN);
#undef BADD
	d.act_alpha = 1.5f;
	d.act_limit = 3.0f;
	ASSERT_EQ(kt_model_create(self->ctx, &d, &m), 0);
	{
		struct kt_model_info info;

		kt_model_get_info(m, &info);
		EXPECT_TRUE(info.act_alpha == 1.5f && info.act_limit == 3.0f);
		EXPECT_EQ(info.hidden, 64);
		EXPECT_EQ(info.inter, 32);
	}
	kt_model_destroy(m);
	oss_free(&o);
}

TEST_HARNESS_MAIN
