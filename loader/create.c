// SPDX-License-Identifier: MIT
/*
 * create.c - kt_model_create(): a model quantized and packed from
 * weights in memory, each node's slice of every expert on that node.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ktcore/live.h"
#include "loader/error.h"
#include "ktcore/moe.h"
#include "kernels/pack.h"
#include "ktcore/core.h"
#include "ktcore/mem.h"
#include "ktcore/model.h"
#include "loader/mask.h"
#include "loader/placement.h"

#define BLOB_ALIGN 4096ul

struct mem_model {
	struct kt_model m;
	struct core_mem mem;	/* the packed blobs */
};

static void mem_release(struct kt_model *m)
{
	struct mem_model *mm = (struct mem_model *)m;

	core_mem_free(&mm->mem);
	free(m->experts);
	free(m->layer_ids);
	free(mm);
}

static int validate(const struct kt_model_desc *d, struct kern_pack_layout *l)
{
	int ret;

	memset(l, 0, sizeof(*l));
	if (!d->n_experts || !d->n_layers || !d->get_expert) {
		l->err = "n_experts, n_layers and get_expert are required";
		return -EINVAL;
	}
	if (d->src_dtype != KT_DTYPE_F32 && d->src_dtype != KT_DTYPE_BF16 &&
	    d->src_dtype != KT_DTYPE_F16) {
		l->err = "src_dtype must be f32, bf16 or f16";
		return -EINVAL;
	}
	ret = kern_pack_layout_mix(d->quant, d->down_quant ?
				   (enum kt_quant)d->down_quant : d->quant,
				   d->hidden, d->inter, d->group_size, l);
	return ret;
}

/* Each page on the node that computes on most of it, before packing. */
static int alloc_blobs(struct kt_ctx *ctx, struct mem_model *mm,
		       const struct kern_pack_layout *l, size_t n_blobs,
		       size_t stride)
{
	struct ldr_placement place;

	ldr_placement_init(&place, l, core_ctx_nodes(ctx), 0, n_blobs, stride);
	return core_mem_alloc_spread(ctx, n_blobs * stride, CORE_MEM_F_1G,
				     &place.lay, &mm->mem);
}

static int model_create(struct kt_ctx *ctx, const struct kt_model_desc *desc,
			struct kt_model **out)
{
	struct kt_model_desc dd;
	struct kern_pack_layout l;
	struct mem_model *mm;
	struct kt_model *m;
	size_t stride, n_blobs = 0, b = 0;
	uint32_t layer, e;
	int ret;

	if (!ctx || !desc || !out)
		return -EINVAL;
	*out = NULL;
	/* an older caller's struct lacks expert_mask: it reads as NULL */
	if (CORE_OPTS_GET(&dd, desc, arg)) {
		core_log(ctx, KT_LOG_ERROR,
			 "kt_model_create: descriptor sz too small, or fields this library does not know are set");
		return -EINVAL;
	}
	desc = &dd;
	ret = validate(desc, &l);
	if (ret) {
		core_log(ctx, KT_LOG_ERROR, "kt_model_create: %s", l.err);
		return ret;
	}
	mm = calloc(1, sizeof(*mm));
	if (!mm)
		return -ENOMEM;
	m = &mm->m;
	m->ctx = ctx;
	m->hidden = desc->hidden;
	m->inter = desc->inter;
	m->n_experts = desc->n_experts;
	m->n_layers = desc->n_layers;
	m->quant = desc->quant;
	m->down_quant = l.quant_down;
	m->group_size = l.group;
	m->down_chunk = l.kc;
	m->expert_bytes = l.total;
	m->release = mem_release;
	ret = -ENOMEM;
	m->layer_ids = calloc(desc->n_layers, sizeof(*m->layer_ids));
	m->experts = calloc((size_t)desc->n_layers * desc->n_experts,
			    sizeof(*m->experts));
	if (!m->layer_ids || !m->experts)
		goto err_free;
	for (layer = 0; layer < desc->n_layers; layer++)
		m->layer_ids[layer] = desc->layer_ids ?
			desc->layer_ids[layer] : (int32_t)layer;
	for (layer = 0; layer < desc->n_layers; layer++)
		for (e = 0; e < desc->n_experts; e++)
			n_blobs += !ldr_masked(desc->expert_mask,
					       desc->layer_masks,
					       desc->n_experts, layer, e);
	stride = (l.total + BLOB_ALIGN - 1) & ~(BLOB_ALIGN - 1);
	ret = alloc_blobs(ctx, mm, &l, n_blobs, stride);
	if (ret)
		goto err_free;
	for (layer = 0; layer < desc->n_layers; layer++) {
		for (e = 0; e < desc->n_experts; e++) {
			struct core_expert *ex = core_model_expert(m, layer, e);
			struct kt_expert_src src = { 0 };
			uint8_t *blob;

			if (ldr_masked(desc->expert_mask, desc->layer_masks,
				       desc->n_experts, layer, e))
				continue;
			ret = desc->get_expert(desc->arg, layer, e, &src);
			if (ret)
				goto err_release;
			blob = mm->mem.base + b++ * stride;
			ret = kern_pack_expert(&l, src.gate, src.up, src.down,
					       desc->src_dtype, blob);
			if (ret)
				goto err_release;
			kern_pack_mat(&l, KERN_MAT_GATE, blob, &ex->gate);
			kern_pack_mat(&l, KERN_MAT_UP, blob, &ex->up);
			kern_pack_mat(&l, KERN_MAT_DOWN, blob, &ex->down);
			ex->present = true;
			m->resident_bytes += l.total;
		}
	}
	ret = core_moe_reserve(ctx, m);
	if (!ret)
		ret = core_live_add(ctx, m);
	if (ret)
		goto err_release;
	*out = m;
	return 0;

err_release:
	mem_release(m);
	return ret;
err_free:
	free(m->experts);
	free(m->layer_ids);
	free(mm);
	return ret;
}

KT_EXPORT int kt_model_create(struct kt_ctx *ctx,
			      const struct kt_model_desc *desc,
			      struct kt_model **out)
{
	ldr_err_clear();
	return ldr_err_ensure(model_create(ctx, desc, out), "kt_model_create");
}
