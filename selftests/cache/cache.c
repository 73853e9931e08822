// SPDX-License-Identifier: MIT
/*
 * cache.c - models larger than their budget: results bitwise equal to the
 * resident model for tiny budgets, budgets below one layer refused, read
 * faults and checksum mismatches with the next op right, prefetch, pins,
 * two submitting threads; routing counters and their file.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kt_test.h"
#include "ktcore/cache.h"
#include "ktcore/core.h"
#include "ktcore/moe.h"

#define H 256
#define I 256
#define E 8
#define L 3

struct tops {
	unsigned int T, k, layer;
	float *x;
	int32_t *ids;
	float *w;
	float *y;	/* the resident model's result */
};

FIXTURE(c) {
	char dir[128];
	char path[160];
	struct kt_ctx *ctx;
	struct kt_model *full;
	uint64_t stride;
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* the faults below are logged as errors on purpose: keep them quiet */
static void quiet(void *arg, enum kt_log_level level, const char *msg)
{
}

FIXTURE_SETUP(c)
{
	struct kt_ktw_synth o = { .sz = sizeof(o), .quant = KT_QUANT_INT8,
				  .hidden = H, .inter = I, .n_experts = E,
				  .n_layers = L, .top_k = 2, .seed = 7 };
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 2,
				  .flags = KT_CTX_F_NO_PIN, .log_fn = quiet };
	struct kt_model_info mi;

	snprintf(self->dir, sizeof(self->dir), "/var/tmp/kt-cache-%d",
		 (int)getpid());
	mkdir(self->dir, 0755);
	snprintf(self->path, sizeof(self->path), "%s/m.ktw", self->dir);
	o.path = self->path;
	ASSERT_EQ(kt_ktw_write_synth(&o), 0);
	ASSERT_EQ(kt_ctx_create(&co, &self->ctx), 0);
	ASSERT_EQ(kt_model_open(self->ctx, self->path, NULL, &self->full), 0);
	kt_model_get_info(self->full, &mi);
	self->stride = (mi.expert_bytes + 4095) / 4096 * 4096;
}

FIXTURE_TEARDOWN(c)
{
	char tmp[200];

	core_cache_fault = NULL;
	kt_model_destroy(self->full);
	kt_ctx_destroy(self->ctx);
	unlink(self->path);
	snprintf(tmp, sizeof(tmp), "%s/route", self->dir);
	unlink(tmp);
	rmdir(self->dir);
}

static void op_make(struct tops *op, uint64_t *s, unsigned int T,
		    unsigned int k, unsigned int layer)
{
	unsigned int i;

	op->T = T;
	op->k = k;
	op->layer = layer;
	op->x = malloc(sizeof(float) * T * H);
	op->ids = malloc(sizeof(int32_t) * T * k);
	op->w = malloc(sizeof(float) * T * k);
	op->y = malloc(sizeof(float) * T * H);
	for (i = 0; i < T * H; i++)
		op->x[i] = (float)((int)(rnd(s) % 2001) - 1000) / 1000.0f;
	for (i = 0; i < T * k; i++) {
		/* a few out of range, a few repeats within a token */
		op->ids[i] = (int32_t)(rnd(s) % (E + 1)) - (rnd(s) % 16 == 0);
		op->w[i] = (float)(rnd(s) % 1000) / 1000.0f;
	}
}

static void op_free(struct tops *op)
{
	free(op->x);
	free(op->ids);
	free(op->w);
	free(op->y);
}

static int op_run(struct kt_ctx *ctx, struct kt_model *m,
		  const struct tops *op, float *y)
{
	struct kt_moe_args a = {
		.x = op->x, .ids = op->ids, .w = op->w, .y = y,
		.tokens = op->T, .top_k = op->k, .layer = op->layer,
		.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I32,
		.y_dtype = KT_DTYPE_F32,
	};

	return kt_moe_forward(ctx, m, &a);
}

/* @n random ops, their results from the resident model. */
static struct tops *ops_make(struct kt_ctx *ctx, struct kt_model *full,
			     unsigned int n, uint64_t seed)
{
	static const unsigned int Ts[] = { 1, 1, 2, 3, 17, 40 };
	struct tops *ops = calloc(n, sizeof(*ops));
	uint64_t s = seed;
	unsigned int i;

	for (i = 0; i < n; i++) {
		op_make(&ops[i], &s, Ts[rnd(&s) % 6], 1 + rnd(&s) % 4,
			(unsigned int)(rnd(&s) % L));
		if (op_run(ctx, full, &ops[i], ops[i].y))
			return NULL;
	}
	return ops;
}

static void ops_free(struct tops *ops, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		op_free(&ops[i]);
	free(ops);
}

static int open_budget(struct kt_ctx *ctx, const char *path, uint64_t budget,
		       uint32_t flags, uint32_t cflags, uint32_t pf,
		       struct kt_model **m)
{
	struct kt_model_opts mo = { .sz = sizeof(mo), .flags = flags,
				    .budget = budget, .cache_flags = cflags,
				    .prefetch_next = pf, .io_block = 64 << 10,
				    .io_depth = 8 };

	return kt_model_open(ctx, path, &mo, m);
}

static bool same(const struct tops *op, const float *y)
{
	return !memcmp(op->y, y, sizeof(float) * op->T * H);
}

TEST_F(c, bitwise_equal_with_tiny_budgets)
{
	static const struct { unsigned int slots; uint32_t flags, cflags, pf; } v[] = {
		{ E, 0, 0, 0 },
		{ E + 1, 0, KT_CACHE_F_LRU, 0 },
		{ E + 3, KT_MODEL_F_NO_URING, 0, 0 },
		{ E + 2, 0, KT_CACHE_F_NO_FIXED | KT_CACHE_F_VERIFY_ALL, 2 },
		{ 2 * E, KT_MODEL_F_NO_VERIFY, 0, 4 },
	};
	const unsigned int n = 60;
	struct tops *ops;
	float *y = malloc(sizeof(float) * 40 * H);
	size_t i;
	unsigned int j;

	core_moe_max_chunk = 16;	/* several chunks per op */
	ops = ops_make(self->ctx, self->full, n, 11);
	ASSERT_NE(ops, NULL);
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		struct kt_model *m = NULL;
		struct kt_cache_stats st;

		ASSERT_EQ(open_budget(self->ctx, self->path,
				      v[i].slots * self->stride, v[i].flags,
				      v[i].cflags, v[i].pf, &m), 0);
		for (j = 0; j < n; j++) {
			memset(y, 0xff, sizeof(float) * 40 * H);
			ASSERT_EQ(op_run(self->ctx, m, &ops[j], y), 0);
			ASSERT_TRUE(same(&ops[j], y));
		}
		EXPECT_EQ(core_cache_not_ready, 0u);
		ASSERT_EQ(kt_model_cache_stats(m, &st, false), 0);
		TH_LOG("slots %u: hits %llu misses %llu evictions %llu prefetches %llu read %llu",
		       v[i].slots, (unsigned long long)st.hits,
		       (unsigned long long)st.misses,
		       (unsigned long long)st.evictions,
		       (unsigned long long)st.prefetches,
		       (unsigned long long)st.bytes_read);
		EXPECT_EQ(st.slots, v[i].slots);
		EXPECT_GT(st.misses, 0u);
		EXPECT_GT(st.evictions, 0u);
		EXPECT_EQ(st.io_errors, 0u);
		EXPECT_EQ(st.ops, n);
		if (v[i].pf)
			EXPECT_GT(st.prefetches, 0u);
		kt_model_destroy(m);
	}
	ops_free(ops, n);
	free(y);
}

/*
 * On 2 (fake) nodes each node computes its slice of I from slots whose
 * pages are bound to it: the cached model's results are still bitwise
 * the resident model's on the same nodes.
 */
TEST_F(c, bitwise_equal_on_fake_nodes)
{
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 2,
				  .flags = KT_CTX_F_NO_PIN, .log_fn = quiet };
	struct kt_model *full = NULL, *m = NULL;
	struct kt_ctx *ctx = NULL;
	const unsigned int n = 30;
	float *y = malloc(sizeof(float) * 40 * H);
	struct tops *ops;
	unsigned int j;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		SKIP(return, "one CPU: no fake node split");
	setenv("KT_FAKE_NUMA", "2", 1);
	ASSERT_EQ(kt_ctx_create(&co, &ctx), 0);
	unsetenv("KT_FAKE_NUMA");
	ASSERT_EQ(core_ctx_nodes(ctx), 2u);
	ASSERT_EQ(kt_model_open(ctx, self->path, NULL, &full), 0);
	ops = ops_make(ctx, full, n, 23);
	ASSERT_NE(ops, NULL);
	ASSERT_EQ(open_budget(ctx, self->path, (E + 2) * self->stride, 0, 0,
			      1, &m), 0);
	for (j = 0; j < n; j++) {
		memset(y, 0xff, sizeof(float) * 40 * H);
		ASSERT_EQ(op_run(ctx, m, &ops[j], y), 0);
		ASSERT_TRUE(same(&ops[j], y));
	}
	kt_model_destroy(m);
	kt_model_destroy(full);
	kt_ctx_destroy(ctx);
	ops_free(ops, n);
	free(y);
}

TEST_F(c, budget_below_one_layer_is_refused)
{
	struct kt_model *m = NULL;
	struct kt_cache_stats st;

	EXPECT_EQ(open_budget(self->ctx, self->path, E * self->stride - 1, 0,
			      0, 0, &m), -EINVAL);
	EXPECT_NE(strstr(kt_last_error(), "minimum"), NULL);
	TH_LOG("%s", kt_last_error());
	/* unknown cache flags */
	EXPECT_EQ(open_budget(self->ctx, self->path, E * self->stride, 0,
			      1u << 31, 0, &m), -EINVAL);
	/* at least the model's size: the plain resident model */
	ASSERT_EQ(open_budget(self->ctx, self->path,
			      (uint64_t)L * E * self->stride, 0, 0, 0, &m), 0);
	ASSERT_EQ(kt_model_cache_stats(m, &st, false), 0);
	EXPECT_EQ(st.slots, 0u);
	kt_model_destroy(m);
}

TEST_F(c, mmap_load_is_bitwise_equal)
{
	struct kt_model_opts mo = { .sz = sizeof(mo), .flags = KT_MODEL_F_MMAP,
				    .budget = E * self->stride };
	const unsigned int n = 10;
	struct tops *ops;
	struct kt_model *m = NULL;
	struct kt_cache_stats st;
	float *y = malloc(sizeof(float) * 40 * H);
	unsigned int j;

	ops = ops_make(self->ctx, self->full, n, 41);
	ASSERT_NE(ops, NULL);
	/* mapped, not cached: the budget does not apply */
	ASSERT_EQ(kt_model_open(self->ctx, self->path, &mo, &m), 0);
	ASSERT_EQ(kt_model_cache_stats(m, &st, false), 0);
	EXPECT_EQ(st.slots, 0u);
	for (j = 0; j < n; j++) {
		ASSERT_EQ(op_run(self->ctx, m, &ops[j], y), 0);
		ASSERT_TRUE(same(&ops[j], y));
	}
	kt_model_destroy(m);
	ops_free(ops, n);
	free(y);
}

/* ---- faults ---- */

enum fault_kind { F_EIO, F_SHORT, F_CSUM, F_SUBMIT };
static enum fault_kind fault_kind;
static int fault_at;		/* event index to fail */
static int fault_events;
static int fault_fired;

static void fault_hook(uint32_t layer, uint32_t expert, uint8_t *dst,
		       uint32_t len, int *res)
{
	bool submit = !dst;

	if (submit != (fault_kind == F_SUBMIT))
		return;
	if (fault_events++ != fault_at)
		return;
	fault_fired++;
	switch (fault_kind) {
	case F_EIO:
		*res = -EIO;
		break;
	case F_SHORT:
		if (*res > 0)
			*res -= 512;
		break;
	case F_CSUM:
		dst[len / 3] ^= 0x40;
		break;
	case F_SUBMIT:
		*res = -ENOMEM;
		break;
	}
}

TEST_F(c, faults_fail_one_op_and_the_next_is_right)
{
	const unsigned int n = 12;
	struct tops *ops;
	float *y = malloc(sizeof(float) * 40 * H);
	int kind, at, fails = 0;
	unsigned int j;

	ops = ops_make(self->ctx, self->full, n, 23);
	ASSERT_NE(ops, NULL);
	core_cache_fault = fault_hook;
	for (kind = F_EIO; kind <= F_SUBMIT; kind++) {
		for (at = 0; at < 40; at += 3) {
			struct kt_model *m = NULL;
			struct kt_cache_stats st;

			fault_kind = kind;
			fault_at = at;
			fault_events = 0;
			fault_fired = 0;
			/* 64 KiB requests: a blob takes several */
			ASSERT_EQ(open_budget(self->ctx, self->path,
					      (E + 1) * self->stride, 0,
					      kind == F_CSUM ? KT_CACHE_F_VERIFY_ALL : 0,
					      0, &m), 0);
			for (j = 0; j < n; j++) {
				int before = fault_fired, ret;

				ret = op_run(self->ctx, m, &ops[j], y);
				if (fault_fired != before) {
					/* the fault may hit a read this op needs */
					if (ret) {
						ASSERT_EQ(ret, -EIO);
						fails++;
						ret = op_run(self->ctx, m, &ops[j], y);
					}
				}
				ASSERT_EQ(ret, 0);
				ASSERT_TRUE(same(&ops[j], y));
			}
			ASSERT_EQ(kt_model_cache_stats(m, &st, false), 0);
			if (fault_fired)
				EXPECT_GT(st.io_errors, 0u);
			kt_model_destroy(m);
		}
	}
	TH_LOG("%d ops failed with -EIO and were retried", fails);
	EXPECT_GT(fails, 20);
	ops_free(ops, n);
	free(y);
}

TEST_F(c, prefetch_and_pins)
{
	struct kt_model *m = NULL;
	struct kt_cache_stats st;
	int32_t ids[3] = { 1, 4, 6 };
	struct kt_sqe sqe;
	struct kt_ring ring;
	struct kt_cqe *cqe;
	unsigned int j;
	const unsigned int n = 30;
	struct tops *ops;
	float *y = malloc(sizeof(float) * 40 * H);

	ops = ops_make(self->ctx, self->full, n, 5);
	ASSERT_NE(ops, NULL);
	ASSERT_EQ(open_budget(self->ctx, self->path, (E + 2) * self->stride, 0,
			      0, 0, &m), 0);
	/* nothing read at open; a prefetch starts reads and returns */
	ASSERT_EQ(kt_model_cache_stats(m, &st, false), 0);
	EXPECT_EQ(st.bytes_read, 0u);
	EXPECT_EQ(kt_model_prefetch(self->ctx, m, 1, ids, 3), 3);
	EXPECT_EQ(kt_model_prefetch(self->ctx, m, 1, ids, 3), 0);
	EXPECT_EQ(kt_model_prefetch(self->ctx, m, L, ids, 3), -EINVAL);
	ids[0] = E;
	EXPECT_EQ(kt_model_prefetch(self->ctx, m, 1, ids, 3), -EINVAL);
	/* through a ring */
	ASSERT_EQ(kt_ring_init(self->ctx, 2, &ring), 0);
	{
		struct kt_sqe *s = kt_get_sqe(&ring);

		ASSERT_NE(s, NULL);
		kt_prep_prefetch(s, m, 0, NULL, 2, 77);
		kt_submit(&ring);
		ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
		EXPECT_EQ(cqe->user_data, 77u);
		EXPECT_EQ(cqe->res, 0);	/* no counts yet: none likely */
		kt_cqe_seen(&ring);
	}
	kt_ring_exit(&ring);
	(void)sqe;
	/* pins: at most slots - E */
	EXPECT_EQ(kt_model_pin(m, 2, 3, true), 0);
	EXPECT_EQ(kt_model_pin(m, 2, 3, true), 0);	/* counts */
	EXPECT_EQ(kt_model_pin(m, 0, 5, true), 0);
	EXPECT_EQ(kt_model_pin(m, 0, 6, true), -ENOSPC);
	EXPECT_EQ(kt_model_pin(m, 1, 2, false), -EINVAL);
	EXPECT_EQ(kt_model_pin(m, L, 0, true), -EINVAL);
	ASSERT_EQ(kt_model_cache_stats(m, &st, true), 0);
	EXPECT_EQ(st.pinned, 2u);
	for (j = 0; j < n; j++) {
		ASSERT_EQ(op_run(self->ctx, m, &ops[j], y), 0);
		ASSERT_TRUE(same(&ops[j], y));
	}
	/* the pinned ones never left: pinning again reads nothing */
	ASSERT_EQ(kt_model_cache_stats(m, &st, true), 0);
	EXPECT_EQ(kt_model_pin(m, 0, 5, true), 0);
	ASSERT_EQ(kt_model_cache_stats(m, &st, false), 0);
	EXPECT_EQ(st.bytes_read, 0u);
	EXPECT_EQ(kt_model_pin(m, 0, 5, false), 0);
	EXPECT_EQ(kt_model_pin(m, 0, 5, false), 0);
	EXPECT_EQ(kt_model_pin(m, 0, 5, false), -EINVAL);
	/* N most likely after counts exist */
	EXPECT_GE(kt_model_prefetch(self->ctx, m, 2, NULL, 2), 0);
	kt_model_destroy(m);
	ops_free(ops, n);
	free(y);
}

/* ---- two submitting threads ---- */

struct thr {
	struct kt_ctx *ctx;
	struct kt_model *m;
	struct tops *ops;
	unsigned int n, rounds;
	int bad;
	uint64_t seed;
};

static void *thr_main(void *p)
{
	struct thr *t = p;
	struct kt_ring ring;
	float *y = malloc(sizeof(float) * 40 * H);
	unsigned int r;

	if (kt_ring_init(t->ctx, 4, &ring)) {
		t->bad = -1;
		return NULL;
	}
	for (r = 0; r < t->rounds; r++) {
		struct tops *op = &t->ops[rnd(&t->seed) % t->n];
		struct kt_moe_args a = {
			.x = op->x, .ids = op->ids, .w = op->w, .y = y,
			.tokens = op->T, .top_k = op->k,
			.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I32,
			.y_dtype = KT_DTYPE_F32,
		};
		struct kt_sqe *s;
		struct kt_cqe *cqe = NULL;

		if (rnd(&t->seed) % 4 == 0) {
			s = kt_get_sqe(&ring);
			kt_prep_prefetch(s, t->m, (unsigned int)(rnd(&t->seed) % L),
					 NULL, 3, 1);
			kt_submit(&ring);
			if (kt_wait_cqe(&ring, &cqe) || cqe->res < 0)
				t->bad++;
			kt_cqe_seen(&ring);
		}
		s = kt_get_sqe(&ring);
		kt_prep_moe(s, t->m, op->layer, &a, 2);
		kt_submit(&ring);
		if (kt_wait_cqe(&ring, &cqe) || cqe->res || !same(op, y))
			t->bad++;
		kt_cqe_seen(&ring);
	}
	kt_ring_exit(&ring);
	free(y);
	return NULL;
}

TEST_TIMEOUT(two_threads_random_run, 120)
{
	struct kt_ktw_synth o = { .sz = sizeof(o), .quant = KT_QUANT_INT4,
				  .hidden = H, .inter = I, .n_experts = E,
				  .n_layers = L, .top_k = 2, .seed = 3 };
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 2,
				  .flags = KT_CTX_F_NO_PIN, .log_fn = quiet };
	char path[128];
	struct kt_ctx *ctx;
	struct kt_model *full, *m;
	struct kt_model_info mi;
	struct thr t[2];
	pthread_t th[2];
	int i;

	snprintf(path, sizeof(path), "/var/tmp/kt-cache-thr-%d.ktw", (int)getpid());
	o.path = path;
	ASSERT_EQ(kt_ktw_write_synth(&o), 0);
	ASSERT_EQ(kt_ctx_create(&co, &ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, path, NULL, &full), 0);
	kt_model_get_info(full, &mi);
	ASSERT_EQ(open_budget(ctx, path, (E + 1) * ((mi.expert_bytes + 4095) /
				4096 * 4096), 0, 0, 3, &m), 0);
	unlink(path);	/* the open fd keeps it */
	for (i = 0; i < 2; i++) {
		t[i] = (struct thr){ .ctx = ctx, .m = m, .n = 20, .rounds = 300,
				     .seed = 100 + i };
		t[i].ops = ops_make(ctx, full, 20, 1000 + i);
		ASSERT_NE(t[i].ops, NULL);
	}
	for (i = 0; i < 2; i++)
		ASSERT_EQ(pthread_create(&th[i], NULL, thr_main, &t[i]), 0);
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	EXPECT_EQ(t[0].bad, 0);
	EXPECT_EQ(t[1].bad, 0);
	/* no op computed from a slot being filled or not yet checked */
	EXPECT_EQ(core_cache_not_ready, 0u);
	for (i = 0; i < 2; i++)
		ops_free(t[i].ops, 20);
	kt_model_destroy(m);
	kt_model_destroy(full);
	kt_ctx_destroy(ctx);
}

/* ---- routing counters ---- */

TEST_F(c, route_counts_and_file)
{
	const unsigned int n = 10;
	struct tops *ops;
	uint64_t want[L][E], got[E], s = 9;
	char rf[200];
	struct kt_model *other;
	unsigned int j, t, k, l, e;
	int fd;

	kt_model_route_reset(self->full);
	memset(want, 0, sizeof(want));
	ops = ops_make(self->ctx, self->full, n, 31);
	ASSERT_NE(ops, NULL);
	for (j = 0; j < n; j++)
		for (t = 0; t < ops[j].T; t++)
			for (k = 0; k < ops[j].k; k++) {
				int32_t id = ops[j].ids[t * ops[j].k + k];
				unsigned int k2;

				for (k2 = 0; k2 < k; k2++)
					if (ops[j].ids[t * ops[j].k + k2] == id)
						break;
				if (id >= 0 && id < E && k2 == k)
					want[ops[j].layer][id]++;
			}
	for (l = 0; l < L; l++) {
		ASSERT_EQ(kt_model_route_counts(self->full, l, got), 0);
		for (e = 0; e < E; e++)
			EXPECT_EQ(got[e], want[l][e]);
	}
	EXPECT_EQ(kt_model_route_counts(self->full, L, got), -EINVAL);
	snprintf(rf, sizeof(rf), "%s/route", self->dir);
	ASSERT_EQ(kt_model_route_save(self->full, rf), 0);
	kt_model_route_reset(self->full);
	ASSERT_EQ(kt_model_route_counts(self->full, 1, got), 0);
	for (e = 0; e < E; e++)
		EXPECT_EQ(got[e], 0u);
	ASSERT_EQ(kt_model_route_load(self->full, rf), 0);
	for (l = 0; l < L; l++) {
		ASSERT_EQ(kt_model_route_counts(self->full, l, got), 0);
		for (e = 0; e < E; e++)
			EXPECT_EQ(got[e], want[l][e]);
	}
	/* hostile files: every byte flipped, truncations, growth */
	{
		uint8_t buf[512], mod[600];
		ssize_t len;
		int i;

		fd = open(rf, O_RDONLY);
		len = read(fd, buf, sizeof(buf));
		close(fd);
		ASSERT_EQ(len, 32 + 8 * L * E + 8);
		kt_model_route_reset(self->full);
		for (i = 0; i < len + 2; i++) {
			size_t ml = (size_t)len;

			memcpy(mod, buf, (size_t)len);
			if (i < len)
				mod[i] ^= (uint8_t)(1u << (rnd(&s) % 8));
			else if (i == len)
				ml = (size_t)len - 1 - rnd(&s) % 40;
			else
				mod[ml++] = 0;
			fd = open(rf, O_WRONLY | O_TRUNC);
			ASSERT_EQ(write(fd, mod, ml), (ssize_t)ml);
			close(fd);
			EXPECT_EQ(kt_model_route_load(self->full, rf), -EINVAL);
		}
		ASSERT_EQ(kt_model_route_counts(self->full, 0, got), 0);
		for (e = 0; e < E; e++)
			EXPECT_EQ(got[e], 0u);
		EXPECT_EQ(kt_model_route_load(self->full, "/nonexistent/x"), -ENOENT);
	}
	/* another geometry */
	{
		struct kt_ktw_synth o = { .sz = sizeof(o), .quant = KT_QUANT_INT8,
					  .hidden = 128, .inter = 128,
					  .n_experts = E + 1, .n_layers = L };
		char p2[200];

		snprintf(p2, sizeof(p2), "%s/o.ktw", self->dir);
		o.path = p2;
		ASSERT_EQ(kt_ktw_write_synth(&o), 0);
		ASSERT_EQ(kt_model_open(self->ctx, p2, NULL, &other), 0);
		unlink(p2);
		ASSERT_EQ(kt_model_route_save(self->full, rf), 0);
		EXPECT_EQ(kt_model_route_load(other, rf), -EINVAL);
		EXPECT_NE(strstr(kt_last_error(), "layers"), NULL);
		kt_model_destroy(other);
	}
	ops_free(ops, n);
}

TEST_HARNESS_MAIN
