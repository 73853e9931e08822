// SPDX-License-Identifier: MIT
/*
 * model.c - what every model has, however it was built (kt_model_create,
 * kt_model_open): destroy, geometry, layer lookup, down's type by layer.
 */
#include <errno.h>
#include <string.h>

#include "ktcore/live.h"
#include "ktcore/cache.h"
#include "ktcore/core.h"
#include "ktcore/model.h"
#include "ktcore/moe-gpu.h"

KT_EXPORT void kt_model_destroy(struct kt_model *m)
{
	core_gpu_stream_model_gone(m);	/* stream-ordered ops end first */
	core_live_remove(m);		/* no op runs on it from here on */
	core_model_extras_free(m);	/* routing counters, expert cache */
	if (m && m->release)
		m->release(m);
}

KT_EXPORT void kt_model_get_info(const struct kt_model *m,
				 struct kt_model_info *info)
{
	memset(info, 0, sizeof(*info));
	info->hidden = core_model_hidden_io(m);
	info->inter = core_model_inter_io(m);
	info->n_experts = m->n_experts;
	info->n_layers = m->n_layers;
	info->quant = m->quant;
	info->down_quant = m->down_quant;
	info->group_size = m->group_size;
	info->expert_bytes = m->expert_bytes;
	info->resident_bytes = m->resident_bytes;
	info->act = m->act;
	info->act_alpha = m->act_alpha;
	info->act_limit = m->act_limit;
	info->bias = m->bias != NULL;
}

KT_EXPORT int kt_model_layer_index(const struct kt_model *m, int32_t layer_id)
{
	uint32_t i;

	if (!m)
		return -EINVAL;
	for (i = 0; i < m->n_layers; i++)
		if (m->layer_ids[i] == layer_id)
			return (int)i;
	return -EINVAL;
}

KT_EXPORT int kt_model_layer_down_quant(const struct kt_model *m,
					uint32_t layer)
{
	if (!m || layer >= m->n_layers)
		return -EINVAL;
	return (int)core_model_down_quant(m, layer);
}
