// SPDX-License-Identifier: MIT
/*
 * upload.c - GPU experts that are not kept in host memory, against the
 * stand-in libcuda: masked experts uploaded from the .ktw, or packed from a
 * GGUF file or a checkpoint folder at open, give bitwise the op of experts
 * uploaded from a host copy, host memory shrinks by exactly them, they
 * cannot leave the GPU, a corrupt blob is refused naming it, and every
 * driver call and every file read failing in turn is a -errno, an error
 * log line and no leak.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <kt/kt.h>

#include "kt_test.h"
#include "kernels/util.h"
#include "gpu/gpu.h"
#include "loader/ktw-format.h"
#include "stub.h"
#include "../loader/ckpt.h"
#include "../loader/gguf-write.h"

/* gw_cfg's fields are named as this file's macros below */
static void gw_moe(struct gw_cfg *c, uint32_t h, uint32_t i, uint32_t e,
		   uint32_t k, uint32_t l, uint32_t type)
{
	memset(c, 0, sizeof(*c));
	c->H = h;
	c->I = i;
	c->E = e;
	c->k = k;
	c->L = l;
	c->type = type;
	c->seed = 41;
}

#define H 128
#define I 256
#define E 8
#define L 2
#define K 3
#define W KT_PLACE_WORDS(E)

/* the plan: layer 0 experts 1, 4; layer 1 experts 0, 3, 6 */
static const uint64_t plan[L * W] = { 0x12, 0x49 };
#define N_PLAN 5

static int errors_logged;

/* LeakSanitizer's check, now: the test child ends with _exit(), which
 * skips the one at exit. Absent without ASan. */
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

#define EXPECT_NO_LEAK()						\
	do {								\
		if (__lsan_do_recoverable_leak_check)			\
			EXPECT_EQ(__lsan_do_recoverable_leak_check(), 0); \
	} while (0)

static void count_log(void *arg, enum kt_log_level l, const char *m)
{
	(void)arg;
	(void)m;
	if (l == KT_LOG_ERROR)
		__atomic_add_fetch(&errors_logged, 1, __ATOMIC_RELAXED);
}

struct env {
	struct stub s;
	struct kt_ctx *ctx;
	char dir[64];
	char path[96];
};

/* 0; 1 skip (no stand-in, no kernels); else a -errno of a step. */
static int env_init(struct env *v, enum kt_quant q, bool quiet,
		    uint64_t gpu_mask, long fail_at)
{
	struct kt_ctx_opts o = {
		.sz = sizeof(o), .threads = 2, .gpu_mask = gpu_mask,
		.spin_us = KT_CTX_SPIN_NONE, .flags = KT_CTX_F_NO_PIN,
		.log_fn = quiet ? count_log : NULL,
	};
	struct kt_ktw_synth s = { .sz = sizeof(s), .quant = q, .hidden = H,
				  .inter = I, .n_experts = E, .n_layers = L,
				  .group_size = q == KT_QUANT_INT4 ? 64 : 0,
				  .top_k = K, .seed = 5 };
	struct kt_gpu_info gi;
	size_t fb;
	int ret;

	memset(v, 0, sizeof(*v));
	if (stub_use(&v->s, "libcuda-stub.so") || !gpu_fatbin(&fb))
		return 1;
	v->s.set_fail_at(fail_at);
	snprintf(v->dir, sizeof(v->dir), "/tmp/kt-gpu-upload-%d",
		 (int)getpid());
	mkdir(v->dir, 0700);
	snprintf(v->path, sizeof(v->path), "%s/m.ktw", v->dir);
	s.path = v->path;
	if (access(v->path, F_OK)) {
		ret = kt_ktw_write_synth(&s);
		if (ret)
			return ret;
	}
	ret = kt_ctx_create(&o, &v->ctx);
	if (ret)
		return ret;
	if (gpu_mask && (kt_ctx_gpu_info(v->ctx, &gi) || !gi.kernels))
		return 1;
	return 0;
}

static void env_fini(struct env *v, bool keep_file)
{
	kt_ctx_destroy(v->ctx);
	v->ctx = NULL;
	if (!keep_file) {
		unlink(v->path);
		rmdir(v->dir);
	}
}

static int open_m(struct env *v, const uint64_t *masks, uint32_t flags,
		  struct kt_model **m)
{
	struct kt_model_opts o = { .sz = sizeof(o), .flags = flags,
				   .layer_masks = masks };

	*m = NULL;
	return kt_model_open(v->ctx, v->path, &o, m);
}

struct op {
	unsigned int T;
	float x[40 * H];
	int64_t ids[40 * K];
	float w[40 * K];
	float y[40 * H];
};

static void op_init(struct op *p, unsigned int T, uint64_t seed)
{
	struct tu_rng r = { seed };
	unsigned int i;

	p->T = T;
	tu_fill_normal(&r, p->x, (size_t)T * H, 1.0);
	for (i = 0; i < T * K; i++) {
		p->ids[i] = i % 11 == 5 ? -1 : (int64_t)(tu_next(&r) % E);
		p->w[i] = (float)tu_unif(&r);
	}
}

static int op_run(struct kt_ctx *ctx, struct kt_model *m, struct op *p,
		  uint32_t layer)
{
	struct kt_moe_args a = {
		.x = p->x, .ids = p->ids, .w = p->w, .y = p->y,
		.tokens = p->T, .top_k = K, .layer = layer,
		.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I64,
		.y_dtype = KT_DTYPE_F32,
	};

	return kt_moe_forward(ctx, m, &a);
}

/* Every layer's op on @a and @b, for T = 1, 7, 40: bitwise equal. */
static void same_ops(struct kt_test_meta *_metadata, struct env *v,
		     struct kt_model *a, struct kt_model *b)
{
	static const unsigned int Ts[] = { 1, 7, 40 };
	static struct op pa, pb;
	unsigned int i, l;
	long l0;

	for (i = 0; i < 3; i++)
		for (l = 0; l < L; l++) {
			op_init(&pa, Ts[i], 17 + i);
			op_init(&pb, Ts[i], 17 + i);
			ASSERT_EQ(op_run(v->ctx, a, &pa, l), 0);
			l0 = v->s.launches();
			ASSERT_EQ(op_run(v->ctx, b, &pb, l), 0);
			if (Ts[i] > 1)	/* routes to a GPU expert: it ran */
				EXPECT_GT(v->s.launches(), l0);
			EXPECT_EQ(memcmp(pa.y, pb.y,
					 (size_t)Ts[i] * H * 4), 0);
		}
}

static void expect_on_gpu(struct kt_test_meta *_metadata,
			  struct kt_model *m, const uint64_t *set)
{
	uint32_t l, e;

	for (l = 0; l < L; l++)
		for (e = 0; e < E; e++)
			EXPECT_EQ(kt_model_gpu_resident(m, l, e),
				  (int)(set[l * W] >> e & 1));
}

/* the experts of @set on the GPU, and the residency table starts with it */
static void expect_plan_table(struct kt_test_meta *_metadata,
			      struct kt_model *m, const uint64_t *set)
{
	uint64_t g;
	uint32_t l;

	expect_on_gpu(_metadata, m, set);
	for (l = 0; l < L; l++) {
		EXPECT_EQ(kt_model_gpu_experts(m, l, &g),
			  __builtin_popcountll(set[l * W]));
		EXPECT_EQ(g, set[l * W]);
	}
}

FIXTURE(up) {
	struct env v;
};

FIXTURE_VARIANT(up) {
	enum kt_quant q;
};

FIXTURE_VARIANT_ADD(up, int8) { .q = KT_QUANT_INT8 };
FIXTURE_VARIANT_ADD(up, int4) { .q = KT_QUANT_INT4 };
FIXTURE_VARIANT_ADD(up, bf16) { .q = KT_QUANT_BF16 };

FIXTURE_SETUP(up)
{
	int ret = env_init(&self->v, variant->q, false, 1, -1);

	if (ret == 1)
		SKIP(return, "no stand-in libcuda or no GPU kernels in this build");
	ASSERT_EQ(ret, 0);
}

FIXTURE_TEARDOWN(up)
{
	if (self->v.ctx)
		env_fini(&self->v, false);
	EXPECT_NO_LEAK();
}

/*
 * The plan applied at open (masks + KT_MODEL_F_GPU_UPLOAD) against the same
 * plan uploaded from host copies: the same ops, bitwise, and the host
 * holds exactly the other experts.
 */
TEST_F(up, open_with_plan_matches_host_upload)
{
	struct env *v = &self->v;
	struct kt_model *full, *m;
	struct kt_model_info fi, mi;

	ASSERT_EQ(open_m(v, NULL, 0, &full), 0);
	EXPECT_EQ(kt_model_place(full, plan), N_PLAN);
	ASSERT_EQ(open_m(v, plan, KT_MODEL_F_GPU_UPLOAD, &m), 0);
	kt_model_get_info(full, &fi);
	kt_model_get_info(m, &mi);
	EXPECT_EQ(fi.resident_bytes, (uint64_t)L * E * fi.expert_bytes);
	EXPECT_EQ(mi.resident_bytes,
		  fi.resident_bytes - N_PLAN * fi.expert_bytes);
	TH_LOG("host bytes %llu of %llu: %u experts only on the GPU",
	       (unsigned long long)mi.resident_bytes,
	       (unsigned long long)fi.resident_bytes, N_PLAN);
	expect_plan_table(_metadata, m, plan);
	same_ops(_metadata, v, full, m);
	kt_model_destroy(m);
	kt_model_destroy(full);
}

/* By hand and through kt_model_place(): masked experts come from the file. */
TEST_F(up, upload_masked_by_hand_and_by_place)
{
	struct env *v = &self->v;
	struct kt_model *full, *m, *p;

	ASSERT_EQ(open_m(v, NULL, 0, &full), 0);
	EXPECT_EQ(kt_model_place(full, plan), N_PLAN);
	ASSERT_EQ(open_m(v, plan, 0, &m), 0);
	EXPECT_EQ(kt_model_gpu_resident(m, 0, 1), 0);
	ASSERT_EQ(kt_model_gpu_upload(m, 0, 1), 0);
	ASSERT_EQ(kt_model_gpu_upload(m, 0, 4), 0);
	ASSERT_EQ(kt_model_gpu_upload(m, 1, 0), 0);
	ASSERT_EQ(kt_model_gpu_upload(m, 1, 3), 0);
	ASSERT_EQ(kt_model_gpu_upload(m, 1, 6), 0);
	/* again: replaced, same bytes */
	ASSERT_EQ(kt_model_gpu_upload(m, 1, 6), 0);
	expect_on_gpu(_metadata, m, plan);
	same_ops(_metadata, v, full, m);
	ASSERT_EQ(open_m(v, plan, 0, &p), 0);
	EXPECT_EQ(kt_model_place(p, plan), N_PLAN);
	expect_on_gpu(_metadata, p, plan);
	same_ops(_metadata, v, full, p);
	kt_model_destroy(p);
	kt_model_destroy(m);
	kt_model_destroy(full);
}

/*
 * The GPU holds the only copy of a masked expert: evicting it by hand or
 * by a placement without it is refused and changes nothing; experts with
 * a host copy still come and go around it.
 */
TEST_F(up, hostless_experts_stay)
{
	struct env *v = &self->v;
	uint64_t more[L * W] = { 0x12 | 0x20, 0x49 }, none[L * W] = { 0 };
	uint64_t g;
	struct kt_model *m;

	ASSERT_EQ(open_m(v, plan, KT_MODEL_F_GPU_UPLOAD, &m), 0);
	EXPECT_EQ(kt_model_gpu_evict(m, 0, 4), -EINVAL);
	EXPECT_EQ(kt_model_place(m, none), -EINVAL);
	expect_on_gpu(_metadata, m, plan);
	EXPECT_EQ(kt_model_gpu_experts(m, 0, &g), 2);
	EXPECT_EQ(g, 0x12u);
	/* expert 5 of layer 0 has a host copy: it joins and leaves */
	EXPECT_EQ(kt_model_place(m, more), 1);
	expect_on_gpu(_metadata, m, more);
	EXPECT_EQ(kt_model_place(m, plan), 1);
	expect_on_gpu(_metadata, m, plan);
	EXPECT_EQ(kt_model_gpu_evict(m, 0, 5), -ENOENT);
	kt_model_destroy(m);
}

/* One byte of a masked expert's blob flipped: refused naming it. */
TEST_F(up, corrupt_blob_refused)
{
	struct env *v = &self->v;
	struct ktw_header h;
	struct ktw_entry e;
	struct kt_model *m = NULL;
	uint8_t b;
	int fd;

	fd = open(v->path, O_RDWR);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	/* layer 1, expert 3 */
	ASSERT_EQ(pread(fd, &e, sizeof(e), (off_t)(h.table_off +
						    (1 * E + 3) * sizeof(e))),
		  (ssize_t)sizeof(e));
	ASSERT_EQ(pread(fd, &b, 1, (off_t)e.offset + 100), 1);
	b ^= 0x10;
	ASSERT_EQ(pwrite(fd, &b, 1, (off_t)e.offset + 100), 1);
	close(fd);
	EXPECT_EQ(open_m(v, plan, KT_MODEL_F_GPU_UPLOAD, &m), -EIO);
	EXPECT_EQ(m, NULL);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), "expert 3"), NULL);
	EXPECT_NE(strstr(kt_last_error(), "checksum"), NULL);
	/* without the flag the open reads no masked blob; the upload does */
	ASSERT_EQ(open_m(v, plan, 0, &m), 0);
	EXPECT_EQ(kt_model_gpu_upload(m, 1, 0), 0);
	EXPECT_EQ(kt_model_gpu_upload(m, 1, 3), -EIO);
	EXPECT_NE(strstr(kt_last_error(), "expert 3"), NULL);
	EXPECT_EQ(kt_model_gpu_resident(m, 1, 3), 0);
	kt_model_destroy(m);
	/* a model that does not check reads it as it is */
	ASSERT_EQ(open_m(v, plan, KT_MODEL_F_NO_VERIFY, &m), 0);
	EXPECT_EQ(kt_model_gpu_upload(m, 1, 3), 0);
	kt_model_destroy(m);
}

/* A mapped copy (KT_MODEL_F_MMAP) uploads from its mapping. */
TEST_F(up, mapped_file)
{
	struct env *v = &self->v;
	struct kt_model *full, *m;

	ASSERT_EQ(open_m(v, NULL, 0, &full), 0);
	EXPECT_EQ(kt_model_place(full, plan), N_PLAN);
	ASSERT_EQ(open_m(v, plan, KT_MODEL_F_MMAP | KT_MODEL_F_GPU_UPLOAD,
			 &m), 0);
	expect_on_gpu(_metadata, m, plan);
	same_ops(_metadata, v, full, m);
	kt_model_destroy(m);
	kt_model_destroy(full);
}

/*
 * A model packed at load (@type a ggml type: a GGUF file of it; 0: a
 * BF16 checkpoint folder packed to @q) in @v's folder; its path into @path.
 */
static int write_src(struct env *v, uint32_t type, char *path, size_t len)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, H, I, E, L, K, 2, 23);
	struct gw_cfg g;
	struct gw_tensor t[6 * L + 1];
	struct gw_buf b;
	size_t n, data;
	FILE *f;
	int ret;

	if (!type) {
		snprintf(path, len, "%s/ckpt", v->dir);
		ret = tck_write(&c, path);
		tck_free(&c);
		return ret;
	}
	gw_moe(&g, H, I, E, K, L, type);
	snprintf(path, len, "%s/m-%u.gguf", v->dir, type);
	gw_build(&g, &b, t, &n, &data);
	f = fopen(path, "wb");
	ret = f && fwrite(b.p, 1, b.len, f) == b.len ? 0 : -EIO;
	if (f && fclose(f))
		ret = -EIO;
	free(b.p);
	return ret;
}

static void rm_src(const char *path)
{
	struct stat st;

	if (!stat(path, &st) && S_ISDIR(st.st_mode))
		tck_rmdir(path);
	else
		unlink(path);
}

static int open_src(struct env *v, const char *path, enum kt_quant q,
		    const uint64_t *masks, uint32_t flags, struct kt_model **m)
{
	struct kt_model_opts o = { .sz = sizeof(o), .flags = flags,
				   .quant = q, .layer_masks = masks };

	*m = NULL;
	return kt_model_open(v->ctx, path, &o, m);
}

/* GGUF files and checkpoint folders: packed at load, not read as blobs */
FIXTURE(src) {
	struct env v;
	char path[160];
};

FIXTURE_VARIANT(src) {
	uint32_t type;		/* ggml type of a GGUF file; 0: a folder */
	enum kt_quant q;	/* a folder's packing */
};

FIXTURE_VARIANT_ADD(src, gguf_bf16) { .type = GW_BF16 };
FIXTURE_VARIANT_ADD(src, gguf_q4_0) { .type = GW_Q4_0 };
FIXTURE_VARIANT_ADD(src, folder_int8) { .q = KT_QUANT_INT8 };
FIXTURE_VARIANT_ADD(src, folder_int4) { .q = KT_QUANT_INT4 };
FIXTURE_VARIANT_ADD(src, folder_bf16) { .q = KT_QUANT_BF16 };

FIXTURE_SETUP(src)
{
	int ret = env_init(&self->v, KT_QUANT_INT8, false, 1, -1);

	if (ret == 1)
		SKIP(return, "no stand-in libcuda or no GPU kernels in this build");
	ASSERT_EQ(ret, 0);
	ASSERT_EQ(write_src(&self->v, variant->type, self->path,
			    sizeof(self->path)), 0);
}

FIXTURE_TEARDOWN(src)
{
	if (self->v.ctx) {
		rm_src(self->path);
		env_fini(&self->v, false);
	}
	EXPECT_NO_LEAK();
}

/*
 * The plan at open: each masked expert packed from the source into the
 * upload staging and uploaded, never held on the host; the same ops,
 * bitwise, as the plan uploaded from host copies.
 */
TEST_F(src, open_with_plan_matches_host_upload)
{
	struct env *v = &self->v;
	struct kt_model *full, *m;
	struct kt_model_info fi, mi;

	ASSERT_EQ(open_src(v, self->path, variant->q, NULL, 0, &full), 0);
	EXPECT_EQ(kt_model_place(full, plan), N_PLAN);
	ASSERT_EQ(open_src(v, self->path, variant->q, plan,
			   KT_MODEL_F_GPU_UPLOAD, &m), 0);
	kt_model_get_info(full, &fi);
	kt_model_get_info(m, &mi);
	EXPECT_EQ(fi.resident_bytes, (uint64_t)L * E * fi.expert_bytes);
	EXPECT_EQ(mi.resident_bytes,
		  fi.resident_bytes - N_PLAN * fi.expert_bytes);
	TH_LOG("%s %s: host bytes %llu of %llu: %u experts only on the GPU",
	       variant->type ? "GGUF" : "folder", kt_quant_name(mi.quant),
	       (unsigned long long)mi.resident_bytes,
	       (unsigned long long)fi.resident_bytes, N_PLAN);
	expect_plan_table(_metadata, m, plan);
	same_ops(_metadata, v, full, m);
	kt_model_destroy(m);
	kt_model_destroy(full);
}

/*
 * After the open the source is gone: uploading a masked expert is
 * -EOPNOTSUPP naming the file, layer and expert, and changes nothing;
 * experts with a host copy still come and go around the GPU-only ones.
 */
TEST_F(src, masked_upload_after_open_refused)
{
	uint64_t more[L * W] = { 0x12 | 0x20, 0x49 }, g;
	struct env *v = &self->v;
	struct kt_model *m;

	ASSERT_EQ(open_src(v, self->path, variant->q, plan,
			   KT_MODEL_F_GPU_UPLOAD, &m), 0);
	/* on the GPU already: its copy stays */
	EXPECT_EQ(kt_model_gpu_upload(m, 1, 3), -EOPNOTSUPP);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), self->path), NULL);
	EXPECT_NE(strstr(kt_last_error(), "layer 1 (index 1), expert 3"),
		  NULL);
	EXPECT_NE(strstr(kt_last_error(), "kt convert"), NULL);
	EXPECT_EQ(kt_model_gpu_resident(m, 1, 3), 1);
	EXPECT_EQ(kt_model_gpu_evict(m, 1, 3), -EINVAL);
	EXPECT_EQ(kt_model_place(m, more), 1);
	expect_on_gpu(_metadata, m, more);
	EXPECT_EQ(kt_model_place(m, plan), 1);
	EXPECT_EQ(kt_model_gpu_experts(m, 0, &g), 2);
	EXPECT_EQ(g, 0x12u);
	kt_model_destroy(m);
	/* masked without the flag: never uploadable; host copies are */
	ASSERT_EQ(open_src(v, self->path, variant->q, plan, 0, &m), 0);
	EXPECT_EQ(kt_model_gpu_upload(m, 0, 1), -EOPNOTSUPP);
	EXPECT_NE(strstr(kt_last_error(), "expert 1"), NULL);
	EXPECT_EQ(kt_model_gpu_resident(m, 0, 1), 0);
	EXPECT_EQ(kt_model_gpu_upload(m, 0, 2), 0);
	EXPECT_EQ(kt_model_place(m, plan), -EOPNOTSUPP);
	expect_on_gpu(_metadata, m, (const uint64_t[L * W]){ 0x4, 0 });
	kt_model_destroy(m);
}

/*
 * Quantizations the GPU has no kernels for (GGUF Q8_0, a folder packed to
 * FP8) are refused at open, before the experts are packed, naming the
 * file; without a GPU the flag is -ENODEV.
 */
TEST(src_refused)
{
	struct env v;
	struct kt_model *m = NULL;
	char q8[160], dir[160];
	int ret = env_init(&v, KT_QUANT_INT8, false, 1, -1);

	if (ret == 1)
		SKIP(return, "no stand-in libcuda or no GPU kernels in this build");
	ASSERT_EQ(ret, 0);
	ASSERT_EQ(write_src(&v, GW_Q8_0, q8, sizeof(q8)), 0);
	ASSERT_EQ(write_src(&v, 0, dir, sizeof(dir)), 0);
	EXPECT_EQ(open_src(&v, q8, 0, plan, KT_MODEL_F_GPU_UPLOAD, &m),
		  -EOPNOTSUPP);
	EXPECT_EQ(m, NULL);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), q8), NULL);
	EXPECT_NE(strstr(kt_last_error(), "no kernels"), NULL);
	EXPECT_EQ(open_src(&v, dir, KT_QUANT_FP8, plan, KT_MODEL_F_GPU_UPLOAD,
			   &m), -EOPNOTSUPP);
	EXPECT_EQ(m, NULL);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), dir), NULL);
	/* it runs on the CPU without the flag */
	ASSERT_EQ(open_src(&v, q8, 0, plan, 0, &m), 0);
	kt_model_destroy(m);
	env_fini(&v, true);
	ASSERT_EQ(env_init(&v, KT_QUANT_INT8, false, 0, -1), 0);
	EXPECT_EQ(open_src(&v, q8, 0, plan, KT_MODEL_F_GPU_UPLOAD, &m),
		  -ENODEV);
	EXPECT_EQ(open_src(&v, dir, 0, plan, KT_MODEL_F_GPU_UPLOAD, &m),
		  -ENODEV);
	EXPECT_EQ(m, NULL);
	rm_src(q8);
	rm_src(dir);
	env_fini(&v, false);
	EXPECT_NO_LEAK();
}

TEST(refused_without_gpu)
{
	struct env v;
	struct kt_model *m = NULL;
	struct kt_model_opts o = { .sz = sizeof(o), .flags = 1u << 31 };
	int ret = env_init(&v, KT_QUANT_INT8, false, 0, -1);

	if (ret == 1)
		SKIP(return, "no stand-in libcuda or no GPU kernels in this build");
	ASSERT_EQ(ret, 0);
	EXPECT_EQ(open_m(&v, plan, KT_MODEL_F_GPU_UPLOAD, &m), -ENODEV);
	EXPECT_EQ(m, NULL);
	EXPECT_EQ(kt_model_open(v.ctx, v.path, &o, &m), -EINVAL);
	TH_LOG("%s", kt_last_error());
	env_fini(&v, false);
}

/*
 * A session (open with the plan uploaded, an op, a placement in and out,
 * destroy) with driver call 1, 2, 3, ... failing: each step is 0 or a
 * -errno said in the log, and nothing of the driver is left. @type: the
 * source as write_src() (-1: the .ktw).
 */
static void walk_calls(struct kt_test_meta *_metadata, int type)
{
	uint64_t more[L * W] = { 0x12 | 0x20, 0x49 };
	long n, calls, failed = 0;
	static struct op p;
	char path[160];
	struct env v;
	int ret;

	ret = env_init(&v, KT_QUANT_INT8, true, 0, -1);
	if (ret == 1)
		SKIP(return, "no stand-in libcuda or no GPU kernels in this build");
	ASSERT_EQ(ret, 0);
	if (type < 0)
		snprintf(path, sizeof(path), "%s", v.path);
	else
		ASSERT_EQ(write_src(&v, (uint32_t)type, path, sizeof(path)), 0);
	env_fini(&v, true);
	for (n = 1; n < 5000; n++) {
		struct kt_model *m = NULL;
		int steps[4] = { 0 }, i;

		errors_logged = 0;
		ret = env_init(&v, KT_QUANT_INT8, true, 1, n);
		if (!ret) {
			steps[0] = open_src(&v, path, 0, plan,
					    KT_MODEL_F_GPU_UPLOAD, &m);
			if (!steps[0]) {
				op_init(&p, 9, 3);
				steps[1] = op_run(v.ctx, m, &p, 1);
				steps[2] = kt_model_place(m, more);
				steps[3] = kt_model_place(m, plan);
				kt_model_destroy(m);
			}
		}
		if (ret == 1)	/* the module load failed: no kernels */
			ret = 0;
		env_fini(&v, true);
		calls = v.s.calls();
		EXPECT_EQ(v.s.live(), 0);
		if (v.s.live())
			TH_LOG("leak when call %ld fails", n);
		ASSERT_TRUE(ret <= 0 && ret >= -4095);
		for (i = 0; i < 4; i++) {
			EXPECT_TRUE(steps[i] >= -4095);
			if (steps[i] < 0) {
				failed++;
				EXPECT_GT(errors_logged, 0);
			}
		}
		if (steps[0] < 0)
			EXPECT_NE(kt_last_error()[0], 0);
		if (ret < 0)
			EXPECT_GT(errors_logged, 0);
		if (calls < n)
			break;
	}
	TH_LOG("%s: %ld driver calls walked, %ld failed steps",
	       type < 0 ? "ktw" : type ? "GGUF" : "folder", n - 1, failed);
	EXPECT_GT(n, 20);
	EXPECT_GT(failed, 10);
	if (type >= 0)
		rm_src(path);
	unlink(v.path);
	rmdir(v.dir);
	EXPECT_NO_LEAK();
}

TEST_TIMEOUT(fail_each_call, 300)
{
	walk_calls(_metadata, -1);
}

TEST_TIMEOUT(fail_each_call_gguf, 300)
{
	walk_calls(_metadata, GW_Q4_0);
}

TEST_TIMEOUT(fail_each_call_folder, 300)
{
	walk_calls(_metadata, 0);
}

#ifdef KT_FAULT_INJECT
/* loader/fault.h's controls (the header itself would wrap malloc here) */
void ldr_fault_set(const char *spec);
unsigned long ldr_fault_hits(void);

/*
 * The open with the plan uploaded, with the nth open, read and allocation
 * of the loader failing in turn: a -errno and kt_last_error() (the
 * upload's own reads also log at error level), no model, nothing of the
 * driver left (leaks are ASan's). @type: the source as walk_calls().
 */
static void walk_reads(struct kt_test_meta *_metadata, int type)
{
	static const char *const sites[] = { "open", "read", "alloc" };
	unsigned int s, nth, failed = 0;
	char spec[32], path[160];
	struct env v;
	int ret;

	ret = env_init(&v, KT_QUANT_INT8, true, 1, -1);
	if (ret == 1)
		SKIP(return, "no stand-in libcuda or no GPU kernels in this build");
	ASSERT_EQ(ret, 0);
	if (type < 0)
		snprintf(path, sizeof(path), "%s", v.path);
	else
		ASSERT_EQ(write_src(&v, (uint32_t)type, path, sizeof(path)), 0);
	for (s = 0; s < 3; s++)
		for (nth = 1; nth < 500; nth++) {
			struct kt_model *m = NULL;
			uint32_t flags = KT_MODEL_F_GPU_UPLOAD |
					 (nth % 2 ? KT_MODEL_F_NO_URING : 0);

			errors_logged = 0;
			snprintf(spec, sizeof(spec), "%s:%u", sites[s], nth);
			ldr_fault_set(spec);
			ret = open_src(&v, path, 0, plan, flags, &m);
			if (ldr_fault_hits() < nth) {
				ldr_fault_set(NULL);
				ASSERT_EQ(ret, 0);
				kt_model_destroy(m);
				break;
			}
			ldr_fault_set(NULL);
			if (!ret) {	/* tolerated: a fallback took over */
				expect_on_gpu(_metadata, m, plan);
				kt_model_destroy(m);
				continue;
			}
			failed++;
			EXPECT_LT(ret, 0);
			EXPECT_EQ(m, NULL);
			EXPECT_NE(kt_last_error()[0], 0);
		}
	if (type >= 0)
		rm_src(path);
	env_fini(&v, false);
	EXPECT_EQ(v.s.live(), 0);
	TH_LOG("%s: %u failed opens",
	       type < 0 ? "ktw" : type ? "GGUF" : "folder", failed);
	EXPECT_GT(failed, 3);
	EXPECT_NO_LEAK();
}

TEST_TIMEOUT(fail_each_read, 300)
{
	walk_reads(_metadata, -1);
}

TEST_TIMEOUT(fail_each_read_gguf, 300)
{
	walk_reads(_metadata, GW_Q4_0);
}

TEST_TIMEOUT(fail_each_read_folder, 300)
{
	walk_reads(_metadata, 0);
}
#endif

TEST_HARNESS_MAIN
