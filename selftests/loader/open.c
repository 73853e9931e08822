// SPDX-License-Identifier: MIT
/*
 * open.c - kt_model_open() options: pread and io_uring paths, 4 KiB pages,
 * small blocks and shallow queues, older option structs, bad options; every
 * variant must load the same bytes as the file holds.
 */
#include <fcntl.h>

#include "kt_test.h"
#include "ckpt.h"
#include "test-ctx.h"
#include "ktcore/model.h"
#include "loader/ktw-format.h"

FIXTURE(op) {
	char dir[256];
	char ktw[300];
	struct kt_ctx *ctx;
};

FIXTURE_SETUP(op)
{
	struct tck c = TCK(TCK_MIXTRAL, TCK_BF16, 256, 384, 5, 2, 2, 1, 51);
	struct kt_convert_opts o = { .sz = sizeof(o), .quant = KT_QUANT_INT4,
				     .group_size = 64, .layer_last = -1,
				     .threads = 2 };

	snprintf(self->dir, sizeof(self->dir), "/tmp/kt-open-%d", (int)getpid());
	tck_rmdir(self->dir);
	ASSERT_EQ(tck_write(&c, self->dir), 0);
	tck_free(&c);
	snprintf(self->ktw, sizeof(self->ktw), "%s/m.ktw", self->dir);
	o.input = self->dir;
	o.output = self->ktw;
	ASSERT_EQ(kt_convert(&o), 0);
	ASSERT_EQ(test_ctx(&self->ctx), 0);
}

FIXTURE_TEARDOWN(op)
{
	kt_ctx_destroy(self->ctx);
	tck_rmdir(self->dir);
}

/* Every present expert's blob equals the file's bytes at its offset. */
static void same_as_file(struct kt_test_meta *_metadata, const char *path,
			 const struct kt_model *m)
{
	int fd = open(path, O_RDONLY);
	struct ktw_header h;
	struct ktw_entry e;
	uint8_t *buf;
	uint32_t i;

	ASSERT_GE(fd, 0);
	ASSERT_EQ(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	buf = malloc(h.expert_bytes);
	for (i = 0; i < m->n_layers * m->n_experts; i++) {
		if (!m->experts[i].present)
			continue;
		ASSERT_EQ(pread(fd, &e, sizeof(e), (off_t)(h.table_off + i * sizeof(e))),
			  (ssize_t)sizeof(e));
		ASSERT_EQ(pread(fd, buf, h.expert_bytes, (off_t)e.offset),
			  (ssize_t)h.expert_bytes);
		ASSERT_EQ(memcmp(buf, m->experts[i].gate.tiles, h.expert_bytes), 0);
	}
	free(buf);
	close(fd);
}

TEST_F(op, variants_load_the_same_bytes)
{
	static const struct { uint32_t flags, block, depth; } v[] = {
		{ 0, 0, 0 },
		{ KT_MODEL_F_NO_URING, 0, 0 },
		{ KT_MODEL_F_NO_HUGEPAGE, 8192, 1 },
		{ KT_MODEL_F_NO_HUGEPAGE | KT_MODEL_F_NO_VERIFY, 1 << 20, 256 },
		{ KT_MODEL_F_NO_URING | KT_MODEL_F_NO_HUGEPAGE, 4096, 2 },
	};
	size_t i;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		struct kt_model_opts mo = { .sz = sizeof(mo), .flags = v[i].flags,
					    .io_block = v[i].block,
					    .io_depth = v[i].depth };
		struct kt_load_stats st;
		struct kt_model *m = NULL;

		ASSERT_EQ(kt_model_open(self->ctx, self->ktw, &mo, &m), 0);
		kt_load_stats_get(&st);
		TH_LOG("variant %zu: io_uring %d direct %d verified %d page %llu KiB block %u depth %u",
		       i, st.io_uring, st.direct, st.verified,
		       (unsigned long long)st.page_kb, st.block, st.depth);
		EXPECT_EQ(st.verified, !(v[i].flags & KT_MODEL_F_NO_VERIFY));
		if (v[i].flags & KT_MODEL_F_NO_URING)
			EXPECT_EQ(st.io_uring, 0);
		if (v[i].flags & KT_MODEL_F_NO_HUGEPAGE)
			EXPECT_EQ(st.page_kb, 4u);
		EXPECT_EQ(st.bytes, (uint64_t)m->n_layers * m->n_experts *
			  ((m->expert_bytes + 4095) / 4096 * 4096));
		EXPECT_EQ(m->quant, KT_QUANT_INT4);
		EXPECT_EQ(m->group_size, 64u);
		same_as_file(_metadata, self->ktw, m);
		kt_model_destroy(m);
	}
}

TEST_F(op, options_checked)
{
	struct kt_model_opts mo = { .sz = sizeof(mo), .io_block = 1000 };
	struct kt_model *m = NULL;

	EXPECT_EQ(kt_model_open(self->ctx, self->ktw, &mo, &m), -EINVAL);
	mo.sz = 4;
	EXPECT_EQ(kt_model_open(self->ctx, self->ktw, &mo, &m), -EINVAL);
	EXPECT_EQ(kt_model_open(NULL, self->ktw, NULL, &m), -EINVAL);
	/* an older caller's struct, without io_block/io_depth */
	mo.sz = offsetof(struct kt_model_opts, io_block);
	mo.io_block = 1000;	/* beyond its size: ignored */
	ASSERT_EQ(kt_model_open(self->ctx, self->ktw, &mo, &m), 0);
	kt_model_destroy(m);
}

TEST_F(op, all_experts_masked)
{
	uint64_t mask = 0x1f;
	struct kt_model_opts mo = { .sz = sizeof(mo), .expert_mask = &mask };
	struct kt_model_info info;
	struct kt_model *m = NULL;
	uint32_t i;

	ASSERT_EQ(kt_model_open(self->ctx, self->ktw, &mo, &m), 0);
	kt_model_get_info(m, &info);
	EXPECT_EQ(info.resident_bytes, 0u);
	for (i = 0; i < m->n_layers * m->n_experts; i++)
		EXPECT_FALSE(m->experts[i].present);
	kt_model_destroy(m);
}

TEST_HARNESS_MAIN
