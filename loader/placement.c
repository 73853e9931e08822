// SPDX-License-Identifier: MIT
/*
 * placement.c - which node reads which bytes of a model's blobs (its
 * slices of gate, up and down), for ktcore's allocator to bind.
 */
#include <string.h>

#include "loader/placement.h"

void ldr_placement_init(struct ldr_placement *p,
			const struct kern_pack_layout *l, unsigned int n_nodes,
			uint64_t start, uint64_t n_blobs, uint64_t stride)
{
	struct kern_range rg[KERN_PACK_MAX_RANGES];
	unsigned int j, n = 0;
	int i, k;

	memset(p, 0, sizeof(*p));
	if (n_nodes > KT_MAX_NODES)
		n_nodes = KT_MAX_NODES;
	for (j = 0; j < n_nodes; j++) {
		k = kern_pack_node_ranges(l, n_nodes, j, rg);
		for (i = 0; i < k; i++)
			p->spans[n++] = (struct core_mem_span){
				rg[i].off, rg[i].len, j };
	}
	p->lay = (struct core_mem_layout){ .spans = p->spans, .n_spans = n,
					   .start = start, .stride = stride,
					   .count = n_blobs };
}
