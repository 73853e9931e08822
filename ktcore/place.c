// SPDX-License-Identifier: MIT
/*
 * place.c - kt_place_plan(): which experts of each layer go to the GPU, by
 * strategy (uniform, frequency, front-loading, random). Pure computation;
 * Documentation/placement.md.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "ktcore/core.h"
#include "ktcore/place.h"

static const char *const names[KT_PLACE_COUNT] = {
	[KT_PLACE_UNIFORM] = "uniform",
	[KT_PLACE_FREQUENCY] = "frequency",
	[KT_PLACE_FRONT_LOADING] = "front-loading",
	[KT_PLACE_RANDOM] = "random",
};

KT_EXPORT const char *kt_place_strategy_name(enum kt_place_strategy s)
{
	return (unsigned int)s < KT_PLACE_COUNT ? names[s] : "?";
}

KT_EXPORT int kt_place_strategy_parse(const char *name)
{
	int i;

	for (i = 0; name && i < KT_PLACE_COUNT; i++)
		if (!strcmp(name, names[i]))
			return i;
	return -EINVAL;
}

static void set_bit(uint64_t *w, uint32_t e)
{
	w[e / 64] |= 1ull << (e % 64);
}

static bool test_bit(const uint64_t *w, uint32_t e)
{
	return w[e / 64] >> (e % 64) & 1;
}

/* @a is hotter than @b: more tokens, or as many and a lower id. */
static bool hotter(const uint64_t *c, uint32_t a, uint32_t b)
{
	return c[a] > c[b] || (c[a] == c[b] && a < b);
}

void core_place_top(const uint64_t *counts, uint32_t E, uint32_t n,
		    const uint64_t *forced, uint64_t *out)
{
	uint32_t placed = 0, e, best;

	memset(out, 0, KT_PLACE_WORDS(E) * 8);
	for (e = 0; forced && e < E; e++)
		if (test_bit(forced, e)) {
			set_bit(out, e);
			placed++;
		}
	/* n passes of a linear scan: E is a few hundred at most, and this
	 * runs at load or re-placement, not per op */
	for (; placed < n; placed++) {
		best = E;
		for (e = 0; e < E; e++)
			if (!test_bit(out, e) &&
			    (best == E || hotter(counts, e, best)))
				best = e;
		if (best == E)
			break;
		set_bit(out, best);
	}
}

/* splitmix64: a small, well mixed generator; the plan depends on it. */
static uint64_t next_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* @n distinct experts of @E, uniformly: Floyd's sampling, no scratch. */
static void random_layer(uint64_t *s, uint32_t E, uint32_t n, uint64_t *out)
{
	uint32_t j, t;

	for (j = E - n; j < E; j++) {
		t = (uint32_t)(next_rand(s) % ((uint64_t)j + 1));
		if (test_bit(out, t))
			t = j;
		set_bit(out, t);
	}
}

/* The @total hottest (layer, expert) pairs of the whole model. */
static int frequency_global(const struct kt_place_opts *o, uint64_t total,
			    uint64_t *masks)
{
	uint64_t W = KT_PLACE_WORDS(o->n_experts), n = 0;
	uint64_t all = (uint64_t)o->n_layers * o->n_experts, i, b;

	if (total > all)
		total = all;
	/* repeated scans like core_place_top; L x E stays small enough */
	for (; n < total; n++) {
		b = all;
		for (i = 0; i < all; i++) {
			uint32_t l = (uint32_t)(i / o->n_experts);
			uint32_t e = (uint32_t)(i % o->n_experts);

			if (test_bit(masks + l * W, e))
				continue;
			if (b == all || o->counts[i] > o->counts[b])
				b = i;
		}
		set_bit(masks + (b / o->n_experts) * W,
			(uint32_t)(b % o->n_experts));
	}
	return (int)n;
}

int core_place_check(const struct kt_place_opts *o, uint32_t *per_layer)
{
	unsigned int i;

	if (o->strategy >= KT_PLACE_COUNT || !o->n_experts || o->pad)
		return -EINVAL;
	for (i = 0; i < sizeof(o->reserved) / sizeof(o->reserved[0]); i++)
		if (o->reserved[i])
			return -EINVAL;
	if (o->per_layer > o->n_experts || !(o->ratio >= 0.0f) ||
	    o->ratio > 1.0f)
		return -EINVAL;
	if (o->strategy == KT_PLACE_FREQUENCY && !o->counts)
		return -EINVAL;
	*per_layer = o->per_layer ? o->per_layer :
		(uint32_t)lrintf(o->ratio * (float)o->n_experts);
	if (*per_layer > o->n_experts)
		*per_layer = o->n_experts;
	return 0;
}

KT_EXPORT int kt_place_plan(const struct kt_place_opts *opts,
			    uint64_t *masks)
{
	struct kt_place_opts o;
	uint64_t W, total, left, s;
	uint32_t n, l, e;
	int ret;

	if (!opts || !masks || CORE_OPTS_GET(&o, opts, counts))
		return -EINVAL;
	ret = core_place_check(&o, &n);
	if (ret)
		return ret;
	W = KT_PLACE_WORDS(o.n_experts);
	if ((uint64_t)o.n_layers * o.n_experts > INT32_MAX)
		return -EINVAL;	/* the count must fit the return value */
	memset(masks, 0, (size_t)(W * o.n_layers * 8));
	total = o.total ? o.total : (uint64_t)n * o.n_layers;
	s = o.seed;
	switch (o.strategy) {
	case KT_PLACE_UNIFORM:
		/* n ids spread evenly over 0 .. E-1, the same in each layer,
		 * so that no range of ids is favoured */
		for (l = 0; l < o.n_layers; l++)
			for (e = 0; e < n; e++)
				set_bit(masks + l * W, (uint32_t)((uint64_t)e *
					o.n_experts / n));
		return (int)((uint64_t)n * o.n_layers);
	case KT_PLACE_FREQUENCY:
		if (!o.per_layer && o.ratio == 0.0f && o.total)
			return frequency_global(&o, o.total, masks);
		for (l = 0; l < o.n_layers; l++)
			core_place_top(o.counts + (uint64_t)l * o.n_experts,
				       o.n_experts, n, NULL, masks + l * W);
		return (int)((uint64_t)n * o.n_layers);
	case KT_PLACE_FRONT_LOADING:
		for (l = 0, left = total; l < o.n_layers && left; l++) {
			uint32_t take = left < o.n_experts ? (uint32_t)left :
				o.n_experts;

			if (o.counts)
				core_place_top(o.counts +
					       (uint64_t)l * o.n_experts,
					       o.n_experts, take, NULL,
					       masks + l * W);
			else
				for (e = 0; e < take; e++)
					set_bit(masks + l * W, e);
			left -= take;
		}
		return (int)(total - left);
	case KT_PLACE_RANDOM:
		for (l = 0; l < o.n_layers; l++)
			random_layer(&s, o.n_experts, n, masks + l * W);
		return (int)((uint64_t)n * o.n_layers);
	}
	return -EINVAL;
}
