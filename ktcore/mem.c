// SPDX-License-Identifier: MIT
/*
 * mem.c - node-placed memory for everything kt keeps (weights, scratch):
 * 1 GiB -> 2 MiB hugetlb -> THP -> 4 KiB, one warning per step and context,
 * and every page bound to the one node that reads most of it.
 */
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ktcore/core.h"
#include "ktcore/ctx.h"
#include "ktcore/fault.h"
#include "ktcore/mem.h"

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#define SZ_4K (4096ull)
#define SZ_2M (2ull << 20)
#define SZ_1G (1ull << 30)

/* bits of ctx->mem_warned: each fallback step is told once per context */
#define WARN_1G		(1u << 0)
#define WARN_HUGETLB	(1u << 1)
#define WARN_THP	(1u << 2)
#define WARN_BIND	(1u << 3)

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static void warn_once(struct kt_ctx *ctx, uint32_t bit, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void warn_once(struct kt_ctx *ctx, uint32_t bit, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (!ctx || (__atomic_fetch_or(&ctx->mem_warned, bit,
				       __ATOMIC_RELAXED) & bit))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	core_log(ctx, KT_LOG_WARN, "%s", msg);
}

/* MemAvailable of /proc/meminfo in bytes; UINT64_MAX when unknown. */
static uint64_t mem_available(void)
{
	unsigned long long kb;
	char line[128];
	uint64_t v = UINT64_MAX;
	FILE *f = fopen("/proc/meminfo", "re");

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

/* THP is usable when the kernel has it and it is not switched off. */
static bool thp_enabled(void)
{
	char buf[128] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
	bool ok;

	if (!f)
		return false;
	ok = fgets(buf, sizeof(buf), f) && !strstr(buf, "[never]");
	fclose(f);
	return ok;
}

static bool map_hugetlb(struct core_mem *m, uint64_t page)
{
	int shift = page == SZ_1G ? 30 : 21;
	size_t len = round_up(m->len, page);
	void *p = core_fault_call("mmap") ? MAP_FAILED :
		  mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB |
		       (shift << MAP_HUGE_SHIFT), -1, 0);

	if (p == MAP_FAILED)
		return false;
	m->base = p;
	m->map_len = len;
	m->page = page;
	m->kind = page == SZ_1G ? CORE_PAGE_1G : CORE_PAGE_2M;
	return true;
}

/*
 * Ordinary pages, 2 MiB aligned so that THP can back every whole 2 MiB
 * and binding granules never split one. Not reserved (MAP_NORESERVE):
 * the caller checked MemAvailable.
 */
static int map_plain(struct core_mem *m)
{
	size_t body = round_up(m->len, SZ_2M), head;
	uint8_t *p, *a;

	p = core_fault_call("mmap") ? MAP_FAILED :
	    mmap(NULL, body + SZ_2M, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	a = (uint8_t *)round_up((uintptr_t)p, SZ_2M);
	head = (size_t)(a - p);
	if (head)
		munmap(p, head);
	if (SZ_2M - head)
		munmap(a + body, SZ_2M - head);
	m->base = a;
	m->map_len = body;
	m->page = SZ_4K;
	m->kind = CORE_PAGE_4K;
	return 0;
}

int core_mem_alloc(struct kt_ctx *ctx, size_t len, unsigned int flags,
		   struct core_mem *m)
{
	uint64_t avail;
	int ret;

	memset(m, 0, sizeof(*m));
	m->len = len ? len : 1;
	if (!(flags & CORE_MEM_F_NO_HUGETLB)) {
		if ((flags & CORE_MEM_F_1G) && m->len >= CORE_MEM_1G_MIN) {
			if (map_hugetlb(m, SZ_1G))
				return 0;
			warn_once(ctx, WARN_1G,
				  "memory: not enough free 1 GiB hugepages for %.1f GiB; trying 2 MiB hugepages",
				  m->len / 1073741824.0);
		}
		if (map_hugetlb(m, SZ_2M))
			return 0;
		warn_once(ctx, WARN_HUGETLB,
			  "memory: not enough free 2 MiB hugepages for %zu of them (vm.nr_hugepages, scripts/setup-hugepages.sh); using %s",
			  (size_t)(round_up(m->len, SZ_2M) / SZ_2M),
			  flags & CORE_MEM_F_NO_THP ? "4 KiB pages" :
			  "transparent hugepages");
	}
	/* ordinary pages are not reserved at mmap time: a size beyond what
	 * is left would end in the OOM killer halfway through filling it */
	avail = mem_available();
	if (avail != UINT64_MAX && m->len > avail) {
		core_log(ctx, KT_LOG_INFO,
			 "memory: %.1f MiB needed, %.1f MiB available",
			 m->len / 1048576.0, avail / 1048576.0);
		return -ENOMEM;
	}
	ret = map_plain(m);
	if (ret)
		return ret;
	if (flags & CORE_MEM_F_NO_THP)
		return 0;
	if (thp_enabled() && !madvise(m->base, m->map_len, MADV_HUGEPAGE)) {
		m->kind = CORE_PAGE_THP;
		m->page = SZ_2M;	/* as far as the kernel manages */
		return 0;
	}
	warn_once(ctx, WARN_THP,
		  "memory: transparent hugepages unavailable; using 4 KiB pages");
	return 0;
}

void core_mem_free(struct core_mem *m)
{
	if (m->base)
		munmap(m->base, m->map_len);
	memset(m, 0, sizeof(*m));
}

int core_mem_bind(const struct core_mem *m, uint64_t off, uint64_t len,
		  int node)
{
	unsigned long mask[KT_MAX_NODES / (8 * sizeof(unsigned long)) + 1];
	uint64_t page = m->page ? m->page : SZ_4K, end;

	if (node < 0 || node >= KT_MAX_NODES || off > m->map_len)
		return -EINVAL;
	if (numa_available() < 0)
		return 0;
	end = len > m->map_len - off ? m->map_len : off + len;
	off = off / page * page;
	end = round_up(end, page);
	if (end > m->map_len)
		end = m->map_len;
	if (end <= off)
		return 0;
	memset(mask, 0, sizeof(mask));
	mask[node / (8 * sizeof(unsigned long))] |=
		1ul << (node % (8 * sizeof(unsigned long)));
	/* preferred, not bind: a full node degrades locality, not a load */
	if (core_fault_call("mbind") ||
	    mbind(m->base + off, end - off, MPOL_PREFERRED, mask,
		  KT_MAX_NODES + 1, 0))
		return -errno;
	return 0;
}

/* Runs of the plan, merged again by node id (fake nodes share one). */
struct bind_state {
	const struct core_mem *m;
	const int *ids;
	unsigned int n_ids;
	uint64_t off, len;
	int node;
	int err;
};

static void bind_flush(struct bind_state *b)
{
	int ret;

	if (!b->len)
		return;
	ret = core_mem_bind(b->m, b->off, b->len, b->node);
	if (ret && !b->err)
		b->err = ret;
	b->len = 0;
}

static void bind_run(void *arg, uint64_t off, uint64_t len,
		     unsigned int node_idx)
{
	struct bind_state *b = arg;
	int node = b->ids[node_idx < b->n_ids ? node_idx : 0];

	if (off >= b->m->map_len)
		return;
	if (len > b->m->map_len - off)
		len = b->m->map_len - off;
	if (b->len && b->node == node && b->off + b->len == off) {
		b->len += len;
		return;
	}
	bind_flush(b);
	b->off = off;
	b->len = len;
	b->node = node;
}

int core_mem_bind_spread(struct kt_ctx *ctx, const struct core_mem *m,
			 const struct core_mem_layout *lay,
			 const int *node_ids, unsigned int n_ids)
{
	struct bind_state b = { .m = m, .ids = node_ids, .n_ids = n_ids };

	if (!n_ids || !node_ids)
		return -EINVAL;
	core_mem_plan(lay, m->map_len, m->page, bind_run, &b);
	bind_flush(&b);
	if (b.err)
		warn_once(ctx, WARN_BIND,
			  "memory: mbind failed (%s); memory not bound to its NUMA node",
			  strerror(-b.err));
	return b.err;
}

int core_mem_alloc_node(struct kt_ctx *ctx, int node, size_t len,
			unsigned int flags, struct core_mem *m)
{
	int ret = core_mem_alloc(ctx, len, flags, m);

	if (ret)
		return ret;
	ret = core_mem_bind(m, 0, m->map_len, node);
	if (ret)
		warn_once(ctx, WARN_BIND,
			  "memory: mbind to node %d failed (%s); memory not bound to its NUMA node",
			  node, strerror(-ret));
	return 0;
}

int core_mem_alloc_spread(struct kt_ctx *ctx, size_t len, unsigned int flags,
			  const struct core_mem_layout *lay,
			  struct core_mem *m)
{
	int ids[KT_MAX_NODES];
	unsigned int n, i;
	int ret;

	if (!ctx)
		return -EINVAL;
	n = core_ctx_nodes(ctx);
	if (n > KT_MAX_NODES)
		n = KT_MAX_NODES;
	if (n > 1)
		flags &= ~CORE_MEM_F_1G;
	ret = core_mem_alloc(ctx, len, flags, m);
	if (ret)
		return ret;
	for (i = 0; i < n; i++)
		ids[i] = core_ctx_node_id(ctx, i);
	core_mem_bind_spread(ctx, m, lay, ids, n);
	return 0;
}

void *core_node_alloc(struct kt_ctx *ctx, int node, size_t size)
{
	struct core_mem m;

	return core_mem_alloc_node(ctx, node, size, 0, &m) ? NULL : m.base;
}

void core_node_free(void *p, size_t size)
{
	/* core_node_alloc() never takes 1 GiB pages: 2 MiB rounding */
	if (p)
		munmap(p, round_up(size ? size : 1, SZ_2M));
}
