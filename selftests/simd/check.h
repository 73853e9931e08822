/* SPDX-License-Identifier: MIT */
/*
 * check.h - runs one kernel variant's gate_up and down against the scalar
 * oracle on identical packed weights and identical f32 inputs, for the
 * token counts, row ranges and chunk ranges the executor hands out.
 */
#ifndef KT_SELFTESTS_SIMD_CHECK_H
#define KT_SELFTESTS_SIMD_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/pack.h"
#include "kernels/util.h"

/*
 * Tolerances, as max |variant - oracle| / max |oracle| over one output:
 * INT8 dots are exact int32 in both, so only the vector exp of SiLU
 * (4e-7), FMA contraction and the f32 order of the chunk sums differ;
 * INT4 adds the order of the group sums; BF16 sums pairs of products
 * (vdpbf16ps) or in a different order, which moves each f32 sum by a few
 * ulps of its largest partial sum.
 */
#define SC_TOL_INT8	2e-6
#define SC_TOL_INT4	1e-5
#define SC_TOL_BF16	5e-5
/*
 * MXFP4 where the AVX-512 body dots int16 activations (avx512, and amx
 * below its tiles): each group of 32 rounded by less than 2^-15 of its
 * largest; measured up to 1.2e-4 of the largest output
 */
#define SC_TOL_MXFP4_I16	3e-4

/* The tolerance of quantization @q when the variant's MXFP4 is int16. */
static inline double sc_tol(enum kt_quant q, bool mxfp4_i16)
{
	/* MXFP4: bf16 products, as BF16; GGUF: int32 dots, f32 block sums */
	return q == KT_QUANT_INT8 ? SC_TOL_INT8 :
	       q == KT_QUANT_INT4 || kern_quant_is_gguf(q) ? SC_TOL_INT4 :
	       q == KT_QUANT_MXFP4 && mxfp4_i16 ? SC_TOL_MXFP4_I16 :
	       SC_TOL_BF16;
}

struct sc_expert {
	struct kern_pack_layout l;
	uint8_t *blob;
	struct kern_mat gate, up, down;
};

static inline int sc_expert_make(struct sc_expert *e, enum kt_quant q,
				 unsigned int H, unsigned int I,
				 unsigned int group, uint64_t seed)
{
	struct tu_rng r = { seed };
	float *g = malloc(sizeof(float) * H * I);
	float *u = malloc(sizeof(float) * H * I);
	float *d = malloc(sizeof(float) * H * I);
	int ret;

	tu_fill_weights(&r, g, I, H);
	tu_fill_weights(&r, u, I, H);
	tu_fill_weights(&r, d, H, I);
	ret = kern_pack_layout(q, H, I, group, &e->l);
	if (!ret) {
		e->blob = aligned_alloc(4096, (e->l.total + 4095) & ~4095ul);
		ret = kern_pack_expert(&e->l, g, u, d, KT_DTYPE_F32, e->blob);
		kern_pack_mat(&e->l, KERN_MAT_GATE, e->blob, &e->gate);
		kern_pack_mat(&e->l, KERN_MAT_UP, e->blob, &e->up);
		kern_pack_mat(&e->l, KERN_MAT_DOWN, e->blob, &e->down);
	}
	free(g);
	free(u);
	free(d);
	return ret;
}

static inline double sc_maxabs(const float *v, size_t n)
{
	double m = 0;
	size_t i;

	for (i = 0; i < n; i++)
		m = fmax(m, fabs(v[i]));
	return m;
}

/* max |a - b| / max |b|, or -1 when a value is not finite. */
static inline double sc_rel_err(const float *a, const float *b, size_t n)
{
	double m = 0, ref = sc_maxabs(b, n);
	size_t i;

	for (i = 0; i < n; i++) {
		if (!isfinite(a[i]))
			return -1;
		m = fmax(m, fabs((double)a[i] - b[i]));
	}
	return ref > 0 ? m / ref : m;
}

struct sc_case {
	unsigned int T;		/* tokens of the expert */
	unsigned int n0, n1;	/* gate/up rows, 0/0: all */
	unsigned int dn0, dn1;	/* down columns, 0/0: all */
	unsigned int c0, c1;	/* down chunks, 0/0: all */
};

/* Worst of @err and the error of @a against @b; -1 sticks. */
static inline double sc_worse(double err, const float *a, const float *b,
			      size_t n)
{
	double e = sc_rel_err(a, b, n);

	if (err < 0 || e < 0)
		return -1;
	return fmax(err, e);
}

/*
 * Run @v (and the oracle) on expert @e for case @c; return the worst
 * relative error of gate_up and down (the many-token paths too, where the
 * variant has them), or -1 on a non-finite output.
 */
static inline double sc_run(const struct kern_quant_ops *v,
			    const struct sc_expert *e, const struct sc_case *c,
			    uint64_t seed)
{
	const struct kern_quant_ops *o = &kern_ops_scalar.q[e->l.quant];
	unsigned int H = e->l.hidden, I = e->l.inter, KC = e->l.kc;
	unsigned int G = e->l.quant == KT_QUANT_INT4 ? e->l.group : 0;
	unsigned int T = c->T, n0 = c->n0, n1 = c->n1 ? c->n1 : I;
	unsigned int dn0 = c->dn0, dn1 = c->dn1 ? c->dn1 : H;
	unsigned int c0 = c->c0, c1 = c->c1 ? c->c1 : I / KC;
	unsigned int nc = c1 - c0, nn = n1 - n0, i, j, k, pass;
	struct kern_geom geom = { H, I, G, KC };
	struct tu_rng r = { seed };
	size_t vrow = v->act_row_bytes(H, G), orow = o->act_row_bytes(H, G);
	size_t vcrow = v->act_row_bytes(KC, G), ocrow = o->act_row_bytes(KC, G);
	size_t TH = (size_t)T * H, TN = (size_t)T * nn;
	float *x = malloc(sizeof(float) * TH);
	float *inter = malloc(sizeof(float) * T * I);
	float *outv = malloc(sizeof(float) * TN);
	float *outo = malloc(sizeof(float) * TN);
	float *yv = malloc(sizeof(float) * TH);
	float *yo = malloc(sizeof(float) * TH);
	float *w = malloc(sizeof(float) * T);
	uint32_t *rows = malloc(sizeof(uint32_t) * T);
	uint8_t *av = aligned_alloc(64, vrow * T + vcrow * nc * T + 64);
	uint8_t *ao = aligned_alloc(64, orow * T + ocrow * nc * T + 64);
	size_t sb = v->scratch_bytes(&geom, KERN_MAX_M);
	void *scratch = aligned_alloc(64, (sb + 127) & ~63ul);
	double err = 0;
	unsigned int i0, mm;

	tu_fill_normal(&r, x, TH, 1.0);
	/* outliers make the per-token scales differ a lot */
	for (i = 0; i < T; i++) {
		x[(size_t)i * H + (i * 7) % H] *= 8;
		w[i] = (float)(0.1 + tu_unif(&r));
		rows[i] = T - 1 - i;	/* gather order differs from row order */
	}
	v->act_prepare(x, sizeof(float) * H, KT_DTYPE_F32, T, H, G, av, vrow);
	o->act_prepare(x, sizeof(float) * H, KT_DTYPE_F32, T, H, G, ao, orow);
	for (pass = 0; pass < 2; pass++) {
		int many = pass == 1;

		if (many && !v->gate_up_many)
			break;
		memset(outv, 0, sizeof(float) * TN);
		for (i0 = 0; i0 < T; i0 += mm) {
			struct kern_gate_up_args ga = {
				.gate = &e->gate, .up = &e->up, .N = I, .K = H,
				.group = G, .n0 = n0, .n1 = n1,
				.act_rows = rows + i0, .out_stride = nn,
				.scratch = scratch,
			};

			mm = T - i0 < KERN_MAX_M ? T - i0 : KERN_MAX_M;
			ga.m = mm;
			ga.act = av;
			ga.act_stride = vrow;
			ga.out = outv + (size_t)i0 * nn;
			if (many)
				v->gate_up_many(&ga);
			else
				v->gate_up(&ga);
			if (pass)
				continue;
			ga.act = ao;
			ga.act_stride = orow;
			ga.out = outo + (size_t)i0 * nn;
			o->gate_up(&ga);
		}
		for (i = 0; i < T; i++)
			err = sc_worse(err, outv + (size_t)i * nn,
				       outo + (size_t)i * nn, nn);
	}
	/* down reads the oracle's intermediate, prepared per chunk of KC */
	if (nn == I)
		memcpy(inter, outo, sizeof(float) * T * I);
	else
		tu_fill_normal(&r, inter, (size_t)T * I, 0.05);
	for (i = 0; i < T; i++)
		for (k = 0; k < nc; k++) {
			const float *src = inter + (size_t)i * I +
					   (size_t)(c0 + k) * KC;

			v->act_prepare(src, 0, KT_DTYPE_F32, 1, KC, G,
				       av + ((size_t)i * nc + k) * vcrow, vcrow);
			o->act_prepare(src, 0, KT_DTYPE_F32, 1, KC, G,
				       ao + ((size_t)i * nc + k) * ocrow, ocrow);
		}
	for (pass = 0; pass < 2; pass++) {
		int many = pass == 1;

		if (many && !v->down_many)
			break;
		for (i = 0; i < T; i++)
			for (j = 0; j < H; j++)
				yv[i * H + j] = yo[i * H + j] =
					(float)(j % 5) * 0.25f;
		for (i0 = 0; i0 < T; i0 += mm) {
			struct kern_down_args da = {
				.down = &e->down, .N = H, .K = I, .kc = KC,
				.group = G, .n0 = dn0, .n1 = dn1,
				.k0 = c0 * KC, .k1 = c1 * KC,
				.y_rows = rows + i0, .w = w + i0,
				.y_stride = H, .scratch = scratch,
			};

			mm = T - i0 < KERN_MAX_M ? T - i0 : KERN_MAX_M;
			da.m = mm;
			da.act = av + (size_t)i0 * nc * vcrow;
			da.act_stride = nc * vcrow;
			da.y = yv;
			if (many)
				v->down_many(&da);
			else
				v->down(&da);
			da.act = ao + (size_t)i0 * nc * ocrow;
			da.act_stride = nc * ocrow;
			da.y = yo;
			o->down(&da);
		}
		/* compare what was added (y starts non-zero, so that a
		 * store instead of an add shows) */
		for (i = 0; i < T; i++)
			for (j = 0; j < H; j++) {
				yv[i * H + j] -= (float)(j % 5) * 0.25f;
				yo[i * H + j] -= (float)(j % 5) * 0.25f;
			}
		err = sc_worse(err, yv, yo, TH);
	}
	free(x);
	free(inter);
	free(outv);
	free(outo);
	free(yv);
	free(yo);
	free(w);
	free(rows);
	free(av);
	free(ao);
	free(scratch);
	return err;
}

#endif /* KT_SELFTESTS_SIMD_CHECK_H */
