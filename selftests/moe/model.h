/* SPDX-License-Identifier: MIT */
/*
 * model.h - a test model in memory for the moe selftests: random experts,
 * kt_model_create() over them, an f64 reference of the MoE op.
 */
#ifndef KT_SELFTESTS_MOE_MODEL_H
#define KT_SELFTESTS_MOE_MODEL_H

#include <kt/kt.h>

#include "../kernels/util.h"
#include "kernels/fp.h"

struct tmodel {
	unsigned int H, I, E, L;
	enum kt_dtype src;
	float *w;		/* [L][E][3][H * I], as the model reads them */
	uint16_t *w16;		/* bf16/f16 copies when src is 16-bit */
	uint64_t mask[4];	/* experts left out at creation */
};

static inline float *tm_mat(const struct tmodel *t, unsigned int l,
			    unsigned int e, unsigned int id)
{
	return t->w + (((size_t)l * t->E + e) * 3 + id) * t->H * t->I;
}

static inline int tm_get_expert(void *arg, uint32_t layer, uint32_t e,
				struct kt_expert_src *src)
{
	const struct tmodel *t = arg;
	size_t off = (((size_t)layer * t->E + e) * 3) * t->H * t->I;

	if (t->src == KT_DTYPE_F32) {
		src->gate = t->w + off;
		src->up = t->w + off + (size_t)t->H * t->I;
		src->down = t->w + off + 2 * (size_t)t->H * t->I;
	} else {
		src->gate = t->w16 + off;
		src->up = t->w16 + off + (size_t)t->H * t->I;
		src->down = t->w16 + off + 2 * (size_t)t->H * t->I;
	}
	return 0;
}

static inline void tm_init(struct tmodel *t, unsigned int H, unsigned int I,
			   unsigned int E, unsigned int L, enum kt_dtype src,
			   uint64_t seed)
{
	struct tu_rng r = { seed };
	size_t n = (size_t)L * E * 3 * H * I, i;
	unsigned int l, e;

	memset(t, 0, sizeof(*t));
	t->H = H;
	t->I = I;
	t->E = E;
	t->L = L;
	t->src = src;
	t->w = malloc(n * 4);
	for (l = 0; l < L; l++)
		for (e = 0; e < E; e++) {
			tu_fill_weights(&r, tm_mat(t, l, e, 0), I, H);
			tu_fill_weights(&r, tm_mat(t, l, e, 1), I, H);
			tu_fill_weights(&r, tm_mat(t, l, e, 2), H, I);
		}
	if (src == KT_DTYPE_F32)
		return;
	t->w16 = malloc(n * 2);
	for (i = 0; i < n; i++) {
		t->w16[i] = src == KT_DTYPE_BF16 ? kern_f32_to_bf16(t->w[i]) :
			kern_f32_to_f16(t->w[i]);
		t->w[i] = src == KT_DTYPE_BF16 ? kern_bf16_to_f32(t->w16[i]) :
			kern_f16_to_f32(t->w16[i]);
	}
}

static inline void tm_free(struct tmodel *t)
{
	free(t->w);
	free(t->w16);
}

static inline int tm_create(struct tmodel *t, struct kt_ctx *ctx,
			    enum kt_quant q, unsigned int group,
			    struct kt_model **m)
{
	struct kt_model_desc d = {
		.sz = sizeof(d), .hidden = t->H, .inter = t->I,
		.n_experts = t->E, .n_layers = t->L, .src_dtype = t->src,
		.quant = q, .group_size = group, .get_expert = tm_get_expert,
		.arg = t, .expert_mask = t->mask,
	};

	return kt_model_create(ctx, &d, m);
}

/*
 * y_ref[T][H] = (accumulate ? y0 : 0) + sum over valid slots, in f64;
 * x is f32 [T][H] (already rounded when the op gets bf16).
 */
static inline void tm_reference(const struct tmodel *t, unsigned int layer,
				const float *x, const int64_t *ids,
				const float *w, unsigned int T, unsigned int k,
				const uint64_t *skip, double *y)
{
	double *xd = malloc(sizeof(double) * t->H);
	unsigned int i, s, h;

	for (i = 0; i < T; i++) {
		for (h = 0; h < t->H; h++)
			xd[h] = x[(size_t)i * t->H + h];
		for (s = 0; s < k; s++) {
			int64_t e = ids[(size_t)i * k + s];

			if (e < 0 || e >= t->E || (t->mask[e / 64] >> (e % 64) & 1) ||
			    (skip && (skip[e / 64] >> (e % 64) & 1)))
				continue;
			tu_expert_ref(tm_mat(t, layer, e, 0),
				      tm_mat(t, layer, e, 1),
				      tm_mat(t, layer, e, 2), t->H, t->I, 0,
				      t->I, xd, w[(size_t)i * k + s],
				      y + (size_t)i * t->H);
		}
	}
	free(xd);
}

#endif /* KT_SELFTESTS_MOE_MODEL_H */
