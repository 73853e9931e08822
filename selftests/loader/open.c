// SPDX-License-Identifier: MIT
/*
 * open.c - kt_model_open() options: pread and io_uring paths, 4 KiB pages,
 * small blocks and shallow queues, older option structs, bad options; every
 * variant must load the same bytes as the file holds.
 */
#include <fcntl.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>

#include "kt_test.h"
#include "ckpt.h"
#include "test-ctx.h"
#include "ktcore/model.h"
#include "loader/ktw.h"

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
	snprintf(self->ktw, sizeof(self->ktw), "%s/m.ktw", self->dir);
	ASSERT_EQ(tck_convert(&c, self->dir, &o, self->ktw), 0);
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

/* The pages of every expert are on the context's (only) node. */
TEST_F(op, pages_on_the_node)
{
	struct kt_model *m = NULL;
	uint32_t i;
	int node, want = -1, cpu_node;

	if (numa_available() < 0)
		SKIP(return, "no NUMA support in this kernel");
	ASSERT_EQ(kt_model_open(self->ctx, self->ktw, NULL, &m), 0);
	/* a one-node machine: the node of this CPU is the context's node */
	cpu_node = numa_node_of_cpu(sched_getcpu());
	for (i = 0; i < m->n_layers * m->n_experts; i++) {
		const void *p = m->experts[i].down.tiles;

		ASSERT_EQ(get_mempolicy(&node, NULL, 0, (void *)p,
					MPOL_F_NODE | MPOL_F_ADDR), 0);
		if (want < 0)
			want = node;
		EXPECT_EQ(node, want);
	}
	if (numa_num_configured_nodes() == 1)
		EXPECT_EQ(want, cpu_node);
	kt_model_destroy(m);
}

/*
 * A (sparse) file larger than the memory left is refused up front with
 * -ENOMEM, not half read and then OOM-killed.
 */
TEST(larger_than_memory)
{
	struct kt_model_opts mo = { .sz = sizeof(mo),
				    .flags = KT_MODEL_F_NO_HUGEPAGE };
	unsigned long long kb = 0;
	struct ktw_header h;
	struct ktw_entry *t;
	struct ldr_geom g;
	struct kt_ctx *ctx = NULL;
	struct kt_model *m = NULL;
	int32_t *ids;
	uint32_t layers, i;
	char path[256], line[128];
	FILE *f = fopen("/proc/meminfo", "r");
	int fd;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	if (!kb || kb > (256ull << 20))
		SKIP(return, "MemAvailable unknown or above 256 GiB");
	/* 8192 x 8192 INT8 experts, 64 per layer: 12 GiB a layer */
	ASSERT_EQ(ldr_geom_init(&g, KT_QUANT_INT8, 8192, 8192, 0), 0);
	layers = (uint32_t)(kb * 1024 * 2 / (g.expert_bytes * 64)) + 1;
	t = calloc((size_t)layers * 64, sizeof(*t));
	ids = calloc(layers, sizeof(*ids));
	for (i = 0; i < layers; i++)
		ids[i] = (int32_t)i;
	ASSERT_EQ(ldr_ktw_layout(&h, &g, layers, 64, t), 0);
	ldr_ktw_seal(&h, ids, t);
	snprintf(path, sizeof(path), "/tmp/kt-huge-%d.ktw", (int)getpid());
	fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ASSERT_EQ(pwrite(fd, ids, 4ull * layers, (off_t)h.layers_off),
		  (ssize_t)(4 * layers));
	ASSERT_EQ(pwrite(fd, t, (size_t)layers * 64 * sizeof(*t), (off_t)h.table_off),
		  (ssize_t)((size_t)layers * 64 * sizeof(*t)));
	if (ftruncate(fd, (off_t)h.file_size)) {
		close(fd);
		unlink(path);
		SKIP(return, "no sparse file of %llu bytes here",
		     (unsigned long long)h.file_size);
	}
	close(fd);
	ASSERT_EQ(test_ctx(&ctx), 0);
	EXPECT_EQ(kt_model_open(ctx, path, &mo, &m), -ENOMEM);
	TH_LOG("%s", kt_last_error());
	unlink(path);
	kt_ctx_destroy(ctx);
	free(t);
	free(ids);
}

TEST_HARNESS_MAIN
