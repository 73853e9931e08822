/* SPDX-License-Identifier: MIT */
/*
 * mem.h - the memory that holds a loaded model: one mapping, hugepages when
 * the machine has them, each page bound to the NUMA node that reads it.
 */
#ifndef KT_LOADER_MEM_H
#define KT_LOADER_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/pack.h"

struct ldr_mem {
	uint8_t *base;
	size_t len;		/* bytes asked for */
	size_t map_len;		/* bytes mapped (rounded to the page) */
	uint64_t page;		/* page size backing it */
	bool hugetlb;
};

/* Map @len bytes, untouched: 1 GiB (when @allow_1g) or 2 MiB hugetlb
 * pages, else THP, else 4 KiB pages (@allow_huge false: 4 KiB only). One
 * warning per fallback. */
int ldr_mem_alloc(size_t len, bool allow_huge, bool allow_1g,
		  struct ldr_mem *m);
void ldr_mem_free(struct ldr_mem *m);

/* Bind [off, off + len) of @m to NUMA @node (MPOL_PREFERRED), whole pages. */
int ldr_mem_bind(const struct ldr_mem *m, uint64_t off, uint64_t len,
		 int node);

typedef void (*ldr_place_fn)(void *arg, uint64_t off, uint64_t len,
			     unsigned int node_idx);

/*
 * Which node index owns each page of @n_blobs blobs laid out @stride bytes
 * apart: a page goes to the node whose kern_pack_node_ranges() range holds
 * its first byte; pages of no range (padding) to node 0. Emits merged page
 * runs in address order; pure, so the tests check it for any node count.
 */
void ldr_place_plan(const struct kern_pack_layout *l, unsigned int n_nodes,
		    uint64_t n_blobs, uint64_t stride, uint64_t page,
		    ldr_place_fn fn, void *arg);

#endif /* KT_LOADER_MEM_H */
