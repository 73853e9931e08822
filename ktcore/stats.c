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
