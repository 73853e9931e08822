// SPDX-License-Identifier: MIT
/*
 * ffn.c - the expert kernels on a real GPU against the f64 reference at
 * the CPU tolerances: every quantization, decode (GEMV) and prefill (mma)
 * token counts, bf16 and f32 activations, a mixed op, device pointers.
 * Skips, saying why, where no GPU or no kernels are present.
 */
#include <errno.h>

#include <kt/kt.h>

#include "kt_test.h"
#include "gpu/cu.h"
#include "../moe/model.h"

#define H 256
#define I 512
#define E 16
#define K 4

/*
 * The CPU's tolerances, BF16 a little wider: one token is 256 outputs, and
 * with activations rounded to bf16 (the tensor cores, the CPU's BF16
 * kernels) the T = 1 case below is 0.0052 on the CPU itself.
 */
static double tol_of(enum kt_quant q)
{
	return q == KT_QUANT_INT8 ? 0.04 : q == KT_QUANT_INT4 ? 0.25 : 0.0075;
}

FIXTURE(dev) {
	struct kt_ctx *ctx;
	struct tmodel t;
	struct kt_model *m;
};

FIXTURE_VARIANT(dev) {
	enum kt_quant q;
};

FIXTURE_VARIANT_ADD(dev, int8) { .q = KT_QUANT_INT8 };
FIXTURE_VARIANT_ADD(dev, int4) { .q = KT_QUANT_INT4 };
FIXTURE_VARIANT_ADD(dev, bf16) { .q = KT_QUANT_BF16 };

FIXTURE_SETUP(dev)
{
	struct kt_ctx_opts o = {
		.sz = sizeof(o), .threads = 2, .gpu_mask = 1,
		.spin_us = KT_CTX_SPIN_NONE,
	};
	struct kt_gpu_info gi;
	struct kt_sysinfo si;
	int ret;

	kt_sysinfo_get(&si);
	if (!si.cuda_driver || !si.cuda_devices)
		SKIP(return, "no GPU: %s", si.cuda_why);
	ret = kt_ctx_create(&o, &self->ctx);
	ASSERT_EQ(ret, 0);
	ASSERT_EQ(kt_ctx_gpu_info(self->ctx, &gi), 0);
	if (!gi.kernels)
		SKIP(return, "no kernels: %s", gi.why);
	TH_LOG("%s sm_%d%d", gi.name, gi.cc_major, gi.cc_minor);
	tm_init(&self->t, H, I, E, 1, KT_DTYPE_F32, 99);
	ASSERT_EQ(tm_create(&self->t, self->ctx, variant->q, 64, &self->m), 0);
}

FIXTURE_TEARDOWN(dev)
{
	kt_model_destroy(self->m);
	kt_ctx_destroy(self->ctx);
	if (self->t.w)
		tm_free(&self->t);
}

/* Run T tokens (x f32 or bf16, y f32) and return rel MAE to the reference. */
static double run(struct kt_test_meta *_metadata, FIXTURE_DATA(dev) *self,
		  unsigned int T, bool xbf16, uint64_t seed)
{
	struct tu_rng r = { seed };
	size_t n = (size_t)T * H, i;
	float *x = malloc(n * 4), *w = malloc((size_t)T * K * 4);
	float *y = malloc(n * 4);
	uint16_t *xb = malloc(n * 2);
	int64_t *ids = malloc((size_t)T * K * 8);
	double *ref = calloc(n, sizeof(double)), *got = malloc(n * 8), e;
	struct kt_moe_args a = {
		.ids = ids, .w = w, .y = y, .tokens = T, .top_k = K,
		.x_dtype = xbf16 ? KT_DTYPE_BF16 : KT_DTYPE_F32,
		.ids_dtype = KT_DTYPE_I64, .y_dtype = KT_DTYPE_F32,
	};
	unsigned int t, j;

	tu_fill_normal(&r, x, n, 1.0);
	for (i = 0; i < n; i++) {
		xb[i] = kern_f32_to_bf16(x[i]);
		if (xbf16)
			x[i] = kern_bf16_to_f32(xb[i]);
	}
	for (t = 0; t < T; t++)
		for (j = 0; j < K; j++) {
			/* skewed: low experts get many tokens (mma tiles) */
			ids[t * K + j] = (int64_t)((j * 5 + (tu_next(&r) %
						   (j ? E : 3))) % E);
			w[t * K + j] = (float)tu_unif(&r);
		}
	a.x = xbf16 ? (const void *)xb : x;
	e = -1;
	if (kt_moe_forward(self->ctx, self->m, &a) == 0) {
		tm_reference(&self->t, 0, x, ids, w, T, K, NULL, ref);
		for (i = 0; i < n; i++)
			got[i] = y[i];
		e = tu_rel_mae(got, ref, n);
	}
	free(x);
	free(w);
	free(y);
	free(xb);
	free(ids);
	free(ref);
	free(got);
	return e;
}

TEST_F(dev, gpu_only)
{
	/* 20: more than 8 slots of an expert, fewer than the mma tiles take */
	static const unsigned int Ts[] = { 1, 3, 8, 20, 64, 300 };
	unsigned int i, e;

	for (e = 0; e < E; e++)
		ASSERT_EQ(kt_model_gpu_upload(self->m, 0, e), 0);
	for (i = 0; i < 6; i++) {
		double err = run(_metadata, self, Ts[i], i % 2, 5 + i);

		TH_LOG("T=%u x %s rel MAE %.4f", Ts[i], i % 2 ? "bf16" : "f32",
		       err);
		ASSERT_GE(err, 0);
		EXPECT_LE(err, tol_of(variant->q));
	}
}

TEST_F(dev, mixed_half)
{
	static const unsigned int Ts[] = { 1, 40, 200 };
	unsigned int i, e;

	for (e = 0; e < E; e += 2)
		ASSERT_EQ(kt_model_gpu_upload(self->m, 0, e), 0);
	for (i = 0; i < 3; i++) {
		double err = run(_metadata, self, Ts[i], false, 17 + i);

		TH_LOG("T=%u rel MAE %.4f", Ts[i], err);
		ASSERT_GE(err, 0);
		EXPECT_LE(err, tol_of(variant->q));
	}
}

/* y in bf16 of an op the GPU runs whole (converted on the device): the
 * bits of the f32 y rounded on the host */
TEST_F(dev, gpu_only_bf16_y)
{
	const unsigned int T = 40;
	struct tu_rng r = { 11 };
	size_t n = (size_t)T * H, i;
	float *x = malloc(n * 4), *w = malloc(T * K * 4), *y = malloc(n * 4);
	uint16_t *yb = malloc(n * 2);
	int64_t *ids = malloc(T * K * 8);
	struct kt_moe_args a = {
		.x = x, .ids = ids, .w = w, .y = y, .tokens = T, .top_k = K,
		.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I64,
		.y_dtype = KT_DTYPE_F32,
	};
	unsigned int e;

	for (e = 0; e < E; e++)
		ASSERT_EQ(kt_model_gpu_upload(self->m, 0, e), 0);
	tu_fill_normal(&r, x, n, 1.0);
	for (i = 0; i < T * K; i++) {
		ids[i] = (int64_t)((i % K) * 3 + tu_next(&r) % 3) % E;
		w[i] = (float)tu_unif(&r);
	}
	ASSERT_EQ(kt_moe_forward(self->ctx, self->m, &a), 0);
	a.y = yb;
	a.y_dtype = KT_DTYPE_BF16;
	ASSERT_EQ(kt_moe_forward(self->ctx, self->m, &a), 0);
	for (i = 0; i < n; i++)
		if (yb[i] != kern_f32_to_bf16(y[i]))
			break;
	if (i < n)
		TH_LOG("y[%zu] 0x%04x, f32 %g", i, yb[i], y[i]);
	EXPECT_EQ(i, n);
	free(x); free(w); free(y); free(yb); free(ids);
}

/* x, ids, w, y in device memory (KT_MOE_F_DEVICE), through the driver */
TEST_F(dev, device_pointers)
{
	const unsigned int T = 24;
	struct tu_rng r = { 3 };
	size_t n = (size_t)T * H, i;
	float *x = malloc(n * 4), *w = malloc(T * K * 4), *y = malloc(n * 4);
	int32_t *ids = malloc(T * K * 4);
	int64_t *ids64 = malloc(T * K * 8);
	double *ref = calloc(n, 8), *got = malloc(n * 8);
	CUdeviceptr dx, dids, dw, dy;
	struct gpu_cu cu;
	CUcontext c, old;
	CUdevice d;
	char why[160];
	unsigned int e;

	for (e = 1; e < E; e += 3)
		ASSERT_EQ(kt_model_gpu_upload(self->m, 0, e), 0);
	tu_fill_normal(&r, x, n, 1.0);
	for (i = 0; i < T * K; i++) {
		ids[i] = (int32_t)(tu_next(&r) % E);
		ids64[i] = ids[i];
		w[i] = (float)tu_unif(&r);
	}
	ASSERT_EQ(gpu_cu_load(&cu, why, sizeof(why)), 0);
	ASSERT_EQ(cu.device_get(&d, 0), 0);
	ASSERT_EQ(cu.primary_ctx_retain(&c, d), 0);
	ASSERT_EQ(cu.ctx_push(c), 0);
	ASSERT_EQ(cu.mem_alloc(&dx, n * 4), 0);
	ASSERT_EQ(cu.mem_alloc(&dy, n * 4), 0);
	ASSERT_EQ(cu.mem_alloc(&dids, T * K * 4), 0);
	ASSERT_EQ(cu.mem_alloc(&dw, T * K * 4), 0);
	ASSERT_EQ(cu.memcpy_htod(dx, x, n * 4), 0);
	ASSERT_EQ(cu.memcpy_htod(dids, ids, T * K * 4), 0);
	ASSERT_EQ(cu.memcpy_htod(dw, w, T * K * 4), 0);
	{
		struct kt_moe_args a = {
			.x = (void *)(uintptr_t)dx,
			.ids = (void *)(uintptr_t)dids,
			.w = (float *)(uintptr_t)dw,
			.y = (void *)(uintptr_t)dy, .tokens = T, .top_k = K,
			.flags = KT_MOE_F_DEVICE, .x_dtype = KT_DTYPE_F32,
			.ids_dtype = KT_DTYPE_I32, .y_dtype = KT_DTYPE_F32,
		};

		ASSERT_EQ(kt_moe_forward(self->ctx, self->m, &a), 0);
	}
	ASSERT_EQ(cu.memcpy_dtoh(y, dy, n * 4), 0);
	tm_reference(&self->t, 0, x, ids64, w, T, K, NULL, ref);
	for (i = 0; i < n; i++)
		got[i] = y[i];
	EXPECT_LE(tu_rel_mae(got, ref, n), tol_of(variant->q));
	cu.mem_free(dx);
	cu.mem_free(dy);
	cu.mem_free(dids);
	cu.mem_free(dw);
	cu.ctx_pop(&old);
	cu.primary_ctx_release(d);
	gpu_cu_unload(&cu);
	free(x); free(w); free(y); free(ids); free(ids64); free(ref); free(got);
}

TEST_HARNESS_MAIN
