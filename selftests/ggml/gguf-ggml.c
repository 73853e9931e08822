// SPDX-License-Identifier: MIT
/*
 * gguf-ggml.c - kt against llama.cpp's own ggml: qwen3moe GGUF files of
 * each expert type written by ggml's quantizers and gguf writer, or by
 * llama.cpp's own quantizer (llama_model_quantize, what llama-quantize
 * runs) from an F32 file with its per-layer type rules, run with
 * kt_model_open() + kt_moe_forward() on every kernel variant the CPU has,
 * and compared with the same MoE layers computed by ggml's CPU graph
 * (selftests/ggml/ggml-dl.h). Skips when the libraries are not there
 * (scripts/fetch-ggml.sh). Documentation/formats.md, "ggml cross-check".
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kt/kt.h>
#include "kt_logged.h"
#include "kt_test.h"
#include "ggml-dl.h"
#include "../loader/kt-bin.h"

#define HID	512
#define INTER	256
#define NEXP	8
#define TOPK	2
#define NLAY	2
#define NT	2
static const uint32_t tokens[NT] = { 1, 37 };
#define TMAX	37
/* rel. MAE of kt against ggml where both round activations alike */
#define TOL	1e-3

/*
 * @ftype 0: ggml_quantize_chunk() writes @type and @type_down. Otherwise
 * the llama_ftype llama.cpp's quantizer is asked for, and the types it is
 * expected to choose: @type_down in layer 0, @type_down_last in the last.
 */
struct xcase {
	int type, type_down;
	enum kt_quant want, want_down;
	int ftype, type_down_last;
};

/*
 * Inputs for one token count and ggml's outputs for each layer:
 * yq  the file's blocks as ggml runs them (activations quantized to the
 *     type's vec_dot type: Q8_0 per 32, Q8_K per 256, bf16, f16);
 * yr  the same with the activations rounded by kt's rule where it is not
 *     ggml's (formats.md, "Types"): the down input of K-quants per 128
 *     values, Q4_0's x per row and its down input per 128 (f32 scales
 *     amax / 127), F16 held as BF16;
 * yx  the weights dequantized by ggml to f32, f32 activations: the exact
 *     layer of the file's weights.
 */
struct io {
	uint32_t T;
	float x[TMAX * HID], w[TMAX * TOPK];
	int32_t ids[TMAX * TOPK];
	float yq[NLAY][TMAX * HID], yr[NLAY][TMAX * HID];
	float yx[NLAY][TMAX * HID];
};

static double rel_mae(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		num += fabs((double)a[i] - b[i]);
		den += fabs((double)b[i]);
	}
	return den > 0 ? num / den : INFINITY;
}

static void make_inputs(struct io *io, uint32_t T, uint64_t seed)
{
	uint64_t s = seed;
	uint32_t t, i;

	io->T = T;
	for (i = 0; i < T * HID; i++)
		io->x[i] = gg_uniform(&s);
	for (t = 0; t < T; t++) {
		/* two distinct experts per token, random weights */
		int32_t e0 = (int32_t)(gg_rand(&s) % NEXP);

		io->ids[t * TOPK] = e0;
		io->ids[t * TOPK + 1] = (int32_t)((e0 + 1 + gg_rand(&s) %
						   (NEXP - 1)) % NEXP);
		for (i = 0; i < TOPK; i++)
			io->w[t * TOPK + i] = 0.25f +
				(float)(gg_rand(&s) % 1000) / 1000.0f;
	}
}

/* kt's int8 rule per @grp values: q = rint(v * 127 / amax), q * amax/127 */
static void kt_act_rule(float *v, size_t n, size_t grp)
{
	size_t i, j;

	for (i = 0; i < n; i += grp) {
		float amax = 0, inv, sc;

		for (j = 0; j < grp; j++)
			amax = fmaxf(amax, fabsf(v[i + j]));
		inv = amax > 0 ? 127.0f / amax : 0;
		sc = amax / 127.0f;
		for (j = 0; j < grp; j++)
			v[i + j] = rintf(v[i + j] * inv) * sc;
	}
}

static bool is_k_quant(int type)
{
	return type == GG_Q4_K || type == GG_Q5_K || type == GG_Q6_K;
}

/* gate/up [H, I, E] or down [I, H, E] of any type as f32, by ggml */
static struct ggml_tensor *dequant(const struct gg *g, struct ggml_context *c,
				   struct ggml_tensor *m, int64_t k,
				   int64_t n, struct ggml_tensor *rows)
{
	return g->reshape_3d(c, g->get_rows(c, g->reshape_2d(c, m, k,
							     n * NEXP),
					    rows), k, n, NEXP);
}

/* the matrix as kt holds it, for yr: F16 rounded to BF16 by ggml */
static struct ggml_tensor *as_kt(const struct gg *g, struct ggml_context *c,
				 struct ggml_tensor *m, int type, int64_t k,
				 int64_t n)
{
	if (type != GG_F16)
		return m;
	return g->cpy(c, m, g->new_tensor_3d(c, GG_BF16, k, n, NEXP));
}

static int compute(const struct gg *g, struct ggml_context *ctx,
		   struct ggml_backend *be, struct ggml_tensor **out,
		   unsigned int n)
{
	struct ggml_cgraph *graph = g->new_graph_custom(ctx, 4096, false);
	unsigned int i;

	for (i = 0; i < n; i++)
		g->build_forward_expand(graph, out[i]);
	return g->backend_graph_compute(be, graph) ? -EIO : 0; /* SUCCESS */
}

/* ggml's three results for every layer of @path and each io */
static int ggml_reference(const struct gg *g, const char *path, int type,
			  int type_down, struct io *ios)
{
	/* kt's rule for the down input where it is not ggml's */
	bool down_rule = is_k_quant(type_down) || type_down == GG_Q4_0;
	struct ggml_context *wctx = NULL, *ctx;
	struct gg_gguf_init_params gp = { false, &wctx };
	struct gguf_context *gf = g->gguf_init_from_file(path, gp);
	size_t mem = (size_t)NLAY * 6 * HID * INTER * NEXP * 4 +
		     (size_t)NT * NLAY * 3 * 16 * (HID + INTER) * TOPK * TMAX * 4 +
		     (64u << 20);
	struct gg_init_params ip = { mem, NULL, false };
	struct ggml_tensor *out[3 * NT * NLAY], *par[NT][NLAY];
	struct ggml_tensor *ids[NT], *w[NT], *rows_i, *rows_h, *m[NLAY][3];
	struct ggml_backend *be = NULL;
	unsigned int l, n, i, no = 0;
	int ret = -EIO;

	if (!gf)
		return -EIO;
	ctx = g->init(ip);
	be = g->backend_cpu_init();
	if (!ctx || !be)
		goto out;
	g->backend_cpu_set_n_threads(be, 2);
	rows_i = g->new_tensor_1d(ctx, GG_I32, INTER * NEXP);
	rows_h = g->new_tensor_1d(ctx, GG_I32, HID * NEXP);
	for (i = 0; i < INTER * NEXP; i++)
		((int32_t *)g->get_data(rows_i))[i] = (int32_t)i;
	for (i = 0; i < HID * NEXP; i++)
		((int32_t *)g->get_data(rows_h))[i] = (int32_t)i;
	for (l = 0; l < NLAY; l++)
		for (i = 0; i < 3; i++) {
			static const char *const nm[3] = { "gate", "up",
							   "down" };
			char name[64];

			snprintf(name, sizeof(name), "blk.%u.ffn_%s_exps.weight",
				 l, nm[i]);
			m[l][i] = g->get_tensor(wctx, name);
			if (!m[l][i])
				goto out;
		}
	for (n = 0; n < NT; n++) {
		uint32_t T = ios[n].T;
		struct ggml_tensor *x = g->new_tensor_2d(ctx, GG_F32, HID, T);
		struct ggml_tensor *xr = x;

		ids[n] = g->new_tensor_2d(ctx, GG_I32, TOPK, T);
		w[n] = g->new_tensor_2d(ctx, GG_F32, TOPK, T);
		memcpy(g->get_data(x), ios[n].x, (size_t)T * HID * 4);
		memcpy(g->get_data(ids[n]), ios[n].ids, (size_t)T * TOPK * 4);
		memcpy(g->get_data(w[n]), ios[n].w, (size_t)T * TOPK * 4);
		if (type == GG_Q4_0) {
			/* kt's INT4 rule: x per row of H */
			xr = g->new_tensor_2d(ctx, GG_F32, HID, T);
			memcpy(g->get_data(xr), ios[n].x, (size_t)T * HID * 4);
			kt_act_rule(g->get_data(xr), (size_t)T * HID, HID);
		}
		for (l = 0; l < NLAY; l++) {
			struct ggml_tensor *gr = as_kt(g, ctx, m[l][0], type,
						       HID, INTER);
			struct ggml_tensor *ur = as_kt(g, ctx, m[l][1], type,
						       HID, INTER);

			if (type == GG_Q4_0) {
				/* f32 weights: ggml leaves xr as it is */
				gr = dequant(g, ctx, m[l][0], HID, INTER,
					     rows_i);
				ur = dequant(g, ctx, m[l][1], HID, INTER,
					     rows_i);
			}
			out[no++] = gg_moe_layer(g, ctx, m[l][0], m[l][1],
						 m[l][2], x, ids[n], w[n], HID,
						 TOPK, T);
			out[no++] = gg_moe_layer(g, ctx,
				dequant(g, ctx, m[l][0], HID, INTER, rows_i),
				dequant(g, ctx, m[l][1], HID, INTER, rows_i),
				dequant(g, ctx, m[l][2], INTER, HID, rows_h),
				x, ids[n], w[n], HID, TOPK, T);
			if (down_rule)
				out[no++] = par[n][l] = gg_moe_par(g, ctx, gr,
						ur, xr, ids[n], HID, T);
			else
				out[no++] = gg_moe_layer(g, ctx, gr, ur,
					as_kt(g, ctx, m[l][2], type_down,
					      INTER, HID),
					xr, ids[n], w[n], HID, TOPK, T);
		}
	}
	if (compute(g, ctx, be, out, no))
		goto out;
	/* the down input quantized by kt's rule, then f32 down weights */
	if (down_rule) {
		struct ggml_tensor *yr[NT * NLAY];
		unsigned int nr = 0;

		for (n = 0; n < NT; n++)
			for (l = 0; l < NLAY; l++) {
				uint32_t T = ios[n].T;
				struct ggml_tensor *pq = g->new_tensor_3d(ctx,
						GG_F32, INTER, TOPK, T);

				memcpy(g->get_data(pq),
				       g->get_data(par[n][l]),
				       (size_t)INTER * TOPK * T * 4);
				kt_act_rule(g->get_data(pq),
					    (size_t)INTER * TOPK * T, 128);
				yr[nr++] = out[(n * NLAY + l) * 3 + 2] =
					gg_moe_down(g, ctx,
						dequant(g, ctx, m[l][2], INTER,
							HID, rows_h),
						pq, ids[n], w[n], HID, TOPK,
						T);
			}
		if (compute(g, ctx, be, yr, nr))
			goto out;
	}
	for (n = 0, no = 0; n < NT; n++)
		for (l = 0; l < NLAY; l++) {
			size_t sz = (size_t)ios[n].T * HID * 4;

			memcpy(ios[n].yq[l], g->get_data(out[no++]), sz);
			memcpy(ios[n].yx[l], g->get_data(out[no++]), sz);
			memcpy(ios[n].yr[l], g->get_data(out[no++]), sz);
		}
	ret = 0;
out:
	if (be)
		g->backend_free(be);
	if (ctx)
		g->free(ctx);
	if (wctx)
		g->free(wctx);
	g->gguf_free(gf);
	return ret;
}

static const enum kt_isa isas[] = {
	KT_ISA_SCALAR, KT_ISA_AVX2, KT_ISA_AVX_VNNI, KT_ISA_AVX512BW,
	KT_ISA_AVX512VNNI, KT_ISA_AVX512, KT_ISA_AMX, KT_ISA_AUTO,
};

static int kt_forward(struct kt_ctx *ctx, struct kt_model *m,
		      const struct io *io, uint32_t layer, float *y)
{
	struct kt_moe_args a = {
		.x = io->x, .ids = io->ids, .w = io->w, .y = y,
		.tokens = io->T, .top_k = TOPK, .layer = layer,
		.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I32,
		.y_dtype = KT_DTYPE_F32,
	};

	return kt_moe_forward(ctx, m, &a);
}

/* `kt convert` of the ggml-written file: the .ktw gives the same bits */
static void convert_same(struct kt_test_meta *_metadata, const char *path,
			 const struct io *ios)
{
	char kt[PATH_MAX], out[PATH_MAX], log[PATH_MAX];
	char *argv[] = { kt, "convert", "--input", (char *)path, "--output",
			 out, NULL };
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 2,
				 .flags = KT_CTX_F_NO_PIN };
	static float y1[TMAX * HID], y2[TMAX * HID];
	struct kt_model *mg, *mk;
	struct kt_ctx *ctx;
	uint32_t n, l;
	int rc;

	kt_bin(kt, sizeof(kt));
	if (access(kt, X_OK))
		SKIP(return, "no kt command at %.200s (make builds it)", kt);
	snprintf(out, sizeof(out), "%s.ktw", path);
	snprintf(log, sizeof(log), "%s.log", path);
	rc = kt_exec(argv, log);
	if (rc) {
		char line[256];
		FILE *f = fopen(log, "r");

		while (f && fgets(line, sizeof(line), f))
			TH_LOG("kt convert: %s", strtok(line, "\n"));
		if (f)
			fclose(f);
	}
	unlink(log);
	ASSERT_EQ(rc, 0);
	ASSERT_EQ(kt_ctx_create(&o, &ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, path, NULL, &mg), 0);
	ASSERT_EQ(kt_logged(kt_model_open(ctx, out, NULL, &mk)), 0);
	for (n = 0; n < NT; n++)
		for (l = 0; l < NLAY; l++) {
			ASSERT_EQ(kt_forward(ctx, mg, &ios[n], l, y1), 0);
			ASSERT_EQ(kt_forward(ctx, mk, &ios[n], l, y2), 0);
			EXPECT_EQ(memcmp(y1, y2, (size_t)ios[n].T * HID * 4), 0);
		}
	kt_model_destroy(mk);
	kt_model_destroy(mg);
	kt_ctx_destroy(ctx);
	unlink(out);
}

/*
 * @path: llama.cpp's quantizer run on an F32 file of the layers @c
 * describes, then the tensor types it chose checked against @xc.
 */
static int llama_quantized(struct kt_test_meta *_metadata,
			   const struct gg *g, const struct gg_moe_cfg *c,
			   const struct xcase *xc, const char *path, char *why,
			   size_t n)
{
	struct gg_moe_cfg f32 = *c;
	struct ggml_context *wctx = NULL;
	struct gg_gguf_init_params gp = { true, &wctx };
	struct gguf_context *gf;
	char src[PATH_MAX];
	unsigned int l, i;
	int rc;

	f32.type = f32.type_down = GG_F32;
	f32.llama_keys = true;
	snprintf(src, sizeof(src), "%s.f32", path);
	rc = gg_write_moe(g, &f32, src);
	if (!rc)
		rc = gg_llama_quantize(g, src, path, xc->ftype, why, n);
	unlink(src);
	if (rc)
		return rc;
	gf = g->gguf_init_from_file(path, gp);
	if (!gf)
		return -EIO;
	for (l = 0; l < NLAY; l++)
		for (i = 0; i < 3; i++) {
			static const char *const nm[3] = { "gate", "up",
							   "down" };
			int want = i < 2 ? xc->type :
				   l + 1 < NLAY ? xc->type_down :
				   xc->type_down_last;
			char name[64];
			int64_t t;

			snprintf(name, sizeof(name), "blk.%u.ffn_%s_exps.weight",
				 l, nm[i]);
			t = g->gguf_find_tensor(gf, name);
			EXPECT_GE(t, 0);
			if (t >= 0)
				EXPECT_EQ(g->gguf_get_tensor_type(gf, t), want);
		}
	TH_LOG("llama_model_quantize ftype %d: gate/up %s, down %s to %s",
	       xc->ftype, g->type_name(xc->type), g->type_name(xc->type_down),
	       g->type_name(xc->type_down_last));
	if (wctx)
		g->free(wctx);
	g->gguf_free(gf);
	return 0;
}

static void cross_check(struct kt_test_meta *_metadata, const struct xcase *xc)
{
	const struct gg_moe_cfg c = {
		.H = HID, .I = INTER, .E = NEXP, .k = TOPK, .L = NLAY,
		.type = xc->type, .type_down = xc->type_down,
		.seed = (uint64_t)xc->type * 31 + (uint64_t)xc->type_down,
	};
	static struct io ios[NT];
	static float y[TMAX * HID];
	/* kt rounds activations as ggml does: Q8_0 and BF16 throughout */
	bool same = (xc->type == GG_Q8_0 || xc->type == GG_BF16) &&
		    xc->type_down == xc->type;
	double worst_q = 0, worst_r = 0, worst_x = 0, ggml_x = 0;
	struct gg g;
	char why[PATH_MAX], path[64];
	unsigned int i, n, l, tested = 0;

	if (gg_open(&g, why, sizeof(why)))
		SKIP(return, "%.250s", why);
	snprintf(path, sizeof(path), "/tmp/kt-ggml-%d-%s-%s.gguf",
		 (int)getpid(), g.type_name(xc->type),
		 g.type_name(xc->type_down));
	if (xc->ftype) {
		int rc = llama_quantized(_metadata, &g, &c, xc, path, why,
					 sizeof(why));

		if (rc == -ENOENT)
			SKIP(return, "%.250s", why);
		ASSERT_EQ(rc, 0);
	} else {
		ASSERT_EQ(gg_write_moe(&g, &c, path), 0);
	}
	for (n = 0; n < NT; n++)
		make_inputs(&ios[n], tokens[n], 1000 + n);
	ASSERT_EQ(ggml_reference(&g, path, xc->type, xc->type_down, ios), 0);
	for (n = 0; n < NT; n++)
		for (l = 0; l < NLAY; l++)
			ggml_x = fmax(ggml_x, rel_mae(ios[n].yq[l],
						      ios[n].yx[l],
						      (size_t)ios[n].T * HID));
	TH_LOG("ggml %s (%s, cpu %s)", g.version(), g.commit(), g.cpu_name);
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
		EXPECT_EQ(info.quant, xc->want);
		EXPECT_EQ(info.down_quant, (uint32_t)xc->want_down);
		EXPECT_EQ(info.hidden, (uint32_t)HID);
		EXPECT_EQ(info.inter, (uint32_t)INTER);
		EXPECT_EQ(info.n_experts, (uint32_t)NEXP);
		EXPECT_EQ(info.n_layers, (uint32_t)NLAY);
		for (n = 0; n < NT; n++)
			for (l = 0; l < NLAY; l++) {
				size_t cnt = (size_t)ios[n].T * HID;
				double eq, er, ex;

				ASSERT_EQ(kt_forward(ctx, m, &ios[n], l, y), 0);
				eq = rel_mae(y, ios[n].yq[l], cnt);
				er = rel_mae(y, ios[n].yr[l], cnt);
				ex = rel_mae(y, ios[n].yx[l], cnt);
				TH_LOG("%s %s/%s T=%u layer %u: kt vs ggml %.2e, vs ggml with kt's rounding %.2e (bound %.0e), vs f32 %.2e",
				       kt_isa_name(kt_ctx_isa(ctx)),
				       g.type_name(xc->type),
				       g.type_name(xc->type_down), ios[n].T,
				       l, eq, er, TOL, ex);
				EXPECT_LT(er, TOL);
				if (same)
					EXPECT_LT(eq, TOL);
				worst_q = fmax(worst_q, eq);
				worst_r = fmax(worst_r, er);
				worst_x = fmax(worst_x, ex);
			}
		tested++;
		kt_model_destroy(m);
		kt_ctx_destroy(ctx);
	}
	EXPECT_GT(tested, 0u);
	TH_LOG("%s/%s worst: kt vs ggml %.2e, vs ggml with kt's rounding %.2e, vs f32 %.2e; ggml vs f32 %.2e",
	       g.type_name(xc->type), g.type_name(xc->type_down), worst_q,
	       worst_r, worst_x, ggml_x);
	if (xc->ftype && xc->type_down_last != xc->type_down)
		TH_LOG("kt convert: not for down types that vary by layer");
	else
		convert_same(_metadata, path, ios);
	unlink(path);
}

#define XTEST(name, t, td, q, qd)					\
	TEST(name)							\
	{								\
		static const struct xcase xc = { t, td, q, qd, 0, td };	\
									\
		cross_check(_metadata, &xc);				\
	}

XTEST(q8_0, GG_Q8_0, GG_Q8_0, KT_QUANT_Q8_0, KT_QUANT_Q8_0)
XTEST(q4_0, GG_Q4_0, GG_Q4_0, KT_QUANT_INT4, KT_QUANT_INT4)
XTEST(q4_k, GG_Q4_K, GG_Q4_K, KT_QUANT_Q4_K, KT_QUANT_Q4_K)
XTEST(q5_k, GG_Q5_K, GG_Q5_K, KT_QUANT_Q5_K, KT_QUANT_Q5_K)
XTEST(q6_k, GG_Q6_K, GG_Q6_K, KT_QUANT_Q6_K, KT_QUANT_Q6_K)
XTEST(bf16, GG_BF16, GG_BF16, KT_QUANT_BF16, KT_QUANT_BF16)
XTEST(f16, GG_F16, GG_F16, KT_QUANT_BF16, KT_QUANT_BF16)
/* Q4_K_M and Q5_K_M as llama.cpp writes their experts */
XTEST(q4_k_m, GG_Q4_K, GG_Q6_K, KT_QUANT_Q4_K, KT_QUANT_Q6_K)
XTEST(q5_k_m, GG_Q5_K, GG_Q6_K, KT_QUANT_Q5_K, KT_QUANT_Q6_K)

/*
 * Files llama.cpp's quantizer writes (llama-quantize's type names). With
 * two layers, its use_more_bits() gives layer 1 a Q6_K down in Q4_K_M and
 * Q5_K_M: the down type varies by layer as in downloaded files.
 */
#define LTEST(name, ftype, t, td, tdl, q, qd)				\
	TEST(llama_quantize_##name)					\
	{								\
		static const struct xcase xc = { t, td, q, qd, ftype, tdl }; \
									\
		cross_check(_metadata, &xc);				\
	}

LTEST(q8_0, GG_FTYPE_Q8_0, GG_Q8_0, GG_Q8_0, GG_Q8_0, KT_QUANT_Q8_0,
      KT_QUANT_Q8_0)
LTEST(q4_0, GG_FTYPE_Q4_0, GG_Q4_0, GG_Q4_0, GG_Q4_0, KT_QUANT_INT4,
      KT_QUANT_INT4)
LTEST(q4_k_m, GG_FTYPE_Q4_K_M, GG_Q4_K, GG_Q4_K, GG_Q6_K, KT_QUANT_Q4_K,
      KT_QUANT_Q4_K)
LTEST(q5_k_m, GG_FTYPE_Q5_K_M, GG_Q5_K, GG_Q5_K, GG_Q6_K, KT_QUANT_Q5_K,
      KT_QUANT_Q5_K)
LTEST(q6_k, GG_FTYPE_Q6_K, GG_Q6_K, GG_Q6_K, GG_Q6_K, KT_QUANT_Q6_K,
      KT_QUANT_Q6_K)

TEST_HARNESS_MAIN
