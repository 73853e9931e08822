// SPDX-License-Identifier: MIT
/*
 * hf-model.c - kt_model_open() on a Hugging Face checkpoint folder: the
 * experts packed at load time, layer by layer on all of the context's
 * workers, straight into the model's node-placed memory. No file is
 * written (Documentation/loading.md). GPT-OSS's experts come with their
 * biases, the clamped SwiGLU and H and I padded to the tiles.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/pack.h"
#include "ktcore/cache.h"
#include "ktcore/core.h"
#include "ktcore/live.h"
#include "ktcore/mem.h"
#include "ktcore/model.h"
#include "ktcore/moe.h"
#include "loader/error.h"
#include "loader/fault.h"
#include "loader/gpu-upload.h"
#include "loader/hf-model.h"
#include "loader/hf-src.h"
#include "loader/mask.h"
#include "loader/placement.h"

#define BLOB_ALIGN	4096ul

struct hf_model {
	struct kt_model m;
	struct core_mem mem;
};

static void release(struct kt_model *m)
{
	struct hf_model *hm = (struct hf_model *)m;

	core_mem_free(&hm->mem);
	ldr_pack_src_free(m->priv);
	free(m->bias);
	free(m->experts);
	free(m->layer_ids);
	free(hm);
}

/* One layer's experts, spread over the workers. */
struct hf_job {
	struct kt_ctx *ctx;
	const struct ldr_hf_src *src;
	struct ldr_hf_scratch *scr;	/* [workers] */
	struct kt_model *m;		/* its biases, where it has them */
	uint8_t **dst;			/* [n_layers * E], NULL: masked */
	uint64_t base;			/* the layer's first entry */
	uint32_t n_experts;
	uint32_t ahead;			/* experts read ahead: one per worker */
	uint32_t next;
	pthread_mutex_t lock;
	int err;
	char msg[512];
};

static void layer_job(void *arg, const struct core_worker_info *w)
{
	struct hf_job *j = arg;
	struct ldr_hf_scratch *sc = &j->scr[w->global];
	uint32_t e;
	int ret;

	while ((e = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) <
	       j->n_experts) {
		uint64_t i = j->base + e;

		if (__atomic_load_n(&j->err, __ATOMIC_RELAXED))
			return;
		if (!j->dst[i])
			continue;
		/* the disk fetches the next round while this one packs */
		if (e + j->ahead < j->n_experts && j->dst[i + j->ahead])
			ldr_hf_prefetch(j->src, i + j->ahead);
		ret = ldr_hf_pack_expert(j->src, sc, i, j->dst[i]);
		if (!ret && j->m->bias)
			ldr_hf_expert_bias(j->src, i, core_model_bias(j->m,
				(uint32_t)(i / j->n_experts),
				(uint32_t)(i % j->n_experts)));
		if (ret) {
			/* kt_last_error() is this worker's: copy it out */
			pthread_mutex_lock(&j->lock);
			if (!j->err) {
				snprintf(j->msg, sizeof(j->msg), "%s",
					 kt_last_error());
				__atomic_store_n(&j->err, ret, __ATOMIC_RELAXED);
			}
			pthread_mutex_unlock(&j->lock);
			return;
		}
		ldr_hf_done(j->src, i);
	}
}

/* On the leader: fork the layer out to every worker of the context. */
static int layer_exec(struct kt_ctx *ctx, void *arg)
{
	struct hf_job *j = arg;
	uint32_t e;

	/* the first round; each expert then reads one round ahead */
	for (e = 0; e < j->n_experts && e < j->ahead; e++)
		if (j->dst[j->base + e])
			ldr_hf_prefetch(j->src, j->base + e);
	core_ctx_run(ctx, layer_job, j);
	return j->err;
}

static int pack_all(struct kt_ctx *ctx, const struct ldr_hf_src *s,
		    const struct kt_model_opts *o, struct kt_model *m,
		    uint8_t **dst, uint64_t present)
{
	unsigned int nw = kt_ctx_threads(ctx), w;
	struct hf_job j = { .ctx = ctx, .src = s, .m = m, .dst = dst,
			    .n_experts = s->cfg.n_experts,
			    .ahead = nw ? nw : 1 };
	uint64_t done = 0;
	uint32_t l, e;
	int ret = 0;

	j.scr = calloc(nw ? nw : 1, sizeof(*j.scr));
	if (!j.scr)
		return -ENOMEM;
	for (w = 0; w < nw && !ret; w++)
		ret = ldr_hf_scratch_init(s, &j.scr[w]);
	pthread_mutex_init(&j.lock, NULL);
	for (l = 0; l < s->n_layers && !ret; l++) {
		j.base = (uint64_t)l * s->cfg.n_experts;
		j.next = 0;
		ret = core_ctx_exec(ctx, layer_exec, &j);
		if (ret && j.err)
			ldr_err(ret, "%s", j.msg);
		else if (ret)
			ldr_err(ret, "%s: layer %d: %s", s->dir,
				s->layer_ids[l], strerror(-ret));
		if (ret)
			break;
		for (e = 0; e < s->cfg.n_experts; e++)
			done += !!dst[j.base + e];
		/* on the caller's thread, between layers */
		if (o->progress)
			o->progress(o->progress_arg, done, present);
	}
	pthread_mutex_destroy(&j.lock);
	for (w = 0; w < nw; w++)
		ldr_hf_scratch_free(&j.scr[w]);
	free(j.scr);
	return ret;
}

static int build(struct kt_ctx *ctx, const struct ldr_hf_src *s,
		 const struct kt_model_opts *o, struct hf_model *hm)
{
	const struct kern_pack_layout *l = &s->lay;
	struct kt_model *m = &hm->m;
	uint32_t E = s->cfg.n_experts, layer, e;
	uint64_t n = (uint64_t)s->n_layers * E, i, b = 0;
	struct ldr_placement place;
	uint8_t **dst;
	size_t stride;
	int ret;

	m->ctx = ctx;
	/* the packed sizes; GPT-OSS's own ones are padded to them */
	m->hidden = l->hidden;
	m->inter = l->inter;
	if (!ldr_hf_src_is_plain(s)) {
		m->hidden_io = s->cfg.hidden;
		m->inter_io = s->cfg.inter;
		m->act = KT_ACT_SWIGLU_OAI;
		m->act_alpha = KT_SWIGLU_OAI_ALPHA;
		m->act_limit = s->cfg.swiglu_limit;
	}
	m->n_experts = E;
	m->n_layers = s->n_layers;
	m->quant = (enum kt_quant)l->quant;
	m->down_quant = m->quant;
	m->group_size = l->group;
	m->down_chunk = l->kc;
	m->expert_bytes = l->total;
	m->release = release;
	m->layer_ids = calloc(s->n_layers, sizeof(*m->layer_ids));
	m->experts = calloc(n, sizeof(*m->experts));
	dst = calloc(n, sizeof(*dst));
	if (!ldr_hf_src_is_plain(s))
		m->bias = calloc(n, core_model_bias_stride(m) * sizeof(float));
	if (!m->layer_ids || !m->experts || !dst ||
	    (!ldr_hf_src_is_plain(s) && !m->bias)) {
		free(dst);
		return -ENOMEM;
	}
	memcpy(m->layer_ids, s->layer_ids, s->n_layers * sizeof(int32_t));
	/* before any expert is packed: the GPU may not take them */
	if (o->flags & KT_MODEL_F_GPU_UPLOAD) {
		ret = ldr_gpu_upload_check(m, s->dir);
		if (ret) {
			free(dst);
			return ret;
		}
	}
	for (layer = 0; layer < s->n_layers; layer++)
		for (e = 0; e < E; e++)
			b += !ldr_masked(o->expert_mask, o->layer_masks, E,
					 layer, e);
	stride = (l->total + BLOB_ALIGN - 1) & ~(BLOB_ALIGN - 1);
	/* bound before first touch: each node's slices land on it */
	ldr_placement_init(&place, l, core_ctx_nodes(ctx), 0, b, stride);
	ret = core_mem_alloc_spread(ctx, b * stride,
				    o->flags & KT_MODEL_F_NO_HUGEPAGE ?
				    CORE_MEM_F_SMALL : CORE_MEM_F_1G,
				    &place.lay, &hm->mem);
	if (ret) {
		free(dst);
		return ldr_err(ret, "%s: not enough memory for %.1f MiB of experts",
			       s->dir, b * stride / 1048576.0);
	}
	for (i = 0, b = 0; i < n; i++)
		if (!ldr_masked(o->expert_mask, o->layer_masks, E,
				(uint32_t)(i / E), (uint32_t)(i % E)))
			dst[i] = hm->mem.base + b++ * stride;
	ret = pack_all(ctx, s, o, m, dst, b);
	for (i = 0; i < n && !ret; i++) {
		struct core_expert *ex = &m->experts[i];

		if (!dst[i])
			continue;
		kern_pack_mat(l, KERN_MAT_GATE, dst[i], &ex->gate);
		kern_pack_mat(l, KERN_MAT_UP, dst[i], &ex->up);
		kern_pack_mat(l, KERN_MAT_DOWN, dst[i], &ex->down);
		ex->present = true;
		m->resident_bytes += l->total;
	}
	free(dst);
	return ret;
}

/* The GPU upload at open packs masked experts on the caller's thread. */
struct hf_masked {
	const struct ldr_hf_src *s;
	struct ldr_hf_scratch sc;
};

static int pack_masked(void *arg, uint32_t layer, uint32_t e, uint8_t *dst)
{
	struct hf_masked *h = arg;
	uint64_t i = (uint64_t)layer * h->s->cfg.n_experts + e;
	int ret;

	ldr_hf_prefetch(h->s, i);
	ret = ldr_hf_pack_expert(h->s, &h->sc, i, dst);
	ldr_hf_done(h->s, i);
	return ret;
}

/* m->blob_read, and with KT_MODEL_F_GPU_UPLOAD the masked experts uploaded */
static int attach_masked(struct kt_model *m, const struct ldr_hf_src *s,
			 const char *path, uint32_t flags)
{
	struct hf_masked h = { .s = s };
	int ret = 0;

	if (flags & KT_MODEL_F_GPU_UPLOAD)
		ret = ldr_hf_scratch_init(s, &h.sc);
	if (!ret)
		ret = ldr_pack_src_attach(m, path, "checkpoint folder", flags,
					  pack_masked, &h);
	ldr_hf_scratch_free(&h.sc);
	return ret;
}

int ldr_hf_model_open(struct kt_ctx *ctx, const char *path,
		      const struct kt_model_opts *o, struct kt_model **out)
{
	struct hf_model *hm = NULL;
	struct ldr_hf_src *s = NULL;
	uint64_t t0 = core_now_ns();
	int ret;

	if (o->budget)
		return ldr_err(-EOPNOTSUPP, "%s: a checkpoint folder is packed into memory whole: budget (the expert cache) needs a .ktw (kt convert)",
			       path);
	if (o->flags & KT_MODEL_F_MMAP)
		return ldr_err(-EOPNOTSUPP, "%s: KT_MODEL_F_MMAP needs a .ktw: a checkpoint folder is packed at load",
			       path);
	ret = ldr_hf_src_open_flags(path, o->quant, o->group_size, 0, -1,
				    LDR_HF_F_ANY, &s);
	if (ret)
		return ret;
	hm = calloc(1, sizeof(*hm));
	if (!hm) {
		ret = -ENOMEM;
		goto out;
	}
	ret = build(ctx, s, o, hm);
	if (!ret) {
		ret = core_moe_reserve(ctx, &hm->m);
		if (ret)
			ldr_err(ret, "%s: no kernels for %s on this context",
				path, kt_quant_name(hm->m.quant));
	}
	if (!ret)
		ret = attach_masked(&hm->m, s, path, o->flags);
	if (!ret)
		ret = core_live_add(ctx, &hm->m);	/* ops may name it */
	if (ret)
		goto out;
	core_log(ctx, KT_LOG_INFO, "%s: packed %u MoE layers x %u experts to %s in %.2f s, %llu MiB resident",
		 path, hm->m.n_layers, hm->m.n_experts,
		 kt_quant_name(hm->m.quant), (core_now_ns() - t0) / 1e9,
		 (unsigned long long)(hm->m.resident_bytes >> 20));
	*out = &hm->m;
	hm = NULL;
out:
	if (hm) {
		core_model_extras_free(&hm->m);
		release(&hm->m);
	}
	ldr_hf_src_close(s);
	return ret;
}
