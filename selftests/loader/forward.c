// SPDX-License-Identifier: MIT
/*
 * forward.c - the whole path a user takes: write a checkpoint, `kt convert`
 * it, `kt forward` one layer from .npy files, and compare y with an f64
 * MoE forward over the source weights (rel. MAE budgets: INT8 0.04, INT4
 * g128 0.25, BF16 0.005); `kt forward --model DIR --method M` on the folder
 * itself gives the same bits. Also kt_moe_forward() on the same model.
 */
#include <libgen.h>
#include <limits.h>
#include <sys/wait.h>

#include "kt_test.h"
#include "kt-bin.h"
#include "ckpt.h"
#include "test-ctx.h"

/* .npy v1.0, C order. */
static void npy_write(const char *path, const char *descr, uint64_t r,
		      uint64_t c, const void *data, size_t esz)
{
	char h[256];
	int n = snprintf(h, sizeof(h),
			 "{'descr': '%s', 'fortran_order': False, 'shape': (%llu, %llu), }",
			 descr, (unsigned long long)r, (unsigned long long)c);
	uint16_t hl;
	FILE *f = fopen(path, "wb");

	while ((10 + n + 1) % 64)
		h[n++] = ' ';
	h[n++] = '\n';
	hl = (uint16_t)n;
	fwrite("\x93NUMPY\x01\x00", 1, 8, f);
	fwrite(&hl, 2, 1, f);
	fwrite(h, 1, (size_t)n, f);
	fwrite(data, esz, r * c, f);
	fclose(f);
}

static float *npy_read_f32(const char *path, uint64_t *r, uint64_t *c)
{
	unsigned char pre[10];
	char h[1024];
	uint16_t hl;
	float *y;
	FILE *f = fopen(path, "rb");
	unsigned long long a, b;
	const char *p;

	if (!f)
		return NULL;
	if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY\x01", 7))
		goto bad;
	hl = (uint16_t)(pre[8] | pre[9] << 8);
	if (hl >= sizeof(h) || fread(h, 1, hl, f) != hl)
		goto bad;
	h[hl] = 0;
	if ((10 + hl) % 64 || !strstr(h, "'<f4'") || !strstr(h, "False"))
		goto bad;
	p = strstr(h, "'shape': (");
	if (!p || sscanf(p, "'shape': (%llu, %llu)", &a, &b) != 2)
		goto bad;
	*r = a;
	*c = b;
	y = malloc(a * b * 4);
	if (fread(y, 4, a * b, f) != a * b) {
		free(y);
		goto bad;
	}
	fclose(f);
	return y;
bad:
	fclose(f);
	return NULL;
}

static void end_to_end(struct kt_test_meta *_metadata, struct tck *c,
		       const char *tag, const char *method, const char *group,
		       double tol, bool bf16_x, bool i64_ids)
{
	const uint32_t T = 9, K = c->top_k;
	char d[256], ktw[300], xp[300], ip[300], wp[300], yp[300], bin[PATH_MAX];
	char layer[16];
	uint64_t seed = 99, r, cc;
	float *x, *w, *y;
	uint16_t *xb;
	int32_t *ids;
	int64_t *ids64;
	double *ref, err;
	uint32_t i, li;

	snprintf(d, sizeof(d), "/tmp/kt-fwd-%s-%d", tag, (int)getpid());
	tck_rmdir(d);
	ASSERT_EQ(tck_write(c, d), 0);
	snprintf(ktw, sizeof(ktw), "%s/m.ktw", d);
	snprintf(xp, sizeof(xp), "%s/x.npy", d);
	snprintf(ip, sizeof(ip), "%s/ids.npy", d);
	snprintf(wp, sizeof(wp), "%s/w.npy", d);
	snprintf(yp, sizeof(yp), "%s/y.npy", d);
	kt_bin(bin, sizeof(bin));
	{
		char *argv[] = { bin, "convert", "--input", d, "--output", ktw,
				 "--method", (char *)method, "--threads", "2",
				 group ? "--group-size" : NULL, (char *)group, NULL };

		ASSERT_EQ(kt_exec(argv, NULL), 0);
	}
	x = malloc((size_t)T * c->hidden * 4);
	xb = malloc((size_t)T * c->hidden * 2);
	ids = malloc((size_t)T * K * 4);
	ids64 = malloc((size_t)T * K * 8);
	w = malloc((size_t)T * K * 4);
	ref = malloc((size_t)T * c->hidden * sizeof(double));
	for (i = 0; i < T * c->hidden; i++) {
		x[i] = tck_uniform(&seed);
		xb[i] = tck_bf16(x[i]);
		if (bf16_x)
			x[i] = tck_from_bf16(xb[i]);	/* what kt sees */
	}
	for (i = 0; i < T * K; i++) {
		ids[i] = (int32_t)(tck_rand(&seed) % c->n_experts);
		ids64[i] = ids[i];
		w[i] = (tck_uniform(&seed) + 1.0f) * 0.5f;
	}
	npy_write(xp, bf16_x ? "<u2" : "<f4", T, c->hidden,
		  bf16_x ? (void *)xb : (void *)x, bf16_x ? 2 : 4);
	npy_write(ip, i64_ids ? "<i8" : "<i4", T, K,
		  i64_ids ? (void *)ids64 : (void *)ids, i64_ids ? 8 : 4);
	npy_write(wp, "<f4", T, K, w, 4);
	for (li = 0; li < c->n_moe; li++) {
		struct tck_src rs = { c, li };
		char *argv[] = { bin, "forward", "--model", ktw, "--layer", layer,
				 "--input", xp, "--ids", ip, "--weights", wp,
				 "--output", yp, "--threads", "2", NULL };

		snprintf(layer, sizeof(layer), "%d", c->moe_ids[li]);
		unlink(yp);
		ASSERT_EQ(kt_exec(argv, NULL), 0);
		y = npy_read_f32(yp, &r, &cc);
		ASSERT_TRUE(y != NULL);
		ASSERT_EQ(r, T);
		ASSERT_EQ(cc, c->hidden);
		tck_forward_ref(c->hidden, c->inter, c->n_experts, T, K, x, ids,
				w, tck_src_get, &rs, ref);
		err = tck_rel_mae(ref, y, (size_t)T * c->hidden);
		TH_LOG("%s layer %d: rel. MAE %.5f (budget %.3f)", method,
		       c->moe_ids[li], err, tol);
		EXPECT_LT(err, tol);
		/* the folder itself, packed at load: the same bits */
		{
			char *av[] = { bin, "forward", "--model", d, "--layer",
				       layer, "--input", xp, "--ids", ip,
				       "--weights", wp, "--output", yp,
				       "--threads", "2", "--method",
				       (char *)method,
				       group ? "--group-size" : NULL,
				       (char *)group, NULL };
			float *y2;

			unlink(yp);
			ASSERT_EQ(kt_exec(av, NULL), 0);
			y2 = npy_read_f32(yp, &r, &cc);
			ASSERT_TRUE(y2 != NULL);
			ASSERT_EQ(r, T);
			EXPECT_EQ(memcmp(y, y2, (size_t)T * c->hidden * 4), 0);
			free(y2);
		}
		free(y);
	}
	/* a layer that is not MoE is refused by name */
	{
		char *argv[] = { bin, "forward", "--model", ktw, "--layer", "999",
				 "--input", xp, "--ids", ip, "--weights", wp,
				 "--output", yp, NULL };

		EXPECT_NE(kt_exec(argv, NULL), 0);
	}
	free(x);
	free(xb);
	free(ids);
	free(ids64);
	free(w);
	free(ref);
	tck_free(c);
	tck_rmdir(d);
}

TEST(qwen_int8_f32x_i32)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 256, 256, 8, 2, 4, 1, 21);

	end_to_end(_metadata, &c, "q8", "int8", NULL, 0.04, false, false);
}

TEST(deepseek_fp8_int4_bf16x_i64)
{
	struct tck c = TCK(TCK_DEEPSEEK, TCK_FP8, 256, 256, 6, 2, 2, 2, 22);

	end_to_end(_metadata, &c, "d4", "int4", "128", 0.25, true, true);
}

TEST(mixtral_bf16)
{
	struct tck c = TCK(TCK_MIXTRAL, TCK_F16, 128, 384, 4, 2, 2, 3, 23);

	end_to_end(_metadata, &c, "mb", "bf16", NULL, 0.005, false, true);
}

/* The API path, and experts kept elsewhere (the GPU) are skipped. */
TEST(api_expert_mask)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 256, 4, 1, 2, 1, 24);
	char d[256], out[300];
	struct kt_convert_opts o = { .sz = sizeof(o), .output = out,
				     .quant = KT_QUANT_BF16, .layer_last = -1,
				     .threads = 2 };
	uint64_t mask = 1u << 2, seed = 5;
	struct kt_model_opts mo = { .sz = sizeof(mo), .expert_mask = &mask };
	struct kt_model_info info;
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	const uint32_t T = 5, K = 2;
	float x[5 * 128], w[5 * 2], y[5 * 128];
	int32_t ids[5 * 2], ids_ref[5 * 2];
	double ref[5 * 128];
	struct tck_src rs = { &c, 0 };
	uint32_t i;

	snprintf(d, sizeof(d), "/tmp/kt-fwd-api-%d", (int)getpid());
	tck_rmdir(d);
	ASSERT_EQ(tck_write(&c, d), 0);
	o.input = d;
	snprintf(out, sizeof(out), "%s/m.ktw", d);
	ASSERT_EQ(kt_convert(&o), 0);
	ASSERT_EQ(test_ctx(&ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, out, &mo, &m), 0);
	kt_model_get_info(m, &info);
	ASSERT_EQ(info.resident_bytes, 3 * info.expert_bytes);
	for (i = 0; i < T * 128; i++)
		x[i] = tck_uniform(&seed);
	for (i = 0; i < T * K; i++) {
		ids[i] = (int32_t)(i % 4);
		/* the masked expert contributes nothing */
		ids_ref[i] = ids[i] == 2 ? -1 : ids[i];
		w[i] = 0.5f;
	}
	{
		struct kt_moe_args a = { .x = x, .ids = ids, .w = w, .y = y,
					 .tokens = T, .top_k = K, .layer = 0,
					 .x_dtype = KT_DTYPE_F32,
					 .ids_dtype = KT_DTYPE_I32,
					 .y_dtype = KT_DTYPE_F32 };

		ASSERT_EQ(kt_moe_forward(ctx, m, &a), 0);
	}
	tck_forward_ref(128, 256, 4, T, K, x, ids_ref, w, tck_src_get, &rs, ref);
	TH_LOG("rel. MAE %.5f", tck_rel_mae(ref, y, T * 128));
	EXPECT_LT(tck_rel_mae(ref, y, T * 128), 0.005);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	tck_free(&c);
	tck_rmdir(d);
}

/* Raw .npy with a given version and header text, for the format cases. */
static void npy_raw(const char *path, int version, const char *dict,
		    const void *data, size_t bytes)
{
	char h[256];
	int n = snprintf(h, sizeof(h), "%s", dict), pre = version == 1 ? 10 : 12;
	FILE *f = fopen(path, "wb");
	uint32_t hl;

	while ((pre + n + 1) % 64)
		h[n++] = ' ';
	h[n++] = '\n';
	hl = (uint32_t)n;
	fwrite("\x93NUMPY", 1, 6, f);
	fputc(version, f);
	fputc(0, f);
	fwrite(&hl, version == 1 ? 2 : 4, 1, f);
	fwrite(h, 1, (size_t)n, f);
	fwrite(data, 1, bytes, f);
	fclose(f);
}

TEST(npy_formats)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 2, 1, 1, 1, 25);
	char d[256], ktw[300], xp[300], ip[300], wp[300], yp[300], bin[PATH_MAX];
	char *argv[] = { bin, "forward", "--model", ktw, "--layer", "0",
			 "--input", xp, "--ids", ip, "--weights", wp,
			 "--output", yp, NULL };
	float x[2 * 128] = { 0.5f }, w[2] = { 1, 1 };
	int32_t ids[2] = { 0, 1 };
	uint64_t r, cc;
	float *y;

	snprintf(d, sizeof(d), "/tmp/kt-fwd-npy-%d", (int)getpid());
	tck_rmdir(d);
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(ktw, sizeof(ktw), "%s/m.ktw", d);
	snprintf(xp, sizeof(xp), "%s/x.npy", d);
	snprintf(ip, sizeof(ip), "%s/ids.npy", d);
	snprintf(wp, sizeof(wp), "%s/w.npy", d);
	snprintf(yp, sizeof(yp), "%s/y.npy", d);
	kt_bin(bin, sizeof(bin));
	{
		char *cv[] = { bin, "convert", "--input", d, "--output", ktw,
			       "--method", "bf16", NULL };

		ASSERT_EQ(kt_exec(cv, NULL), 0);
	}
	/* version 2.0 headers, shapes with a trailing comma */
	npy_raw(xp, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 128,), }",
		x, sizeof(x));
	npy_raw(ip, 2, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 1), }",
		ids, sizeof(ids));
	npy_raw(wp, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }",
		w, sizeof(w));
	ASSERT_EQ(kt_exec(argv, NULL), 0);
	y = npy_read_f32(yp, &r, &cc);
	ASSERT_TRUE(y != NULL);
	EXPECT_EQ(r, 2u);
	EXPECT_EQ(cc, 128u);
	free(y);
	/* Fortran order, wrong dtype, short data, garbage: refused */
	npy_raw(xp, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 128), }",
		x, sizeof(x));
	EXPECT_NE(kt_exec(argv, NULL), 0);
	npy_raw(xp, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 128), }",
		x, sizeof(x));
	EXPECT_NE(kt_exec(argv, NULL), 0);
	npy_raw(xp, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 128), }",
		x, sizeof(x) / 2);
	EXPECT_NE(kt_exec(argv, NULL), 0);
	npy_raw(xp, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 99999999999999999999), }",
		x, sizeof(x));
	EXPECT_NE(kt_exec(argv, NULL), 0);
	npy_raw(xp, 3, "garbage", x, 8);
	EXPECT_NE(kt_exec(argv, NULL), 0);
	/* ids rows must match x rows */
	npy_raw(xp, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 128), }",
		x, sizeof(x) / 2);
	EXPECT_NE(kt_exec(argv, NULL), 0);
	tck_free(&c);
	tck_rmdir(d);
}

TEST_HARNESS_MAIN
