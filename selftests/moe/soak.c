// SPDX-License-Identifier: MIT
/*
 * soak.c - the ring soak. Several threads, each owning two rings of one
 * context, submit a random mix of MoE ops (shapes, dtypes, accumulate,
 * skip masks), NOPs and invalid entries. Every completion must arrive
 * exactly once, on its own ring, with the result its kind predicts; every
 * MoE output must be bitwise the output of the same op run alone (itself
 * checked against the f64 reference). Rings are torn down with ops in
 * flight and re-created, and reaped lazily so that the CQ fills and holds
 * the SQ back. KT_SOAK_OPS sets the total (scripts/ring-soak.sh: 10^7).
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <time.h>

#include <kt/kt.h>
#include <kt/ring.h>
#include "kt_test.h"
#include "model.h"

#define SOAK_H		128
#define SOAK_I		128
#define SOAK_E		12
#define SOAK_L		2
#define SOAK_THREADS	3
#define SOAK_RINGS	2		/* per thread */
#define SOAK_ENTRIES	16		/* SQ; the CQ holds 32 */
#define SOAK_SLOTS	64		/* > SQ + CQ: ops one ring has out */
#define SOAK_CASES	24
#define SOAK_MAX_T	4
/* CI's count; sanitizers slow every op down 5 to 20 times */
#if defined(__SANITIZE_THREAD__)
#define SOAK_DEFAULT_OPS 20000
#elif defined(__SANITIZE_ADDRESS__)
#define SOAK_DEFAULT_OPS 50000
#else
#define SOAK_DEFAULT_OPS 200000
#endif

/* One prepared MoE op: its inputs, y before the op, and y after it. */
struct scase {
	struct kt_moe_args a;		/* a.y unset: each slot has its own */
	void *x, *ids, *y0, *yref;
	float *w;
	uint64_t skip;
	size_t ybytes;
};

enum skind { SK_NOP, SK_MOE, SK_BAD_OPCODE, SK_BAD_FLAGS, SK_BAD_RESERVED,
	     SK_BAD_ARGS };

struct sslot {
	uint64_t seq;
	uint8_t kind;
	uint8_t pending;
	uint16_t c;			/* case of an SK_MOE */
	uint8_t y[SOAK_MAX_T * SOAK_H * 4];
};

struct sring {
	struct kt_ring r;
	uint64_t seq;
	unsigned int inflight;
	bool lazy;			/* not reaping until the CQ is full */
	struct sslot slots[SOAK_SLOTS];
};

struct soak {
	struct kt_ctx *ctx;
	struct kt_model *m;
	struct scase cases[SOAK_CASES];
	int moe_res;			/* what a good MoE op completes with */
};

struct sworker {
	pthread_t th;
	const struct soak *s;
	unsigned int id;
	uint64_t target;
	struct tu_rng rng;
	struct sring rings[SOAK_RINGS];
	/* counts */
	uint64_t submitted, completed, dropped, moe, nop, invalid;
	uint64_t cq_full, teardowns;
	char err[256];			/* first failure, empty if none */
};

static void case_init(struct scase *c, struct tu_rng *r)
{
	unsigned int T = 1 + tu_next(r) % SOAK_MAX_T;
	unsigned int k = 1 + tu_next(r) % 4, i;
	size_t n = (size_t)T * SOAK_H;
	float *xf = malloc(n * 4);
	int64_t *ids = malloc((size_t)T * k * 8);

	memset(c, 0, sizeof(*c));
	c->w = malloc((size_t)T * k * 4);
	for (i = 0; i < n; i++)
		xf[i] = (float)tu_normal(r);
	for (i = 0; i < T * k; i++) {
		/* now and then an id out of range, which the op skips */
		ids[i] = tu_next(r) % 16 ? (int64_t)(tu_next(r) % SOAK_E) :
			 (tu_next(r) & 1 ? -1 : SOAK_E + 3);
		c->w[i] = (float)(0.1 + 0.9 * (tu_next(r) % 1000) / 1000.0);
	}
	c->a.tokens = T;
	c->a.top_k = k;
	c->a.layer = tu_next(r) % SOAK_L;
	c->a.x_dtype = tu_next(r) & 1 ? KT_DTYPE_BF16 : KT_DTYPE_F32;
	c->a.y_dtype = tu_next(r) & 1 ? KT_DTYPE_BF16 : KT_DTYPE_F32;
	c->a.ids_dtype = tu_next(r) & 1 ? KT_DTYPE_I32 : KT_DTYPE_I64;
	c->a.flags = tu_next(r) % 3 ? 0 : KT_MOE_F_ACCUMULATE;
	if (!(tu_next(r) % 4)) {
		c->skip = 1ull << (tu_next(r) % SOAK_E);
		c->a.skip_mask = &c->skip;
	}
	if (c->a.x_dtype == KT_DTYPE_BF16) {
		uint16_t *xb = malloc(n * 2);

		for (i = 0; i < n; i++)
			xb[i] = kern_f32_to_bf16(xf[i]);
		c->x = xb;
		free(xf);
	} else {
		c->x = xf;
	}
	if (c->a.ids_dtype == KT_DTYPE_I32) {
		int32_t *i32 = malloc((size_t)T * k * 4);

		for (i = 0; i < T * k; i++)
			i32[i] = (int32_t)ids[i];
		c->ids = i32;
		free(ids);
	} else {
		c->ids = ids;
	}
	c->ybytes = n * (c->a.y_dtype == KT_DTYPE_BF16 ? 2 : 4);
	c->y0 = malloc(c->ybytes);
	c->yref = malloc(c->ybytes);
	for (i = 0; i < c->ybytes; i++)
		((uint8_t *)c->y0)[i] = (uint8_t)tu_next(r);
	if (c->a.y_dtype == KT_DTYPE_BF16)	/* finite bf16 start values */
		for (i = 0; i < n; i++)
			((uint16_t *)c->y0)[i] = kern_f32_to_bf16(
				(float)(0.01 * tu_normal(r)));
	else
		for (i = 0; i < n; i++)
			((float *)c->y0)[i] = (float)(0.01 * tu_normal(r));
	c->a.x = c->x;
	c->a.ids = c->ids;
	c->a.w = c->w;
}

static void case_free(struct scase *c)
{
	free(c->x);
	free(c->ids);
	free(c->w);
	free(c->y0);
	free(c->yref);
}

static float ybits_to_f32(const struct scase *c, const void *y, size_t i)
{
	return c->a.y_dtype == KT_DTYPE_BF16 ?
	       kern_bf16_to_f32(((const uint16_t *)y)[i]) :
	       ((const float *)y)[i];
}

/* The op alone, and that result against the f64 reference. */
static int case_expect(struct soak *s, const struct tmodel *t,
		       struct scase *c, char *why, size_t why_len)
{
	unsigned int T = c->a.tokens, k = c->a.top_k, i;
	size_t n = (size_t)T * SOAK_H;
	struct kt_moe_args a = c->a;
	double *ref = calloc(n, sizeof(double)), asum = 0, esum = 0;
	float *xf = malloc(n * 4);
	int64_t *ids = malloc((size_t)T * k * 8);
	int ret;

	memcpy(c->yref, c->y0, c->ybytes);
	a.y = c->yref;
	ret = kt_moe_forward(s->ctx, s->m, &a);
	if (ret < 0) {
		snprintf(why, why_len, "kt_moe_forward: %d", ret);
		goto out;
	}
	s->moe_res = ret;
	for (i = 0; i < n; i++)
		xf[i] = c->a.x_dtype == KT_DTYPE_BF16 ?
			kern_bf16_to_f32(((uint16_t *)c->x)[i]) :
			((float *)c->x)[i];
	for (i = 0; i < T * k; i++)
		ids[i] = c->a.ids_dtype == KT_DTYPE_I32 ?
			 ((int32_t *)c->ids)[i] : ((int64_t *)c->ids)[i];
	tm_reference(t, c->a.layer, xf, ids, c->w, T, k, c->a.skip_mask, ref);
	for (i = 0; i < n; i++) {
		double want = ref[i];

		if (c->a.flags & KT_MOE_F_ACCUMULATE)
			want += ybits_to_f32(c, c->y0, i);
		asum += fabs(want);
		esum += fabs(ybits_to_f32(c, c->yref, i) - want);
	}
	/* relative mean error, at the INT8 tolerance of selftests/moe/moe */
	if (esum > 0.04 * asum + 1e-6) {
		snprintf(why, why_len, "relative mean error %g", esum / asum);
		ret = -EDOM;
	}
out:
	free(ref);
	free(xf);
	free(ids);
	return ret < 0 ? ret : 0;
}

static void fail(struct sworker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void fail(struct sworker *w, const char *fmt, ...)
{
	va_list ap;

	if (w->err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(w->err, sizeof(w->err), fmt, ap);
	va_end(ap);
}

static uint64_t udata(const struct sworker *w, unsigned int ring,
		      uint64_t seq)
{
	return (uint64_t)w->id << 56 | (uint64_t)ring << 48 |
	       (seq & ((1ull << 48) - 1));
}

/* Account one completion of ring @ri; its slot must be waiting for it. */
static void complete(struct sworker *w, unsigned int ri,
		     const struct kt_cqe *cqe)
{
	struct sring *sr = &w->rings[ri];
	uint64_t seq = cqe->user_data & ((1ull << 48) - 1);
	struct sslot *sl = &sr->slots[seq % SOAK_SLOTS];
	int want;

	if (cqe->user_data >> 56 != w->id || (cqe->user_data >> 48 & 0xff) != ri) {
		fail(w, "ring %u.%u got user_data %#llx of another ring", w->id,
		     ri, (unsigned long long)cqe->user_data);
		return;
	}
	if (!sl->pending || (sl->seq & ((1ull << 48) - 1)) != seq) {
		fail(w, "ring %u.%u: completion of op %llu that is not out (duplicate or stray)",
		     w->id, ri, (unsigned long long)seq);
		return;
	}
	sl->pending = 0;
	sr->inflight--;
	w->completed++;
	want = sl->kind == SK_NOP ? 0 : sl->kind == SK_MOE ? w->s->moe_res :
	       -EINVAL;
	if (cqe->res != want) {
		fail(w, "ring %u.%u op %llu kind %u: res %d, want %d", w->id,
		     ri, (unsigned long long)seq, sl->kind, cqe->res, want);
		return;
	}
	if (sl->kind == SK_MOE) {
		const struct scase *c = &w->s->cases[sl->c];

		if (memcmp(sl->y, c->yref, c->ybytes))
			fail(w, "ring %u.%u op %llu (case %u): y differs from the op run alone",
			     w->id, ri, (unsigned long long)seq, sl->c);
	}
}

/* Reap what is there; with @wait, at least one (a bounded wait). */
static void reap(struct sworker *w, unsigned int ri, bool wait)
{
	struct sring *sr = &w->rings[ri];
	struct kt_cqe *cqe;
	int ret;

	if (wait) {
		ret = kt_wait_cqe_timeout(&sr->r, &cqe, 30ull * 1000000000);
		if (ret) {
			fail(w, "ring %u.%u: wait for one of %u ops out: %d",
			     w->id, ri, sr->inflight, ret);
			return;
		}
		complete(w, ri, cqe);
		kt_cqe_seen(&sr->r);
	}
	while (!kt_peek_cqe(&sr->r, &cqe)) {
		complete(w, ri, cqe);
		kt_cqe_seen(&sr->r);
	}
}

static void prep(struct sworker *w, unsigned int ri, struct kt_sqe *sqe,
		 struct sslot *sl)
{
	unsigned int pick = tu_next(&w->rng) % 100;
	uint64_t ud = udata(w, ri, sl->seq);

	if (pick < 55) {
		sl->kind = SK_NOP;
		kt_prep_nop(sqe, ud);
		w->nop++;
		return;
	}
	if (pick < 90) {
		const struct scase *c;
		struct kt_moe_args a;

		sl->kind = SK_MOE;
		sl->c = (uint16_t)(tu_next(&w->rng) % SOAK_CASES);
		c = &w->s->cases[sl->c];
		memcpy(sl->y, c->y0, c->ybytes);
		a = c->a;
		a.y = sl->y;
		kt_prep_moe(sqe, w->s->m, a.layer, &a, ud);
		w->moe++;
		return;
	}
	w->invalid++;
	switch (pick % 4) {
	case 0:
		sl->kind = SK_BAD_OPCODE;
		kt_prep_nop(sqe, ud);
		sqe->opcode = (uint8_t)(KT_OP_COUNT + tu_next(&w->rng) %
					(256 - KT_OP_COUNT));
		break;
	case 1:
		sl->kind = SK_BAD_FLAGS;
		kt_prep_nop(sqe, ud);
		sqe->flags = (uint8_t)(1u << (tu_next(&w->rng) % 8));
		break;
	case 2:
		sl->kind = SK_BAD_RESERVED;
		kt_prep_nop(sqe, ud);
		if (tu_next(&w->rng) & 1)
			sqe->reserved[tu_next(&w->rng) % 3] = 1;
		else
			sqe->pad[tu_next(&w->rng) % 6] = 1;
		break;
	default: {
		struct kt_moe_args a = w->s->cases[0].a;

		sl->kind = SK_BAD_ARGS;
		a.y = sl->y;
		switch (tu_next(&w->rng) % 3) {
		case 0:
			a.tokens = 0;
			break;
		case 1:
			a.top_k = KT_MOE_MAX_TOPK + 1;
			break;
		default:
			a.flags = 1u << 7;
			break;
		}
		kt_prep_moe(sqe, w->s->m, tu_next(&w->rng) & 1 ? a.layer : SOAK_L,
			    &a, ud);
	}
	}
}

/* Exit @ri with whatever it has out, then start it afresh. */
static void teardown(struct sworker *w, unsigned int ri)
{
	struct sring *sr = &w->rings[ri];
	unsigned int i;

	kt_ring_exit(&sr->r);
	w->dropped += sr->inflight;
	for (i = 0; i < SOAK_SLOTS; i++)
		sr->slots[i].pending = 0;
	sr->inflight = 0;
	sr->lazy = false;
	w->teardowns++;
	if (kt_ring_init(w->s->ctx, SOAK_ENTRIES, &sr->r))
		fail(w, "ring %u.%u: kt_ring_init after teardown failed",
		     w->id, ri);
}

static void *soak_thread(void *arg)
{
	struct sworker *w = arg;
	unsigned int ri, b, batch;

	for (ri = 0; ri < SOAK_RINGS; ri++)
		if (kt_ring_init(w->s->ctx, SOAK_ENTRIES, &w->rings[ri].r)) {
			fail(w, "kt_ring_init failed");
			return NULL;
		}
	while (w->submitted < w->target && !w->err[0]) {
		struct sring *sr;

		ri = tu_next(&w->rng) % SOAK_RINGS;
		sr = &w->rings[ri];
		/* now and then a lazy phase: no reaping until the CQ is full */
		if (!sr->lazy && tu_next(&w->rng) % 64 == 0)
			sr->lazy = true;
		batch = 1 + tu_next(&w->rng) % 8;
		for (b = 0; b < batch && w->submitted < w->target &&
			    !w->err[0]; b++) {
			struct sslot *sl = &sr->slots[sr->seq % SOAK_SLOTS];
			struct kt_sqe *sqe;

			while (sl->pending && !w->err[0])
				reap(w, ri, true);
			sqe = kt_get_sqe(&sr->r);
			if (!sqe) {
				/* SQ full: publish, then make room */
				kt_submit(&sr->r);
				if (sr->lazy && sr->inflight < 3 * SOAK_ENTRIES) {
					/* let the workers fill the CQ */
					nanosleep(&(struct timespec){ 0, 20000 },
						  NULL);
					continue;
				}
				w->cq_full += sr->lazy;
				sr->lazy = false;
				reap(w, ri, true);
				continue;
			}
			if (sr->inflight >= 3 * SOAK_ENTRIES)
				fail(w, "ring %u.%u: a free sqe with %u ops out: the CQ overflowed",
				     w->id, ri, sr->inflight);
			sl->seq = sr->seq++;
			sl->pending = 1;
			prep(w, ri, sqe, sl);
			sr->inflight++;
			w->submitted++;
		}
		if (kt_submit(&sr->r) < 0)
			fail(w, "kt_submit on an attached ring failed");
		if (!sr->lazy)
			reap(w, ri, false);
		if (tu_next(&w->rng) % 20000 == 0)
			teardown(w, ri);
	}
	for (ri = 0; ri < SOAK_RINGS; ri++) {
		while (w->rings[ri].inflight && !w->err[0])
			reap(w, ri, true);
		kt_ring_exit(&w->rings[ri].r);
	}
	return NULL;
}

static uint64_t soak_ops(void)
{
	const char *e = getenv("KT_SOAK_OPS");
	unsigned long long n = e ? strtoull(e, NULL, 0) : 0;

	return n ? n : SOAK_DEFAULT_OPS;
}

TEST_TIMEOUT(ring_soak, 300)
{
	struct kt_ctx_opts o = { .sz = sizeof(o) };
	static struct sworker w[SOAK_THREADS];
	struct tu_rng r = { 4242 };
	uint64_t total = soak_ops(), sum[8] = { 0 };
	struct soak s = { 0 };
	struct tmodel t;
	struct timespec t0, t1;
	char why[128] = "";
	unsigned int i;

	tm_init(&t, SOAK_H, SOAK_I, SOAK_E, SOAK_L, KT_DTYPE_F32, 77);
	ASSERT_EQ(kt_ctx_create(&o, &s.ctx), 0);
	ASSERT_EQ(tm_create(&t, s.ctx, KT_QUANT_INT8, 0, &s.m), 0);
	for (i = 0; i < SOAK_CASES; i++) {
		case_init(&s.cases[i], &r);
		if (case_expect(&s, &t, &s.cases[i], why, sizeof(why)))
			TH_LOG("case %u: %s", i, why);
		ASSERT_EQ(why[0], 0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < SOAK_THREADS; i++) {
		w[i].s = &s;
		w[i].id = i;
		w[i].target = total / SOAK_THREADS + (i < total % SOAK_THREADS);
		w[i].rng.s = 1000 + i;
		ASSERT_EQ(pthread_create(&w[i].th, NULL, soak_thread, &w[i]), 0);
	}
	for (i = 0; i < SOAK_THREADS; i++) {
		pthread_join(w[i].th, NULL);
		if (w[i].err[0])
			TH_LOG("thread %u: %s", i, w[i].err);
		EXPECT_EQ(w[i].err[0], 0);
		sum[0] += w[i].submitted;
		sum[1] += w[i].completed;
		sum[2] += w[i].dropped;
		sum[3] += w[i].moe;
		sum[4] += w[i].nop;
		sum[5] += w[i].invalid;
		sum[6] += w[i].cq_full;
		sum[7] += w[i].teardowns;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	TH_LOG("%llu ops (%llu MoE, %llu NOP, %llu invalid) on %u rings in %.1f s: %llu completed, %llu dropped by %llu teardowns, SQ held back by a full CQ %llu times",
	       (unsigned long long)sum[0], (unsigned long long)sum[3],
	       (unsigned long long)sum[4], (unsigned long long)sum[5],
	       SOAK_THREADS * SOAK_RINGS,
	       (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
	       (unsigned long long)sum[1], (unsigned long long)sum[2],
	       (unsigned long long)sum[7], (unsigned long long)sum[6]);
	/* every op completed once or was dropped with its ring, none else */
	EXPECT_EQ(sum[0], total);
	EXPECT_EQ(sum[1] + sum[2], sum[0]);
	kt_model_destroy(s.m);
	kt_ctx_destroy(s.ctx);
	for (i = 0; i < SOAK_CASES; i++)
		case_free(&s.cases[i]);
	tm_free(&t);
}

TEST_HARNESS_MAIN
