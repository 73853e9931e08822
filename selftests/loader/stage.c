// SPDX-License-Identifier: MIT
/*
 * stage.c - kt_ktw_stage() onto a hugetlbfs mount made for the test, and
 * kt_model_open() of the staged copy: mapped, not read, same bytes as a
 * normal load. Skips without root or free hugepages; the harness unmounts
 * and gives the pages back (hugetlb.h).
 */
#include <fcntl.h>
#include <sys/mount.h>

#include "kt_test.h"
#include "hugetlb.h"
#include "ckpt.h"
#include "gguf-write.h"
#include "test-ctx.h"
#include "ktcore/model.h"
#include "loader/ktw-format.h"

#define EXTRA_PAGES 8

FIXTURE(stage) {
	char dir[256];
	char mnt[256];
	char ktw[300];
	bool mounted;
	struct kt_ctx *ctx;
};

FIXTURE_SETUP(stage)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 256, 4, 2, 2, 1, 41);
	struct kt_convert_opts o = { .sz = sizeof(o), .quant = KT_QUANT_INT8,
				     .layer_last = -1, .threads = 1 };
	const char *why = "";
	char buf[160];

	snprintf(self->dir, sizeof(self->dir), "/tmp/kt-stage-%d", (int)getpid());
	snprintf(self->mnt, sizeof(self->mnt), "/tmp/kt-stage-mnt-%d", (int)getpid());
	snprintf(self->ktw, sizeof(self->ktw), "%s/m.ktw", self->dir);
	ASSERT_EQ(tck_convert(&c, self->dir, &o, self->ktw), 0);
	ASSERT_EQ(test_ctx(&self->ctx), 0);
	if (th_staging_mount(self->mnt, EXTRA_PAGES, &why, buf, sizeof(buf)))
		SKIP(return, "%s", why);
	self->mounted = true;
}

FIXTURE_TEARDOWN(stage)
{
	char staged[600];

	snprintf(staged, sizeof(staged), "%s/m.ktw", self->mnt);
	unlink(staged);
	if (self->mounted)
		umount(self->mnt);
	rmdir(self->mnt);
	kt_ctx_destroy(self->ctx);
	tck_rmdir(self->dir);
}

TEST_F(stage, staged_copy_is_mapped)
{
	struct kt_model_opts plain = { .sz = sizeof(plain),
				       .flags = KT_MODEL_F_NO_HUGEPAGE };
	struct kt_model *a = NULL, *b = NULL;
	struct kt_load_stats st;
	struct kt_ktw_info info;
	char staged[600];
	uint32_t i;

	ASSERT_EQ(kt_ktw_stage(self->ktw, self->mnt, staged, sizeof(staged),
			       NULL, NULL), 0);
	TH_LOG("staged %s", staged);
	ASSERT_EQ(kt_ktw_inspect(staged, &info, NULL, 0), 0);
	ASSERT_TRUE(info.hugetlbfs);
	ASSERT_EQ(kt_ktw_verify(staged, NULL), 0);
	ASSERT_EQ(kt_model_open(self->ctx, staged, NULL, &b), 0);
	kt_load_stats_get(&st);
	EXPECT_EQ(st.mapped, 1);
	EXPECT_EQ(st.bytes, 0u);
	EXPECT_EQ(st.verified, 1);
	ASSERT_EQ(kt_model_open(self->ctx, self->ktw, &plain, &a), 0);
	kt_load_stats_get(&st);
	EXPECT_EQ(st.mapped, 0);
	ASSERT_EQ(a->n_layers * a->n_experts, b->n_layers * b->n_experts);
	for (i = 0; i < a->n_layers * a->n_experts; i++) {
		ASSERT_TRUE(b->experts[i].present);
		ASSERT_EQ(memcmp(a->experts[i].gate.tiles, b->experts[i].gate.tiles,
				 a->expert_bytes), 0);
	}
	kt_model_destroy(a);
	kt_model_destroy(b);
	/* staging twice replaces the copy */
	ASSERT_EQ(kt_ktw_stage(self->ktw, self->mnt, NULL, 0, NULL, NULL), 0);
}

TEST_F(stage, refuses_bad_targets_and_sources)
{
	char staged[600];
	uint8_t byte;
	int fd;

	/* not hugetlbfs */
	EXPECT_EQ(kt_ktw_stage(self->ktw, self->dir, NULL, 0, NULL, NULL), -EINVAL);
	TH_LOG("%s", kt_last_error());
	/* a damaged blob is caught while staging; nothing is left */
	fd = open(self->ktw, O_RDWR);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(pread(fd, &byte, 1, 3 * 4096 + 4096 * 20), 1);
	byte ^= 1;
	ASSERT_EQ(pwrite(fd, &byte, 1, 3 * 4096 + 4096 * 20), 1);
	close(fd);
	EXPECT_EQ(kt_ktw_stage(self->ktw, self->mnt, NULL, 0, NULL, NULL), -EIO);
	TH_LOG("%s", kt_last_error());
	snprintf(staged, sizeof(staged), "%s/m.ktw", self->mnt);
	EXPECT_NE(access(staged, F_OK), 0);
}

/* y of layer 0 of @path for a fixed batch (H 160, top-2 of 3) */
static int oss_y(struct kt_ctx *ctx, const char *path, float *y)
{
	static float x[4 * 160], w[8];
	static int32_t ids[8];
	struct kt_moe_args a = {
		.x = x, .ids = ids, .w = w, .y = y, .tokens = 4, .top_k = 2,
		.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I32,
		.y_dtype = KT_DTYPE_F32,
	};
	struct kt_model *m;
	int i, ret;

	for (i = 0; i < 4 * 160; i++)
		x[i] = (float)((i * 29) % 97) / 48.0f - 1.0f;
	for (i = 0; i < 8; i++) {
		ids[i] = (i / 2 + i % 2) % 3;
		w[i] = 0.25f + 0.125f * (float)i;
	}
	ret = kt_model_open(ctx, path, NULL, &m);
	if (ret)
		return ret;
	ret = kt_moe_forward(ctx, m, &a);
	kt_model_destroy(m);
	return ret;
}

/*
 * A 2.3 file (gpt-oss: biases, padded sizes) staged: the bias section
 * comes along, checked; the mapped copy gives the file's y bits; a
 * damaged bias section is caught while staging.
 */
TEST_F(stage, gpt_oss_with_biases)
{
	struct gw_cfg c = {
		.arch = "gpt-oss", .H = 160, .I = 96, .E = 3, .k = 2, .L = 1,
		.type = GW_Q8_0, .seed = 9, .bias = 1,
	};
	char oss[600], staged[600];
	struct kt_convert_opts co = { .sz = sizeof(co), .output = oss,
				      .layer_last = -1, .threads = 1 };
	static float y1[4 * 160], y2[4 * 160];
	struct kt_load_stats st;
	struct ktw_header hb;
	struct gw_tensor t[16];
	struct gw_buf b;
	size_t n, data;
	char *path;
	uint8_t byte;
	int fd;

	snprintf(oss, sizeof(oss), "%s/oss.ktw", self->dir);
	gw_build(&c, &b, t, &n, &data);
	path = gw_save(&b);
	free(b.p);
	ASSERT_NE(path, NULL);
	co.input = path;
	ASSERT_EQ(kt_convert(&co), 0);
	unlink(path);
	free(path);
	ASSERT_EQ(kt_ktw_stage(oss, self->mnt, staged, sizeof(staged), NULL,
			       NULL), 0);
	ASSERT_EQ(kt_ktw_verify(staged, NULL), 0);
	ASSERT_EQ(oss_y(self->ctx, oss, y1), 0);
	ASSERT_EQ(oss_y(self->ctx, staged, y2), 0);
	kt_load_stats_get(&st);
	EXPECT_EQ(st.mapped, 1);
	EXPECT_EQ(memcmp(y1, y2, sizeof(y1)), 0);
	unlink(staged);
	fd = open(oss, O_RDWR);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(pread(fd, &hb, sizeof(hb), 0), (ssize_t)sizeof(hb));
	ASSERT_EQ(pread(fd, &byte, 1, (off_t)hb.bias_off + 8), 1);
	byte ^= 1;
	ASSERT_EQ(pwrite(fd, &byte, 1, (off_t)hb.bias_off + 8), 1);
	close(fd);
	EXPECT_EQ(kt_ktw_stage(oss, self->mnt, NULL, 0, NULL, NULL), -EIO);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), "bias section"), NULL);
	EXPECT_NE(access(staged, F_OK), 0);
	unlink(oss);
}

TEST_HARNESS_MAIN
