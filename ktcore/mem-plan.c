// SPDX-License-Identifier: MIT
/*
 * mem-plan.c - core_mem_plan(): which node each page of a spread region
 * goes to (most of its bytes wins). Pure arithmetic, so the tests run it
 * for any topology and page size.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ktcore/mem.h"

/* One group of blobs: its layout and spans, sorted and clipped. */
struct group {
	const struct core_mem_layout *lay;
	uint64_t end;		/* start + count * stride, saturated */
	struct core_mem_span sp[CORE_MEM_MAX_SPANS];
	unsigned int n;
};

struct plan {
	struct group *g;
	unsigned int n_g;
	unsigned int cur;	/* the group same_until() last looked at */
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
	unsigned int i, k, owner = 0;

	for (k = 0; k < p->n_g; k++) {
		const struct group *g = &p->g[k];

		if (b <= g->lay->start || a >= g->end)
			continue;
		for (i = 0; i < g->n; i++)
			bytes[g->sp[i].node_idx] +=
				span_below(g->lay, &g->sp[i], b) -
				span_below(g->lay, &g->sp[i], a);
	}
	for (i = 0; i < KT_MAX_NODES; i++)
		if (bytes[i] > best) {
			best = bytes[i];
			owner = i;
		}
	return owner;
}

/*
 * End of the span copy or gap that holds byte @x: one owner up to it. @x
 * only grows from call to call, so the group it is in moves forward.
 */
static uint64_t same_until(struct plan *p, uint64_t x)
{
	const struct group *g;
	const struct core_mem_layout *lay;
	uint64_t base, r;
	unsigned int i;

	while (p->cur < p->n_g && x >= p->g[p->cur].end)
		p->cur++;
	if (p->cur == p->n_g)
		return UINT64_MAX;
	g = &p->g[p->cur];
	lay = g->lay;
	if (x < lay->start)
		return lay->start;
	r = (x - lay->start) % lay->stride;
	base = x - r;
	for (i = 0; i < g->n; i++) {
		if (r < g->sp[i].off)
			return base + g->sp[i].off;
		if (r < g->sp[i].off + g->sp[i].len)
			return base + g->sp[i].off + g->sp[i].len;
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

/* Group @lay's spans into @g; false: it places nothing. */
static bool group_init(struct group *g, const struct core_mem_layout *lay)
{
	unsigned int i;

	if (!lay->stride || !lay->count)
		return false;
	g->lay = lay;
	g->end = lay->count > (UINT64_MAX - lay->start) / lay->stride ?
		 UINT64_MAX : lay->start + lay->count * lay->stride;
	g->n = 0;
	for (i = 0; i < lay->n_spans && g->n < CORE_MEM_MAX_SPANS; i++) {
		struct core_mem_span s = lay->spans[i];

		if (s.off >= lay->stride || !s.len || s.node_idx >= KT_MAX_NODES)
			continue;
		if (s.len > lay->stride - s.off)
			s.len = lay->stride - s.off;
		g->sp[g->n++] = s;
	}
	qsort(g->sp, g->n, sizeof(g->sp[0]), cmp_span);
	return g->n > 0;
}

void core_mem_plan(const struct core_mem_layout *lay, uint64_t region_len,
		   uint64_t page, core_mem_run_fn fn, void *arg)
{
	const struct core_mem_layout *l;
	struct plan *p = calloc(1, sizeof(*p));
	uint64_t pos = 0, end;
	unsigned int n = 0;

	if (!page)
		page = 4096;
	end = (region_len + page - 1) / page * page;
	for (l = lay; l; l = l->next)
		n++;
	if (p && n)
		p->g = calloc(n, sizeof(*p->g));
	if (!p || (n && !p->g)) {
		/* no room to plan: one run, still every page exactly once */
		free(p);
		if (end)
			fn(arg, 0, end, 0);
		return;
	}
	p->fn = fn;
	p->arg = arg;
	for (l = lay; l; l = l->next)
		p->n_g += group_init(&p->g[p->n_g], l);
	while (pos < end) {
		uint64_t u = same_until(p, pos);
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
	free(p->g);
	free(p);
}
