/* SPDX-License-Identifier: MIT */
/*
 * mem.h - ktcore's one allocator of node-placed memory (weights, scratch,
 * later the expert cache): a page-size policy, every page bound to one node.
 */
#ifndef KT_CORE_MEM_H
#define KT_CORE_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <kt/kt.h>

/* What backs a mapping, largest first in the fallback order. */
enum core_page_kind {
	CORE_PAGE_4K,		/* ordinary pages */
	CORE_PAGE_THP,		/* ordinary pages advised to THP (madvise) */
	CORE_PAGE_2M,		/* reserved hugetlb pages */
	CORE_PAGE_1G,
};

/* Policy: 1 GiB (when asked) -> 2 MiB hugetlb -> THP -> 4 KiB. */
#define CORE_MEM_F_1G		(1u << 0)	/* try 1 GiB pages first */
#define CORE_MEM_F_NO_HUGETLB	(1u << 1)	/* skip reserved hugepages */
#define CORE_MEM_F_NO_THP	(1u << 2)	/* no transparent hugepages */
#define CORE_MEM_F_SMALL	(CORE_MEM_F_NO_HUGETLB | CORE_MEM_F_NO_THP)

/* 1 GiB pages are tried only when the rounding wastes at most 1/8. */
#define CORE_MEM_1G_MIN		(8ull << 30)

struct core_mem {
	uint8_t *base;
	size_t len;		/* bytes asked for */
	size_t map_len;		/* mapped: len rounded up to 2 MiB (1 GiB) */
	size_t page;		/* binding granule: 4 KiB, 2 MiB or 1 GiB */
	enum core_page_kind kind;
};

/*
 * The bytes of a region that each node index reads: @n_spans spans (at
 * most KT_MAX_NODES * 8, not overlapping, inside [0, @stride)) repeated
 * @count times, @stride apart, from byte @start of the region. Bytes of
 * no span (headers, padding) belong to no node.
 */
struct core_mem_span {
	uint64_t off;
	uint64_t len;
	unsigned int node_idx;
};

struct core_mem_layout {
	const struct core_mem_span *spans;
	unsigned int n_spans;
	uint64_t start;
	uint64_t stride;
	uint64_t count;
	/*
	 * The region's next group of blobs, of other spans (a GGUF model
	 * whose down type varies by layer), at or after this group's end
	 * (start + count * stride); groups in address order. NULL: none.
	 */
	const struct core_mem_layout *next;
};

#define CORE_MEM_MAX_SPANS	(KT_MAX_NODES * 8)

typedef void (*core_mem_run_fn)(void *arg, uint64_t off, uint64_t len,
				unsigned int node_idx);

/*
 * core_mem_alloc() - map @len bytes, zeroed and untouched, with the
 * largest pages @flags allow and the machine has. Each fallback step is
 * logged once per context (KT_LOG_WARN through @ctx's log; nothing when
 * @ctx is NULL). THP and 4 KiB mappings are refused with -ENOMEM when
 * larger than MemAvailable: they are not reserved at mmap time.
 * Return: 0 or -ENOMEM.
 */
int core_mem_alloc(struct kt_ctx *ctx, size_t len, unsigned int flags,
		   struct core_mem *m);

/* core_mem_alloc(), then every page bound to NUMA node @node. */
int core_mem_alloc_node(struct kt_ctx *ctx, int node, size_t len,
			unsigned int flags, struct core_mem *m);

/*
 * core_mem_alloc_spread() - core_mem_alloc(), then each page bound to the
 * node of @ctx that core_mem_plan() gives it for @lay (1 GiB pages are not
 * tried with several nodes: they would not keep the nodes' bytes apart).
 * A failed bind is logged once and leaves the page where it was: locality
 * is lost, never results. Return: 0 or -ENOMEM.
 */
int core_mem_alloc_spread(struct kt_ctx *ctx, size_t len, unsigned int flags,
			  const struct core_mem_layout *lay,
			  struct core_mem *m);

/* Unmap what core_mem_alloc*() mapped; @m is zeroed. NULL base is fine. */
void core_mem_free(struct core_mem *m);

/*
 * core_mem_bind() - bind [@off, @off + @len) of @m (whole pages of
 * m->page, from the mapping's start) to NUMA @node, MPOL_PREFERRED: a full
 * node costs locality, never a crash. Before first touch.
 * Return: 0, -EINVAL (bad node or range) or mbind's -errno; 0 without NUMA.
 */
int core_mem_bind(const struct core_mem *m, uint64_t off, uint64_t len,
		  int node);

/*
 * core_mem_bind_spread() - bind each page of @m (any mapping: a staged
 * hugetlbfs file fills in a struct core_mem by hand) to
 * @node_ids[node_idx] of its core_mem_plan() run. A failure is logged once
 * through @ctx (may be NULL) and the remaining runs are still bound.
 * Return: 0 or the first -errno.
 */
int core_mem_bind_spread(struct kt_ctx *ctx, const struct core_mem *m,
			 const struct core_mem_layout *lay,
			 const int *node_ids, unsigned int n_ids);

/*
 * core_mem_plan() - which node index each @page-sized page of a region of
 * @region_len bytes goes to: the node whose spans hold most of its bytes,
 * ties to the lower index; a page with none of any span's bytes to index
 * 0. Calls @fn with merged runs of whole pages in address order, covering
 * [0, region_len rounded up to @page) exactly once. Pure: no system calls.
 */
void core_mem_plan(const struct core_mem_layout *lay, uint64_t region_len,
		   uint64_t page, core_mem_run_fn fn, void *arg);

/*
 * Convenience for fixed-size scratch: core_mem_alloc_node() with the
 * default policy, the pointer only. core_node_free() needs the same @size.
 */
void *core_node_alloc(struct kt_ctx *ctx, int node, size_t size);
void core_node_free(void *p, size_t size);

#endif /* KT_CORE_MEM_H */
