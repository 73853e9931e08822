// SPDX-License-Identifier: MIT
/*
 * placement.c - which node's pages each byte of a model's blobs lands on,
 * for fake node counts, against kern_pack_node_ranges() and the rule that a
 * page goes to the node owning most of its bytes.
 */
#include "kt_test.h"
#include "kernels/pack.h"
#include "loader/placement.h"

struct plan_check {
	const struct kern_pack_layout *l;
	unsigned int n_nodes;
	uint64_t start, blobs, stride, page, next;
	int errors;
};

/* Blob by blob overlap: most bytes wins, ties to the lower, none: 0. */
static unsigned int page_owner(const struct plan_check *c, uint64_t p0)
{
	struct kern_range rg[KERN_PACK_MAX_RANGES];
	uint64_t bytes[KT_MAX_NODES] = { 0 }, best = 0, b, p1 = p0 + c->page;
	unsigned int j, owner = 0;
	int k, i;

	for (b = 0; b < c->blobs; b++) {
		uint64_t base = c->start + b * c->stride;

		if (base >= p1 || base + c->stride <= p0)
			continue;
		for (j = 0; j < c->n_nodes; j++) {
			k = kern_pack_node_ranges(c->l, c->n_nodes, j, rg);
			for (i = 0; i < k; i++) {
				uint64_t s = base + rg[i].off;
				uint64_t e = s + rg[i].len;

				s = s > p0 ? s : p0;
				e = e < p1 ? e : p1;
				if (e > s)
					bytes[j] += e - s;
			}
		}
	}
	for (j = 0; j < c->n_nodes; j++)
		if (bytes[j] > best) {
			best = bytes[j];
			owner = j;
		}
	return owner;
}

static void on_run(void *arg, uint64_t off, uint64_t len, unsigned int node)
{
	struct plan_check *c = arg;
	uint64_t p;

	if (off != c->next || off % c->page || len % c->page || !len)
		c->errors++;
	c->next = off + len;
	for (p = off; p < off + len; p += c->page)
		if (page_owner(c, p) != node)
			c->errors++;
}

/* Every page of a model's blobs exactly once, to the node reading most. */
TEST(placement_plan_fake_nodes)
{
	static const struct { enum kt_quant q; unsigned int h, i, g; } geo[] = {
		{ KT_QUANT_INT8, 512, 1024, 0 },
		{ KT_QUANT_INT4, 256, 768, 64 },
		{ KT_QUANT_BF16, 384, 512, 0 },
		{ KT_QUANT_INT8, 128, 384, 0 },
	};
	unsigned int gi, nodes;
	uint64_t page, start;

	for (gi = 0; gi < sizeof(geo) / sizeof(geo[0]); gi++) {
		struct kern_pack_layout l;

		ASSERT_EQ(kern_pack_layout(geo[gi].q, geo[gi].h, geo[gi].i,
					   geo[gi].g, &l), 0);
		for (nodes = 1; nodes <= 4; nodes++)
			for (page = 4096; page <= 65536; page *= 16)
			for (start = 0; start <= 8192; start += 8192) {
				struct ldr_placement pl;
				struct plan_check c = {
					.l = &l, .n_nodes = nodes,
					.start = start, .blobs = 5,
					.stride = (l.total + 4095) / 4096 * 4096,
					.page = page,
				};
				uint64_t len = start + c.blobs * c.stride;

				ldr_placement_init(&pl, &l, nodes, start,
						   c.blobs, c.stride);
				core_mem_plan(&pl.lay, len, page, on_run, &c);
				EXPECT_EQ(c.errors, 0);
				EXPECT_EQ(c.next, (len + page - 1) / page * page);
			}
	}
}

/*
 * Down's type by layer (a GGUF Q4_K_M file): layer l's blobs of layout
 * lays[l]. Each page goes to the node reading most of its bytes by the
 * blob's own layout; @one_layout plans them all by layer 0's instead.
 */
struct layer_check {
	const struct kern_pack_layout *lays;
	const uint64_t *blobs;	/* per layer */
	uint32_t n_layers;
	unsigned int n_nodes;
	uint64_t stride, page, next;
	int errors;
};

static const struct kern_pack_layout *blob_layout(const struct layer_check *c,
						  uint64_t b)
{
	uint32_t l;

	for (l = 0; l + 1 < c->n_layers && b >= c->blobs[l]; l++)
		b -= c->blobs[l];
	return &c->lays[l];
}

static void on_layer_run(void *arg, uint64_t off, uint64_t len,
			 unsigned int node)
{
	struct layer_check *c = arg;
	uint64_t p, total = 0;
	uint32_t l;

	for (l = 0; l < c->n_layers; l++)
		total += c->blobs[l];
	if (off != c->next || off % c->page || len % c->page || !len)
		c->errors++;
	c->next = off + len;
	for (p = off; p < off + len; p += c->page) {
		struct kern_range rg[KERN_PACK_MAX_RANGES];
		uint64_t bytes[KT_MAX_NODES] = { 0 }, best = 0, b;
		unsigned int j, owner = 0;
		int k, i;

		for (b = p / c->stride; b < total && b * c->stride < p + c->page;
		     b++)
			for (j = 0; j < c->n_nodes; j++) {
				k = kern_pack_node_ranges(blob_layout(c, b),
							  c->n_nodes, j, rg);
				for (i = 0; i < k; i++) {
					uint64_t s = b * c->stride + rg[i].off;
					uint64_t e = s + rg[i].len;

					s = s > p ? s : p;
					e = e < p + c->page ? e : p + c->page;
					if (e > s)
						bytes[j] += e - s;
				}
			}
		for (j = 0; j < c->n_nodes; j++)
			if (bytes[j] > best) {
				best = bytes[j];
				owner = j;
			}
		if (owner != node)
			c->errors++;
	}
}

TEST(placement_down_type_by_layer)
{
	/* Q4_K_M's pattern: Q6_K, Q4_K, Q4_K, Q6_K (masks: blobs vary) */
	static const enum kt_quant qd[] = { KT_QUANT_Q6_K, KT_QUANT_Q4_K,
					    KT_QUANT_Q4_K, KT_QUANT_Q6_K };
	static const uint64_t blobs[] = { 3, 4, 2, 4 };
	struct kern_pack_layout lays[4];
	unsigned int l, nodes;
	uint64_t page, stride = 0;

	for (l = 0; l < 4; l++) {
		ASSERT_EQ(kern_pack_layout_mix(KT_QUANT_Q4_K, qd[l], 1024, 2048,
					       0, &lays[l]), 0);
		if (lays[l].total > stride)
			stride = lays[l].total;
	}
	stride = (stride + 4095) / 4096 * 4096;
	for (nodes = 1; nodes <= 4; nodes++)
		for (page = 4096; page <= 65536; page *= 16) {
			struct ldr_placement_set set;
			struct ldr_placement one;
			struct layer_check c = {
				.lays = lays, .blobs = blobs, .n_layers = 4,
				.n_nodes = nodes, .stride = stride,
				.page = page,
			};
			uint64_t len = 13 * stride;

			ASSERT_EQ(ldr_placement_layers(&set, lays, 4, nodes,
						       blobs, stride), 0);
			/* Q6_K | Q4_K, Q4_K | Q6_K: three groups */
			ASSERT_EQ(set.n, 3u);
			core_mem_plan(&set.groups[0].lay, len, page,
				      on_layer_run, &c);
			EXPECT_EQ(c.errors, 0);
			EXPECT_EQ(c.next, (len + page - 1) / page * page);
			ldr_placement_set_free(&set);
			/* what kt did: layer 0's layout for every blob puts
			 * pages of the Q4_K layers' down slices and scales
			 * on other nodes */
			c.errors = 0;
			c.next = 0;
			ldr_placement_init(&one, &lays[0], nodes, 0, 13, stride);
			core_mem_plan(&one.lay, len, page, on_layer_run, &c);
			if (nodes > 1 && page == 4096)
				EXPECT_GT(c.errors, 0);
		}
}

TEST_HARNESS_MAIN
