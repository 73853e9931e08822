// SPDX-License-Identifier: MIT
/*
 * mem.c - model memory: MAP_HUGETLB (1 GiB, then 2 MiB) when pages are
 * free, else transparent hugepages, else 4 KiB; node binding before first
 * touch, so the O_DIRECT reads fault each page in on its node.
 */
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ktcore/core.h"
#include "loader/mem.h"

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#define SZ_2M (2ull << 20)
#define SZ_1G (1ull << 30)

static bool warned_hugetlb, warned_thp;

static void *map_huge(size_t len, uint64_t page)
{
	int shift = page == SZ_1G ? 30 : 21;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB |
		       (shift << MAP_HUGE_SHIFT), -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* MemAvailable of /proc/meminfo in bytes; UINT64_MAX when unknown. */
static uint64_t mem_available(void)
{
	unsigned long long kb;
	char line[128];
	uint64_t v = UINT64_MAX;
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return v;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
			v = kb * 1024;
			break;
		}
	fclose(f);
	return v;
}

/*
 * Ordinary pages are not reserved at mmap time: a model larger than the
 * memory left would end in the OOM killer halfway through the read.
 */
static int check_room(size_t len)
{
	uint64_t avail = mem_available();

	if (avail != UINT64_MAX && len > avail) {
		core_logv_global(KT_LOG_INFO,
				 "model memory: %.1f MiB needed, %.1f MiB available",
				 len / 1048576.0, avail / 1048576.0);
		return -ENOMEM;
	}
	return 0;
}

int ldr_mem_alloc(size_t len, bool allow_huge, bool allow_1g,
		  struct ldr_mem *m)
{
	size_t map_len;
	uint8_t *p;
	int ret;

	memset(m, 0, sizeof(*m));
	m->len = len ? len : 1;
	if (allow_huge) {
		/* 1 GiB pages only when the rounding wastes little */
		if (allow_1g && m->len >= 8 * SZ_1G) {
			map_len = (m->len + SZ_1G - 1) & ~(SZ_1G - 1);
			p = map_huge(map_len, SZ_1G);
			if (p) {
				m->page = SZ_1G;
				goto huge;
			}
		}
		map_len = (m->len + SZ_2M - 1) & ~(SZ_2M - 1);
		p = map_huge(map_len, SZ_2M);
		if (p) {
			m->page = SZ_2M;
			goto huge;
		}
		if (!__atomic_exchange_n(&warned_hugetlb, true, __ATOMIC_RELAXED))
			core_logv_global(KT_LOG_WARN,
					 "model memory: not enough free hugepages for %.1f MiB (scripts/setup-hugepages.sh); trying transparent hugepages",
					 m->len / 1048576.0);
		ret = check_room(m->len);
		if (ret)
			return ret;
		/* over-map by 2 MiB to align the start for THP */
		map_len = ((m->len + SZ_2M - 1) & ~(SZ_2M - 1)) + SZ_2M;
		p = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED)
			return -ENOMEM;
		{
			uint8_t *a = (uint8_t *)(((uintptr_t)p + SZ_2M - 1) &
						 ~(uintptr_t)(SZ_2M - 1));
			size_t head = (size_t)(a - p), body = map_len - SZ_2M;

			if (head)
				munmap(p, head);
			if (SZ_2M - head)
				munmap(a + body, SZ_2M - head);
			p = a;
			map_len = body;
		}
		if (!madvise(p, map_len, MADV_HUGEPAGE)) {
			m->base = p;
			m->map_len = map_len;
			m->page = SZ_2M;	/* as the kernel manages to */
			return 0;
		}
		if (!__atomic_exchange_n(&warned_thp, true, __ATOMIC_RELAXED))
			core_logv_global(KT_LOG_WARN,
					 "model memory: transparent hugepages unavailable; using 4 KiB pages");
		m->base = p;
		m->map_len = map_len;
		m->page = 4096;
		return 0;
	}
	ret = check_room(m->len);
	if (ret)
		return ret;
	map_len = (m->len + 4095) & ~(size_t)4095;
	p = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	m->base = p;
	m->map_len = map_len;
	m->page = 4096;
	return 0;
huge:
	m->base = p;
	m->map_len = map_len;
	m->hugetlb = true;
	return 0;
}

void ldr_mem_free(struct ldr_mem *m)
{
	if (m->base)
		munmap(m->base, m->map_len);
	memset(m, 0, sizeof(*m));
}

int ldr_mem_bind(const struct ldr_mem *m, uint64_t off, uint64_t len,
		 int node)
{
	unsigned long mask[KT_MAX_NODES / (8 * sizeof(unsigned long)) + 1];

	if (node < 0 || node >= KT_MAX_NODES)
		return -EINVAL;
	if (numa_available() < 0)
		return 0;
	memset(mask, 0, sizeof(mask));
	mask[node / (8 * sizeof(unsigned long))] |=
		1ul << (node % (8 * sizeof(unsigned long)));
	/* preferred, not bind: a full node degrades locality, not the load */
	if (mbind(m->base + off, len, MPOL_PREFERRED, mask, KT_MAX_NODES + 1, 0))
		return -errno;
	return 0;
}

struct place_run {
	uint64_t off, len;
	unsigned int node;
	bool open;
	ldr_place_fn fn;
	void *arg;
};

static void run_add(struct place_run *r, uint64_t p0, uint64_t p1,
		    unsigned int node)
{
	if (p1 <= p0)
		return;
	if (r->open && r->node == node && r->off + r->len == p0) {
		r->len += p1 - p0;
		return;
	}
	if (r->open)
		r->fn(r->arg, r->off, r->len, r->node);
	r->off = p0;
	r->len = p1 - p0;
	r->node = node;
	r->open = true;
}

struct owner {
	uint64_t off, end;
	unsigned int node;
};

static int cmp_owner(const void *a, const void *b)
{
	const struct owner *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

void ldr_place_plan(const struct kern_pack_layout *l, unsigned int n_nodes,
		    uint64_t n_blobs, uint64_t stride, uint64_t page,
		    ldr_place_fn fn, void *arg)
{
	struct owner own[KERN_PACK_MAX_RANGES * KT_MAX_NODES];
	struct kern_range rg[KERN_PACK_MAX_RANGES];
	struct place_run run = { .fn = fn, .arg = arg };
	uint64_t b, pos = 0, total = n_blobs * stride;
	unsigned int j, n = 0;
	int i, k;

	if (n_nodes > KT_MAX_NODES)
		n_nodes = KT_MAX_NODES;
	for (j = 0; j < n_nodes; j++) {
		k = kern_pack_node_ranges(l, n_nodes, j, rg);
		for (i = 0; i < k; i++)
			own[n++] = (struct owner){ rg[i].off,
						   rg[i].off + rg[i].len, j };
	}
	qsort(own, n, sizeof(own[0]), cmp_owner);
	/* walk pages: owner of the byte each page starts at */
	while (pos < total) {
		uint64_t in = pos % stride, next, blob_base = pos - in;
		unsigned int node = 0;

		b = blob_base;
		next = b + stride;	/* default: up to the next blob */
		for (j = 0; j < n; j++) {
			if (in < own[j].off) {
				next = b + own[j].off;
				break;
			}
			if (in < own[j].end) {
				node = own[j].node;
				next = b + own[j].end;
				break;
			}
		}
		/* pages starting in [pos, next) all belong to @node */
		{
			uint64_t p0 = (pos + page - 1) / page * page;
			uint64_t p1 = (next + page - 1) / page * page;

			if (p1 > (total + page - 1) / page * page)
				p1 = (total + page - 1) / page * page;
			run_add(&run, p0, p1, node);
		}
		pos = next;
	}
	if (run.open)
		fn(arg, run.off, run.len, run.node);
}
