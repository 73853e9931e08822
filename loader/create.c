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
	free(m->bias);
	free(m->experts);
	free(m->layer_ids);
	free(mm);
}

/* The multiple the tiles need of H and I (K-quants: their super-block). */
static uint32_t pad_unit(const struct kt_model_desc *d)
{
	enum kt_quant qd = d->down_quant ? (enum kt_quant)d->down_quant :
					   d->quant;

	return kern_quant_is_k(d->quant) || kern_quant_is_k(qd) ?
		KERN_Q4_K_SUPER : KERN_DOWN_CHUNK;
}

static uint32_t pad_to(uint32_t v, uint32_t unit)
{
	return (v + unit - 1) / unit * unit;
}

static int check_act(const struct kt_model_desc *d, const char **err)
{
	if (d->desc_flags & ~KT_DESC_F_BIAS) {
		*err = "unknown desc_flags";
		return -EINVAL;
	}
	if (d->act == KT_ACT_SILU && (d->act_alpha != 0.0f ||
				      d->act_limit != 0.0f)) {
		*err = "act_alpha and act_limit are for KT_ACT_SWIGLU_OAI only";
		return -EINVAL;
	}
	if (d->act != KT_ACT_SILU && d->act != KT_ACT_SWIGLU_OAI) {
		*err = "act is not an enum kt_act";
		return -EINVAL;
	}
	if (!(d->act_alpha >= 0.0f) || !(d->act_limit >= 0.0f) ||
	    d->act_alpha > 1e6f || d->act_limit > 1e30f) {
		*err = "act_alpha and act_limit must be finite and >= 0";
		return -EINVAL;
	}
	return 0;
}

static int validate(const struct kt_model_desc *d, struct kern_pack_layout *l)
{
	uint32_t unit = pad_unit(d);
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
	ret = check_act(d, &l->err);
	if (ret)
		return ret;
	if (!d->hidden || !d->inter || d->hidden % 32 || d->inter % 32 ||
	    d->hidden > (1u << 20) || d->inter > (1u << 20)) {
		l->err = "hidden and inter must be multiples of 32 (up to 2^20)";
		return -EINVAL;
	}
	return kern_pack_layout_mix(d->quant, d->down_quant ?
				    (enum kt_quant)d->down_quant : d->quant,
				    pad_to(d->hidden, unit),
				    pad_to(d->inter, unit), d->group_size, l);
}

/*
 * One expert zero-padded to the packed H and I (@l), from @src of H x I:
 * gate and up [Ip][Hp], down [Hp][Ip] in @pad (3 Hp Ip elements of @esz).
 */
static void pad_expert(const struct kt_model_desc *d,
		       const struct kern_pack_layout *l,
		       const struct kt_expert_src *src, size_t esz,
		       uint8_t *pad, const void *out[3])
{
	size_t mat = (size_t)l->hidden * l->inter * esz;
	const void *in[3] = { src->gate, src->up, src->down };
	unsigned int i, r;

	memset(pad, 0, 3 * mat);
	for (i = 0; i < 3; i++) {
		/* rows x cols of the source, cols of the padded matrix */
		unsigned int rows = i < 2 ? d->inter : d->hidden;
		unsigned int cols = i < 2 ? d->hidden : d->inter;
		unsigned int pcols = i < 2 ? l->hidden : l->inter;
		uint8_t *dst = pad + i * mat;

		for (r = 0; r < rows; r++)
			memcpy(dst + (size_t)r * pcols * esz,
			       (const uint8_t *)in[i] + (size_t)r * cols * esz,
			       (size_t)cols * esz);
		out[i] = dst;
	}
}

/* The expert's biases into the model's zero-padded rows. */
static void copy_bias(const struct kt_model_desc *d, struct kt_model *m,
		      uint32_t layer, uint32_t e,
		      const struct kt_expert_src *src)
{
	float *b = core_model_bias(m, layer, e);

	if (src->gate_bias)
		memcpy(b, src->gate_bias, (size_t)d->inter * 4);
	if (src->up_bias)
		memcpy(b + m->inter, src->up_bias, (size_t)d->inter * 4);
	if (src->down_bias)
		memcpy(b + 2 * (size_t)m->inter, src->down_bias,
		       (size_t)d->hidden * 4);
}

static int pack_one(const struct kt_model_desc *d, struct kt_model *m,
		    const struct kern_pack_layout *l, uint8_t *pad,
		    uint32_t layer, uint32_t e, uint8_t *blob)
{
	struct kt_expert_src src;
	const void *mats[3];
	int ret;

	memset(&src, 0, sizeof(src));
	ret = d->get_expert(d->arg, layer, e, &src);
	if (ret)
		return ret;
	if (!src.gate || !src.up || !src.down)
		return ldr_err(-EINVAL, "expert %u of layer %u: a matrix is NULL",
			       e, layer);
	if (m->bias)
		copy_bias(d, m, layer, e, &src);
	if (!pad)
		return kern_pack_expert(l, src.gate, src.up, src.down,
					d->src_dtype, blob);
	pad_expert(d, l, &src, d->src_dtype == KT_DTYPE_F32 ? 4 : 2, pad,
		   mats);
	return kern_pack_expert(l, mats[0], mats[1], mats[2], d->src_dtype,
				blob);
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
	uint8_t *pad = NULL;
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
	m->hidden = l.hidden;
	m->inter = l.inter;
	m->hidden_io = desc->hidden;
	m->inter_io = desc->inter;
	m->act = (enum kt_act)desc->act;
	if (m->act == KT_ACT_SWIGLU_OAI) {
		m->act_alpha = desc->act_alpha ? desc->act_alpha :
						 KT_SWIGLU_OAI_ALPHA;
		m->act_limit = desc->act_limit ? desc->act_limit :
						 KT_SWIGLU_OAI_LIMIT;
	}
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
	if (desc->desc_flags & KT_DESC_F_BIAS) {
		m->bias = calloc((size_t)desc->n_layers * desc->n_experts,
				 core_model_bias_stride(m) * sizeof(float));
		if (!m->bias)
			goto err_free;
	}
	if (l.hidden != desc->hidden || l.inter != desc->inter) {
		pad = malloc(3 * (size_t)l.hidden * l.inter *
			     (desc->src_dtype == KT_DTYPE_F32 ? 4 : 2));
		if (!pad)
			goto err_free;
	}
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
			uint8_t *blob;

			if (ldr_masked(desc->expert_mask, desc->layer_masks,
				       desc->n_experts, layer, e))
				continue;
			blob = mm->mem.base + b++ * stride;
			ret = pack_one(desc, m, &l, pad, layer, e, blob);
			if (ret)
				goto err_release;
			kern_pack_mat(&l, KERN_MAT_GATE, blob, &ex->gate);
			kern_pack_mat(&l, KERN_MAT_UP, blob, &ex->up);
			kern_pack_mat(&l, KERN_MAT_DOWN, blob, &ex->down);
			ex->present = true;
			m->resident_bytes += l.total;
		}
	}
	free(pad);
	pad = NULL;
	ret = core_moe_reserve(ctx, m);
	if (!ret)
		ret = core_live_add(ctx, m);
	if (ret)
		goto err_release;
	*out = m;
	return 0;

err_release:
	free(pad);
	mem_release(m);
	return ret;
err_free:
	free(pad);
	free(m->bias);
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
