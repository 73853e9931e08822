// SPDX-License-Identifier: MIT
/*
 * placement.c - which node reads which bytes of a model's blobs (its
 * slices of gate, up and down), for ktcore's allocator to bind.
 */
#include <errno.h>
#include <stdlib.h>
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

/* Layouts of one model differ only in down's type. */
static bool same_layout(const struct kern_pack_layout *a,
			const struct kern_pack_layout *b)
{
	return a->quant_down == b->quant_down && a->total == b->total;
}

int ldr_placement_layers(struct ldr_placement_set *s,
			 const struct kern_pack_layout *lays, uint32_t n_layers,
			 unsigned int n_nodes, const uint64_t *blobs,
			 uint64_t stride)
{
	uint64_t b0 = 0, nb;
	uint32_t l, l0;
	unsigned int n = 0;

	memset(s, 0, sizeof(*s));
	for (l = 0; l < n_layers; l++)
		n += !l || !same_layout(&lays[l], &lays[l - 1]);
	if (!n)
		return 0;
	s->groups = calloc(n, sizeof(*s->groups));
	if (!s->groups)
		return -ENOMEM;
	for (l0 = 0; l0 < n_layers; l0 = l, b0 += nb) {
		struct ldr_placement *g = &s->groups[s->n];

		nb = blobs[l0];
		for (l = l0 + 1; l < n_layers &&
		     same_layout(&lays[l], &lays[l0]); l++)
			nb += blobs[l];
		ldr_placement_init(g, &lays[l0], n_nodes, b0 * stride, nb,
				   stride);
		if (s->n)
			s->groups[s->n - 1].lay.next = &g->lay;
		s->n++;
	}
	return 0;
}

void ldr_placement_set_free(struct ldr_placement_set *s)
{
	free(s->groups);
	memset(s, 0, sizeof(*s));
}
