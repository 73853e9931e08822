// SPDX-License-Identifier: MIT
/*
 * defer.c - deferred experts: kt_defer_split() (lowest weights deferred,
 * ties, N = 0, N >= k, keep masks, invalid ids, int64 ids, in place), the
 * two ops kt_submit_moe_deferred() queues landing in this and the next
 * layer's outputs, and the accuracy cost of deferral on a random-weight
 * layer stack (printed; Documentation/placement.md quotes it).
 */
#include <kt/kt.h>

#include "kt_test.h"
#include "../moe/model.h"

static const struct kt_defer_opts D1 = { .sz = sizeof(D1), .max_deferred = 1,
					 .n_experts = 8 };

TEST(split_lowest_weights)
{
	int32_t ids[2 * 4] = { 3, 1, 4, 5,  0, 7, 6, 2 };
	float w[2 * 4] = { .4f, .1f, .3f, .2f,  .05f, .5f, .25f, .2f };
	int32_t in[8], il[8];
	float wn[8], wl[8];
	struct kt_defer_opts o = D1;
	int s;

	o.max_deferred = 2;
	ASSERT_EQ(kt_defer_split(&o, ids, KT_DTYPE_I32, w, 2, 4, in, wn, il,
				 wl), 4);
	/* token 0: 0.1 (slot 1) and 0.2 (slot 3) deferred */
	EXPECT_EQ(in[0], 3);
	EXPECT_EQ(in[1], -1);
	EXPECT_EQ(in[2], 4);
	EXPECT_EQ(in[3], -1);
	EXPECT_EQ(il[1], 1);
	EXPECT_EQ(il[3], 5);
	EXPECT_EQ(il[0], -1);
	EXPECT_EQ(wl[1], .1f);
	EXPECT_EQ(wn[1], 0.0f);
	/* token 1: 0.05 (slot 0) and 0.2 (slot 3) */
	EXPECT_EQ(il[4], 0);
	EXPECT_EQ(il[7], 2);
	EXPECT_EQ(in[5], 7);
	EXPECT_EQ(in[6], 6);
	/* every slot is on exactly one side, with its weight */
	for (s = 0; s < 8; s++) {
		EXPECT_TRUE((in[s] < 0) != (il[s] < 0));
		EXPECT_EQ(wn[s] + wl[s], w[s]);
	}
}

TEST(split_ties_defer_the_later_slot)
{
	int32_t ids[4] = { 0, 1, 2, 3 };
	float w[4] = { .25f, .25f, .25f, .25f };
	int32_t in[4], il[4];
	float wn[4], wl[4];

	ASSERT_EQ(kt_defer_split(&D1, ids, KT_DTYPE_I32, w, 1, 4, in, wn, il,
				 wl), 1);
	EXPECT_EQ(il[3], 3);
	EXPECT_EQ(in[3], -1);
	EXPECT_EQ(in[2], 2);
}

TEST(split_zero_and_all)
{
	int32_t ids[3] = { 4, 2, 6 }, in[3], il[3];
	float w[3] = { .5f, .2f, .3f }, wn[3], wl[3];
	struct kt_defer_opts o = D1;

	o.max_deferred = 0;
	ASSERT_EQ(kt_defer_split(&o, ids, KT_DTYPE_I32, w, 1, 3, in, wn, il,
				 wl), 0);
	EXPECT_EQ(memcmp(in, ids, sizeof(ids)), 0);
	EXPECT_EQ(il[0] & il[1] & il[2], -1);
	/* N >= k: all but the heaviest deferred, never the whole token */
	o.max_deferred = 3;
	ASSERT_EQ(kt_defer_split(&o, ids, KT_DTYPE_I32, w, 1, 3, in, wn, il,
				 wl), 2);
	EXPECT_EQ(in[0], 4);
	EXPECT_EQ(in[1], -1);
	EXPECT_EQ(in[2], -1);
	o.max_deferred = 100;
	ASSERT_EQ(kt_defer_split(&o, ids, KT_DTYPE_I32, w, 1, 3, in, wn, il,
				 wl), 2);
	EXPECT_EQ(in[0], 4);
}

TEST(split_keep_mask_and_invalid_ids)
{
	int32_t ids[4] = { 5, -1, 9, 2 }, in[4], il[4];
	float w[4] = { .1f, .0f, .05f, .6f }, wn[4], wl[4];
	uint64_t keep = 1u << 5;
	struct kt_defer_opts o = D1;

	/* 5 is kept (on the GPU), -1 and 9 (>= E) are not experts: only 2
	 * could go, but it is the token's last valid expert besides 5 */
	o.keep = &keep;
	o.max_deferred = 2;
	ASSERT_EQ(kt_defer_split(&o, ids, KT_DTYPE_I32, w, 1, 4, in, wn, il,
				 wl), 1);
	EXPECT_EQ(in[0], 5);
	EXPECT_EQ(in[1], -1);
	EXPECT_EQ(in[2], 9);	/* left for the op to skip, not deferred */
	EXPECT_EQ(il[3], 2);
	/* without the keep bit, 5 (0.1) goes before 2 (0.6); 2 stays */
	o.keep = NULL;
	ASSERT_EQ(kt_defer_split(&o, ids, KT_DTYPE_I32, w, 1, 4, in, wn, il,
				 wl), 1);
	EXPECT_EQ(il[0], 5);
	EXPECT_EQ(in[3], 2);
}

TEST(split_int64_in_place_and_bad_args)
{
	int64_t ids[4] = { 1, 2, 3, 4 }, il[4];
	float w[4] = { .4f, .3f, .2f, .1f }, wl[4];
	struct kt_defer_opts o = D1;

	/* the immediate half written over the inputs */
	ASSERT_EQ(kt_defer_split(&o, ids, KT_DTYPE_I64, w, 1, 4, ids, w, il,
				 wl), 1);
	EXPECT_EQ(ids[3], -1);
	EXPECT_EQ(w[3], 0.0f);
	EXPECT_EQ(il[3], 4);
	EXPECT_EQ(wl[3], .1f);
	EXPECT_EQ(ids[0], 1);
	EXPECT_EQ(kt_defer_split(&o, ids, KT_DTYPE_I32 + 9, w, 1, 4, ids, w,
				 il, wl), -EINVAL);
	EXPECT_EQ(kt_defer_split(&o, ids, KT_DTYPE_I64, w, 1, 0, ids, w,
				 il, wl), -EINVAL);
	EXPECT_EQ(kt_defer_split(&o, ids, KT_DTYPE_I64, w, 1, 4, NULL, w,
				 il, wl), -EINVAL);
	o.reserved[0] = 1;
	EXPECT_EQ(kt_defer_split(&o, ids, KT_DTYPE_I64, w, 1, 4, ids, w,
				 il, wl), -EINVAL);
}

/* ---- end to end on a small model ----------------------------------------- */

#define H 256
#define I 256
#define E 16
#define L 4
#define K 4
#define T 32

struct stack {
	struct tmodel tm;
	struct kt_ctx *ctx;
	struct kt_model *m;
	float router[L][E][H];
};

static int stack_init(struct stack *s)
{
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 2,
				  .flags = KT_CTX_F_NO_PIN };
	struct tu_rng r = { 77 };
	int ret;

	tm_init(&s->tm, H, I, E, L, KT_DTYPE_F32, 1234);
	tu_fill_normal(&r, &s->router[0][0][0], (size_t)L * E * H, 0.1);
	ret = kt_ctx_create(&co, &s->ctx);
	if (ret)
		return ret;
	return tm_create(&s->tm, s->ctx, KT_QUANT_BF16, 0, &s->m);
}

static void stack_free(struct stack *s)
{
	kt_model_destroy(s->m);
	kt_ctx_destroy(s->ctx);
	tm_free(&s->tm);
}

/* Softmax router, top-k renormalised (as Qwen3-MoE), in f64. */
static void route(const struct stack *s, unsigned int l, const float *h,
		  int32_t *ids, float *w)
{
	unsigned int t, e, j, c;

	for (t = 0; t < T; t++) {
		double lg[E], mx = -1e300, sum = 0, top = 0;
		bool used[E] = { false };

		for (e = 0; e < E; e++) {
			lg[e] = 0;
			for (c = 0; c < H; c++)
				lg[e] += (double)h[t * H + c] * s->router[l][e][c];
			if (lg[e] > mx)
				mx = lg[e];
		}
		for (e = 0; e < E; e++)
			sum += lg[e] = exp(lg[e] - mx);
		for (j = 0; j < K; j++) {
			unsigned int b = E;

			for (e = 0; e < E; e++)
				if (!used[e] && (b == E || lg[e] > lg[b]))
					b = e;
			used[b] = true;
			ids[t * K + j] = (int32_t)b;
			w[t * K + j] = (float)(lg[b] / sum);
			top += lg[b] / sum;
		}
		for (j = 0; j < K; j++)
			w[t * K + j] = (float)(w[t * K + j] / top);
	}
}

static int wait_n(struct kt_ring *ring, unsigned int n)
{
	struct kt_cqe *cqe;
	int ret = 0;

	while (n--) {
		if (kt_wait_cqe(ring, &cqe))
			return -EIO;
		if (cqe->res && !ret)
			ret = cqe->res;
		kt_cqe_seen(ring);
	}
	return ret;
}

/*
 * h_{l+1} = h_l + y_l over every layer, the router on h_l; with deferral
 * y_l = immediate_l(h_l) + deferred_{l-1}(h_{l-1}). h: [T][H], in and out.
 */
static int stack_run(struct stack *s, unsigned int max_def, float *h)
{
	static float y[L + 1][T * H];
	static int32_t ids[T * K], idn[L][T * K], idl[L][T * K];
	static float w[T * K], wn[L][T * K], wl[L][T * K];
	struct kt_defer_opts o = { .sz = sizeof(o), .max_deferred = max_def };
	struct kt_ring ring;
	unsigned int l, i;
	int ret, n;

	ret = kt_ring_init(s->ctx, 8, &ring);
	if (ret)
		return ret;
	for (l = 0; l < L && !ret; l++) {
		struct kt_defer_bufs b = { idn[l], wn[l], idl[l], wl[l] };
		struct kt_moe_args a = {
			.x = h, .ids = ids, .w = w, .y = y[l], .tokens = T,
			.top_k = K, .ids_dtype = KT_DTYPE_I32,
			/* the previous layer's deferred part is in y[l] */
			.flags = l && max_def ? KT_MOE_F_ACCUMULATE : 0,
		};

		route(s, l, h, ids, w);
		n = kt_submit_moe_deferred(&ring, s->m, l, &a, &o,
					   l + 1 < L ? y[l + 1] : NULL, &b,
					   l, 100 + l);
		if (n < 0) {
			ret = n;
			break;
		}
		/* the immediate op is first in the ring: once both are
		 * done, y[l] is whole (the deferred one wrote y[l + 1]) */
		ret = wait_n(&ring, (unsigned int)n);
		for (i = 0; i < T * H; i++)
			h[i] += y[l][i];
	}
	kt_ring_exit(&ring);
	return ret;
}

static double rel_err(const float *a, const float *b, const float *base)
{
	double num = 0, den = 0, d;
	unsigned int i;

	for (i = 0; i < T * H; i++) {
		d = (double)a[i] - b[i];
		num += d * d;
		d = (double)b[i] - (base ? base[i] : 0);
		den += d * d;
	}
	return sqrt(num / (den ? den : 1));
}

/* One layer: immediate + deferred equal the whole op. */
TEST(submit_splits_one_op)
{
	static struct stack s;
	static float x[T * H], y[T * H], ya[T * H], yb[T * H];
	static int32_t ids[T * K], idn[T * K], idl[T * K];
	static float w[T * K], wn[T * K], wl[T * K];
	struct kt_defer_opts o = { .sz = sizeof(o), .max_deferred = 2 };
	struct kt_defer_bufs b = { idn, wn, idl, wl };
	struct kt_moe_args a = { .x = x, .ids = ids, .w = w, .y = ya,
				 .tokens = T, .top_k = K,
				 .ids_dtype = KT_DTYPE_I32 };
	struct tu_rng r = { 5 };
	struct kt_ring ring;
	struct kt_sqe *sqe;
	unsigned int i;

	ASSERT_EQ(stack_init(&s), 0);
	tu_fill_normal(&r, x, T * H, 1.0);
	route(&s, 1, x, ids, w);
	a.layer = 1;
	a.y = y;
	ASSERT_EQ(kt_moe_forward(s.ctx, s.m, &a), 0);
	a.y = ya;
	ASSERT_EQ(kt_ring_init(s.ctx, 2, &ring), 0);
	/* the last layer never defers: one op */
	ASSERT_EQ(kt_submit_moe_deferred(&ring, s.m, L - 1, &a, &o, yb, &b,
					 1, 2), 1);
	ASSERT_EQ(wait_n(&ring, 1), 0);
	ASSERT_EQ(kt_submit_moe_deferred(&ring, s.m, 1, &a, &o, yb, &b, 1, 2),
		  2);
	ASSERT_EQ(wait_n(&ring, 2), 0);
	for (i = 0; i < T * H; i++)
		ya[i] += yb[i];
	EXPECT_LT(rel_err(ya, y, NULL), 1e-5);
	/* no room for two: nothing queued */
	sqe = kt_get_sqe(&ring);
	ASSERT_NE(sqe, NULL);
	kt_prep_nop(sqe, 9);
	EXPECT_EQ(kt_submit_moe_deferred(&ring, s.m, 1, &a, &o, yb, &b, 1, 2),
		  -EAGAIN);
	EXPECT_EQ(kt_submit(&ring), 1);
	EXPECT_EQ(wait_n(&ring, 1), 0);
	/* y_next must not be y */
	EXPECT_EQ(kt_submit_moe_deferred(&ring, s.m, 1, &a, &o, ya, &b, 1, 2),
		  -EINVAL);
	kt_ring_exit(&ring);
	stack_free(&s);
}

/* Without deferral the stack is the plain sum; with it, measure the cost. */
TEST_TIMEOUT(stack_accuracy, 120)
{
	static struct stack s;
	static float h0[T * H], ref[T * H], h[T * H];
	struct tu_rng r = { 9 };
	unsigned int n;

	ASSERT_EQ(stack_init(&s), 0);
	tu_fill_normal(&r, h0, T * H, 1.0);
	memcpy(ref, h0, sizeof(h0));
	ASSERT_EQ(stack_run(&s, 0, ref), 0);
	EXPECT_GT(rel_err(ref, h0, NULL), 0.0);	/* the layers did work */
	for (n = 0; n <= 2; n++) {
		double e_moe, e_h;

		memcpy(h, h0, sizeof(h0));
		ASSERT_EQ(stack_run(&s, n, h), 0);
		e_moe = rel_err(h, ref, h0);	/* of the layers' sum */
		e_h = rel_err(h, ref, NULL);	/* of the final hidden state */
		TH_LOG("deferred per token %u: rel. error of the MoE output sum %.3e, of the final hidden state %.3e (L=%u E=%u k=%u T=%u, bf16)",
		       n, e_moe, e_h, L, E, K, T);
		if (!n)
			EXPECT_EQ(e_moe, 0.0);	/* bitwise the plain stack */
		else
			EXPECT_GT(e_moe, 0.0);
		EXPECT_LT(e_moe, 1.0);
	}
	stack_free(&s);
}

TEST_HARNESS_MAIN
