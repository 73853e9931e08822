// SPDX-License-Identifier: MIT
/*
 * mem-plan.c - core_mem_plan(): which node each page of a spread region
 * goes to (most of its bytes wins). Pure arithmetic, so the tests run it
 * for any topology and page size.
 */
#include <stdlib.h>
#include <string.h>

#include "ktcore/mem.h"

struct plan {
	const struct core_mem_layout *lay;
	struct core_mem_span sp[CORE_MEM_MAX_SPANS];	/* sorted, clipped */
	unsigned int n;
	/* the run being built */
	uint64_t off, len;
	unsigned int node;
	core_mem_run_fn fn;
	void *arg;
};

static int cmp_span(const void *a, const void *b)
{
	const struct core_mem_span *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* Bytes of every copy of @s below region offset @x. */
static uint64_t span_below(const struct core_mem_layout *lay,
			   const struct core_mem_span *s, uint64_t x)
{
	uint64_t y, k, r;

	if (x <= lay->start)
		return 0;
	y = x - lay->start;
	k = y / lay->stride;
	if (k >= lay->count)
		return lay->count * s->len;
	r = y % lay->stride;
	if (r <= s->off)
		return k * s->len;
	return k * s->len + (r - s->off < s->len ? r - s->off : s->len);
}

/* The node index with most bytes in [a, b); ties to the lower, none: 0. */
static unsigned int owner_of(const struct plan *p, uint64_t a, uint64_t b)
{
	uint64_t bytes[KT_MAX_NODES] = { 0 }, best = 0;
	unsigned int i, owner = 0;

	for (i = 0; i < p->n; i++)
		bytes[p->sp[i].node_idx] += span_below(p->lay, &p->sp[i], b) -
					    span_below(p->lay, &p->sp[i], a);
	for (i = 0; i < KT_MAX_NODES; i++)
		if (bytes[i] > best) {
			best = bytes[i];
			owner = i;
		}
	return owner;
}

/* End of the span copy or gap that holds byte @x: one owner up to it. */
static uint64_t same_until(const struct plan *p, uint64_t x)
{
	const struct core_mem_layout *lay = p->lay;
	uint64_t base, r;
	unsigned int i;

	if (x < lay->start)
		return lay->start;
	if ((x - lay->start) / lay->stride >= lay->count)
		return UINT64_MAX;
	r = (x - lay->start) % lay->stride;
	base = x - r;
	for (i = 0; i < p->n; i++) {
		if (r < p->sp[i].off)
			return base + p->sp[i].off;
		if (r < p->sp[i].off + p->sp[i].len)
			return base + p->sp[i].off + p->sp[i].len;
	}
	return base + lay->stride;
}

static void run_add(struct plan *p, uint64_t off, uint64_t end,
		    unsigned int node)
{
	if (p->len && p->node == node && p->off + p->len == off) {
		p->len = end - p->off;
		return;
	}
	if (p->len)
		p->fn(p->arg, p->off, p->len, p->node);
	p->off = off;
	p->len = end - off;
	p->node = node;
}

void core_mem_plan(const struct core_mem_layout *lay, uint64_t region_len,
		   uint64_t page, core_mem_run_fn fn, void *arg)
{
	struct core_mem_layout none = { 0 };
	struct plan *p = calloc(1, sizeof(*p));
	uint64_t pos = 0, end;
	unsigned int i;

	if (!page)
		page = 4096;
	end = (region_len + page - 1) / page * page;
	if (!p) {
		/* no room to plan: one run, still every page exactly once */
		if (end)
			fn(arg, 0, end, 0);
		return;
	}
	if (!lay || !lay->stride || !lay->count)
		lay = &none;
	p->lay = lay;
	p->fn = fn;
	p->arg = arg;
	for (i = 0; lay->stride && i < lay->n_spans &&
		    p->n < CORE_MEM_MAX_SPANS; i++) {
		struct core_mem_span s = lay->spans[i];

		if (s.off >= lay->stride || !s.len || s.node_idx >= KT_MAX_NODES)
			continue;
		if (s.len > lay->stride - s.off)
			s.len = lay->stride - s.off;
		p->sp[p->n++] = s;
	}
	qsort(p->sp, p->n, sizeof(p->sp[0]), cmp_span);
	if (!p->n)
		lay = p->lay = &none;
	while (pos < end) {
		uint64_t u = lay == &none ? UINT64_MAX : same_until(p, pos);
		uint64_t next = pos + page;

		/* a page inside one span copy or gap: so are the next ones
		 * up to its end, without counting bytes page by page */
		if (u >= pos + page) {
			next = u / page * page;
			if (next > end)
				next = end;
		}
		run_add(p, pos, next, owner_of(p, pos, pos + page));
		pos = next;
	}
	if (p->len)
		fn(arg, p->off, p->len, p->node);
	free(p);
}
