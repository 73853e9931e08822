// SPDX-License-Identifier: MIT
/*
 * mixed.c - the MoE op split between the GPU and the CPU, against the
 * stand-in libcuda (whose kernels run on the host in f32): results against
 * the f64 reference, residency and eviction, device pointers, and every
 * driver call failing in turn without a crash, a leak or a vague error.
 */
#include <errno.h>

#include <kt/kt.h>

#include "kt_test.h"
#include "gpu/gpu.h"
#include "kernels/fp.h"
#include "../moe/model.h"
#include "stub.h"

#define H 128
#define I 256
#define E 8
#define K 3

static double tol_of(enum kt_quant q)
{
	return q == KT_QUANT_INT8 ? 0.04 : q == KT_QUANT_INT4 ? 0.25 : 0.005;
}

static int errors_logged;

/* The failure walk's log: count errors, print nothing. */
static void count_log(void *arg, enum kt_log_level l, const char *m)
{
	if (l == KT_LOG_ERROR)
		errors_logged++;
}

struct env {
	struct stub s;
	struct kt_ctx *ctx;
	struct tmodel t;
	struct kt_model *m;
};

/* 0; 1 skip (no stub or no kernels); a -errno of a step. */
static int env_init(struct env *v, enum kt_quant q, bool quiet)
{
	struct kt_ctx_opts o = {
		.sz = sizeof(o), .threads = 2, .gpu_mask = 1,
		.spin_us = KT_CTX_SPIN_NONE,
		.log_fn = quiet ? count_log : NULL,
	};
	struct kt_gpu_info gi;
	int ret;

	memset(v, 0, sizeof(*v));
	if (stub_use(&v->s, "libcuda-stub.so"))
		return 1;
	ret = kt_ctx_create(&o, &v->ctx);
	if (ret)
		return ret;
	tm_init(&v->t, H, I, E, 2, KT_DTYPE_F32, 42);
	ret = tm_create(&v->t, v->ctx, q, 64, &v->m);
	if (ret)
		return ret;
	if (kt_ctx_gpu_info(v->ctx, &gi) || !gi.kernels)
		return 1;
	return 0;
}

static void env_fini(struct env *v)
{
	kt_model_destroy(v->m);
	kt_ctx_destroy(v->ctx);
	if (v->t.w)
		tm_free(&v->t);
}

struct op {
	unsigned int T;
	float *x;
	int64_t *ids;
	float *w;
	float *y;
	double *ref;
};

static void op_init(struct op *p, unsigned int T, uint64_t seed)
{
	struct tu_rng r = { seed };
	unsigned int t, j;

	p->T = T;
	p->x = malloc((size_t)T * H * 4);
	p->ids = malloc((size_t)T * K * 8);
	p->w = malloc((size_t)T * K * 4);
	p->y = malloc((size_t)T * H * 4);
	p->ref = calloc((size_t)T * H, sizeof(double));
	tu_fill_normal(&r, p->x, (size_t)T * H, 1.0);
	for (t = 0; t < T; t++)
		for (j = 0; j < K; j++) {
			/* a repeat and an invalid id now and then */
			p->ids[t * K + j] = j == 2 && t % 5 == 1 ? -1 :
				j == 1 && t % 7 == 3 ? p->ids[t * K] :
				(int64_t)(tu_next(&r) % E);
			p->w[t * K + j] = (float)tu_unif(&r);
		}
}

static void op_free(struct op *p)
{
	free(p->x);
	free(p->ids);
	free(p->w);
	free(p->y);
	free(p->ref);
}

static int op_run(struct env *v, struct op *p, uint32_t flags)
{
	struct kt_moe_args a = {
		.x = p->x, .ids = p->ids, .w = p->w, .y = p->y,
		.tokens = p->T, .top_k = K, .layer = 1, .flags = flags,
		.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I64,
		.y_dtype = KT_DTYPE_F32,
	};

	return kt_moe_forward(v->ctx, v->m, &a);
}

/* Layer 1's route counters read what op @p routes, counted by hand. */
static int routes_match(struct env *v, const struct op *p)
{
	uint64_t got[E], want[E] = { 0 };
	unsigned int t, j, j2;

	if (kt_model_route_counts(v->m, 1, got))
		return 0;
	for (t = 0; t < p->T; t++)
		for (j = 0; j < K; j++) {
			int64_t id = p->ids[t * K + j];

			for (j2 = 0; j2 < j; j2++)
				if (p->ids[t * K + j2] == id)
					break;
			if (id >= 0 && id < E && j2 == j)
				want[id]++;
		}
	return !memcmp(got, want, sizeof(got));
}

static double op_err(struct env *v, struct op *p, const float *y0)
{
	size_t n = (size_t)p->T * H, i;
	double *got = malloc(n * sizeof(double)), e;

	memset(p->ref, 0, n * sizeof(double));
	tm_reference(&v->t, 1, p->x, p->ids, p->w, p->T, K, NULL, p->ref);
	for (i = 0; i < n; i++)
		got[i] = p->y[i] - (y0 ? y0[i] : 0);
	e = tu_rel_mae(got, p->ref, n);
	free(got);
	return e;
}

FIXTURE(mixed) {
	struct env v;
};

FIXTURE_VARIANT(mixed) {
	enum kt_quant q;
};

FIXTURE_VARIANT_ADD(mixed, int8) { .q = KT_QUANT_INT8 };
FIXTURE_VARIANT_ADD(mixed, int4) { .q = KT_QUANT_INT4 };
FIXTURE_VARIANT_ADD(mixed, bf16) { .q = KT_QUANT_BF16 };

FIXTURE_SETUP(mixed)
{
	int ret = env_init(&self->v, variant->q, false);

	if (ret == 1)
		SKIP(return, "no stand-in libcuda or no GPU kernels in this build");
	ASSERT_EQ(ret, 0);
}

FIXTURE_TEARDOWN(mixed)
{
	env_fini(&self->v);
}

/* GPU experts 1, 4 and 6, the others on the CPU; T covers GEMV and mma */
TEST_F(mixed, split_matches_reference)
{
	static const unsigned int Ts[] = { 1, 5, 40, 600 };
	static const uint32_t gpu_e[] = { 1, 4, 6 };
	struct env *v = &self->v;
	unsigned int i;
	long l0;

	for (i = 0; i < 3; i++)
		ASSERT_EQ(kt_model_gpu_upload(v->m, 1, gpu_e[i]), 0);
	EXPECT_EQ(kt_model_gpu_resident(v->m, 1, 4), 1);
	EXPECT_EQ(kt_model_gpu_resident(v->m, 1, 3), 0);
	EXPECT_EQ(kt_model_gpu_resident(v->m, 0, 4), 0);
	EXPECT_EQ(kt_model_gpu_resident(v->m, 2, 4), -EINVAL);
	for (i = 0; i < 4; i++) {
		struct op p;
		double e;

		op_init(&p, Ts[i], 7 + i);
		l0 = v->s.launches();
		kt_model_route_reset(v->m);
		ASSERT_EQ(op_run(v, &p, 0), 0);
		EXPECT_GT(v->s.launches(), l0);
		/* the routes of both devices' experts are counted */
		EXPECT_TRUE(routes_match(v, &p));
		e = op_err(v, &p, NULL);
		TH_LOG("T=%u rel MAE %.4f", Ts[i], e);
		EXPECT_LE(e, tol_of(variant->q));
		op_free(&p);
	}
}

TEST_F(mixed, accumulate_and_evict)
{
	struct env *v = &self->v;
	struct op p;
	float *y0;
	size_t n;
	long l0;
	uint32_t e;

	for (e = 0; e < E; e += 2)
		ASSERT_EQ(kt_model_gpu_upload(v->m, 1, e), 0);
	op_init(&p, 9, 3);
	n = (size_t)p.T * H;
	y0 = malloc(n * 4);
	for (size_t i = 0; i < n; i++)
		y0[i] = p.y[i] = (float)(i % 13) * 0.25f;
	ASSERT_EQ(op_run(v, &p, KT_MOE_F_ACCUMULATE), 0);
	EXPECT_LE(op_err(v, &p, y0), tol_of(variant->q));
	/* all evicted: the op runs on the CPU alone, same answer */
	for (e = 0; e < E; e += 2)
		ASSERT_EQ(kt_model_gpu_evict(v->m, 1, e), 0);
	EXPECT_EQ(kt_model_gpu_evict(v->m, 1, 0), -ENOENT);
	EXPECT_EQ(kt_model_gpu_resident(v->m, 1, 0), 0);
	l0 = v->s.launches();
	ASSERT_EQ(op_run(v, &p, 0), 0);
	EXPECT_EQ(v->s.launches(), l0);
	EXPECT_LE(op_err(v, &p, NULL), tol_of(variant->q));
	free(y0);
	op_free(&p);
}

/* no CPU expert in the op: y is written from the GPU part alone */
TEST_F(mixed, all_on_gpu)
{
	struct env *v = &self->v;
	struct op p;
	size_t i;
	uint32_t e;

	for (e = 0; e < E; e++)
		ASSERT_EQ(kt_model_gpu_upload(v->m, 1, e), 0);
	op_init(&p, 6, 21);
	for (i = 0; i < (size_t)p.T * H; i++)
		p.y[i] = NAN;
	kt_model_route_reset(v->m);
	ASSERT_EQ(op_run(v, &p, 0), 0);
	EXPECT_LE(op_err(v, &p, NULL), tol_of(variant->q));
	/* GPU-only chunks count their routes: placement reads them */
	EXPECT_TRUE(routes_match(v, &p));
	op_free(&p);
}

/* 0 when op @p's y in bf16 (accumulating onto zeros or not) holds the
 * bits of its f32 y rounded; else the first element that differs + 1. */
static size_t bf16_y_mismatch(struct env *v, struct op *p)
{
	size_t n = (size_t)p->T * H, i = n;
	uint16_t *yb = malloc(n * 2);

	if (!yb || op_run(v, p, 0))
		goto out;
	for (int acc = 0; acc < 2; acc++) {
		struct kt_moe_args a = {
			.x = p->x, .ids = p->ids, .w = p->w, .y = yb,
			.tokens = p->T, .top_k = K, .layer = 1,
			.flags = acc ? KT_MOE_F_ACCUMULATE : 0,
			.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I64,
			.y_dtype = KT_DTYPE_BF16,
		};

		memset(yb, 0, n * 2);	/* +0: accumulating adds nothing */
		if (kt_moe_forward(v->ctx, v->m, &a))
			goto out;
		for (i = 0; i < n; i++)
			if (yb[i] != kern_f32_to_bf16(p->y[i]))
				goto out;
	}
	free(yb);
	return 0;
out:
	free(yb);
	return i + 1;
}

/*
 * y in bf16 is the f32 sum rounded once, bit for bit: from an op the GPU
 * runs whole (converted on the device), and from a mixed op large enough
 * for the workers to share the host sum.
 */
TEST_F(mixed, bf16_y_rounds_the_f32_sum)
{
	struct env *v = &self->v;
	struct op p;
	uint32_t e;

	for (e = 0; e < E; e += 2)
		ASSERT_EQ(kt_model_gpu_upload(v->m, 1, e), 0);
	op_init(&p, 600, 23);	/* 600 x H: above SUM_SPLIT_MIN */
	EXPECT_EQ(bf16_y_mismatch(v, &p), 0);
	op_free(&p);
	for (e = 1; e < E; e += 2)
		ASSERT_EQ(kt_model_gpu_upload(v->m, 1, e), 0);
	op_init(&p, 9, 29);
	EXPECT_EQ(bf16_y_mismatch(v, &p), 0);
	op_free(&p);
}

/* kt_model_place() on a context with a GPU moves experts with the device
 * table: the published set and the op's split agree */
TEST_F(mixed, place_moves_experts_to_the_gpu)
{
	struct env *v = &self->v;
	uint64_t masks[2] = { 0, 1u << 0 | 1u << 3 | 1u << 5 };
	struct op p;
	long l0;

	/* uploaded by hand first: kept, not uploaded again */
	ASSERT_EQ(kt_model_gpu_upload(v->m, 1, 0), 0);
	EXPECT_EQ(kt_model_place(v->m, masks), 2);
	EXPECT_EQ(kt_model_gpu_resident(v->m, 1, 3), 1);
	EXPECT_EQ(kt_model_gpu_resident(v->m, 1, 5), 1);
	EXPECT_EQ(kt_model_gpu_resident(v->m, 1, 1), 0);
	op_init(&p, 12, 31);
	l0 = v->s.launches();
	ASSERT_EQ(op_run(v, &p, 0), 0);
	EXPECT_GT(v->s.launches(), l0);
	EXPECT_LE(op_err(v, &p, NULL), tol_of(variant->q));
	/* down to expert 3: 0 and 5 leave the GPU */
	masks[1] = 1u << 3;
	EXPECT_EQ(kt_model_place(v->m, masks), 2);
	EXPECT_EQ(kt_model_gpu_resident(v->m, 1, 0), 0);
	EXPECT_EQ(kt_model_gpu_resident(v->m, 1, 5), 0);
	EXPECT_EQ(kt_model_gpu_resident(v->m, 1, 3), 1);
	ASSERT_EQ(op_run(v, &p, 0), 0);
	EXPECT_LE(op_err(v, &p, NULL), tol_of(variant->q));
	op_free(&p);
}

/* the stand-in's device memory is host memory: any pointer is a device one */
TEST_F(mixed, device_pointers)
{
	struct env *v = &self->v;
	struct op p;

	ASSERT_EQ(kt_model_gpu_upload(v->m, 1, 2), 0);
	ASSERT_EQ(kt_model_gpu_upload(v->m, 1, 5), 0);
	op_init(&p, 17, 11);
	ASSERT_EQ(op_run(v, &p, KT_MOE_F_DEVICE), 0);
	EXPECT_LE(op_err(v, &p, NULL), tol_of(variant->q));
	op_free(&p);
}

/*
 * Fail driver call 1, 2, 3, ... of a whole session (context, uploads, an
 * op, an eviction, teardown): each step gives 0 or a clear -errno, and
 * once everything is destroyed no driver handle is left.
 */
/* gate/up Q4_K with down Q6_K (a GGUF Q4_K_M file): the device layout
 * has one type, so the GPU refuses the model by name; the CPU runs it */
TEST(gate_up_and_down_of_two_types_stay_on_the_cpu)
{
	struct kt_ctx_opts o = {
		.sz = sizeof(o), .threads = 2, .gpu_mask = 1,
		.spin_us = KT_CTX_SPIN_NONE,
	};
	struct tmodel t;
	struct kt_model_desc d;
	struct kt_model *m = NULL;
	struct kt_ctx *ctx;
	struct stub s;

	if (stub_use(&s, "libcuda-stub.so"))
		SKIP(return, "stand-in libcuda not built");
	ASSERT_EQ(kt_ctx_create(&o, &ctx), 0);
	tm_init(&t, 256, 256, 4, 1, KT_DTYPE_F32, 9);
	d = (struct kt_model_desc){
		.sz = sizeof(d), .hidden = 256, .inter = 256,
		.n_experts = 4, .n_layers = 1, .src_dtype = KT_DTYPE_F32,
		.quant = KT_QUANT_Q4_K, .down_quant = KT_QUANT_Q6_K,
		.get_expert = tm_get_expert, .arg = &t,
	};
	ASSERT_EQ(kt_model_create(ctx, &d, &m), 0);
	EXPECT_EQ(kt_model_gpu_upload(m, 0, 1), -EOPNOTSUPP);
	EXPECT_EQ(kt_model_gpu_resident(m, 0, 1), 0);
	{
		struct kt_moe_args a = { .tokens = 3, .top_k = 2,
					 .x_dtype = KT_DTYPE_F32,
					 .ids_dtype = KT_DTYPE_I64,
					 .y_dtype = KT_DTYPE_F32 };
		float x[3 * 256], w[6] = { 1, 1, 1, 1, 1, 1 }, y[3 * 256];
		int64_t ids[6] = { 0, 1, 2, 3, 1, 2 };
		unsigned int i;

		for (i = 0; i < 3 * 256; i++)
			x[i] = (float)(i % 17) / 17.0f - 0.5f;
		a.x = x;
		a.ids = ids;
		a.w = w;
		a.y = y;
		EXPECT_EQ(kt_moe_forward(ctx, m, &a), 0);
	}
	kt_model_destroy(m);
	tm_free(&t);
	kt_ctx_destroy(ctx);
}

TEST_TIMEOUT(fail_each_call, 300)
{
	long n, calls, failed_steps = 0;
	size_t fb;

	if (!gpu_fatbin(&fb))
		SKIP(return, "no GPU kernels in this build");
	for (n = 1; n < 5000; n++) {
		struct env v;
		struct op p;
		int ret, steps[5], i;

		memset(steps, 0, sizeof(steps));
		ret = stub_use(&v.s, "libcuda-stub.so");
		if (ret)
			SKIP(return, "stand-in libcuda-stub.so not built");
		v.s.set_fail_at(n);
		ret = env_init(&v, KT_QUANT_INT8, true);
		if (!ret) {
			steps[0] = kt_model_gpu_upload(v.m, 1, 1);
			steps[1] = kt_model_gpu_upload(v.m, 1, 2);
			op_init(&p, 3, 5);
			steps[2] = op_run(&v, &p, 0);
			steps[3] = kt_model_gpu_evict(v.m, 1, 1);
			op_free(&p);
		}
		/* 1: the failed call was the module load: no kernels, no GPU
		 * experts, which env_init reports as a skip */
		if (ret == 1)
			ret = 0;
		env_fini(&v);
		calls = v.s.calls();
		EXPECT_EQ(v.s.live(), 0);
		ASSERT_TRUE(ret <= 0 && ret >= -4095);
		for (i = 0; i < 4; i++) {
			EXPECT_TRUE(steps[i] <= 0 && steps[i] >= -4095);
			if (steps[i] || ret)
				failed_steps++;
		}
		/* every failure was said in the log at error level */
		if (ret < 0 || steps[0] || steps[1] || steps[2])
			EXPECT_GT(errors_logged, 0);
		errors_logged = 0;
		if (v.s.live())
			TH_LOG("leak when call %ld fails", n);
		if (calls < n)
			break;
	}
	TH_LOG("%ld driver calls walked, %ld failed steps", n - 1,
	       failed_steps);
	EXPECT_GT(n, 20);
	EXPECT_GT(failed_steps, 10);
}

TEST_HARNESS_MAIN
