// SPDX-License-Identifier: MIT
/*
 * residency.c - GPU residency and re-placement with a fake backend: CPU
 * ops skip the GPU experts, kt_model_place() uploads and evicts exactly
 * the difference, unwinds a failed upload, refuses to drop an expert the
 * host lacks, never evicts an expert a held snapshot names, and ops that
 * run while placements flip each see one whole set (run under TSan too).
 */
#include <pthread.h>
#include <kt/kt.h>

#include "kt_test.h"
#include "../moe/model.h"
#include "ktcore/model.h"
#include "ktcore/residency.h"

#define H 128
#define I 128
#define E 8
#define L 2
#define K 3
#define T 4

struct fake {
	uint32_t on[L][E];	/* 1: on the "GPU" */
	uint32_t uploads, evicts, bad;	/* bad: double upload/evict */
	uint32_t fail_at;	/* fail the n-th upload (1-based; 0 never) */
	uint32_t released;
};

static int fake_upload(void *arg, uint32_t l, uint32_t e)
{
	struct fake *f = arg;
	uint32_t n = __atomic_add_fetch(&f->uploads, 1, __ATOMIC_RELAXED);

	if (f->fail_at && n == f->fail_at)
		return -ENOMEM;
	if (__atomic_exchange_n(&f->on[l][e], 1, __ATOMIC_RELAXED))
		__atomic_add_fetch(&f->bad, 1, __ATOMIC_RELAXED);
	return 0;
}

static int fake_evict(void *arg, uint32_t l, uint32_t e)
{
	struct fake *f = arg;

	__atomic_add_fetch(&f->evicts, 1, __ATOMIC_RELAXED);
	if (!__atomic_exchange_n(&f->on[l][e], 0, __ATOMIC_RELAXED))
		__atomic_add_fetch(&f->bad, 1, __ATOMIC_RELAXED);
	return 0;
}

static void fake_release(void *arg)
{
	((struct fake *)arg)->released++;
}

FIXTURE(rs) {
	struct tmodel tm;
	struct kt_ctx *ctx;
	struct kt_model *m;
	struct fake f;
	struct core_place_backend be;
	float x[T * H];
	int32_t ids[T * K];
	float w[T * K];
};

FIXTURE_SETUP(rs)
{
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 2,
				  .flags = KT_CTX_F_NO_PIN };
	struct tu_rng r = { 3 };
	unsigned int i;

	tm_init(&self->tm, H, I, E, L, KT_DTYPE_F32, 99);
	ASSERT_EQ(kt_ctx_create(&co, &self->ctx), 0);
	ASSERT_EQ(tm_create(&self->tm, self->ctx, KT_QUANT_INT8, 0, &self->m),
		  0);
	memset(&self->f, 0, sizeof(self->f));
	self->be = (struct core_place_backend){ &self->f, fake_upload,
						fake_evict, fake_release };
	tu_fill_normal(&r, self->x, T * H, 1.0);
	for (i = 0; i < T * K; i++) {
		self->ids[i] = (int32_t)(i % E);	/* every expert */
		self->w[i] = 0.25f + 0.01f * (float)i;
	}
}

FIXTURE_TEARDOWN(rs)
{
	kt_model_destroy(self->m);
	kt_ctx_destroy(self->ctx);
	tm_free(&self->tm);
}

static int op(struct kt_ctx *ctx, struct kt_model *m, uint32_t layer,
	      const float *x, const int32_t *ids, const float *w,
	      const uint64_t *skip, float *y)
{
	struct kt_moe_args a = {
		.x = x, .ids = ids, .w = w, .y = y, .tokens = T, .top_k = K,
		.layer = layer, .ids_dtype = KT_DTYPE_I32, .skip_mask = skip,
	};

	return kt_moe_forward(ctx, m, &a);
}

TEST_F(rs, no_backend)
{
	uint64_t g = ~0ull, want[L] = { 1, 0 };

	EXPECT_EQ(kt_model_gpu_experts(self->m, 0, &g), 0);
	EXPECT_EQ(g, 0u);
	EXPECT_EQ(kt_model_place(self->m, want), -ENODEV);
	EXPECT_EQ(kt_model_gpu_experts(self->m, L, &g), -EINVAL);
}

TEST_F(rs, ops_skip_gpu_experts)
{
	uint64_t init[L] = { 0x22, 0x81 }, g, skip = 0x4;
	float y0[T * H], y1[T * H];
	uint32_t l;

	ASSERT_EQ(core_residency_attach(self->m, &self->be, init), 0);
	EXPECT_EQ(core_residency_attach(self->m, &self->be, init), -EBUSY);
	EXPECT_EQ(self->f.uploads, 0u);	/* the caller put them there */
	for (l = 0; l < L; l++) {
		uint64_t both = init[l] | skip;

		EXPECT_EQ(kt_model_gpu_experts(self->m, l, &g), 2);
		EXPECT_EQ(g, init[l]);
		/* the GPU experts are skipped, also with the op's own mask */
		ASSERT_EQ(op(self->ctx, self->m, l, self->x, self->ids,
			     self->w, &skip, y1), 0);
		kt_model_destroy(self->m);
		ASSERT_EQ(tm_create(&self->tm, self->ctx, KT_QUANT_INT8, 0,
				    &self->m), 0);
		ASSERT_EQ(op(self->ctx, self->m, l, self->x, self->ids,
			     self->w, &both, y0), 0);
		EXPECT_EQ(memcmp(y0, y1, sizeof(y0)), 0);
		ASSERT_EQ(core_residency_attach(self->m, &self->be, init), 0);
	}
	/* the routing counters still see the GPU experts */
	{
		uint64_t c[E];

		ASSERT_EQ(kt_model_route_counts(self->m, L - 1, c), 0);
		EXPECT_GT(c[7], 0u);
	}
}

TEST_F(rs, place_moves_the_difference)
{
	uint64_t a[L] = { 0x03, 0x10 }, b[L] = { 0x06, 0x00 }, g;

	ASSERT_EQ(core_residency_attach(self->m, &self->be, NULL), 0);
	ASSERT_EQ(kt_model_place(self->m, a), 3);
	EXPECT_EQ(self->f.uploads, 3u);
	EXPECT_EQ(self->f.on[0][0] + self->f.on[0][1] + self->f.on[1][4], 3u);
	/* 0 and layer 1's 4 leave, 2 joins, 1 stays */
	ASSERT_EQ(kt_model_place(self->m, b), 3);
	EXPECT_EQ(self->f.uploads, 4u);
	EXPECT_EQ(self->f.evicts, 2u);
	EXPECT_EQ(self->f.on[0][0], 0u);
	EXPECT_EQ(self->f.on[0][1] + self->f.on[0][2], 2u);
	EXPECT_EQ(self->f.on[1][4], 0u);
	ASSERT_EQ(kt_model_gpu_experts(self->m, 0, &g), 2);
	EXPECT_EQ(g, 0x6u);
	/* the same set again moves nothing */
	EXPECT_EQ(kt_model_place(self->m, b), 0);
	EXPECT_EQ(self->f.bad, 0u);
	kt_model_destroy(self->m);
	self->m = NULL;
	EXPECT_EQ(self->f.released, 1u);
}

TEST_F(rs, failed_upload_changes_nothing)
{
	uint64_t a[L] = { 0x01, 0 }, b[L] = { 0x0f, 0x0f }, g;
	uint32_t e;

	ASSERT_EQ(core_residency_attach(self->m, &self->be, NULL), 0);
	ASSERT_EQ(kt_model_place(self->m, a), 1);
	self->f.fail_at = 4;
	EXPECT_EQ(kt_model_place(self->m, b), -ENOMEM);
	ASSERT_EQ(kt_model_gpu_experts(self->m, 0, &g), 1);
	EXPECT_EQ(g, 0x1u);
	ASSERT_EQ(kt_model_gpu_experts(self->m, 1, &g), 0);
	/* the two uploaded before the failure were evicted again */
	for (e = 0; e < E; e++) {
		EXPECT_EQ(self->f.on[0][e], e == 0);
		EXPECT_EQ(self->f.on[1][e], 0u);
	}
	EXPECT_EQ(self->f.bad, 0u);
}

/* An expert masked at load lives only on the GPU: it must stay there. */
TEST_F(rs, no_host_copy_stays)
{
	uint64_t lm[L] = { 0x80, 0 }, none[L] = { 0, 0 }, g;
	struct kt_model_desc d = {
		.sz = sizeof(d), .hidden = H, .inter = I, .n_experts = E,
		.n_layers = L, .src_dtype = KT_DTYPE_F32,
		.quant = KT_QUANT_INT8, .get_expert = tm_get_expert,
		.arg = &self->tm, .layer_masks = lm,
	};
	struct kt_place_opts po = { .sz = sizeof(po),
				    .strategy = KT_PLACE_FREQUENCY,
				    .per_layer = 2 };
	int32_t hot[T * K];
	float y[T * H];
	unsigned int i;

	kt_model_destroy(self->m);
	ASSERT_EQ(kt_model_create(self->ctx, &d, &self->m), 0);
	ASSERT_EQ(core_residency_attach(self->m, &self->be, lm), 0);
	EXPECT_EQ(kt_model_place(self->m, none), -EINVAL);
	ASSERT_EQ(kt_model_gpu_experts(self->m, 0, &g), 1);
	EXPECT_EQ(g, 0x80u);
	/* route layer 0 to 2 and 3, layer 1 to 5 and 6 */
	for (i = 0; i < T * K; i++)
		hot[i] = (int32_t)(2 + i % 2);
	ASSERT_EQ(op(self->ctx, self->m, 0, self->x, hot, self->w, NULL, y), 0);
	for (i = 0; i < T * K; i++)
		hot[i] = (int32_t)(5 + i % 2);
	ASSERT_EQ(op(self->ctx, self->m, 1, self->x, hot, self->w, NULL, y), 0);
	/* frequency re-placement: layer 0 keeps 7 and takes the hottest */
	EXPECT_EQ(kt_model_replace(self->m, &po), 3);
	ASSERT_EQ(kt_model_gpu_experts(self->m, 0, &g), 2);
	EXPECT_EQ(g, 0x80u | 0x4u);	/* 2 before 3: a tie, the lower id */
	ASSERT_EQ(kt_model_gpu_experts(self->m, 1, &g), 2);
	EXPECT_EQ(g, 0x60u);
	po.n_layers = 1;
	EXPECT_EQ(kt_model_replace(self->m, &po), -EINVAL);
	EXPECT_EQ(self->f.bad, 0u);
}

struct placer {
	struct kt_model *m;
	const uint64_t *masks;
	int ret;
};

static void *place_thread(void *arg)
{
	struct placer *p = arg;

	p->ret = kt_model_place(p->m, p->masks);
	return NULL;
}

/* A snapshot held (an op in flight) keeps its experts from eviction. */
TEST_F(rs, held_snapshot_delays_eviction)
{
	uint64_t a[L] = { 0x3, 0 }, b[L] = { 0x1, 0 }, g;
	struct placer p = { self->m, b, 1 };
	const struct core_res_snap *s;
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	unsigned int slot;
	pthread_t th;

	ASSERT_EQ(core_residency_attach(self->m, &self->be, NULL), 0);
	ASSERT_EQ(kt_model_place(self->m, a), 2);
	s = core_residency_get(self->m, &slot);
	ASSERT_NE(s, NULL);
	ASSERT_EQ(pthread_create(&th, NULL, place_thread, &p), 0);
	/* the new set is published at once; the eviction waits for us */
	do
		nanosleep(&ts, NULL);
	while (kt_model_gpu_experts(self->m, 0, &g) != 1);
	nanosleep(&ts, NULL);
	EXPECT_EQ(__atomic_load_n(&self->f.evicts, __ATOMIC_RELAXED), 0u);
	EXPECT_EQ(__atomic_load_n(&self->f.on[0][1], __ATOMIC_RELAXED), 1u);
	EXPECT_EQ(s->bits[0], 0x3u);	/* still readable, unchanged */
	core_residency_put(self->m, slot);
	pthread_join(th, NULL);
	EXPECT_EQ(p.ret, 1);
	EXPECT_EQ(self->f.evicts, 1u);
	EXPECT_EQ(self->f.on[0][1], 0u);
}

struct flipper {
	struct kt_model *m;
	const uint64_t *sets[2];
	uint32_t stop;
	uint32_t flips;
	int ret;
};

static void *flip_thread(void *arg)
{
	struct flipper *f = arg;
	int ret;

	while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) {
		ret = kt_model_place(f->m, f->sets[f->flips & 1]);
		if (ret < 0) {
			f->ret = ret;
			break;
		}
		__atomic_add_fetch(&f->flips, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/*
 * Ops on a ring while another thread flips the GPU set between A and B:
 * each result equals the op run wholly with A or wholly with B.
 */
TEST_F_TIMEOUT(rs, ops_see_whole_sets_while_flipping, 120)
{
	static const uint64_t A[L] = { 0x0f, 0 }, B[L] = { 0xf0, 0 };
	static float ya[T * H], yb[T * H], y[8][T * H];
	struct flipper fl = { .m = self->m, .sets = { A, B } };
	unsigned int n_a = 0, n_b = 0, i, round;
	struct kt_ring ring;
	struct kt_cqe *cqe;
	pthread_t th;

	ASSERT_EQ(op(self->ctx, self->m, 0, self->x, self->ids, self->w,
		     &A[0], ya), 0);
	ASSERT_EQ(op(self->ctx, self->m, 0, self->x, self->ids, self->w,
		     &B[0], yb), 0);
	ASSERT_NE(memcmp(ya, yb, sizeof(ya)), 0);
	for (i = 0; i < E; i++)
		self->f.on[0][i] = A[0] >> i & 1;
	ASSERT_EQ(core_residency_attach(self->m, &self->be, A), 0);
	ASSERT_EQ(kt_ring_init(self->ctx, 8, &ring), 0);
	ASSERT_EQ(pthread_create(&th, NULL, flip_thread, &fl), 0);
	for (round = 0; round < 40; round++) {
		for (i = 0; i < 8; i++) {
			struct kt_moe_args a = {
				.x = self->x, .ids = self->ids, .w = self->w,
				.y = y[i], .tokens = T, .top_k = K,
				.ids_dtype = KT_DTYPE_I32,
			};

			kt_prep_moe(kt_get_sqe(&ring), self->m, 0, &a, i);
		}
		ASSERT_EQ(kt_submit(&ring), 8);
		for (i = 0; i < 8; i++) {
			ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
			EXPECT_EQ(cqe->res, 0);
			kt_cqe_seen(&ring);
		}
		for (i = 0; i < 8; i++) {
			bool is_a = !memcmp(y[i], ya, sizeof(ya));
			bool is_b = !memcmp(y[i], yb, sizeof(yb));

			EXPECT_TRUE(is_a || is_b);
			n_a += is_a;
			n_b += is_b;
		}
	}
	__atomic_store_n(&fl.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	kt_ring_exit(&ring);
	EXPECT_EQ(fl.ret, 0);
	EXPECT_GT(fl.flips, 0u);
	EXPECT_EQ(self->f.bad, 0u);
	TH_LOG("%u flips; %u ops saw set A, %u set B", fl.flips, n_a, n_b);
}

TEST_HARNESS_MAIN
