/* SPDX-License-Identifier: MIT */
/*
 * placement.h - where a model's bytes go: each node's slice of every
 * expert blob, as a ktcore/mem.h layout that the one allocator binds.
 */
#ifndef KT_LOADER_PLACEMENT_H
#define KT_LOADER_PLACEMENT_H

#include <stdint.h>

#include "kernels/pack.h"
#include "ktcore/mem.h"

struct ldr_placement {
	struct core_mem_span spans[KERN_PACK_MAX_RANGES * KT_MAX_NODES];
	struct core_mem_layout lay;
};

/*
 * ldr_placement_init() - the layout of @n_blobs expert blobs of layout @l,
 * @stride bytes apart from byte @start of a region, read by @n_nodes
 * nodes: node index j owns its kern_pack_node_ranges() in every blob.
 * Scales every node reads are listed for node 0 (kern_pack_node_ranges).
 */
void ldr_placement_init(struct ldr_placement *p,
			const struct kern_pack_layout *l, unsigned int n_nodes,
			uint64_t start, uint64_t n_blobs, uint64_t stride);

#endif /* KT_LOADER_PLACEMENT_H */
