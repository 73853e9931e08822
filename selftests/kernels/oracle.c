// SPDX-License-Identifier: MIT
/*
 * oracle.c - the scalar oracle against f64 math: tightly against the
 * dequantized weights and activations (checks the kernel logic), and
 * within the quantization tolerance against the unquantized weights.
 */
#include <errno.h>

#include "kt_test.h"
#include "kernels/fp.h"
#include "kernels/kern.h"
#include "kernels/pack.h"
#include "util.h"

/* The activation contract of kern.h, in f64: dequantized values. */
static void act_deq(enum kt_quant q, const float *x, unsigned int K,
		    double *out)
{
	unsigned int k;
	float amax = 0, inv;

	if (q == KT_QUANT_BF16 || q == KT_QUANT_FP8 || q == KT_QUANT_MXFP4) {
		for (k = 0; k < K; k++)
			out[k] = kern_bf16_to_f32(kern_f32_to_bf16(x[k]));
		return;
	}
	for (k = 0; k < K; k++)
		amax = fmaxf(amax, fabsf(x[k]));
	inv = amax > 0 ? 127.0f / amax : 0.0f;
	for (k = 0; k < K; k++)
		out[k] = (double)rintf(x[k] * inv) * (double)(amax / 127.0f);
}

struct expert_fx {
	struct kern_pack_layout l;
	float *w[3];
	uint8_t *blob;
	struct kern_mat mat[3];
};

static int expert_make(struct expert_fx *e, enum kt_quant q, unsigned int H,
		       unsigned int I, unsigned int group, uint64_t seed)
{
	struct tu_rng r = { seed };
	int id;

	if (kern_pack_layout(q, H, I, group, &e->l))
		return -EINVAL;
	e->blob = aligned_alloc(64, (e->l.total + 63) & ~(size_t)63);
	for (id = 0; id < 3; id++) {
		e->w[id] = malloc((size_t)H * I * 4);
		tu_fill_weights(&r, e->w[id], id == 2 ? H : I, id == 2 ? I : H);
	}
	if (kern_pack_expert(&e->l, e->w[0], e->w[1], e->w[2], KT_DTYPE_F32,
			     e->blob))
		return -EINVAL;
	for (id = 0; id < 3; id++)
		kern_pack_mat(&e->l, id, e->blob, &e->mat[id]);
	return 0;
}

static void expert_free(struct expert_fx *e)
{
	for (int id = 0; id < 3; id++)
		free(e->w[id]);
	free(e->blob);
}

/*
 * gate_up of @ops for m tokens and rows [n0, n1) against f64 from the
 * dequantized weights (tight) and from the f32 weights (quantization).
 */
static void check_gate_up(struct kt_test_meta *_metadata,
			  const struct kern_ops *ops, enum kt_quant q,
			  unsigned int H, unsigned int I, unsigned int group,
			  unsigned int m, unsigned int n0, unsigned int n1,
			  double tol_quant)
{
	const struct kern_quant_ops *qo = kern_quant_ops_get(ops, q);
	struct kern_geom geom = { H, I, group, 0 };
	struct tu_rng r = { 99 + m };
	struct expert_fx e;
	struct kern_gate_up_args a;
	unsigned int nr = n1 - n0, i, n, h;
	size_t rb;
	float *x, *out;
	uint8_t *act;
	uint32_t *rows;
	double *xd, *ref, *ref_fp, *got;
	void *scratch;

	ASSERT_TRUE(qo != NULL);
	ASSERT_EQ(expert_make(&e, q, H, I, group, 1234 + q), 0);
	geom.kc = e.l.kc;
	geom.group = e.l.group;
	rb = qo->act_row_bytes(H, e.l.group);
	ASSERT_EQ(rb % 64, 0);
	/* 2m source rows; the kernel reads every other one via act_rows */
	x = malloc((size_t)2 * m * H * 4);
	tu_fill_normal(&r, x, (size_t)2 * m * H, 1.0);
	act = aligned_alloc(64, rb * 2 * m);
	qo->act_prepare(x, (size_t)H * 4, KT_DTYPE_F32, 2 * m, H, e.l.group,
			act, rb);
	rows = malloc(m * 4);
	for (i = 0; i < m; i++)
		rows[i] = 2 * (m - 1 - i) + 1;
	out = malloc((size_t)m * (nr + 3) * 4);
	scratch = malloc(qo->scratch_bytes(&geom, m) + 64);
	a = (struct kern_gate_up_args){
		.gate = &e.mat[0], .up = &e.mat[1], .N = I, .K = H,
		.group = e.l.group, .n0 = n0, .n1 = n1, .act = act,
		.act_stride = rb, .act_rows = rows, .m = m, .out = out,
		.out_stride = nr + 3, .scratch = scratch,
	};
	qo->gate_up(&a);

	xd = malloc(sizeof(double) * H);
	ref = malloc(sizeof(double) * m * nr);
	ref_fp = malloc(sizeof(double) * m * nr);
	got = malloc(sizeof(double) * m * nr);
	for (i = 0; i < m; i++) {
		const float *xs = x + (size_t)rows[i] * H;

		act_deq(q, xs, H, xd);
		for (n = n0; n < n1; n++) {
			double g = 0, u = 0, gf = 0, uf = 0;

			for (h = 0; h < H; h++) {
				g += kern_pack_get(&e.l, KERN_MAT_GATE, e.blob,
						   n, h) * xd[h];
				u += kern_pack_get(&e.l, KERN_MAT_UP, e.blob,
						   n, h) * xd[h];
				gf += (double)e.w[0][(size_t)n * H + h] * xs[h];
				uf += (double)e.w[1][(size_t)n * H + h] * xs[h];
			}
			ref[i * nr + n - n0] = tu_silu(g) * u;
			ref_fp[i * nr + n - n0] = tu_silu(gf) * uf;
			got[i * nr + n - n0] = out[i * (nr + 3) + n - n0];
		}
	}
	double e_deq = tu_rel_mae(got, ref, (size_t)m * nr);
	double e_fp = tu_rel_mae(got, ref_fp, (size_t)m * nr);

	TH_LOG("%s %s gate_up m=%u rows %u..%u: rel MAE %.2e vs dequantized, %.2e vs f32 weights",
	       ops->name, kt_quant_name(q), m, n0, n1, e_deq, e_fp);
	EXPECT_LE(e_deq, 1e-5);
	EXPECT_LE(e_fp, tol_quant);
	free(x);
	free(act);
	free(rows);
	free(out);
	free(scratch);
	free(xd);
	free(ref);
	free(ref_fp);
	free(got);
	expert_free(&e);
}

/*
 * down of @ops for m tokens, columns [n0, n1), K range [k0, k1), adding
 * into y rows picked by y_rows, against f64 from dequantized operands.
 */
static void check_down(struct kt_test_meta *_metadata,
		       const struct kern_ops *ops, enum kt_quant q,
		       unsigned int H, unsigned int I, unsigned int group,
		       unsigned int m, unsigned int n0, unsigned int n1,
		       unsigned int k0, unsigned int k1, double tol_quant)
{
	const struct kern_quant_ops *qo = kern_quant_ops_get(ops, q);
	struct kern_geom geom = { H, I, group, 0 };
	struct tu_rng r = { 7 + m };
	struct expert_fx e;
	struct kern_down_args a;
	unsigned int kc, nch, i, n, k, c;
	size_t crb, rb;
	float *av, *y, *w;
	uint8_t *act;
	uint32_t *yrows;
	double *ad, *ref, *ref_fp, *got;
	void *scratch;

	ASSERT_TRUE(qo != NULL);
	ASSERT_EQ(expert_make(&e, q, H, I, group, 555 + q), 0);
	kc = e.l.kc;
	geom.kc = kc;
	geom.group = e.l.group;
	nch = (k1 - k0) / kc;
	crb = qo->act_row_bytes(kc, e.l.group);
	rb = crb * nch + 64;	/* a stride larger than the row */
	/* intermediate values like silu(g)*u: heavy-tailed, mixed signs */
	av = malloc((size_t)m * I * 4);
	tu_fill_normal(&r, av, (size_t)m * I, 0.05);
	for (i = 0; i < m * I; i += 7)
		av[i] *= 8;
	act = aligned_alloc(64, rb * m);
	for (i = 0; i < m; i++)
		for (c = 0; c < nch; c++)
			qo->act_prepare(av + (size_t)i * I + k0 + c * kc, 0,
					KT_DTYPE_F32, 1, kc, e.l.group,
					act + i * rb + c * crb, crb);
	y = malloc((size_t)(2 * m) * H * 4);
	tu_fill_normal(&r, y, (size_t)2 * m * H, 0.1);
	w = malloc(m * 4);
	yrows = malloc(m * 4);
	for (i = 0; i < m; i++) {
		w[i] = (float)(0.1 + tu_unif(&r));
		yrows[i] = (i * 5 + 1) % (2 * m);
	}
	/* distinct rows: (5i + 1) mod 2m is injective for i < m when 2m and
	 * 5 are coprime; force it */
	if ((2 * m) % 5 == 0)
		for (i = 0; i < m; i++)
			yrows[i] = 2 * i + 1;
	ref = malloc(sizeof(double) * 2 * m * H);
	ref_fp = malloc(sizeof(double) * 2 * m * H);
	got = malloc(sizeof(double) * 2 * m * H);
	for (i = 0; i < 2 * m * H; i++)
		ref[i] = ref_fp[i] = y[i];
	scratch = malloc(qo->scratch_bytes(&geom, m) + 64);
	a = (struct kern_down_args){
		.down = &e.mat[2], .N = H, .K = I, .kc = kc,
		.group = e.l.group, .n0 = n0, .n1 = n1, .k0 = k0, .k1 = k1,
		.act = act, .act_stride = rb, .m = m, .y_rows = yrows, .w = w,
		.y = y, .y_stride = H, .scratch = scratch,
	};
	qo->down(&a);

	ad = malloc(sizeof(double) * I);
	for (i = 0; i < m; i++) {
		for (c = 0; c < nch; c++)
			act_deq(q, av + (size_t)i * I + k0 + c * kc, kc,
				ad + k0 + c * kc);
		for (n = n0; n < n1; n++) {
			double s = 0, sf = 0;

			for (k = k0; k < k1; k++) {
				s += kern_pack_get(&e.l, KERN_MAT_DOWN, e.blob,
						   n, k) * ad[k];
				sf += (double)e.w[2][(size_t)n * I + k] *
					av[(size_t)i * I + k];
			}
			ref[(size_t)yrows[i] * H + n] += w[i] * s;
			ref_fp[(size_t)yrows[i] * H + n] += w[i] * sf;
		}
	}
	/* outside the written rows and columns y must be untouched */
	double num = 0, den = 0, numf = 0;
	int untouched_ok = 1;
	uint8_t *hit = calloc(2 * m, 1);

	for (i = 0; i < m; i++)
		hit[yrows[i]] = 1;
	for (i = 0; i < 2 * m; i++)
		for (n = 0; n < H; n++) {
			size_t j = (size_t)i * H + n;

			got[j] = y[j];
			if ((!hit[i] || n < n0 || n >= n1) && got[j] != ref[j])
				untouched_ok = 0;
		}
	free(hit);
	for (i = 0; i < m; i++)
		for (n = n0; n < n1; n++) {
			size_t j = (size_t)yrows[i] * H + n;
			double s = 0;

			num += fabs(got[j] - ref[j]);
			numf += fabs(got[j] - ref_fp[j]);
			/* scale: the magnitude of the added term */
			for (k = k0; k < k1; k++)
				s += (double)e.w[2][(size_t)n * I + k] *
					av[(size_t)i * I + k];
			den += fabs(w[i] * s);
		}
	TH_LOG("%s %s down m=%u cols %u..%u k %u..%u: rel MAE %.2e vs dequantized, %.2e vs f32 weights",
	       ops->name, kt_quant_name(q), m, n0, n1, k0, k1, num / den,
	       numf / den);
	EXPECT_TRUE(untouched_ok);
	EXPECT_LE(num / den, 1e-5);
	EXPECT_LE(numf / den, tol_quant);
	free(av);
	free(act);
	free(y);
	free(w);
	free(yrows);
	free(ref);
	free(ref_fp);
	free(got);
	free(ad);
	free(scratch);
	expert_free(&e);
}

static double quant_tol(enum kt_quant q)
{
	/* FP8: E4M3 keeps 3 mantissa bits, ~3.6% rms per weight; MXFP4:
	 * E2M1 with a power-of-two scale per 32, ~10% mean per weight */
	return q == KT_QUANT_INT8 ? 0.04 : q == KT_QUANT_INT4 ? 0.25 :
	       q == KT_QUANT_FP8 ? 0.06 : q == KT_QUANT_MXFP4 ? 0.25 : 0.005;
}

static const enum kt_quant all_q[] = { KT_QUANT_INT8, KT_QUANT_INT4,
				       KT_QUANT_BF16, KT_QUANT_FP8,
				       KT_QUANT_MXFP4 };
#define N_Q	(sizeof(all_q) / sizeof(all_q[0]))

TEST(scalar_gate_up)
{
	const struct kern_ops *ops = kern_ops_get(KT_ISA_SCALAR);

	for (unsigned int qi = 0; qi < N_Q; qi++) {
		enum kt_quant q = all_q[qi];

		check_gate_up(_metadata, ops, q, 256, 384, 0, 1, 0, 384,
			      quant_tol(q));
		check_gate_up(_metadata, ops, q, 384, 256, 0, 5, 48, 208,
			      quant_tol(q));
	}
	check_gate_up(_metadata, ops, KT_QUANT_INT4, 256, 128, 32, 3, 16, 128,
		      quant_tol(KT_QUANT_INT4));
	check_gate_up(_metadata, ops, KT_QUANT_INT4, 256, 128, 64, 2, 0, 64,
		      quant_tol(KT_QUANT_INT4));
	/* FP8 with one scale per row */
	check_gate_up(_metadata, ops, KT_QUANT_FP8, 384, 256,
		      KT_GROUP_CHANNEL, 3, 16, 256, quant_tol(KT_QUANT_FP8));
}

TEST(scalar_down)
{
	const struct kern_ops *ops = kern_ops_get(KT_ISA_SCALAR);

	for (unsigned int qi = 0; qi < N_Q; qi++) {
		enum kt_quant q = all_q[qi];

		/* I = 768: six chunks of KC; two middle chunks alone */
		check_down(_metadata, ops, q, 256, 768, 0, 1, 0, 256, 0, 768,
			   quant_tol(q));
		check_down(_metadata, ops, q, 256, 768, 0, 4, 32, 96, 256, 512,
			   quant_tol(q));
		/* I = 384: KC 128 */
		check_down(_metadata, ops, q, 128, 384, 0, 3, 16, 128, 128, 384,
			   quant_tol(q));
	}
	check_down(_metadata, ops, KT_QUANT_INT4, 128, 512, 32, 2, 0, 128, 0,
		   512, quant_tol(KT_QUANT_INT4));
	check_down(_metadata, ops, KT_QUANT_INT4, 128, 256, 64, 2, 0, 128, 0,
		   256, quant_tol(KT_QUANT_INT4));
	check_down(_metadata, ops, KT_QUANT_FP8, 256, 384, KT_GROUP_CHANNEL, 2,
		   32, 160, 128, 384, quant_tol(KT_QUANT_FP8));
}

TEST(silu)
{
	ASSERT_NEAR(kern_silu_f32(0.0f), 0.0, 0);
	ASSERT_NEAR(kern_silu_f32(1.0f), 1.0 / (1.0 + exp(-1.0)), 1e-7);
	ASSERT_NEAR(kern_silu_f32(-3.0f), -3.0 / (1.0 + exp(3.0)), 1e-7);
	ASSERT_NEAR(kern_silu_f32(100.0f), 100.0, 1e-5);
	ASSERT_FALSE(isnan(kern_silu_f32(-200.0f)));
	ASSERT_NEAR(kern_silu_f32(-200.0f), 0.0, 1e-30);
}

TEST(ops_table)
{
	const struct kern_ops *ops = kern_ops_get(KT_ISA_SCALAR);

	ASSERT_TRUE(ops != NULL);
	ASSERT_EQ(ops->isa, KT_ISA_SCALAR);
	ASSERT_TRUE(kern_quant_ops_get(ops, KT_QUANT_INT8) != NULL);
	ASSERT_TRUE(kern_quant_ops_get(ops, KT_QUANT_INT4) != NULL);
	ASSERT_TRUE(kern_quant_ops_get(ops, KT_QUANT_BF16) != NULL);
	ASSERT_TRUE(kern_quant_ops_get(ops, KT_QUANT_FP8) != NULL);
	ASSERT_TRUE(kern_quant_ops_get(ops, KT_QUANT_MXFP4) != NULL);
	ASSERT_TRUE(kern_quant_ops_get(ops, (enum kt_quant)0) == NULL);
	ASSERT_TRUE(kern_ops_get(KT_ISA_AUTO) == NULL);
	ASSERT_TRUE(kern_ops_get(KT_ISA_COUNT) == NULL);
	for (int isa = KT_ISA_SCALAR; isa < KT_ISA_COUNT; isa++) {
		const struct kern_ops *o = kern_ops_get((enum kt_isa)isa);

		if (o)
			ASSERT_EQ(o->isa, (enum kt_isa)isa);
	}
}

TEST_HARNESS_MAIN
