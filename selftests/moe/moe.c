// SPDX-License-Identifier: MIT
/*
 * moe.c - the MoE op through kt_moe_forward() and through rings against an
 * f64 reference from the unquantized weights: token counts, routing edge
 * cases, dtypes, accumulate, skip masks, determinism, bad arguments.
 */
#include <errno.h>
#include <stdlib.h>

#include "kt_test.h"
#include "ktcore/moe.h"
#include "model.h"

/* rel MAE bounds of the assignment, per quantization */
/* against f64 of the f32 weights: the quantization's own error (FP8:
 * E4M3's 3 mantissa bits; MXFP4: E2M1 with a power-of-two scale per 32) */
static double tol_of(enum kt_quant q)
{
	return q == KT_QUANT_INT8 || q == KT_QUANT_Q8_0 ? 0.04 :
	       q == KT_QUANT_INT4 || q == KT_QUANT_Q4_K || q == KT_QUANT_Q5_K ||
	       q == KT_QUANT_Q6_K ? 0.25 :
	       q == KT_QUANT_FP8 ? 0.06 : q == KT_QUANT_MXFP4 ? 0.25 : 0.005;
}

enum route_kind {
	ROUTE_RANDOM,		/* distinct experts per token */
	ROUTE_ONE,		/* every slot on one expert */
	ROUTE_MESSY,		/* duplicates, negative, out of range */
};

/* One op's inputs, outputs and reference. */
struct tcase {
	unsigned int T, k, layer;
	enum kt_dtype x_dt, ids_dt, y_dt;
	uint32_t flags;
	enum route_kind route;
	const uint64_t *skip;
	uint64_t seed;

	float *x;		/* f32 view of x (rounded if bf16) */
	void *x_op;
	int64_t *ids;
	void *ids_op;
	float *w;
	void *y_op;
	double *y0;		/* y before the op, as f64 */
	double *ref;
};

static void tc_setup(struct tcase *c, const struct tmodel *t)
{
	struct tu_rng r = { c->seed };
	size_t n = (size_t)c->T * t->H, nk = (size_t)c->T * c->k, i;
	unsigned int s;

	c->x = malloc(n * 4);
	tu_fill_normal(&r, c->x, n, 1.0);
	if (c->x_dt == KT_DTYPE_BF16) {
		uint16_t *xb = malloc(n * 2);

		for (i = 0; i < n; i++) {
			xb[i] = kern_f32_to_bf16(c->x[i]);
			c->x[i] = kern_bf16_to_f32(xb[i]);
		}
		c->x_op = xb;
	} else {
		c->x_op = c->x;
	}
	c->ids = malloc(nk * 8);
	c->w = malloc(nk * 4);
	for (i = 0; i < c->T; i++) {
		for (s = 0; s < c->k; s++) {
			int64_t e;

			switch (c->route) {
			case ROUTE_ONE:
				e = t->E / 2;
				break;
			case ROUTE_MESSY:
				e = (int64_t)(tu_next(&r) % (t->E + 4)) - 2;
				break;
			default:
				/* distinct per token while k <= E */
				e = (int64_t)((tu_next(&r) % t->E + s) % t->E);
				if (c->k <= t->E) {
					unsigned int p;

					for (p = 0; p < s; p++)
						if (c->ids[i * c->k + p] == e) {
							e = (e + 1) % t->E;
							p = (unsigned int)-1;
						}
				}
				break;
			}
			c->ids[i * c->k + s] = e;
			c->w[i * c->k + s] = (float)(0.05 + tu_unif(&r));
		}
	}
	if (c->ids_dt == KT_DTYPE_I32) {
		int32_t *p = malloc(nk * 4);

		for (i = 0; i < nk; i++)
			p[i] = (int32_t)c->ids[i];
		c->ids_op = p;
	} else {
		c->ids_op = c->ids;
	}
	c->y0 = malloc(n * sizeof(double));
	c->ref = malloc(n * sizeof(double));
	if (c->y_dt == KT_DTYPE_BF16) {
		uint16_t *y = malloc(n * 2);

		for (i = 0; i < n; i++) {
			y[i] = kern_f32_to_bf16((float)(0.01 * tu_normal(&r)));
			c->y0[i] = kern_bf16_to_f32(y[i]);
		}
		c->y_op = y;
	} else {
		float *y = malloc(n * 4);

		for (i = 0; i < n; i++) {
			y[i] = (float)(0.01 * tu_normal(&r));
			c->y0[i] = y[i];
		}
		c->y_op = y;
	}
	for (i = 0; i < n; i++)
		c->ref[i] = 0;
	tm_reference(t, c->layer, c->x, c->ids, c->w, c->T, c->k, c->skip,
		     c->ref);
}

static void tc_free(struct tcase *c)
{
	if (c->x_op != c->x)
		free(c->x_op);
	if (c->ids_op != c->ids)
		free(c->ids_op);
	free(c->x);
	free(c->ids);
	free(c->w);
	free(c->y_op);
	free(c->y0);
	free(c->ref);
}

static void tc_args(const struct tcase *c, struct kt_moe_args *a)
{
	memset(a, 0, sizeof(*a));
	a->x = c->x_op;
	a->ids = c->ids_op;
	a->w = c->w;
	a->y = c->y_op;
	a->tokens = c->T;
	a->top_k = c->k;
	a->layer = c->layer;
	a->flags = c->flags;
	a->x_dtype = (uint8_t)c->x_dt;
	a->ids_dtype = (uint8_t)c->ids_dt;
	a->y_dtype = (uint8_t)c->y_dt;
	a->skip_mask = c->skip;
}

static double y_at(const struct tcase *c, size_t i)
{
	if (c->y_dt == KT_DTYPE_BF16)
		return kern_bf16_to_f32(((const uint16_t *)c->y_op)[i]);
	return ((const float *)c->y_op)[i];
}

/*
 * The op's contribution against the reference: rel MAE within @tol, and
 * tokens with no valid expert exactly 0 (or untouched when accumulating).
 */
static double tc_check(struct kt_test_meta *_metadata, const struct tcase *c,
		       const struct tmodel *t, double tol)
{
	size_t n = (size_t)c->T * t->H, i;
	double *got = malloc(n * sizeof(double));
	bool acc = c->flags & KT_MOE_F_ACCUMULATE;
	double err;

	for (i = 0; i < n; i++) {
		got[i] = y_at(c, i) - (acc ? c->y0[i] : 0);
		if (c->ref[i] == 0 && !(acc && c->y_dt == KT_DTYPE_BF16))
			ASSERT_EQ(got[i], 0.0);
	}
	err = tu_rel_mae(got, c->ref, n);
	free(got);
	EXPECT_LE(err, tol);
	return err;
}

struct env {
	struct kt_ctx *ctx;
	struct tmodel t;
	struct kt_model *m;
};

static int ctx_init(struct kt_ctx **ctx, unsigned int threads)
{
	/* short spins: idle workers must not starve the f64 reference */
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = threads,
				 .spin_us = 200, .flags = KT_CTX_F_NO_PIN };

	return kt_ctx_create(&o, ctx);
}

/* the weights' seed of quantization @q's test model of @E experts */
static uint64_t model_seed(enum kt_quant q, unsigned int E)
{
	return 1000 + q * 10 + E;
}

static int env_init(struct env *v, unsigned int threads, enum kt_quant q,
		    unsigned int group, unsigned int H, unsigned int I,
		    unsigned int E, unsigned int L, enum kt_dtype src)
{
	int ret;

	memset(v, 0, sizeof(*v));
	ret = ctx_init(&v->ctx, threads);
	if (ret)
		return ret;
	tm_init(&v->t, H, I, E, L, src, model_seed(q, E));
	return 0;
}

static void env_free(struct env *v)
{
	kt_model_destroy(v->m);
	kt_ctx_destroy(v->ctx);
	tm_free(&v->t);
}

static void run_tokens(struct kt_test_meta *_metadata, enum kt_quant q,
		       unsigned int group)
{
	static const unsigned int Ts[] = { 1, 3, 17, 33, 300 };
	struct env v;
	unsigned int i;
	double worst = 0;

	ASSERT_EQ(env_init(&v, 0, q, group, 256, 384, 10, 2,
			   KT_DTYPE_BF16), 0);
	ASSERT_EQ(tm_create(&v.t, v.ctx, q, group, &v.m), 0);
	for (i = 0; i < sizeof(Ts) / sizeof(Ts[0]); i++) {
		struct tcase c = {
			.T = Ts[i], .k = 1 + i % 8, .layer = i % 2,
			.x_dt = i % 2 ? KT_DTYPE_BF16 : KT_DTYPE_F32,
			.ids_dt = i % 2 ? KT_DTYPE_I64 : KT_DTYPE_I32,
			.y_dt = KT_DTYPE_F32, .seed = 77 + i,
		};
		struct kt_moe_args a;
		double e;

		tc_setup(&c, &v.t);
		tc_args(&c, &a);
		ASSERT_EQ(kt_moe_forward(v.ctx, v.m, &a), 0);
		e = tc_check(_metadata, &c, &v.t, tol_of(q));
		TH_LOG("%s %s T=%u k=%u: rel MAE %.4f", kt_isa_name(kt_ctx_isa(v.ctx)),
		       kt_quant_name(q), c.T, c.k, e);
		if (e > worst)
			worst = e;
		tc_free(&c);
	}
	TH_LOG("%s: worst rel MAE %.4f (bound %.3f)", kt_quant_name(q), worst,
	       tol_of(q));
	env_free(&v);
}

TEST(tokens_int8)
{
	run_tokens(_metadata, KT_QUANT_INT8, 0);
}

TEST(tokens_int4)
{
	run_tokens(_metadata, KT_QUANT_INT4, 128);
}

TEST(tokens_bf16)
{
	run_tokens(_metadata, KT_QUANT_BF16, 0);
}

TEST(tokens_int4_group32)
{
	run_tokens(_metadata, KT_QUANT_INT4, 32);
}

/* Routing edge cases, dtypes, accumulate and a skip mask on one model. */
TEST(routing_and_flags)
{
	static const enum kt_quant qs[] = { KT_QUANT_INT8, KT_QUANT_BF16 };
	uint64_t skip[4] = { 0 };
	unsigned int qi, i;

	for (qi = 0; qi < 2; qi++) {
		struct env v;
		struct tcase cases[] = {
			{ .T = 33, .k = 4, .route = ROUTE_ONE },
			{ .T = 17, .k = 16, .route = ROUTE_MESSY },
			{ .T = 40, .k = 3, .route = ROUTE_MESSY, .skip = skip },
			{ .T = 9, .k = 2, .flags = KT_MOE_F_ACCUMULATE },
			{ .T = 5, .k = 2, .y_dt = KT_DTYPE_BF16 },
			{ .T = 20, .k = 6, .y_dt = KT_DTYPE_BF16,
			  .x_dt = KT_DTYPE_BF16, .flags = KT_MOE_F_ACCUMULATE },
			/* no valid expert at all */
			{ .T = 3, .k = 2, .skip = skip, .route = ROUTE_ONE },
			/* messy ids with the skip mask again */
			{ .T = 12, .k = 2, .route = ROUTE_MESSY, .skip = skip },
		};

		ASSERT_EQ(env_init(&v, 0, qs[qi], 0, 128, 512, 6, 1,
				   KT_DTYPE_F32), 0);
		/* expert 2 lives elsewhere (the GPU): not packed, skipped */
		v.t.mask[0] = 1u << 2;
		ASSERT_EQ(tm_create(&v.t, v.ctx, qs[qi], 0, &v.m), 0);
		for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			struct tcase *c = &cases[i];
			struct kt_moe_args a;
			double tol = tol_of(qs[qi]), e;

			/* case 6 routes all to expert 3 and skips it */
			skip[0] = i == 6 ? 1u << 3 : (1u << 1) | (1u << 4);
			c->ids_dt = i % 2 ? KT_DTYPE_I32 : KT_DTYPE_I64;
			if (!c->x_dt)
				c->x_dt = KT_DTYPE_F32;
			if (!c->y_dt)
				c->y_dt = KT_DTYPE_F32;
			c->seed = 500 + i;
			tc_setup(c, &v.t);
			tc_args(c, &a);
			ASSERT_EQ(kt_moe_forward(v.ctx, v.m, &a), 0);
			/* bf16 output rounds each value: ~0.2% more */
			if (c->y_dt == KT_DTYPE_BF16)
				tol += 0.004;
			e = tc_check(_metadata, c, &v.t, tol);
			TH_LOG("%s case %u: rel MAE %.4f", kt_quant_name(qs[qi]),
			       i, e);
			tc_free(c);
		}
		env_free(&v);
	}
}

/* Several ops in flight on a ring, completions matched by user_data. */
TEST(ring_pipelined)
{
	struct kt_ring ring;
	struct tcase c[6];
	struct env v;
	unsigned int i, seen = 0;

	ASSERT_EQ(env_init(&v, 0, KT_QUANT_INT8, 0, 256, 256, 8, 3,
			   KT_DTYPE_F16), 0);
	ASSERT_EQ(tm_create(&v.t, v.ctx, KT_QUANT_INT8, 0, &v.m), 0);
	ASSERT_EQ(kt_ring_init(v.ctx, 4, &ring), 0);
	for (i = 0; i < 6; i++) {
		c[i] = (struct tcase){
			.T = 1 + i * 7, .k = 2 + i % 3, .layer = i % 3,
			.x_dt = KT_DTYPE_F32, .ids_dt = KT_DTYPE_I32,
			.y_dt = KT_DTYPE_F32, .seed = 900 + i,
		};
		tc_setup(&c[i], &v.t);
	}
	for (i = 0; i < 6; i++) {
		struct kt_sqe *sqe;
		struct kt_moe_args a;
		struct kt_cqe *cqe;

		tc_args(&c[i], &a);
		while (!(sqe = kt_get_sqe(&ring))) {
			ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
			ASSERT_EQ(cqe->res, 0);
			seen |= 1u << cqe->user_data;
			kt_cqe_seen(&ring);
		}
		kt_prep_moe(sqe, v.m, c[i].layer, &a, i);
		kt_submit(&ring);
	}
	while (seen != 0x3f) {
		struct kt_cqe *cqe;

		ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
		ASSERT_EQ(cqe->res, 0);
		ASSERT_LT(cqe->user_data, 6);
		seen |= 1u << cqe->user_data;
		kt_cqe_seen(&ring);
	}
	for (i = 0; i < 6; i++) {
		tc_check(_metadata, &c[i], &v.t, tol_of(KT_QUANT_INT8));
		tc_free(&c[i]);
	}
	kt_ring_exit(&ring);
	env_free(&v);
}

/*
 * y of case @c over test model @t for @threads workers (and KT_FAKE_NUMA,
 * if set by the caller), checked against the case's reference; a second
 * call on the same context must give the same bits.
 */
static void *run_det(struct kt_test_meta *_metadata, unsigned int threads,
		     enum kt_quant q, struct tmodel *t, struct tcase *c,
		     double *err)
{
	size_t n = (size_t)c->T * t->H * 4;
	struct kt_moe_args a;
	struct kt_model *m;
	struct kt_ctx *ctx;
	void *y;

	ASSERT_EQ(ctx_init(&ctx, threads), 0);
	ASSERT_EQ(tm_create(t, ctx, q, 0, &m), 0);
	tc_args(c, &a);
	ASSERT_EQ(kt_moe_forward(ctx, m, &a), 0);
	*err = tc_check(_metadata, c, t, tol_of(q));
	y = malloc(n);
	memcpy(y, c->y_op, n);
	ASSERT_EQ(kt_moe_forward(ctx, m, &a), 0);
	ASSERT_EQ(memcmp(y, c->y_op, n), 0);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	return y;
}

/* the weights and the case of run_det() for @q, @T and hidden size @H */
static void det_case(struct tmodel *t, struct tcase *c, enum kt_quant q,
		     unsigned int T, unsigned int H)
{
	*c = (struct tcase){
		.T = T, .k = 6, .x_dt = KT_DTYPE_F32, .ids_dt = KT_DTYPE_I32,
		.y_dt = KT_DTYPE_F32, .seed = 4242, .route = ROUTE_MESSY,
	};
	tm_init(t, H, 768, 8, 1, KT_DTYPE_F32, model_seed(q, 8));
	tc_setup(c, t);
}

static const enum kt_quant det_quants[] = {
	KT_QUANT_INT8, KT_QUANT_INT4, KT_QUANT_BF16, KT_QUANT_FP8,
	KT_QUANT_MXFP4, KT_QUANT_Q8_0, KT_QUANT_Q4_K, KT_QUANT_Q5_K,
	KT_QUANT_Q6_K,
};

/* every quantization at @T tokens and hidden size @H: 1 and 2 workers
 * give the same bits (one set of weights and one reference for both) */
static void det_threads(struct kt_test_meta *_metadata, unsigned int T,
			unsigned int H)
{
	unsigned int qi;

	for (qi = 0; qi < sizeof(det_quants) / sizeof(det_quants[0]); qi++) {
		enum kt_quant q = det_quants[qi];
		struct tmodel t;
		struct tcase c;
		double e1, e2;
		void *y1, *y2;

		det_case(&t, &c, q, T, H);
		y1 = run_det(_metadata, 1, q, &t, &c, &e1);
		y2 = run_det(_metadata, 2, q, &t, &c, &e2);
		ASSERT_EQ(memcmp(y1, y2, (size_t)T * H * 4), 0);
		free(y1);
		free(y2);
		tc_free(&c);
		tm_free(&t);
	}
}

TEST(deterministic_threads)
{
	/* 7 tokens: the leader prepares alone; 150: all workers do */
	det_threads(_metadata, 7, 256);
	det_threads(_metadata, 150, 256);
}

/*
 * Decode's down takes column blocks as long as the workers' shares allow
 * (ktcore/moe.c): at H 1024 one worker's blocks are 1024 columns, two
 * workers' 512. The bits must not change with them.
 */
TEST(deterministic_threads_decode)
{
	det_threads(_metadata, 1, 1024);
}

/* Two (fake) NUMA nodes each computing a slice of I; the sum is right. */
TEST(two_nodes)
{
	struct tmodel t;
	struct tcase c;
	double e;
	void *y;

	setenv("KT_FAKE_NUMA", "2", 1);
	for (int q = KT_QUANT_INT8; q <= KT_QUANT_BF16; q++) {
		struct kt_ctx *ctx;

		if (kt_ctx_create(NULL, &ctx))
			SKIP(return, "cannot split this machine into 2 fake nodes");
		kt_ctx_destroy(ctx);
		det_case(&t, &c, (enum kt_quant)q, 41, 256);
		y = run_det(_metadata, 0, (enum kt_quant)q, &t, &c, &e);
		TH_LOG("2 nodes %s: rel MAE %.4f", kt_quant_name((enum kt_quant)q), e);
		free(y);
		tc_free(&c);
		tm_free(&t);
	}
}

/* T much larger than the token chunk: many chunks, k = 16 cuts it more. */
TEST(token_chunks)
{
	static const unsigned int ks[] = { 3, 16 };
	struct env v;
	unsigned int i;

	core_moe_max_chunk = 16;
	ASSERT_EQ(env_init(&v, 0, KT_QUANT_INT8, 0, 128, 256, 5, 1,
			   KT_DTYPE_F32), 0);
	ASSERT_EQ(tm_create(&v.t, v.ctx, KT_QUANT_INT8, 0, &v.m), 0);
	for (i = 0; i < 2; i++) {
		struct tcase c = {
			.T = 77, .k = ks[i], .x_dt = KT_DTYPE_BF16,
			.ids_dt = KT_DTYPE_I64, .y_dt = KT_DTYPE_F32,
			.flags = KT_MOE_F_ACCUMULATE, .seed = 31 + i,
			.route = ROUTE_MESSY,
		};
		struct kt_moe_args a;

		tc_setup(&c, &v.t);
		tc_args(&c, &a);
		ASSERT_EQ(kt_moe_forward(v.ctx, v.m, &a), 0);
		TH_LOG("T=77 in chunks of 16, k=%u: rel MAE %.4f", c.k,
		       tc_check(_metadata, &c, &v.t, tol_of(KT_QUANT_INT8)));
		tc_free(&c);
	}
	env_free(&v);
}

/* Random geometry, E, k, T, dtypes and flags. */
TEST(random_shapes)
{
	static const enum kt_quant qs[] = { KT_QUANT_INT8, KT_QUANT_INT4,
					    KT_QUANT_BF16 };
	struct tu_rng r = { 2024 };
	unsigned int it;

	for (it = 0; it < 8; it++) {
		enum kt_quant q = qs[tu_next(&r) % 3];
		unsigned int H = 128 * (1 + tu_next(&r) % 3);
		unsigned int I = 128 * (1 + tu_next(&r) % 4);
		unsigned int E = 1 + tu_next(&r) % 20;
		struct tcase c = {
			.T = 1 + tu_next(&r) % 50,
			.k = 1 + tu_next(&r) % 16,
			.x_dt = tu_next(&r) % 2 ? KT_DTYPE_BF16 : KT_DTYPE_F32,
			.ids_dt = tu_next(&r) % 2 ? KT_DTYPE_I64 : KT_DTYPE_I32,
			.y_dt = KT_DTYPE_F32,
			.flags = tu_next(&r) % 2 ? KT_MOE_F_ACCUMULATE : 0,
			.route = (enum route_kind)(tu_next(&r) % 3),
			.seed = tu_next(&r),
		};
		struct kt_moe_args a;
		struct env v;

		ASSERT_EQ(env_init(&v, 0, q, 0, H, I, E, 1, KT_DTYPE_BF16), 0);
		ASSERT_EQ(tm_create(&v.t, v.ctx, q, 0, &v.m), 0);
		tc_setup(&c, &v.t);
		tc_args(&c, &a);
		ASSERT_EQ(kt_moe_forward(v.ctx, v.m, &a), 0);
		TH_LOG("%s H=%u I=%u E=%u T=%u k=%u: rel MAE %.4f",
		       kt_quant_name(q), H, I, E, c.T, c.k,
		       tc_check(_metadata, &c, &v.t, tol_of(q)));
		tc_free(&c);
		env_free(&v);
	}
}

/* The whole op on the context's variant against the same op on scalar. */
TEST(variant_vs_scalar_op)
{
	static const enum kt_quant qs[] = { KT_QUANT_INT8, KT_QUANT_INT4,
					    KT_QUANT_BF16 };
	unsigned int qi;

	for (qi = 0; qi < 3; qi++) {
		float *y[2];
		enum kt_isa isa = KT_ISA_AUTO;

		for (int v = 0; v < 2; v++) {
			struct tcase c = {
				.T = 45, .k = 5, .x_dt = KT_DTYPE_F32,
				.ids_dt = KT_DTYPE_I32, .y_dt = KT_DTYPE_F32,
				.seed = 8080, .route = ROUTE_MESSY,
			};
			struct kt_moe_args a;
			struct env e;

			if (v == 1)
				setenv("KT_ISA", "scalar", 1);
			ASSERT_EQ(env_init(&e, 0, qs[qi], 0, 256, 512, 9, 1,
					   KT_DTYPE_BF16), 0);
			if (v == 0)
				isa = kt_ctx_isa(e.ctx);
			if (isa == KT_ISA_SCALAR) {
				env_free(&e);
				SKIP(return, "no SIMD variant runs here");
			}
			ASSERT_EQ(tm_create(&e.t, e.ctx, qs[qi], 0, &e.m), 0);
			tc_setup(&c, &e.t);
			tc_args(&c, &a);
			ASSERT_EQ(kt_moe_forward(e.ctx, e.m, &a), 0);
			y[v] = malloc((size_t)c.T * 256 * 4);
			memcpy(y[v], c.y_op, (size_t)c.T * 256 * 4);
			tc_free(&c);
			env_free(&e);
		}
		unsetenv("KT_ISA");
		double num = 0, den = 0;

		for (size_t i = 0; i < (size_t)45 * 256; i++) {
			num += fabs((double)y[0][i] - y[1][i]);
			den += fabs((double)y[1][i]);
		}
		TH_LOG("%s %s vs scalar, whole op: rel MAE %.2e",
		       kt_isa_name(isa), kt_quant_name(qs[qi]), num / den);
		EXPECT_LE(num / den, 2e-5);
		free(y[0]);
		free(y[1]);
	}
}

TEST(bad_arguments)
{
	struct tcase c = {
		.T = 4, .k = 2, .x_dt = KT_DTYPE_F32, .ids_dt = KT_DTYPE_I32,
		.y_dt = KT_DTYPE_F32, .seed = 1,
	};
	struct kt_moe_args a, b;
	struct kt_ring ring;
	struct kt_sqe *sqe;
	struct kt_cqe *cqe;
	struct env v;

	ASSERT_EQ(env_init(&v, 0, KT_QUANT_INT8, 0, 128, 128, 4, 2,
			   KT_DTYPE_F32), 0);
	ASSERT_EQ(tm_create(&v.t, v.ctx, KT_QUANT_INT8, 0, &v.m), 0);
	tc_setup(&c, &v.t);
	tc_args(&c, &a);
	ASSERT_EQ(kt_moe_forward(v.ctx, v.m, &a), 0);
	ASSERT_EQ(kt_moe_forward(v.ctx, NULL, &a), -EINVAL);
#define BAD(stmt) do { b = a; stmt; \
		EXPECT_EQ(kt_moe_forward(v.ctx, v.m, &b), -EINVAL); } while (0)
	BAD(b.x = NULL);
	BAD(b.ids = NULL);
	BAD(b.w = NULL);
	BAD(b.y = NULL);
	BAD(b.tokens = 0);
	BAD(b.tokens = KT_MOE_MAX_TOKENS + 1);
	BAD(b.top_k = 0);
	BAD(b.top_k = KT_MOE_MAX_TOPK + 1);
	BAD(b.layer = 2);
	BAD(b.x_dtype = KT_DTYPE_F16);
	BAD(b.x_dtype = 77);
	BAD(b.ids_dtype = KT_DTYPE_F32);
	BAD(b.y_dtype = KT_DTYPE_I32);
	BAD(b.flags = 1u << 7);
#undef BAD
	/* and through a ring: the error is in the completion */
	ASSERT_EQ(kt_ring_init(v.ctx, 2, &ring), 0);
	sqe = kt_get_sqe(&ring);
	ASSERT_TRUE(sqe != NULL);
	b = a;
	b.top_k = 0;
	kt_prep_moe(sqe, v.m, 0, &b, 99);
	kt_submit(&ring);
	ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
	ASSERT_EQ(cqe->res, -EINVAL);
	ASSERT_EQ(cqe->user_data, 99);
	kt_cqe_seen(&ring);
	kt_ring_exit(&ring);
	tc_free(&c);
	env_free(&v);
}

TEST(model_create_checks)
{
	struct kt_model_info info;
	struct kt_model *m;
	struct env v;
	struct kt_model_desc d;
	int32_t ids[2] = { 3, 7 };

	ASSERT_EQ(env_init(&v, 0, KT_QUANT_INT4, 0, 128, 256, 3, 2,
			   KT_DTYPE_F32), 0);
	d = (struct kt_model_desc){
		.sz = sizeof(d), .hidden = 128, .inter = 256, .n_experts = 3,
		.n_layers = 2, .layer_ids = ids, .src_dtype = KT_DTYPE_F32,
		.quant = KT_QUANT_INT4, .group_size = 64,
		.get_expert = tm_get_expert, .arg = &v.t,
	};
	ASSERT_EQ(kt_model_create(v.ctx, &d, &m), 0);
	kt_model_get_info(m, &info);
	EXPECT_EQ(info.hidden, 128);
	EXPECT_EQ(info.inter, 256);
	EXPECT_EQ(info.group_size, 64);
	EXPECT_EQ(info.quant, KT_QUANT_INT4);
	EXPECT_EQ(info.resident_bytes, 6 * info.expert_bytes);
	EXPECT_EQ(kt_model_layer_index(m, 7), 1);
	EXPECT_EQ(kt_model_layer_index(m, 3), 0);
	EXPECT_EQ(kt_model_layer_index(m, 4), -EINVAL);
	kt_model_destroy(m);
#define BADD(stmt, err) do { struct kt_model_desc b = d; stmt; \
		EXPECT_EQ(kt_model_create(v.ctx, &b, &m), err); } while (0)
	BADD(b.hidden = 100, -EINVAL);
	BADD(b.inter = 0, -EINVAL);
	BADD(b.group_size = 48, -EINVAL);
	BADD(b.quant = 0, -EINVAL);
	BADD(b.src_dtype = KT_DTYPE_I64, -EINVAL);
	BADD(b.get_expert = NULL, -EINVAL);
	BADD(b.n_experts = 0, -EINVAL);
	BADD(b.sz = 8, -EINVAL);
#undef BADD
	EXPECT_EQ(kt_model_create(NULL, &d, &m), -EINVAL);
	env_free(&v);
}

static int fail_third(void *arg, uint32_t layer, uint32_t e,
		      struct kt_expert_src *src)
{
	if (layer * 3 + e == 2)
		return -EIO;
	return tm_get_expert(arg, layer, e, src);
}

TEST(model_create_source_error)
{
	struct kt_model *m = (struct kt_model *)1;
	struct env v;
	struct kt_model_desc d;

	ASSERT_EQ(env_init(&v, 0, KT_QUANT_INT8, 0, 128, 128, 3, 1,
			   KT_DTYPE_F32), 0);
	d = (struct kt_model_desc){
		.sz = sizeof(d), .hidden = 128, .inter = 128, .n_experts = 3,
		.n_layers = 1, .src_dtype = KT_DTYPE_F32,
		.quant = KT_QUANT_INT8, .get_expert = fail_third, .arg = &v.t,
	};
	ASSERT_EQ(kt_model_create(v.ctx, &d, &m), -EIO);
	ASSERT_TRUE(m == NULL);
	env_free(&v);
}

TEST_HARNESS_MAIN
