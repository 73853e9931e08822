// SPDX-License-Identifier: MIT
/*
 * mem.c - ktcore's node-placed allocator: each page size the machine has,
 * the fallback order with one warning per step through the log callback,
 * every page bound to exactly one node (fake topologies), free.
 */
#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <numaif.h>

#include "kt_test.h"
#include "hugetlb.h"
#include "ktcore/core.h"
#include "ktcore/mem.h"

#define FREE_2M TH_FREE_2M
#define FREE_1G "/sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages"
#define SZ_2M (2ull << 20)

/* ---- a context whose log the test reads ------------------------------- */

struct log_rec {
	unsigned int n;
	char msg[16][256];
};

static void log_cb(void *arg, enum kt_log_level level, const char *msg)
{
	struct log_rec *r = arg;

	/* the allocator's messages only, the context's own ones are not ours */
	if (level != KT_LOG_WARN || strncmp(msg, "memory:", 7) || r->n >= 16)
		return;
	snprintf(r->msg[r->n++], sizeof(r->msg[0]), "%s", msg);
}

static struct kt_ctx *log_ctx(struct log_rec *r)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 1,
				 .flags = KT_CTX_F_NO_PIN, .log_fn = log_cb,
				 .log_arg = r };
	struct kt_ctx *ctx = NULL;

	setenv("KT_LOG", "warn", 1);
	return kt_ctx_create(&o, &ctx) ? NULL : ctx;
}

static unsigned int count_msgs(const struct log_rec *r, const char *what)
{
	unsigned int i, n = 0;

	for (i = 0; i < r->n; i++)
		n += strstr(r->msg[i], what) != NULL;
	return n;
}

/* ---- the plan: pure --------------------------------------------------- */

struct run_rec {
	uint64_t next;
	unsigned int owner[4096];	/* per page */
	int errors;
	uint64_t page;
};

static void rec_run(void *arg, uint64_t off, uint64_t len, unsigned int node)
{
	struct run_rec *r = arg;
	uint64_t p;

	if (off != r->next || !len || off % r->page || len % r->page)
		r->errors++;
	r->next = off + len;
	for (p = off / r->page; p < (off + len) / r->page && p < 4096; p++)
		r->owner[p] = node;
}

/* The defect kt had: a page half in two nodes' slices bound to neither. */
TEST(plan_straddling_page_goes_to_most_bytes)
{
	/* period 10000: node 1 [0, 100), node 0 [100, 6000), node 2
	 * [6000, 9000), padding [9000, 10000) */
	static const struct core_mem_span sp[] = {
		{ 6000, 3000, 2 }, { 0, 100, 1 }, { 100, 5900, 0 },
	};
	struct core_mem_layout lay = { sp, 3, 0, 10000, 3, NULL };
	static struct run_rec r = { .page = 4096 };

	core_mem_plan(&lay, 30000, 4096, rec_run, &r);
	ASSERT_EQ(r.errors, 0);
	ASSERT_EQ(r.next, 32768);
	EXPECT_EQ(r.owner[0], 0);	/* 100 B of node 1, 3996 of node 0 */
	EXPECT_EQ(r.owner[1], 2);	/* [4096, 8192): 1904 of 0, 2192 of 2 */
	EXPECT_EQ(r.owner[2], 0);	/* 808 of 2, 1000 pad, 100 of 1, 2188 of 0 */
	EXPECT_EQ(r.owner[7], 2);	/* 328 B of node 2, then pad and past */
	/* tie: 2048 B each of nodes 1 and 0 in a 4 KiB page: the lower */
	{
		static const struct core_mem_span t[] = {
			{ 0, 2048, 1 }, { 2048, 2048, 0 },
		};
		struct core_mem_layout tl = { t, 2, 0, 4096, 2, NULL };
		static struct run_rec tr = { .page = 4096 };

		core_mem_plan(&tl, 8192, 4096, rec_run, &tr);
		EXPECT_EQ(tr.errors, 0);
		EXPECT_EQ(tr.owner[0], 0);
		EXPECT_EQ(tr.owner[1], 0);
	}
	/* a header before the blobs (kt stage): no owner, index 0 */
	{
		static const struct core_mem_span h[] = { { 0, 8192, 3 } };
		struct core_mem_layout hl = { h, 1, 8192, 8192, 2, NULL };
		static struct run_rec hr = { .page = 4096 };

		core_mem_plan(&hl, 6 * 4096, 4096, rec_run, &hr);
		EXPECT_EQ(hr.errors, 0);
		EXPECT_EQ(hr.next, 6 * 4096);
		EXPECT_EQ(hr.owner[0], 0);
		EXPECT_EQ(hr.owner[1], 0);
		EXPECT_EQ(hr.owner[2], 3);
		EXPECT_EQ(hr.owner[5], 3);
	}
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Random layouts, 1 to 4 nodes, against counting every byte. */
TEST(plan_random_layouts_against_byte_count)
{
	static struct run_rec r;
	static uint16_t own[1 << 20];	/* node + 1 of each byte, 0: none */
	uint64_t seed = 88172645463325252ull;
	unsigned int it, tried;

	for (it = 0, tried = 0; it < 300; it++) {
		struct core_mem_span sp[12];
		struct core_mem_layout lay = { .spans = sp };
		unsigned int nodes = 1 + rnd(&seed) % 4, n = 0, i;
		uint64_t page = 512ull << (rnd(&seed) % 6), len, x, cut = 0;

		lay.stride = 1 + rnd(&seed) % 20000;
		lay.count = rnd(&seed) % 8;
		lay.start = rnd(&seed) % 3 ? 0 : rnd(&seed) % 9000;
		/* spans cut the period in order, some gaps left */
		while (n < 12 && cut < lay.stride) {
			uint64_t gap = rnd(&seed) % 3 ? 0 : rnd(&seed) % 700;
			uint64_t l = 1 + rnd(&seed) % (lay.stride / 3 + 1);

			cut += gap;
			if (cut >= lay.stride)
				break;
			if (l > lay.stride - cut)
				l = lay.stride - cut;
			sp[n++] = (struct core_mem_span){ cut, l,
				(unsigned int)(rnd(&seed) % nodes) };
			cut += l;
		}
		lay.n_spans = n;
		len = lay.start + lay.count * lay.stride + rnd(&seed) % 5000;
		if (len > sizeof(own) / sizeof(own[0]) || len / page >= 4096)
			continue;
		memset(own, 0, len * sizeof(own[0]));
		for (x = lay.start; x < lay.start + lay.count * lay.stride; x++)
			for (i = 0; i < n; i++) {
				uint64_t in = (x - lay.start) % lay.stride;

				if (in >= sp[i].off && in < sp[i].off + sp[i].len)
					own[x] = (uint16_t)(sp[i].node_idx + 1);
			}
		memset(&r, 0, sizeof(r));
		r.page = page;
		tried++;
		core_mem_plan(&lay, len, page, rec_run, &r);
		ASSERT_EQ(r.errors, 0);
		ASSERT_EQ(r.next, (len + page - 1) / page * page);
		for (x = 0; x < len; x += page) {
			uint64_t cnt[5] = { 0 }, y, best = 0;
			unsigned int want = 0, j;

			for (y = x; y < x + page && y < len; y++)
				cnt[own[y]]++;
			for (j = 0; j < nodes; j++)
				if (cnt[j + 1] > best) {
					best = cnt[j + 1];
					want = j;
				}
			if (r.owner[x / page] != want) {
				TH_LOG("iteration %u, page %llu: node %u, want %u",
				       it, (unsigned long long)(x / page),
				       r.owner[x / page], want);
				ASSERT_EQ(r.owner[x / page], want);
			}
		}
	}
	EXPECT_GE(tried, 200);	/* the size filter let most through */
}

/* ---- allocation ------------------------------------------------------- */

/* Node of each page of [p, p + len) by get_mempolicy(); -1 unbound. */
static int policy_node(void *p)
{
	unsigned long mask[KT_MAX_NODES / (8 * sizeof(unsigned long)) + 1];
	int mode = -1, i;

	memset(mask, 0, sizeof(mask));
	if (get_mempolicy(&mode, mask, KT_MAX_NODES + 1, p, MPOL_F_ADDR))
		return -2;
	if (mode != MPOL_PREFERRED)
		return -1;
	for (i = 0; i < KT_MAX_NODES; i++)
		if (mask[i / (8 * sizeof(unsigned long))] >>
		    (i % (8 * sizeof(unsigned long))) & 1)
			return i;
	return -1;
}

/* Allocate, check the page size reported, bind, touch, free. */
static void check_alloc(struct kt_test_meta *_metadata, size_t len,
			unsigned int flags, enum core_page_kind want)
{
	struct log_rec rec = { 0 };
	struct kt_ctx *ctx = log_ctx(&rec);
	struct core_mem m;
	size_t i;
	int node = numa_available() >= 0 ? numa_node_of_cpu(0) : 0;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(core_mem_alloc_node(ctx, node < 0 ? 0 : node, len, flags,
				      &m), 0);
	EXPECT_EQ(m.kind, want);
	EXPECT_EQ(m.page, want == CORE_PAGE_1G ? 1ull << 30 :
			  want == CORE_PAGE_4K ? 4096 : SZ_2M);
	EXPECT_EQ((uintptr_t)m.base % m.page, 0);
	EXPECT_GE(m.map_len, len);
	EXPECT_EQ(m.map_len % m.page, 0);
	if (numa_available() >= 0) {
		EXPECT_EQ(policy_node(m.base), node);
		EXPECT_EQ(policy_node(m.base + m.map_len - 1), node);
	}
	for (i = 0; i < len; i += 4096)
		EXPECT_EQ(m.base[i], 0);	/* zeroed */
	memset(m.base, 0x5a, len);
	if (numa_available() >= 0) {
		void *pg = m.base;
		int status = -1;

		ASSERT_EQ(move_pages(0, 1, &pg, NULL, &status, 0), 0);
		EXPECT_EQ(status, node);
	}
	EXPECT_EQ(rec.n, 0);	/* what was asked for came: no warning */
	core_mem_free(&m);
	EXPECT_EQ(m.base, NULL);
	kt_ctx_destroy(ctx);
}

TEST_TIMEOUT(alloc_4k_pages, 30)
{
	check_alloc(_metadata, 3 * 4096 + 5, CORE_MEM_F_SMALL, CORE_PAGE_4K);
}

TEST_TIMEOUT(alloc_thp, 30)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	char buf[128] = "";

	if (!f || !fgets(buf, sizeof(buf), f) || strstr(buf, "[never]")) {
		if (f)
			fclose(f);
		SKIP(return, "transparent hugepages are off");
	}
	fclose(f);
	check_alloc(_metadata, 5 * SZ_2M + 123, CORE_MEM_F_NO_HUGETLB,
		    CORE_PAGE_THP);
}

TEST_TIMEOUT(alloc_2m_hugetlb, 30)
{
	const char *why = "";

	if (th_reserve_2m(4, &why))
		SKIP(return, "%s", why);
	check_alloc(_metadata, 3 * SZ_2M + 1, 0, CORE_PAGE_2M);
}

TEST_TIMEOUT(alloc_1g_hugetlb, 30)
{
	if (th_read_long(FREE_1G) < (long)(CORE_MEM_1G_MIN >> 30))
		SKIP(return, "fewer than %llu free 1 GiB hugepages",
		     CORE_MEM_1G_MIN >> 30);
	check_alloc(_metadata, CORE_MEM_1G_MIN, CORE_MEM_F_1G, CORE_PAGE_1G);
}

/* 1 GiB -> 2 MiB -> THP -> 4 KiB, each step told once per context. */
TEST_TIMEOUT(fallback_order_warns_once_per_context, 30)
{
	struct log_rec r1 = { 0 }, r2 = { 0 };
	struct kt_ctx *c1 = log_ctx(&r1), *c2 = log_ctx(&r2);
	long free2m = th_read_long(FREE_2M), free1g = th_read_long(FREE_1G);
	size_t big = (size_t)((free2m > 0 ? free2m : 0) + 1) * SZ_2M;
	enum core_page_kind kind = CORE_PAGE_4K;
	struct core_mem m;
	int i, ret;

	ASSERT_NE(c1, NULL);
	ASSERT_NE(c2, NULL);
	/* more than the free 2 MiB pages: the next step */
	for (i = 0; i < 2; i++) {
		ASSERT_EQ(core_mem_alloc(c1, big, 0, &m), 0);
		kind = m.kind;
		EXPECT_TRUE(kind == CORE_PAGE_THP || kind == CORE_PAGE_4K);
		core_mem_free(&m);
	}
	EXPECT_EQ(count_msgs(&r1, "2 MiB hugepages"), 1);
	EXPECT_EQ(count_msgs(&r1, "transparent hugepages unavailable"),
		  kind == CORE_PAGE_4K);
	/* another context is told again */
	ASSERT_EQ(core_mem_alloc(c2, big, CORE_MEM_F_NO_THP, &m), 0);
	EXPECT_EQ(m.kind, CORE_PAGE_4K);
	core_mem_free(&m);
	EXPECT_EQ(count_msgs(&r2, "2 MiB hugepages"), 1);
	EXPECT_EQ(count_msgs(&r2, "transparent"), 0);	/* not asked for */
	/* 1 GiB first, when asked: told before the 2 MiB step */
	if (free1g < (long)(CORE_MEM_1G_MIN >> 30) &&
	    free2m < (long)(CORE_MEM_1G_MIN / SZ_2M)) {
		struct log_rec r3 = { 0 };
		struct kt_ctx *c3 = log_ctx(&r3);

		ASSERT_NE(c3, NULL);
		/* untouched NORESERVE mapping; -ENOMEM when MemAvailable
		 * is smaller, the warnings come first either way */
		ret = core_mem_alloc(c3, CORE_MEM_1G_MIN, CORE_MEM_F_1G, &m);
		if (!ret)
			core_mem_free(&m);
		EXPECT_TRUE(ret == 0 || ret == -ENOMEM);
		ASSERT_GE(r3.n, 2);
		EXPECT_NE(strstr(r3.msg[0], "1 GiB"), NULL);
		EXPECT_NE(strstr(r3.msg[1], "2 MiB"), NULL);
		kt_ctx_destroy(c3);
	}
	kt_ctx_destroy(c1);
	kt_ctx_destroy(c2);
}

/* Every page preferred on exactly the node its plan run names. */
static void check_spread(struct kt_test_meta *_metadata, struct kt_ctx *ctx,
			 const struct core_mem *m,
			 const struct core_mem_layout *lay, const int *ids)
{
	static struct run_rec r;
	uint64_t p;

	memset(&r, 0, sizeof(r));
	r.page = m->page;
	core_mem_plan(lay, m->map_len, m->page, rec_run, &r);
	ASSERT_EQ(r.errors, 0);
	ASSERT_LE(m->map_len / m->page, 4096);
	for (p = 0; p < m->map_len / m->page; p++) {
		int want = ids[r.owner[p]];
		int got = policy_node(m->base + p * m->page);

		if (got != want) {
			TH_LOG("page %llu: node %d, want %d",
			       (unsigned long long)p, got, want);
			ASSERT_EQ(got, want);
		}
	}
	(void)ctx;
}

/* Blob-like spans: node j owns its share of each 40 KiB period. */
static void blob_layout(struct core_mem_span *sp, unsigned int nodes,
			struct core_mem_layout *lay, uint64_t count)
{
	unsigned int j;

	for (j = 0; j < nodes; j++)
		sp[j] = (struct core_mem_span){ 40960 * j / nodes,
			40960 * (j + 1) / nodes - 40960 * j / nodes, j };
	*lay = (struct core_mem_layout){ sp, nodes, 0, 40960, count, NULL };
}

TEST_TIMEOUT(spread_binds_every_page_fake_topologies, 60)
{
	struct log_rec rec = { 0 };
	struct kt_ctx *ctx;
	unsigned int nodes;

	if (numa_available() < 0)
		SKIP(return, "no NUMA support in this kernel");
	ctx = log_ctx(&rec);
	ASSERT_NE(ctx, NULL);
	/* 1 to 4 nodes by id list: several real nodes where the machine
	 * has them, else node 0 repeated, binding merged per id */
	for (nodes = 1; nodes <= 4; nodes++) {
		struct core_mem_span sp[4];
		struct core_mem_layout lay;
		struct core_mem m;
		int ids[4], j, real = numa_max_node() + 1;

		for (j = 0; j < (int)nodes; j++)
			ids[j] = numa_bitmask_isbitset(numa_all_nodes_ptr,
						       j % real) ? j % real : 0;
		blob_layout(sp, nodes, &lay, 25);
		ASSERT_EQ(core_mem_alloc(ctx, 25 * 40960, CORE_MEM_F_SMALL,
					 &m), 0);
		ASSERT_EQ(core_mem_bind_spread(ctx, &m, &lay, ids, nodes), 0);
		check_spread(_metadata, ctx, &m, &lay, ids);
		memset(m.base, 1, m.len);
		core_mem_free(&m);
	}
	kt_ctx_destroy(ctx);
	EXPECT_EQ(rec.n, 0);
}

/* Through a context of KT_FAKE_NUMA nodes, as the loader calls it. */
TEST_TIMEOUT(spread_alloc_fake_numa_ctx, 60)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned int parts;

	if (numa_available() < 0)
		SKIP(return, "no NUMA support in this kernel");
	for (parts = 2; parts <= 4 && parts <= cpus; parts++) {
		struct kt_ctx_opts o = { .sz = sizeof(o), .threads = parts,
					 .flags = KT_CTX_F_NO_PIN };
		struct core_mem_span sp[4];
		struct core_mem_layout lay;
		struct kt_ctx *ctx = NULL;
		struct core_mem m;
		int ids[4];
		unsigned int j;
		char v[4];

		snprintf(v, sizeof(v), "%u", parts);
		setenv("KT_FAKE_NUMA", v, 1);
		ASSERT_EQ(kt_ctx_create(&o, &ctx), 0);
		ASSERT_EQ(core_ctx_nodes(ctx), parts);
		for (j = 0; j < parts; j++)
			ids[j] = core_ctx_node_id(ctx, j);
		blob_layout(sp, parts, &lay, 200);
		ASSERT_EQ(core_mem_alloc_spread(ctx, 200 * 40960, 0, &lay,
						&m), 0);
		check_spread(_metadata, ctx, &m, &lay, ids);
		core_mem_free(&m);
		kt_ctx_destroy(ctx);
	}
	unsetenv("KT_FAKE_NUMA");
	if (cpus < 2)
		SKIP(return, "one CPU: no fake node split");
}

/* Freed memory is unmapped: mincore() no longer knows the pages. */
TEST_TIMEOUT(free_unmaps, 30)
{
	struct log_rec rec = { 0 };
	struct kt_ctx *ctx = log_ctx(&rec);
	unsigned char vec[4];
	struct core_mem m;
	uint8_t *p, *q;

	ASSERT_NE(ctx, NULL);
	ASSERT_EQ(core_mem_alloc(ctx, 10000, CORE_MEM_F_SMALL, &m), 0);
	p = m.base;
	p[0] = 1;
	ASSERT_EQ(mincore(p, 4096, vec), 0);
	core_mem_free(&m);
	EXPECT_EQ(m.base, NULL);
	EXPECT_EQ(m.map_len, 0);
	EXPECT_EQ(mincore(p, 4096, vec), -1);
	EXPECT_EQ(errno, ENOMEM);
	core_mem_free(&m);	/* twice is harmless */
	q = core_node_alloc(ctx, 0, 3 * SZ_2M + 7);
	ASSERT_NE(q, NULL);
	q[3 * SZ_2M + 6] = 1;
	core_node_free(q, 3 * SZ_2M + 7);
	EXPECT_EQ(mincore(q + 3 * SZ_2M, 4096, vec), -1);
	kt_ctx_destroy(ctx);
}

TEST_HARNESS_MAIN
