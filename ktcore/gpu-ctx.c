// SPDX-License-Identifier: MIT
/*
 * gpu-ctx.c - a context's GPU (kt_ctx_opts.gpu_mask) and the experts a
 * model keeps on it: kt_ctx_gpu_info, kt_model_gpu_upload/evict/resident.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/pack.h"
#include "ktcore/ctx.h"
#include "ktcore/moe-gpu.h"

static void gpu_log(void *arg, enum kt_log_level level, const char *msg)
{
	core_log(arg, level, "%s", msg);
}

int core_gpu_open(struct kt_ctx *ctx, uint64_t mask)
{
	struct core_gpu *g;
	int ordinal, ret;

	ctx->gpu = NULL;
	if (!mask)
		return 0;
	if (mask & (mask - 1)) {
		core_log(ctx, KT_LOG_ERROR,
			 "gpu_mask %#llx: one GPU per context for now",
			 (unsigned long long)mask);
		return -EOPNOTSUPP;
	}
	ordinal = __builtin_ctzll(mask);
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	ret = gpu_dev_open(ordinal, gpu_log, ctx, &g->d);
	if (ret) {
		free(g);
		return ret;
	}
	ctx->gpu = g;
	return 0;
}

void core_gpu_close(struct kt_ctx *ctx)
{
	struct core_gpu *g = ctx->gpu;

	if (!g)
		return;
	core_gpu_stream_free(ctx);
	core_gpu_stage_free(g->d, &g->ring);
	gpu_dev_close(g->d);
	free(g);
	ctx->gpu = NULL;
}

KT_EXPORT int kt_ctx_gpu_info(const struct kt_ctx *ctx,
			      struct kt_gpu_info *info)
{
	const struct gpu_dev *d;

	if (!ctx || !info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	if (!ctx->gpu)
		return -ENODEV;
	d = ctx->gpu->d;
	info->ordinal = d->ordinal;
	info->cc_major = d->cc_major;
	info->cc_minor = d->cc_minor;
	info->sms = (uint32_t)d->sms;
	info->total_mem = d->total_mem;
	info->kernels = d->mod != NULL;
	memcpy(info->name, d->name, sizeof(info->name));
	if (!info->kernels)
		memcpy(info->why, d->why, sizeof(info->why));
	return 0;
}

KT_EXPORT int kt_ctx_gpu_measure(struct kt_ctx *ctx, struct kt_gpu_limits *l)
{
	struct gpu_limits g;
	int ret;

	if (!ctx || !l)
		return -EINVAL;
	memset(l, 0, sizeof(*l));
	if (!ctx->gpu)
		return -ENODEV;
	ret = gpu_measure(ctx->gpu->d, &g);
	if (ret)
		return ret;
	l->h2d_gbps = g.h2d_gbps;
	l->d2h_gbps = g.d2h_gbps;
	l->hbm_gbps = g.hbm_gbps;
	l->bf16_tflops = g.bf16_tflops;
	return 0;
}

/*
 * Whether the device layout holds @m's experts: 0 with @gl filled, or
 * -EOPNOTSUPP with *@why saying which kernels are missing (static text).
 */
static int model_fits(const struct kt_model *m, struct gpu_layout *gl,
		      const char **why)
{
	if (!core_model_is_plain(m)) {
		*why = "no kernels for experts with biases, another activation than silu or padded sizes";
		return -EOPNOTSUPP;
	}
	if (m->down_quant != m->quant) {
		*why = "no kernels for a down type other than gate/up's";
		return -EOPNOTSUPP;
	}
	if (gpu_layout_init(gl, m->quant, m->hidden, m->inter,
			    m->group_size)) {
		*why = "no kernels for this quantization (the GPU runs INT8, INT4 and BF16 experts)";
		return -EOPNOTSUPP;
	}
	return 0;
}

int core_gpu_upload_check(const struct kt_model *m, const char **why)
{
	struct gpu_layout gl;
	int ret;

	*why = "";
	if (!m->ctx->gpu) {
		*why = "the context has no GPU (kt_ctx_opts.gpu_mask)";
		ret = -ENODEV;
	} else {
		ret = gpu_dev_compute_ok(m->ctx->gpu->d);
		if (ret)
			*why = "the GPU cannot run kt's kernels (see kt_ctx_gpu_info())";
		else
			ret = model_fits(m, &gl, why);
	}
	if (ret)
		core_log(m->ctx, KT_LOG_ERROR, "KT_MODEL_F_GPU_UPLOAD: %s (H %u, I %u): %s",
			 kt_quant_name(m->quant), core_model_hidden_io(m),
			 core_model_inter_io(m), *why);
	return ret;
}

/* The model's device table, created on first use. */
static int model_table(struct kt_model *m, struct gpu_table **out)
{
	struct kt_ctx *ctx = m->ctx;
	struct gpu_layout gl;
	struct gpu_table *t;
	const char *why;
	int ret;

	*out = NULL;
	if (!ctx->gpu)
		return -ENODEV;
	ret = gpu_dev_compute_ok(ctx->gpu->d);
	if (ret)
		return ret;
	t = __atomic_load_n(&m->gpu, __ATOMIC_ACQUIRE);
	if (t) {
		*out = t;
		return 0;
	}
	ret = model_fits(m, &gl, &why);
	if (ret) {
		core_log(ctx, KT_LOG_ERROR, "gpu: %s (down %s, H %u, I %u): %s (run it on the CPU)",
			 kt_quant_name(m->quant), kt_quant_name(m->down_quant),
			 core_model_hidden_io(m), core_model_inter_io(m), why);
		return ret;
	}
	ret = gpu_table_create(ctx->gpu->d, &gl, m->n_layers, m->n_experts,
			       &t);
	if (ret)
		return ret;
	/* acq_rel: two first uploads race; the loser frees its table */
	{
		struct gpu_table *none = NULL;

		if (!__atomic_compare_exchange_n(&m->gpu, &none, t, false,
						 __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE)) {
			gpu_table_destroy(t);
			t = none;
		}
	}
	*out = t;
	return 0;
}

KT_EXPORT int kt_model_gpu_upload(struct kt_model *m, uint32_t layer,
				  uint32_t expert)
{
	const struct core_expert *ex;
	struct core_expert blob_ex;
	struct kern_pack_layout pl;
	struct gpu_table *t;
	size_t src_bytes = 0;
	bool from_host;
	uint8_t *buf;
	int ret;

	if (!m || layer >= m->n_layers || expert >= m->n_experts)
		return -EINVAL;
	ret = model_table(m, &t);
	if (ret)
		return ret;
	ex = core_model_expert(m, layer, expert);
	/* a model whose experts are cached slots has no stable host copy:
	 * its experts come from the file as masked ones do */
	from_host = ex->present && !m->cache;
	if (!from_host && !m->blob_read) {
		core_log(m->ctx, KT_LOG_ERROR,
			 "gpu: expert %u of layer %u is not in host memory and the model has no file to read it from",
			 expert, layer);
		return -ENOENT;
	}
	if (!from_host)
		src_bytes = m->blob_stride;
	/* one staging per model, registered once: [blob][device layout] */
	ret = gpu_table_stage(t, src_bytes + t->lay.total, &buf);
	if (ret)
		return ret;
	if (!from_host) {
		ret = m->blob_read(m, layer, expert, buf);
		if (ret)
			goto out;
		if (kern_pack_layout(m->quant, m->hidden, m->inter,
				     m->group_size, &pl)) {
			ret = -EINVAL;
			goto out;
		}
		kern_pack_mat(&pl, KERN_MAT_GATE, buf, &blob_ex.gate);
		kern_pack_mat(&pl, KERN_MAT_UP, buf, &blob_ex.up);
		kern_pack_mat(&pl, KERN_MAT_DOWN, buf, &blob_ex.down);
		blob_ex.present = true;
		ex = &blob_ex;
	}
	ret = core_gpu_pack_expert(m, ex, &t->lay, buf + src_bytes);
	if (!ret)
		ret = gpu_table_upload(t, layer, expert, buf + src_bytes);
out:
	gpu_table_unstage(t);
	return ret;
}

int core_gpu_evict(struct kt_model *m, uint32_t layer, uint32_t expert)
{
	struct gpu_table *t;

	if (!m || layer >= m->n_layers || expert >= m->n_experts)
		return -EINVAL;
	if (!m->ctx->gpu)
		return -ENODEV;
	t = __atomic_load_n(&m->gpu, __ATOMIC_ACQUIRE);
	if (!t)
		return -ENOENT;
	return gpu_table_evict(t, layer, expert);
}

KT_EXPORT int kt_model_gpu_evict(struct kt_model *m, uint32_t layer,
				 uint32_t expert)
{
	if (!m || layer >= m->n_layers || expert >= m->n_experts)
		return -EINVAL;
	/* the GPU copy is the only one: nothing could compute it after */
	if (!core_model_expert(m, layer, expert)->present &&
	    kt_model_gpu_resident(m, layer, expert) == 1) {
		core_log(m->ctx, KT_LOG_ERROR,
			 "kt_model_gpu_evict: layer %u expert %u has no host copy and cannot leave the GPU",
			 layer, expert);
		return -EINVAL;
	}
	return core_gpu_evict(m, layer, expert);
}

KT_EXPORT int kt_model_gpu_resident(const struct kt_model *m, uint32_t layer,
				    uint32_t expert)
{
	const struct gpu_table *t;

	if (!m || layer >= m->n_layers || expert >= m->n_experts)
		return -EINVAL;
	t = __atomic_load_n(&m->gpu, __ATOMIC_ACQUIRE);
	return t && gpu_table_resident(t, layer, expert);
}

int core_gpu_upload_absent(struct kt_model *m)
{
	uint32_t l, e, n = 0;
	const char *why;
	int ret;

	ret = core_gpu_upload_check(m, &why);
	if (ret)
		return ret;
	for (l = 0; l < m->n_layers; l++)
		for (e = 0; e < m->n_experts; e++) {
			if (core_model_expert(m, l, e)->present)
				continue;
			ret = kt_model_gpu_upload(m, l, e);
			if (ret)
				return ret;
			n++;
		}
	/* the residency table starts from what is on the GPU now, so
	 * kt_model_place() moves from here */
	ret = core_gpu_place_attach(m);
	if (ret)
		return ret;
	core_log(m->ctx, KT_LOG_INFO,
		 "gpu: %u masked experts uploaded, not kept in host memory",
		 n);
	return 0;
}

void core_gpu_model_free(struct kt_model *m)
{
	if (!m || !m->gpu)
		return;
	gpu_table_destroy(m->gpu);
	m->gpu = NULL;
}
