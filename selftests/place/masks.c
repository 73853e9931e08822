// SPDX-License-Identifier: MIT
/*
 * masks.c - per-layer load masks (layer_masks): the experts a layer leaves
 * out are neither in host memory (resident_bytes shrinks by exactly them)
 * nor run, for kt_model_create() and every kt_model_open() path (read,
 * mmap, cache); the old one-bitmap expert_mask still works and combines.
 */
#include <sys/stat.h>
#include <kt/kt.h>

#include "kt_test.h"

#define H 128
#define I 128
#define E 8
#define L 3
#define T 6
#define K 3

static float wbig[3][H * I + L * E * 97];

static int get_expert_big(void *arg, uint32_t layer, uint32_t e,
			  struct kt_expert_src *src)
{
	size_t off = ((size_t)layer * E + e) * 97;

	src->gate = wbig[0] + off;
	src->up = wbig[1] + off;
	src->down = wbig[2] + off;
	return 0;
}

static void fill(float *p, size_t n, uint32_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
	}
}

FIXTURE(mk) {
	struct kt_ctx *ctx;
	char dir[64];
	char ktw[96];
	float x[T * H];
	int32_t ids[T * K];
	float w[T * K];
};

FIXTURE_SETUP(mk)
{
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 2,
				  .flags = KT_CTX_F_NO_PIN };
	struct kt_ktw_synth s = { .sz = sizeof(s), .quant = KT_QUANT_INT8,
				  .hidden = H, .inter = I, .n_experts = E,
				  .n_layers = L, .top_k = K, .seed = 11 };
	unsigned int i;

	ASSERT_EQ(kt_ctx_create(&co, &self->ctx), 0);
	snprintf(self->dir, sizeof(self->dir), "/tmp/kt-masks-%d",
		 (int)getpid());
	ASSERT_EQ(mkdir(self->dir, 0700), 0);
	snprintf(self->ktw, sizeof(self->ktw), "%s/m.ktw", self->dir);
	s.path = self->ktw;
	ASSERT_EQ(kt_ktw_write_synth(&s), 0);
	fill(self->x, T * H, 5);
	fill(self->w, T * K, 6);
	for (i = 0; i < T * K; i++)
		self->ids[i] = (int32_t)((i * 5 + i / K) % E);
}

FIXTURE_TEARDOWN(mk)
{
	unlink(self->ktw);
	rmdir(self->dir);
	kt_ctx_destroy(self->ctx);
}

/* layer 0: experts 1, 2; layer 1: none; layer 2: 0 and 7 */
static const uint64_t lm[L] = { 0x6, 0, 0x81 };

static unsigned int n_masked(void)
{
	unsigned int l, n = 0;

	for (l = 0; l < L; l++)
		n += (unsigned int)__builtin_popcountll(lm[l]);
	return n;
}

/* Run layer @l on @m; @skip as the op's skip mask. */
static int run(struct kt_ctx *ctx, struct kt_model *m, uint32_t l,
	       const float *x, const int32_t *ids, const float *w,
	       const uint64_t *skip, float *y)
{
	struct kt_moe_args a = {
		.x = x, .ids = ids, .w = w, .y = y, .tokens = T, .top_k = K,
		.layer = l, .ids_dtype = KT_DTYPE_I32, .skip_mask = skip,
	};

	return kt_moe_forward(ctx, m, &a);
}

/* @m (left out by @lm) computes what @full computes skipping them. */
static void same_as_skipped(struct kt_test_meta *_metadata,
			    struct kt_ctx *ctx, struct kt_model *full,
			    struct kt_model *m, const float *x,
			    const int32_t *ids, const float *w)
{
	float y0[T * H], y1[T * H];
	uint32_t l;

	for (l = 0; l < L; l++) {
		ASSERT_EQ(run(ctx, full, l, x, ids, w, &lm[l], y0), 0);
		ASSERT_EQ(run(ctx, m, l, x, ids, w, NULL, y1), 0);
		EXPECT_EQ(memcmp(y0, y1, sizeof(y0)), 0);
	}
}

TEST_F(mk, create_keeps_only_host_experts)
{
	struct kt_model_desc d = {
		.sz = sizeof(d), .hidden = H, .inter = I, .n_experts = E,
		.n_layers = L, .src_dtype = KT_DTYPE_F32,
		.quant = KT_QUANT_INT8, .get_expert = get_expert_big,
	};
	struct kt_model_info full_i, mi;
	struct kt_model *full, *m;
	uint64_t all = 0x10;

	fill(wbig[0], sizeof(wbig[0]) / 4, 1);
	fill(wbig[1], sizeof(wbig[1]) / 4, 2);
	fill(wbig[2], sizeof(wbig[2]) / 4, 3);
	ASSERT_EQ(kt_model_create(self->ctx, &d, &full), 0);
	d.layer_masks = lm;
	ASSERT_EQ(kt_model_create(self->ctx, &d, &m), 0);
	kt_model_get_info(full, &full_i);
	kt_model_get_info(m, &mi);
	EXPECT_EQ(full_i.resident_bytes, (uint64_t)L * E * full_i.expert_bytes);
	EXPECT_EQ(mi.resident_bytes,
		  full_i.resident_bytes - n_masked() * mi.expert_bytes);
	TH_LOG("host bytes: %llu of %llu (%u of %u experts on the GPU)",
	       (unsigned long long)mi.resident_bytes,
	       (unsigned long long)full_i.resident_bytes, n_masked(), L * E);
	same_as_skipped(_metadata, self->ctx, full, m, self->x, self->ids,
			self->w);
	kt_model_destroy(m);
	/* the old mask and the new one together: either leaves one out */
	d.expert_mask = &all;
	ASSERT_EQ(kt_model_create(self->ctx, &d, &m), 0);
	kt_model_get_info(m, &mi);
	EXPECT_EQ(mi.resident_bytes, full_i.resident_bytes -
		  (n_masked() + L) * mi.expert_bytes);
	kt_model_destroy(m);
	kt_model_destroy(full);
}

static void open_case(struct kt_test_meta *_metadata, struct kt_ctx *ctx,
		      const char *path, uint32_t flags, uint64_t budget,
		      const float *x, const int32_t *ids, const float *w)
{
	struct kt_model_opts o = { .sz = sizeof(o), .flags = flags,
				   .budget = budget };
	struct kt_model_info fi, mi;
	struct kt_model *full, *m;

	ASSERT_EQ(kt_model_open(ctx, path, &o, &full), 0);
	o.layer_masks = lm;
	ASSERT_EQ(kt_model_open(ctx, path, &o, &m), 0);
	kt_model_get_info(full, &fi);
	kt_model_get_info(m, &mi);
	if (!budget) {
		EXPECT_EQ(fi.resident_bytes, (uint64_t)L * E * fi.expert_bytes);
		EXPECT_EQ(mi.resident_bytes,
			  fi.resident_bytes - n_masked() * fi.expert_bytes);
	}
	same_as_skipped(_metadata, ctx, full, m, x, ids, w);
	kt_model_destroy(m);
	kt_model_destroy(full);
}

TEST_F(mk, open_read_path)
{
	open_case(_metadata, self->ctx, self->ktw, 0, 0, self->x, self->ids,
		  self->w);
	open_case(_metadata, self->ctx, self->ktw, KT_MODEL_F_NO_URING, 0,
		  self->x, self->ids, self->w);
}

TEST_F(mk, open_mapped)
{
	open_case(_metadata, self->ctx, self->ktw, KT_MODEL_F_MMAP, 0,
		  self->x, self->ids, self->w);
}

static uint64_t want_reads(const int32_t *ids)
{
	uint64_t n = 0;
	uint32_t l, e, i;

	for (l = 0; l < L; l++)
		for (e = 0; e < E; e++) {
			if (lm[l] >> e & 1)
				continue;
			for (i = 0; i < T * K; i++)
				if (ids[i] == (int32_t)e)
					break;
			n += i < T * K;
		}
	return n;
}

/* A budget of one layer: the cache never reads a masked expert. */
TEST_F(mk, open_cached)
{
	struct kt_model_opts o = { .sz = sizeof(o), .layer_masks = lm };
	struct kt_cache_stats st;
	struct kt_model *m;
	struct kt_model_info mi;
	float y[T * H];
	uint32_t l;

	ASSERT_EQ(kt_model_open(self->ctx, self->ktw, NULL, &m), 0);
	kt_model_get_info(m, &mi);
	kt_model_destroy(m);
	o.budget = (E + 1) * ((mi.expert_bytes + 4095) & ~4095ull);
	open_case(_metadata, self->ctx, self->ktw, 0, o.budget, self->x,
		  self->ids, self->w);
	ASSERT_EQ(kt_model_open(self->ctx, self->ktw, &o, &m), 0);
	for (l = 0; l < L; l++)
		ASSERT_EQ(run(self->ctx, m, l, self->x, self->ids, self->w,
			      NULL, y), 0);
	ASSERT_EQ(kt_model_cache_stats(m, &st, false), 0);
	ASSERT_GT(st.slots, 0u);
	/* one read per distinct expert of a layer's op that the layer has */
	EXPECT_EQ(st.misses, want_reads(self->ids));
	kt_model_destroy(m);
}

TEST_F(mk, bad_fields_refused)
{
	struct kt_model_opts o = { .sz = sizeof(o), .pad0 = 1 };
	struct kt_model *m = NULL;

	EXPECT_EQ(kt_model_open(self->ctx, self->ktw, &o, &m), -EINVAL);
	o.pad0 = 0;
	o.reserved2[2] = 1;
	EXPECT_EQ(kt_model_open(self->ctx, self->ktw, &o, &m), -EINVAL);
	/* an older caller's struct ends before layer_masks: ignored */
	o.reserved2[2] = 0;
	o.layer_masks = lm;
	o.sz = offsetof(struct kt_model_opts, pad0);
	ASSERT_EQ(kt_model_open(self->ctx, self->ktw, &o, &m), 0);
	kt_model_destroy(m);
}

TEST_HARNESS_MAIN
