// SPDX-License-Identifier: MIT
/*
 * stats.c - per (layer, expert) routing counters of a model: counted by
 * the executor (core_cache_op_begin), read and reset through the API. The
 * counters drive the cache's self-prefetch and "N most likely" prefetch.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ktcore/cache.h"
#include "ktcore/core.h"
#include "ktcore/model.h"
#include "ktcore/moe.h"
#include "ktcore/moe-gpu.h"
#include "ktcore/residency.h"

int core_stats_reserve(const struct kt_model *m)
{
	/* the counters are state of the model, not part of what the
	 * executor reads as const */
	struct kt_model *mm = (struct kt_model *)m;

	if (mm->route)
		return 0;
	mm->route = calloc((size_t)m->n_layers * m->n_experts,
			   sizeof(*mm->route));
	return mm->route ? 0 : -ENOMEM;
}

void core_stats_count(const struct kt_model *m, const struct kt_moe_args *a)
{
	const void *ids;
	uint64_t *route;
	uint32_t t, s, s2;

	if (!m->route)
		return;
	route = m->route + (size_t)a->layer * m->n_experts;
	ids = a->ids;
	for (t = 0; t < a->tokens; t++) {
		size_t base = (size_t)t * a->top_k;

		for (s = 0; s < a->top_k; s++) {
			int64_t id = core_moe_id(ids, a->ids_dtype, base + s);

			if (id < 0 || id >= m->n_experts)
				continue;
			for (s2 = 0; s2 < s; s2++)
				if (core_moe_id(ids, a->ids_dtype, base + s2) ==
				    id)
					break;
			if (s2 == s)
				/* relaxed: a counter; readers see it later */
				__atomic_fetch_add(&route[id], 1,
						   __ATOMIC_RELAXED);
		}
	}
}

void core_model_extras_free(struct kt_model *m)
{
	if (!m)
		return;
	core_residency_free(m);
	core_cache_destroy(m->cache);
	m->cache = NULL;
	free(m->route);
	m->route = NULL;
	core_gpu_model_free(m);
}

KT_EXPORT int kt_model_route_counts(const struct kt_model *m, uint32_t layer,
				    uint64_t *counts)
{
	uint32_t e;

	if (!m || !counts || layer >= m->n_layers)
		return -EINVAL;
	for (e = 0; e < m->n_experts; e++)
		/* relaxed: each counter alone; the leader adds meanwhile */
		counts[e] = m->route ? __atomic_load_n(
			&m->route[(size_t)layer * m->n_experts + e],
			__ATOMIC_RELAXED) : 0;
	return 0;
}

KT_EXPORT void kt_model_route_reset(struct kt_model *m)
{
	size_t i;

	if (!m || !m->route)
		return;
	for (i = 0; i < (size_t)m->n_layers * m->n_experts; i++)
		__atomic_store_n(&m->route[i], 0, __ATOMIC_RELAXED);
}
