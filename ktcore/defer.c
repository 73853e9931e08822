// SPDX-License-Identifier: MIT
/*
 * defer.c - deferred experts: each token's lowest-weight experts split off
 * into an op whose output lands in the next layer's (kt_defer_split,
 * kt_submit_moe_deferred). Documentation/placement.md.
 */
#include <errno.h>
#include <string.h>

#include "ktcore/core.h"
#include "ktcore/residency.h"

static int64_t get_id(const void *ids, uint8_t dt, size_t i)
{
	return dt == KT_DTYPE_I64 ? ((const int64_t *)ids)[i] :
		((const int32_t *)ids)[i];
}

static void put_id(void *ids, uint8_t dt, size_t i, int64_t v)
{
	if (dt == KT_DTYPE_I64)
		((int64_t *)ids)[i] = v;
	else
		((int32_t *)ids)[i] = (int32_t)v;
}

/* May this slot's expert be deferred at all? */
static bool deferrable(const struct kt_defer_opts *o, int64_t id)
{
	if (id < 0 || (o->n_experts && id >= o->n_experts))
		return false;
	if (o->keep && o->n_experts &&
	    (o->keep[id / 64] >> (id % 64) & 1))
		return false;
	return true;
}

static int check_opts(const struct kt_defer_opts *o)
{
	unsigned int i;

	for (i = 0; i < sizeof(o->reserved) / sizeof(o->reserved[0]); i++)
		if (o->reserved[i])
			return -EINVAL;
	return 0;
}

/* One token: mark in @later the slots to defer; returns how many. */
static unsigned int split_token(const struct kt_defer_opts *o,
				const void *ids, uint8_t dt, const float *w,
				size_t base, uint32_t k, bool *later)
{
	unsigned int valid = 0, cand = 0, n, j, s, pick;

	for (s = 0; s < k; s++) {
		int64_t id = get_id(ids, dt, base + s);

		later[s] = false;
		valid += id >= 0 && (!o->n_experts || id < o->n_experts);
		cand += deferrable(o, id);
	}
	/* a token keeps at least one valid expert now, so that the layer's
	 * output is never left with nothing of it */
	n = o->max_deferred < cand ? o->max_deferred : cand;
	if (valid && n >= valid)
		n = valid - 1;
	for (j = 0; j < n; j++) {
		pick = k;
		for (s = 0; s < k; s++) {
			if (later[s] || !deferrable(o, get_id(ids, dt, base + s)))
				continue;
			/* the lowest weight; of equal ones the later slot */
			if (pick == k || w[base + s] <= w[base + pick])
				pick = s;
		}
		later[pick] = true;
	}
	return n;
}

KT_EXPORT int kt_defer_split(const struct kt_defer_opts *opts,
			     const void *ids, uint8_t ids_dtype,
			     const float *w, uint32_t tokens, uint32_t top_k,
			     void *ids_now, float *w_now, void *ids_later,
			     float *w_later)
{
	struct kt_defer_opts o;
	bool later[KT_MOE_MAX_TOPK];
	uint64_t total = 0;
	uint32_t t, s;

	if (!opts || CORE_OPTS_GET(&o, opts, keep) || check_opts(&o))
		return -EINVAL;
	if (!ids || !w || !ids_now || !w_now || !ids_later || !w_later)
		return -EINVAL;
	if (ids_dtype != KT_DTYPE_I32 && ids_dtype != KT_DTYPE_I64)
		return -EINVAL;
	if (!top_k || top_k > KT_MOE_MAX_TOPK || tokens > KT_MOE_MAX_TOKENS)
		return -EINVAL;
	for (t = 0; t < tokens; t++) {
		size_t base = (size_t)t * top_k;

		total += split_token(&o, ids, ids_dtype, w, base, top_k, later);
		for (s = 0; s < top_k; s++) {
			int64_t id = get_id(ids, ids_dtype, base + s);
			float ws = w[base + s];

			/* read both before writing: the outputs may be the
			 * inputs (an in-place split of the immediate half) */
			put_id(ids_now, ids_dtype, base + s, later[s] ? -1 : id);
			w_now[base + s] = later[s] ? 0.0f : ws;
			put_id(ids_later, ids_dtype, base + s, later[s] ? id : -1);
			w_later[base + s] = later[s] ? ws : 0.0f;
		}
	}
	return (int)total;
}

KT_EXPORT int kt_submit_moe_deferred(struct kt_ring *ring, struct kt_model *m,
				     uint32_t layer,
				     const struct kt_moe_args *args,
				     const struct kt_defer_opts *o,
				     void *y_next,
				     const struct kt_defer_bufs *bufs,
				     uint64_t user_data,
				     uint64_t user_data_later)
{
	struct kt_model_info info;
	struct kt_defer_opts dop;
	struct kt_moe_args now, later;
	const struct core_res_snap *rs;
	struct kt_sqe *sqe;
	uint64_t free_sq;
	unsigned int slot = 0;
	int ret;

	if (!ring || !m || !args)
		return -EINVAL;
	if (!ring->sh)
		return -EINVAL;
	kt_model_get_info(m, &info);
	if (layer >= info.n_layers)
		return -EINVAL;
	/* the last layer never defers: nothing comes after it */
	if (!o || !o->max_deferred || !y_next || layer + 1 == info.n_layers) {
		sqe = kt_get_sqe(ring);
		if (!sqe)
			return -EAGAIN;
		kt_prep_moe(sqe, m, layer, args, user_data);
		ret = kt_submit(ring);
		return ret < 0 ? ret : 1;
	}
	if (!bufs || !bufs->ids_now || !bufs->w_now || !bufs->ids_later ||
	    !bufs->w_later || y_next == args->y)
		return -EINVAL;
	if (CORE_OPTS_GET(&dop, o, keep))
		return -EINVAL;
	/* both entries or none: a lone immediate op would leave y_next
	 * without its deferred part */
	/* acquire: pairs with the worker's release of sq_head (W1), as in
	 * kt_get_sqe(): the two slots are free before we fill them */
	free_sq = ring->sq_entries - (ring->sqe_tail -
		__kt_load_acquire(&ring->sh->sq_head));
	if (free_sq < 2)
		return -EAGAIN;
	if (!dop.n_experts)
		dop.n_experts = info.n_experts;
	/* the GPU's experts run at once (KT-Kernel defers CPU experts
	 * only): without a keep mask of the caller's, the current set */
	rs = dop.keep ? NULL : core_residency_get(m, &slot);
	if (rs)
		dop.keep = core_res_layer(m, rs, layer);
	ret = kt_defer_split(&dop, args->ids, args->ids_dtype, args->w,
			     args->tokens, args->top_k, bufs->ids_now,
			     bufs->w_now, bufs->ids_later, bufs->w_later);
	if (rs)
		core_residency_put(m, slot);
	if (ret < 0)
		return ret;
	now = *args;
	now.ids = bufs->ids_now;
	now.w = bufs->w_now;
	later = *args;
	later.ids = bufs->ids_later;
	later.w = bufs->w_later;
	later.y = y_next;
	/* overwrite: the next layer's op accumulates onto it */
	later.flags &= ~KT_MOE_F_ACCUMULATE;
	kt_prep_moe(kt_get_sqe(ring), m, layer, &now, user_data);
	kt_prep_moe(kt_get_sqe(ring), m, layer, &later, user_data_later);
	ret = kt_submit(ring);
	return ret < 0 ? ret : 2;
}
