// SPDX-License-Identifier: MIT
/*
 * stream.c - stream-ordered ops (kt_moe_stream_submit/_sync) against the
 * stand-in libcuda, whose streams run work as it is enqueued and whose
 * memory is host memory: the sum, the run-time token count, the order of
 * calls, and every driver call failing in turn.
 */
#include <errno.h>

#include <kt/kt.h>

#include "kt_test.h"
#include "gpu/gpu.h"
#include "../moe/model.h"
#include "stub.h"

#define H 128
#define I 256
#define E 8
#define K 2
#define T 12

static double tol_of(enum kt_quant q)
{
	return q == KT_QUANT_INT8 ? 0.04 : q == KT_QUANT_INT4 ? 0.25 : 0.005;
}

struct env {
	struct stub s;
	struct kt_ctx *ctx;
	struct tmodel t;
	struct kt_model *m;
	float x[T * H], w[T * K], y[T * H];
	int32_t ids[T * K];
	int64_t ids64[T * K];
};

static int unsynced_seen;

static void quiet(void *arg, enum kt_log_level l, const char *m)
{
	if (l == KT_LOG_ERROR && strstr(m, "stream op not synced"))
		__atomic_add_fetch(&unsynced_seen, 1, __ATOMIC_RELAXED);
}

/* 0; 1 skip; a -errno of a step. */
static int env_init(struct env *v, enum kt_quant q)
{
	struct kt_ctx_opts o = {
		.sz = sizeof(o), .threads = 2, .gpu_mask = 1,
		.spin_us = KT_CTX_SPIN_NONE, .log_fn = quiet,
	};
	struct tu_rng r = { 5 };
	size_t fb;
	int i, ret;

	memset(v, 0, sizeof(*v));
	if (stub_use(&v->s, "libcuda-stub.so") || !gpu_fatbin(&fb))
		return 1;
	ret = kt_ctx_create(&o, &v->ctx);
	if (ret)
		return ret;
	tm_init(&v->t, H, I, E, 1, KT_DTYPE_F32, 77);
	ret = tm_create(&v->t, v->ctx, q, 64, &v->m);
	if (ret)
		return ret;
	tu_fill_normal(&r, v->x, T * H, 1.0);
	for (i = 0; i < T * K; i++) {
		v->ids[i] = (int32_t)((i * 3 + i / K) % E);
		v->ids64[i] = v->ids[i];
		v->w[i] = (float)tu_unif(&r);
	}
	return 0;
}

static void env_fini(struct env *v)
{
	kt_model_destroy(v->m);
	kt_ctx_destroy(v->ctx);
	if (v->t.w)
		tm_free(&v->t);
}

static int submit(struct env *v, const volatile uint32_t *word)
{
	struct kt_moe_args a = {
		.x = v->x, .ids = v->ids, .w = v->w, .y = v->y, .tokens = T,
		.top_k = K, .x_dtype = KT_DTYPE_F32,
		.ids_dtype = KT_DTYPE_I32, .y_dtype = KT_DTYPE_F32,
	};

	return kt_moe_stream_submit(v->ctx, v->m, &a, NULL, word);
}

/* rel MAE of the first @n tokens of y */
static double err_of(struct env *v, unsigned int n)
{
	double *ref = calloc((size_t)n * H, 8), *got = malloc((size_t)n * H * 8);
	size_t i;
	double e;

	tm_reference(&v->t, 0, v->x, v->ids64, v->w, n, K, NULL, ref);
	for (i = 0; i < (size_t)n * H; i++)
		got[i] = v->y[i];
	e = tu_rel_mae(got, ref, (size_t)n * H);
	free(ref);
	free(got);
	return e;
}

FIXTURE(strm) {
	struct env v;
};

FIXTURE_VARIANT(strm) {
	enum kt_quant q;
};

FIXTURE_VARIANT_ADD(strm, int8) { .q = KT_QUANT_INT8 };
FIXTURE_VARIANT_ADD(strm, bf16) { .q = KT_QUANT_BF16 };

FIXTURE_SETUP(strm)
{
	int ret = env_init(&self->v, variant->q);

	if (ret == 1)
		SKIP(return, "no stand-in libcuda or no GPU kernels in this build");
	ASSERT_EQ(ret, 0);
}

FIXTURE_TEARDOWN(strm)
{
	env_fini(&self->v);
}

TEST_F(strm, submit_sync_sum)
{
	struct env *v = &self->v;
	uint32_t e;
	int i;

	for (e = 0; e < E; e += 3)
		ASSERT_EQ(kt_model_gpu_upload(v->m, 0, e), 0);
	for (i = 0; i < 3; i++) {	/* the slots of the op ring, reused */
		memset(v->y, 0xff, sizeof(v->y));
		ASSERT_EQ(submit(v, NULL), 0);
		ASSERT_EQ(kt_moe_stream_sync(v->ctx, NULL), 0);
		EXPECT_LE(err_of(v, T), tol_of(variant->q));
		EXPECT_EQ(kt_ctx_gpu_last_error(v->ctx), 0);
	}
	/* the holds went with the op: eviction does not wait */
	EXPECT_EQ(kt_model_gpu_evict(v->m, 0, 0), 0);
}

TEST_F(strm, runtime_token_count)
{
	struct env *v = &self->v;
	uint32_t word = 5;
	size_t i;

	ASSERT_EQ(kt_model_gpu_upload(v->m, 0, 1), 0);
	for (i = 0; i < T * H; i++)
		v->y[i] = 1234.0f;
	ASSERT_EQ(submit(v, &word), 0);
	ASSERT_EQ(kt_moe_stream_sync(v->ctx, NULL), 0);
	EXPECT_LE(err_of(v, 5), tol_of(variant->q));
	/* rows past the count are the caller's, untouched */
	for (i = 5 * H; i < T * H; i++)
		ASSERT_EQ(v->y[i], 1234.0f);
	word = 0;
	ASSERT_EQ(submit(v, &word), 0);
	ASSERT_EQ(kt_moe_stream_sync(v->ctx, NULL), 0);
	EXPECT_EQ(v->y[0], v->y[0]);	/* not NaN */
}

TEST_F(strm, call_order)
{
	struct env *v = &self->v;
	struct kt_moe_args big = {
		.x = v->x, .ids = v->ids, .w = v->w, .y = v->y,
		.tokens = 2000, .top_k = K, .x_dtype = KT_DTYPE_F32,
		.ids_dtype = KT_DTYPE_I32, .y_dtype = KT_DTYPE_F32,
	};

	EXPECT_EQ(kt_moe_stream_sync(v->ctx, NULL), -EINVAL);
	ASSERT_EQ(submit(v, NULL), 0);
	/* one op between submit and sync; the sync names the stream */
	EXPECT_EQ(submit(v, NULL), -EBUSY);
	EXPECT_EQ(kt_moe_stream_sync(v->ctx, (void *)0x1), -EINVAL);
	ASSERT_EQ(kt_moe_stream_sync(v->ctx, NULL), 0);
	EXPECT_EQ(kt_moe_stream_sync(v->ctx, NULL), -EINVAL);
	/* more tokens than one GPU chunk: refused */
	EXPECT_EQ(kt_moe_stream_submit(v->ctx, v->m, &big, NULL, NULL),
		  -EINVAL);
}

#ifndef KT_DEBUG
/*
 * kt_model_destroy() with a stream op submitted and not synced (a KT_DEBUG
 * build aborts): said in the log, the op finished without its y, its
 * holds and slot freed, so the next model's ops run; after a sync, no
 * word.
 */
TEST_F(strm, destroy_before_sync)
{
	struct env *v = &self->v;

	ASSERT_EQ(kt_model_gpu_upload(v->m, 0, 0), 0);
	ASSERT_EQ(kt_model_gpu_upload(v->m, 0, 3), 0);
	unsynced_seen = 0;
	ASSERT_EQ(submit(v, NULL), 0);
	kt_model_destroy(v->m);
	EXPECT_EQ(unsynced_seen, 1);
	ASSERT_EQ(tm_create(&v->t, v->ctx, variant->q, 64, &v->m), 0);
	ASSERT_EQ(kt_model_gpu_upload(v->m, 0, 3), 0);
	memset(v->y, 0xff, sizeof(v->y));
	ASSERT_EQ(submit(v, NULL), 0);
	ASSERT_EQ(kt_moe_stream_sync(v->ctx, NULL), 0);
	EXPECT_LE(err_of(v, T), tol_of(variant->q));
	kt_model_destroy(v->m);
	EXPECT_EQ(unsynced_seen, 1);
	ASSERT_EQ(tm_create(&v->t, v->ctx, variant->q, 64, &v->m), 0);
}
#endif

/* Every driver call of a session with stream ops failing in turn. */
TEST_TIMEOUT(stream_fail_each_call, 300)
{
	long n, calls;

	for (n = 1; n < 5000; n++) {
		struct env v;
		int ret, r1 = 0, r2 = 0;

		ret = env_init(&v, KT_QUANT_INT8);
		if (ret == 1) {
			env_fini(&v);
			SKIP(return, "no stand-in libcuda or no GPU kernels");
		}

		/* count from here: the session's driver calls */
		v.s.set_fail_at(n);
		if (!ret) {
			r1 = kt_model_gpu_upload(v.m, 0, 2);
			r2 = submit(&v, NULL);
			if (!r2)
				r2 = kt_moe_stream_sync(v.ctx, NULL);
		}
		env_fini(&v);
		calls = v.s.calls();
		EXPECT_EQ(v.s.live(), 0);
		EXPECT_TRUE(r1 <= 0 && r1 >= -4095);
		EXPECT_TRUE(r2 <= 0 && r2 >= -4095);
		if (calls < n)
			break;
	}
	TH_LOG("%ld driver calls walked", n - 1);
	EXPECT_GT(n, 10);
}

TEST_HARNESS_MAIN
