// SPDX-License-Identifier: MIT
/*
 * gguf-ggml-oss.c - kt against llama.cpp's own ggml on gpt-oss: GGUF files
 * of MXFP4 experts (ggml's quantizer) with F32 expert biases, run with
 * kt_moe_forward() on every kernel variant the CPU has and compared with
 * llama.cpp's gpt-oss MoE graph in ggml (add_id biases, swiglu_oai).
 * Documentation/formats.md, "Against llama.cpp's own ggml".
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
#include "kernels/mxfp4.h"

#define NEXP	8
#define NLAY	2
#define NT	2
static const uint32_t tokens[NT] = { 1, 37 };
#define TMAX	37
#define KMAX	4
#define HMAX	288
/*
 * rel. MAE of kt against ggml computing with kt's rounding (bf16 x and
 * down input, the weights exact in f32): only the order of the f32 sums
 * and the exp of the activation differ (plus, where the kernels dot
 * int16 activations, Q16FAC times that rounding's measured difference)
 */
#define TOL	1e-5
/*
 * kt against plain ggml (Q8_0 activations) differs by the two activation
 * roundings; bound it by this many times their measured difference (the
 * rel. MAE between Q8_0 and bf16 of x plus that of the down input)
 */
#define QFAC	2.0
/*
 * the same for the int16 step of the MXFP4 kernels (kern_mxfp4_int16()): its output
 * difference reached 2.4 times that of the inputs here (an int16 group's
 * rounding is as large for every element, so cancelling sums keep more)
 */
#define Q16FAC	4.0

/* H = I, top-k; H and I multiples of 32, not of 128 (kt pads them) */
struct ocfg {
	uint32_t H, k;
	uint64_t seed;
};

/*
 * Inputs for one token count and ggml's outputs for each layer:
 * yq  the file as ggml runs it (x and the down input as Q8_0, the type
 *     vec_dot_mxfp4_q8_0 takes);
 * yr  the weights dequantized by ggml (exact in f32), x and the down input
 *     rounded to bf16 as kt's MXFP4 kernels take them;
 * yn  yr without the down bias: how far a wrong bias lands;
 * yx  the weights dequantized, f32 activations: the exact layer.
 * dx, da: rel. MAE between Q8_0 and bf16 of x and of the down input;
 * dx16, da16: the same between bf16 and int16 per group of 32 (what the
 *     MXFP4 kernels of avx512, and of amx below its tiles, dot with);
 * clamped: share of the activation's inputs the limit clamps.
 */
struct io {
	uint32_t T, k;
	float x[TMAX * HMAX], w[TMAX * KMAX];
	int32_t ids[TMAX * KMAX];
	float yq[NLAY][TMAX * HMAX], yr[NLAY][TMAX * HMAX];
	float yn[NLAY][TMAX * HMAX], yx[NLAY][TMAX * HMAX];
	double dx, da[NLAY], dx16, da16[NLAY], clamped[NLAY];
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

/* f32 to bf16, nearest even (kt's activation rounding), back to f32 */
static float bf16_round(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	u += 0x7fffu + ((u >> 16) & 1);
	u &= 0xffff0000u;
	memcpy(&f, &u, 4);
	return f;
}

/*
 * @n bf16 values (a multiple of 32) to int16 per group of 32 and back, as
 * moe-mxfp4-avx512.c rounds them: the power of two that brings the
 * group's largest magnitude into [2^14, 2^15), nearest even.
 */
static void int16_round(float *v, size_t n)
{
	size_t g, i;

	for (g = 0; g < n; g += 32) {
		float amax = 0, sc;
		int e;

		for (i = g; i < g + 32; i++)
			amax = fmaxf(amax, fabsf(v[i]));
		frexpf(amax, &e);	/* amax in [2^(e-1), 2^e) */
		sc = amax < 0x1p-111f ? 0.0f : ldexpf(1.0f, e - 1 - 14);
		for (i = g; i < g + 32; i++)
			v[i] = sc > 0 ? rintf(v[i] / sc) * sc : 0.0f;
	}
}

/* rel. MAE of the int16 rounding of the @n bf16 values at @b */
static double int16_diff(const float *b, size_t n)
{
	float *v = malloc(n * 4);
	double d;

	memcpy(v, b, n * 4);
	int16_round(v, n);
	d = rel_mae(v, b, n);
	free(v);
	return d;
}

static void make_inputs(struct io *io, uint32_t T, uint32_t H, uint32_t k,
			uint64_t seed)
{
	uint64_t s = seed;
	uint32_t t, i, j;

	io->T = T;
	io->k = k;
	for (i = 0; i < T * H; i++)
		io->x[i] = gg_uniform(&s);
	for (t = 0; t < T; t++) {
		int32_t e[NEXP];
		float l[KMAX], sum = 0;

		/* k distinct experts, softmax weights (gpt-oss's gating) */
		for (i = 0; i < NEXP; i++)
			e[i] = (int32_t)i;
		for (j = 0; j < k; j++) {
			uint32_t r = j + (uint32_t)(gg_rand(&s) % (NEXP - j));
			int32_t v = e[r];

			e[r] = e[j];
			e[j] = v;
			io->ids[t * k + j] = v;
			l[j] = expf(2.0f * gg_uniform(&s));
			sum += l[j];
		}
		for (j = 0; j < k; j++)
			io->w[t * k + j] = l[j] / sum;
	}
}

/* gate/up [H, I, E] or down [I, H, E] as f32, by ggml */
static struct ggml_tensor *dequant(const struct gg *g, struct ggml_context *c,
				   struct ggml_tensor *m, int64_t k,
				   int64_t n, struct ggml_tensor *rows)
{
	return g->reshape_3d(c, g->get_rows(c, g->reshape_2d(c, m, k,
							     n * NEXP),
					    rows), k, n, NEXP);
}

static struct ggml_tensor *iota(const struct gg *g, struct ggml_context *c,
				int64_t n)
{
	struct ggml_tensor *t = g->new_tensor_1d(c, GG_I32, n);
	int64_t i;

	for (i = 0; i < n; i++)
		((int32_t *)g->get_data(t))[i] = (int32_t)i;
	return t;
}

/* @v [K, N] f32 as ggml's Q8_0 activations have it, back in f32 */
static struct ggml_tensor *as_q8_0(const struct gg *g, struct ggml_context *c,
				   struct ggml_tensor *v, int64_t K, int64_t N)
{
	return g->get_rows(c, g->cpy(c, g->reshape_2d(c, v, K, N),
				     g->new_tensor_2d(c, GG_Q8_0, K, N)),
			   iota(g, c, N));
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

/* ggml's results for every layer of @path and each io */
static int ggml_reference(const struct gg *g, const char *path, uint32_t H,
			  struct io *ios)
{
	static const char *const nm[3] = { "gate", "up", "down" };
	const uint32_t I = H;
	struct ggml_context *wctx = NULL, *ctx;
	struct gg_gguf_init_params gp = { false, &wctx };
	struct gguf_context *gf = g->gguf_init_from_file(path, gp);
	size_t mem = (size_t)NLAY * 3 * H * I * NEXP * 4 + (128u << 20);
	struct gg_init_params ip = { mem, NULL, false };
	struct ggml_tensor *m[NLAY][3], *b[NLAY][3], *dq[NLAY][3];
	struct ggml_tensor *ids[NT], *w[NT], *xq[NT];
	struct ggml_tensor *yq[NT][NLAY], *yx[NT][NLAY], *yr[NT][NLAY];
	struct ggml_tensor *yn[NT][NLAY], *px[NT][NLAY], *pq[NT][NLAY];
	struct ggml_tensor *pr[NT][NLAY], *gu[NT][NLAY][2];
	struct ggml_tensor *out[NT * NLAY * 4 + NT], *rows_i, *rows_h;
	struct ggml_backend *be = NULL;
	unsigned int l, n, no = 0;
	size_t i;
	int ret = -EIO;

	if (!gf)
		return -EIO;
	ctx = g->init(ip);
	be = g->backend_cpu_init();
	if (!ctx || !be)
		goto out;
	g->backend_cpu_set_n_threads(be, 2);
	rows_i = iota(g, ctx, (int64_t)I * NEXP);
	rows_h = iota(g, ctx, (int64_t)H * NEXP);
	for (l = 0; l < NLAY; l++) {
		for (i = 0; i < 3; i++) {
			char name[64];

			snprintf(name, sizeof(name), "blk.%u.ffn_%s_exps.weight",
				 l, nm[i]);
			m[l][i] = g->get_tensor(wctx, name);
			snprintf(name, sizeof(name), "blk.%u.ffn_%s_exps.bias",
				 l, nm[i]);
			b[l][i] = g->get_tensor(wctx, name);
			if (!m[l][i] || !b[l][i])
				goto out;
		}
		dq[l][0] = dequant(g, ctx, m[l][0], H, I, rows_i);
		dq[l][1] = dequant(g, ctx, m[l][1], H, I, rows_i);
		dq[l][2] = dequant(g, ctx, m[l][2], I, H, rows_h);
	}
	/* first graph: yq, yx, and the down inputs of yr */
	for (n = 0; n < NT; n++) {
		uint32_t T = ios[n].T, k = ios[n].k;
		struct ggml_tensor *x = g->new_tensor_2d(ctx, GG_F32, H, T);
		struct ggml_tensor *xr = g->new_tensor_2d(ctx, GG_F32, H, T);

		ids[n] = g->new_tensor_2d(ctx, GG_I32, k, T);
		w[n] = g->new_tensor_2d(ctx, GG_F32, k, T);
		memcpy(g->get_data(x), ios[n].x, (size_t)T * H * 4);
		for (i = 0; i < (size_t)T * H; i++)
			((float *)g->get_data(xr))[i] = bf16_round(ios[n].x[i]);
		memcpy(g->get_data(ids[n]), ios[n].ids, (size_t)T * k * 4);
		memcpy(g->get_data(w[n]), ios[n].w, (size_t)T * k * 4);
		out[no++] = xq[n] = as_q8_0(g, ctx, x, H, T);
		for (l = 0; l < NLAY; l++) {
			out[no++] = yq[n][l] = gg_oss_down(g, ctx, m[l][2],
				b[l][2], gg_oss_par(g, ctx, m[l][0], m[l][1],
						    b[l], x, ids[n], H, T,
						    NULL),
				ids[n], w[n], H, k, T);
			px[n][l] = gg_oss_par(g, ctx, dq[l][0], dq[l][1], b[l],
					      x, ids[n], H, T, gu[n][l]);
			out[no++] = yx[n][l] = gg_oss_down(g, ctx, dq[l][2],
				b[l][2], px[n][l], ids[n], w[n], H, k, T);
			out[no++] = pq[n][l] = as_q8_0(g, ctx, px[n][l], I,
						       (int64_t)k * T);
			out[no++] = pr[n][l] = gg_oss_par(g, ctx, dq[l][0],
				dq[l][1], b[l], xr, ids[n], H, T, NULL);
		}
	}
	if (compute(g, ctx, be, out, no))
		goto out;
	/* second graph: yr and yn from the down inputs rounded to bf16 */
	for (n = 0, no = 0; n < NT; n++)
		for (l = 0; l < NLAY; l++) {
			uint32_t T = ios[n].T, k = ios[n].k;
			struct ggml_tensor *p = g->new_tensor_3d(ctx, GG_F32, I,
								 k, T);
			const float *src = g->get_data(pr[n][l]);

			for (i = 0; i < (size_t)I * k * T; i++)
				((float *)g->get_data(p))[i] =
					bf16_round(src[i]);
			out[no++] = yr[n][l] = gg_oss_down(g, ctx, dq[l][2],
				b[l][2], p, ids[n], w[n], H, k, T);
			out[no++] = yn[n][l] = gg_oss_down(g, ctx, dq[l][2],
				NULL, p, ids[n], w[n], H, k, T);
		}
	if (compute(g, ctx, be, out, no))
		goto out;
	for (n = 0; n < NT; n++) {
		uint32_t T = ios[n].T, k = ios[n].k;
		size_t sz = (size_t)T * H * 4, na = (size_t)I * k * T;
		size_t nv = na > (size_t)T * H ? na : (size_t)T * H;
		float *v = malloc(nv * 4);

		if (!v)
			goto out;
		/* the two roundings of x, and of the exact down input */
		for (i = 0; i < (size_t)T * H; i++)
			v[i] = bf16_round(ios[n].x[i]);
		ios[n].dx = rel_mae(g->get_data(xq[n]), v, (size_t)T * H);
		ios[n].dx16 = int16_diff(v, (size_t)T * H);
		for (l = 0; l < NLAY; l++) {
			const float *p = g->get_data(px[n][l]);
			const float *gv = g->get_data(gu[n][l][0]);
			const float *uv = g->get_data(gu[n][l][1]);
			size_t c = 0;

			memcpy(ios[n].yq[l], g->get_data(yq[n][l]), sz);
			memcpy(ios[n].yx[l], g->get_data(yx[n][l]), sz);
			memcpy(ios[n].yr[l], g->get_data(yr[n][l]), sz);
			memcpy(ios[n].yn[l], g->get_data(yn[n][l]), sz);
			for (i = 0; i < na; i++) {
				v[i] = bf16_round(p[i]);
				c += gv[i] > GG_OAI_LIMIT ||
				     fabsf(uv[i]) > GG_OAI_LIMIT;
			}
			ios[n].da[l] = rel_mae(g->get_data(pq[n][l]), v, na);
			ios[n].da16[l] = int16_diff(v, na);
			ios[n].clamped[l] = (double)c / (double)na;
		}
		free(v);
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

/* @xb: x as bf16 instead of f32 (NULL: f32) */
static int kt_forward(struct kt_ctx *ctx, struct kt_model *m,
		      const struct io *io, const uint16_t *xb,
		      uint32_t layer, float *y)
{
	struct kt_moe_args a = {
		.x = xb ? (const void *)xb : io->x, .ids = io->ids,
		.w = io->w, .y = y, .tokens = io->T, .top_k = io->k,
		.layer = layer,
		.x_dtype = xb ? KT_DTYPE_BF16 : KT_DTYPE_F32,
		.ids_dtype = KT_DTYPE_I32, .y_dtype = KT_DTYPE_F32,
	};

	return kt_moe_forward(ctx, m, &a);
}

/*
 * `kt convert` of the ggml-written gpt-oss file: a .ktw 2.3 (activation,
 * padding, biases) with the same output bits as the .gguf.
 */
static void convert_same(struct kt_test_meta *_metadata, const char *path,
			 const struct io *ios, unsigned int H)
{
	char kt[PATH_MAX], out[PATH_MAX], log[PATH_MAX];
	char *argv[] = { kt, "convert", "--input", (char *)path, "--output",
			 out, NULL };
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 2,
				 .flags = KT_CTX_F_NO_PIN };
	static float y1[TMAX * HMAX], y2[TMAX * HMAX];
	struct kt_model *mg, *mk;
	struct kt_ctx *ctx;
	uint32_t n, l;

	kt_bin(kt, sizeof(kt));
	if (access(kt, X_OK)) {
		TH_LOG("no kt command at %.200s: convert not checked", kt);
		return;
	}
	snprintf(out, sizeof(out), "%s.ktw", path);
	snprintf(log, sizeof(log), "%s.log", path);
	EXPECT_EQ(kt_exec(argv, log), 0);
	unlink(log);
	ASSERT_EQ(kt_ctx_create(&o, &ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, path, NULL, &mg), 0);
	ASSERT_EQ(kt_model_open(ctx, out, NULL, &mk), 0);
	for (n = 0; n < NT; n++)
		for (l = 0; l < NLAY; l++) {
			ASSERT_EQ(kt_forward(ctx, mg, &ios[n], NULL, l, y1), 0);
			ASSERT_EQ(kt_forward(ctx, mk, &ios[n], NULL, l, y2), 0);
			EXPECT_EQ(memcmp(y1, y2, (size_t)ios[n].T * H * 4), 0);
		}
	kt_model_destroy(mk);
	kt_model_destroy(mg);
	kt_ctx_destroy(ctx);
	unlink(out);
}

static void cross_check(struct kt_test_meta *_metadata, const struct ocfg *oc)
{
	const struct gg_moe_cfg c = {
		.H = oc->H, .I = oc->H, .E = NEXP, .k = oc->k, .L = NLAY,
		.type = GG_MXFP4, .type_down = GG_MXFP4, .seed = oc->seed,
		.arch = "gpt-oss", .bias = 1.0f,
	};
	static struct io ios[NT];
	static float y[TMAX * HMAX], yb[TMAX * HMAX];
	static uint16_t xb[TMAX * HMAX];
	double worst_q = 0, worst_r = 0, worst_x = 0, ggml_x = 0;
	double worst_n = INFINITY, ratio = 0;
	struct gg g;
	char why[PATH_MAX], path[64];
	unsigned int i, n, l, tested = 0;
	const char *tn;

	if (gg_open(&g, why, sizeof(why)))
		SKIP(return, "%.250s", why);
	/* MXFP4 is ggml type 39, blocks of 32 in 17 bytes (block_mxfp4) */
	tn = g.type_name(GG_MXFP4);
	if (!tn || strcmp(tn, "mxfp4") || g.blck_size(GG_MXFP4) != 32 ||
	    g.type_size(GG_MXFP4) != 17)
		SKIP(return, "ggml %s has no MXFP4 as type 39 (%s)",
		     g.version(), tn ? tn : "none");
	snprintf(path, sizeof(path), "/tmp/kt-ggml-oss-%d-%u-%u.gguf",
		 (int)getpid(), oc->H, oc->k);
	ASSERT_EQ(gg_write_moe(&g, &c, path), 0);
	for (n = 0; n < NT; n++)
		make_inputs(&ios[n], tokens[n], oc->H, oc->k, 2000 + n);
	ASSERT_EQ(ggml_reference(&g, path, oc->H, ios), 0);
	TH_LOG("ggml %s (%s, cpu %s), H = I = %u, E %u, top-%u",
	       g.version(), g.commit(), g.cpu_name, oc->H, NEXP, oc->k);
	for (n = 0; n < NT; n++)
		for (l = 0; l < NLAY; l++) {
			size_t cnt = (size_t)ios[n].T * oc->H;
			double dn = rel_mae(ios[n].yn[l], ios[n].yr[l], cnt);

			ggml_x = fmax(ggml_x, rel_mae(ios[n].yq[l],
						      ios[n].yx[l], cnt));
			worst_n = fmin(worst_n, dn);
			TH_LOG("T=%u layer %u: Q8_0 vs bf16 rounding: x %.2e, down input %.2e; int16 vs bf16: %.2e, %.2e; clamped %.1f%%; without the down bias %.2e",
			       ios[n].T, l, ios[n].dx, ios[n].da[l],
			       ios[n].dx16, ios[n].da16[l],
			       100 * ios[n].clamped[l], dn);
			/* the test sees the clamp and the down bias */
			if (ios[n].T > 1)
				EXPECT_GT(ios[n].clamped[l], 0.0);
			EXPECT_GT(dn, 100 * TOL);
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
		EXPECT_EQ(info.quant, KT_QUANT_MXFP4);
		EXPECT_EQ(info.down_quant, (uint32_t)KT_QUANT_MXFP4);
		EXPECT_EQ(info.hidden, oc->H);
		EXPECT_EQ(info.inter, oc->H);
		EXPECT_EQ(info.n_experts, (uint32_t)NEXP);
		EXPECT_EQ(info.n_layers, (uint32_t)NLAY);
		EXPECT_EQ(info.act, (uint32_t)KT_ACT_SWIGLU_OAI);
		EXPECT_EQ(info.act_alpha, GG_OAI_ALPHA);
		EXPECT_EQ(info.act_limit, GG_OAI_LIMIT);
		EXPECT_EQ(info.bias, 1u);
		for (n = 0; n < NT; n++)
			for (l = 0; l < NLAY; l++) {
				size_t cnt = (size_t)ios[n].T * oc->H;
				double d = ios[n].dx + ios[n].da[l];
				enum kt_isa isa = kt_ctx_isa(ctx);
				/* the variants' int16 step: bounded like
				 * the Q8_0 one */
				double tr = TOL + (kern_mxfp4_int16(isa) ?
						   Q16FAC * (ios[n].dx16 +
						   ios[n].da16[l]) : 0);
				double eq, er, ex;
				size_t j;

				ASSERT_EQ(kt_forward(ctx, m, &ios[n], NULL, l,
						     y), 0);
				/* bf16 x is what kt rounds f32 x to */
				for (j = 0; j < cnt; j++) {
					float f = bf16_round(ios[n].x[j]);
					uint32_t u;

					memcpy(&u, &f, 4);
					xb[j] = (uint16_t)(u >> 16);
				}
				ASSERT_EQ(kt_forward(ctx, m, &ios[n], xb, l,
						     yb), 0);
				EXPECT_EQ(memcmp(y, yb, cnt * 4), 0);
				eq = rel_mae(y, ios[n].yq[l], cnt);
				er = rel_mae(y, ios[n].yr[l], cnt);
				ex = rel_mae(y, ios[n].yx[l], cnt);
				TH_LOG("%s T=%u layer %u: kt vs ggml %.2e (bound %.1e), vs ggml with kt's rounding %.2e (bound %.1e), vs f32 %.2e",
				       kt_isa_name(isa), ios[n].T, l, eq,
				       QFAC * d, er, tr, ex);
				EXPECT_LT(er, tr);
				EXPECT_LT(eq, QFAC * d);
				worst_q = fmax(worst_q, eq);
				worst_r = fmax(worst_r, er);
				worst_x = fmax(worst_x, ex);
				ratio = fmax(ratio, eq / d);
			}
		tested++;
		kt_model_destroy(m);
		kt_ctx_destroy(ctx);
	}
	EXPECT_GT(tested, 0u);
	TH_LOG("H %u top-%u worst: kt vs ggml %.2e (%.2f x the rounding difference), vs ggml with kt's rounding %.2e, vs f32 %.2e; ggml vs f32 %.2e; without the down bias >= %.2e",
	       oc->H, oc->k, worst_q, ratio, worst_r, worst_x, ggml_x,
	       worst_n);
	convert_same(_metadata, path, ios, oc->H);
	unlink(path);
}

/* H 160 is packed to 256 by kt, 288 to 384; top-4 and top-2 */
TEST(mxfp4_h160_top4)
{
	static const struct ocfg oc = { 160, 4, 39 };

	cross_check(_metadata, &oc);
}

TEST(mxfp4_h288_top2)
{
	static const struct ocfg oc = { 288, 2, 40 };

	cross_check(_metadata, &oc);
}

TEST_HARNESS_MAIN
