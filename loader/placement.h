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
 * Scale parts every node reads, or whose slices are strided, are listed
 * for node 0 (kern_pack_node_ranges).
 */
void ldr_placement_init(struct ldr_placement *p,
			const struct kern_pack_layout *l, unsigned int n_nodes,
			uint64_t start, uint64_t n_blobs, uint64_t stride);

/* Placements of blob groups with their own layouts, chained (mem.h). */
struct ldr_placement_set {
	struct ldr_placement *groups;	/* [n]; groups[0].lay heads the chain */
	unsigned int n;
};

/*
 * ldr_placement_layers() - the layout of a model whose blobs' layout
 * varies by layer (a GGUF Q4_K_M file: down's type by layer): layer l's
 * @blobs[l] blobs, of layout @lays[l], after those of the layers before
 * it, each @stride bytes apart from byte 0. A run of layers of one down
 * type is one group. ldr_placement_set_free() frees it.
 * Return: 0 or -ENOMEM.
 */
int ldr_placement_layers(struct ldr_placement_set *s,
			 const struct kern_pack_layout *lays, uint32_t n_layers,
			 unsigned int n_nodes, const uint64_t *blobs,
			 uint64_t stride);
void ldr_placement_set_free(struct ldr_placement_set *s);

#endif /* KT_LOADER_PLACEMENT_H */
