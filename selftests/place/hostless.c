// SPDX-License-Identifier: MIT
/*
 * hostless.c - re-placement of a model whose GPU experts have no host
 * copy (opened with the plan as load masks and KT_MODEL_F_GPU_UPLOAD),
 * against the stand-in libcuda: while one thread flips the GPU set
 * between two plans around them (and tries to drop them, which is
 * refused) and another re-uploads them from the file, ring ops each give
 * bitwise the op of some consistent CPU/GPU split, never one that lost a
 * host-less expert. Run under TSan too.
 */
#include <pthread.h>
#include <sys/stat.h>
#include <kt/kt.h>

#include "kt_test.h"
#include "kernels/util.h"
#include "../gpu/stub.h"

#define H 128
#define I 128
#define E 8
#define K 3
#define T 8

/* experts 0 and 1 live only on the GPU; 2..5 come and go */
#define HOSTLESS	0x03ull
#define A		(HOSTLESS | 0x0cull)
#define B		(HOSTLESS | 0x30ull)
#define MOVING		0x3cull

FIXTURE(hl) {
	struct stub s;
	struct kt_ctx *ctx;
	char dir[64];
	char path[96];
	float x[T * H];
	int32_t ids[T * K];
	float w[T * K];
};

FIXTURE_SETUP(hl)
{
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 2,
				  .gpu_mask = 1, .flags = KT_CTX_F_NO_PIN };
	struct kt_ktw_synth s = { .sz = sizeof(s), .quant = KT_QUANT_INT8,
				  .hidden = H, .inter = I, .n_experts = E,
				  .n_layers = 1, .top_k = K, .seed = 9 };
	struct kt_gpu_info gi;
	struct tu_rng r = { 4 };
	unsigned int i;

	self->ctx = NULL;
	if (stub_use(&self->s, "../gpu/libcuda-stub.so"))
		SKIP(return, "stand-in libcuda-stub.so not built");
	ASSERT_EQ(kt_ctx_create(&co, &self->ctx), 0);
	if (kt_ctx_gpu_info(self->ctx, &gi) || !gi.kernels)
		SKIP(return, "no GPU kernels in this build");
	snprintf(self->dir, sizeof(self->dir), "/tmp/kt-hostless-%d",
		 (int)getpid());
	ASSERT_EQ(mkdir(self->dir, 0700), 0);
	snprintf(self->path, sizeof(self->path), "%s/m.ktw", self->dir);
	s.path = self->path;
	ASSERT_EQ(kt_ktw_write_synth(&s), 0);
	tu_fill_normal(&r, self->x, T * H, 1.0);
	for (i = 0; i < T * K; i++) {
		self->ids[i] = (int32_t)(i % E);	/* every expert */
		self->w[i] = 0.2f + 0.01f * (float)i;
	}
}

/* LeakSanitizer's check, now: the test child ends with _exit(), which
 * skips the one at exit. Absent without ASan. */
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

FIXTURE_TEARDOWN(hl)
{
	if (!self->ctx)
		return;
	unlink(self->path);
	rmdir(self->dir);
	kt_ctx_destroy(self->ctx);
	if (__lsan_do_recoverable_leak_check)
		EXPECT_EQ(__lsan_do_recoverable_leak_check(), 0);
}

static int op(struct kt_ctx *ctx, struct kt_model *m, const float *x,
	      const int32_t *ids, const float *w, float *y)
{
	struct kt_moe_args a = {
		.x = x, .ids = ids, .w = w, .y = y, .tokens = T, .top_k = K,
		.ids_dtype = KT_DTYPE_I32,
	};

	return kt_moe_forward(ctx, m, &a);
}

struct flipper {
	struct kt_model *m;
	uint32_t stop;
	uint32_t flips, refused;
	int ret;
};

static void *flip_thread(void *arg)
{
	struct flipper *f = arg;
	uint64_t set;
	int ret;

	while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) {
		uint32_t n = __atomic_load_n(&f->flips, __ATOMIC_RELAXED);

		/* every fourth try drops the host-less experts: refused */
		if (n % 4 == 3) {
			set = MOVING;
			ret = kt_model_place(f->m, &set);
			if (ret != -EINVAL) {
				f->ret = ret < 0 ? ret : -EPROTO;
				break;
			}
			__atomic_add_fetch(&f->refused, 1, __ATOMIC_RELAXED);
		} else {
			set = n % 2 ? B : A;
			ret = kt_model_place(f->m, &set);
			if (ret < 0) {
				f->ret = ret;
				break;
			}
		}
		__atomic_add_fetch(&f->flips, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

struct reuploader {
	struct kt_model *m;
	uint32_t stop;
	uint32_t n;
	int ret;
};

/* The host-less experts again from the file, replacing their copies. */
static void *reupload_thread(void *arg)
{
	struct reuploader *u = arg;
	int ret;

	while (!__atomic_load_n(&u->stop, __ATOMIC_RELAXED)) {
		ret = kt_model_gpu_upload(u->m, 0, u->n % 2);
		if (ret) {
			u->ret = ret;
			break;
		}
		__atomic_add_fetch(&u->n, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/*
 * An op that runs while the set flips between A and B may meet any split
 * with the host-less experts on the GPU and each of 2..5 on either side
 * (joiners are uploaded before the set is published, leavers evicted
 * after): its result must be bitwise the op of one of those 16 splits,
 * computed first on a model that has every host copy.
 */
TEST_F_TIMEOUT(hl, ops_stay_whole_while_replacing, 240)
{
	static float ref[16][T * H], y[8][T * H];
	struct flipper fl = { 0 };
	struct reuploader up = { 0 };
	struct kt_model_opts o = { .sz = sizeof(o) };
	uint64_t mask = HOSTLESS, g;
	struct kt_model_info fi, mi;
	struct kt_model *full, *m;
	unsigned int c, i, round, seen[16] = { 0 }, n_splits = 0;
	struct kt_ring ring;
	struct kt_cqe *cqe;
	pthread_t th[2];

	/* every split's op, on a model with all host copies */
	ASSERT_EQ(kt_model_open(self->ctx, self->path, &o, &full), 0);
	for (c = 0; c < 16; c++) {
		uint64_t set = HOSTLESS | (uint64_t)c << 2;

		ASSERT_GE(kt_model_place(full, &set), 0);
		ASSERT_EQ(op(self->ctx, full, self->x, self->ids, self->w,
			     ref[c]), 0);
	}
	for (c = 1; c < 16; c++)
		ASSERT_NE(memcmp(ref[0], ref[c], sizeof(ref[0])), 0);
	/* the plan applied at open: 0 and 1 only on the GPU */
	o.layer_masks = &mask;
	o.flags = KT_MODEL_F_GPU_UPLOAD;
	ASSERT_EQ(kt_model_open(self->ctx, self->path, &o, &m), 0);
	kt_model_get_info(full, &fi);
	kt_model_get_info(m, &mi);
	EXPECT_EQ(mi.resident_bytes, fi.resident_bytes - 2 * fi.expert_bytes);
	kt_model_destroy(full);
	ASSERT_EQ(kt_model_gpu_experts(m, 0, &g), 2);
	EXPECT_EQ(g, HOSTLESS);
	ASSERT_EQ(op(self->ctx, m, self->x, self->ids, self->w, y[0]), 0);
	EXPECT_EQ(memcmp(y[0], ref[0], sizeof(ref[0])), 0);

	fl.m = m;
	up.m = m;
	ASSERT_EQ(kt_ring_init(self->ctx, 8, &ring), 0);
	ASSERT_EQ(pthread_create(&th[0], NULL, flip_thread, &fl), 0);
	ASSERT_EQ(pthread_create(&th[1], NULL, reupload_thread, &up), 0);
	/* 40 rounds, and more until the flipper has had its turns (on two
	 * cores the workers may starve it): every fourth flip is refused */
	for (round = 0; round < 40 ||
	     (__atomic_load_n(&fl.flips, __ATOMIC_RELAXED) < 8 &&
	      round < 4000); round++) {
		for (i = 0; i < 8; i++) {
			struct kt_moe_args a = {
				.x = self->x, .ids = self->ids, .w = self->w,
				.y = y[i], .tokens = T, .top_k = K,
				.ids_dtype = KT_DTYPE_I32,
			};

			kt_prep_moe(kt_get_sqe(&ring), m, 0, &a, i);
		}
		ASSERT_EQ(kt_submit(&ring), 8);
		for (i = 0; i < 8; i++) {
			ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
			EXPECT_EQ(cqe->res, 0);
			kt_cqe_seen(&ring);
		}
		for (i = 0; i < 8; i++) {
			for (c = 0; c < 16; c++)
				if (!memcmp(y[i], ref[c], sizeof(ref[c])))
					break;
			EXPECT_LT(c, 16u);	/* some whole split */
			if (c < 16)
				n_splits += !seen[c]++;
		}
	}
	__atomic_store_n(&fl.stop, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&up.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	kt_ring_exit(&ring);
	EXPECT_EQ(fl.ret, 0);
	EXPECT_EQ(up.ret, 0);
	EXPECT_GT(fl.flips, 0u);
	EXPECT_GT(fl.refused, 0u);
	EXPECT_GT(up.n, 0u);
	/* the refusals changed nothing: the host-less pair is still there */
	ASSERT_GE(kt_model_gpu_experts(m, 0, &g), 2);
	EXPECT_EQ(g & HOSTLESS, HOSTLESS);
	TH_LOG("%u placements (%u refused), %u re-uploads; ops met %u splits",
	       fl.flips, fl.refused, up.n, n_splits);
	kt_model_destroy(m);
}

TEST_HARNESS_MAIN
