/* SPDX-License-Identifier: MIT */
/*
 * model.h - the in-memory form of a model: geometry plus pointers to each
 * expert's packed matrices (layout: Documentation/packed-layout.md).
 * Built by loader/ (kt_model_create, kt_model_open), run by the executor.
 */
#ifndef KT_CORE_MODEL_H
#define KT_CORE_MODEL_H

#include <stdint.h>
#include <stdbool.h>
#include <kt/kt.h>

#include "kernels/kern.h"

struct gpu_table;

struct core_expert {
	struct kern_mat gate;	/* [inter][hidden], row-block-major */
	struct kern_mat up;	/* [inter][hidden], row-block-major */
	struct kern_mat down;	/* [hidden][inter], k-chunk-major */
	bool present;		/* false: lives elsewhere, skipped */
};

struct kt_model {
	struct kt_ctx *ctx;
	/* the packed H and I: gate/up's K and down's N, the intermediate */
	uint32_t hidden;
	uint32_t inter;
	/*
	 * H and I as the model has them, where the packed ones are padded
	 * to the tiles with zero weights (GPT-OSS's 2880 packs as 2944);
	 * 0: not padded. x and y rows are hidden_io wide.
	 */
	uint32_t hidden_io;
	uint32_t inter_io;
	/* the gated activation (enum kt_act) and its constants */
	enum kt_act act;
	float act_alpha, act_limit;
	/*
	 * Expert biases, f32, NULL: none. Expert (l, e)'s are at
	 * bias + (l * n_experts + e) * core_model_bias_stride(m): gate
	 * [inter], up [inter], down [hidden] (packed sizes, zero padded).
	 */
	float *bias;
	uint32_t n_experts;
	uint32_t n_layers;
	enum kt_quant quant;	/* gate and up */
	enum kt_quant down_quant;	/* down: quant, or another GGUF type */
	/*
	 * Down's type per layer where it varies (a llama.cpp Q4_K_M file:
	 * Q6_K in some layers, Q4_K in the others), each layer's experts
	 * packed by kern_pack_layout_mix(quant, layer_down_quant[l]); NULL:
	 * down_quant in every layer.
	 */
	uint8_t *layer_down_quant;
	uint32_t group_size;	/* INT4 group along K; 0 otherwise */
	uint32_t down_chunk;	/* KC: K chunk of the down matrix */
	uint64_t expert_bytes;	/* packed bytes of one expert */
	uint64_t resident_bytes;
	int32_t *layer_ids;	/* [n_layers] checkpoint layer numbers */
	struct core_expert *experts;	/* [n_layers * n_experts] */
	/* routing counters [n_layers * n_experts] (ktcore/stats.c) */
	uint64_t *route;
	/* expert slots of a model larger than its budget (ktcore/cache.c);
	 * NULL: every present expert is resident */
	struct core_cache *cache;
	/* experts on the GPU, changed while ops run (ktcore/residency.c);
	 * NULL: no GPU backend, nothing is on the GPU */
	struct core_residency *residency;
	/* whoever built the model frees its memory here */
	void (*release)(struct kt_model *m);
	void *priv;
	/*
	 * Read expert (@layer, @expert)'s packed blob, checked, from where
	 * the model came from (loader/: the .ktw file or its mapping) into
	 * @dst, 4 KiB aligned, @blob_stride bytes: the GPU upload of an
	 * expert without a host copy. 0 or -errno, logged. Callers
	 * serialise the calls (the upload staging). NULL: nowhere to read
	 * from (kt_model_create()).
	 */
	int (*blob_read)(const struct kt_model *m, uint32_t layer,
			 uint32_t expert, uint8_t *dst);
	uint64_t blob_stride;	/* a multiple of 4096 */
	/* experts on the context's GPU (gpu/gpu.h); NULL until the first
	 * upload */
	struct gpu_table *gpu;
};

/* The type of down in MoE layer @layer. */
static inline enum kt_quant core_model_down_quant(const struct kt_model *m,
						  uint32_t layer)
{
	return m->layer_down_quant ?
		(enum kt_quant)m->layer_down_quant[layer] : m->down_quant;
}

/* Width of x and y rows: H as the model has it. */
static inline uint32_t core_model_hidden_io(const struct kt_model *m)
{
	return m->hidden_io ? m->hidden_io : m->hidden;
}

static inline uint32_t core_model_inter_io(const struct kt_model *m)
{
	return m->inter_io ? m->inter_io : m->inter;
}

/* Floats of one expert's biases: gate, up, down. */
static inline size_t core_model_bias_stride(const struct kt_model *m)
{
	return 2 * (size_t)m->inter + m->hidden;
}

/* Expert (@layer, @expert)'s biases, or NULL. */
static inline float *core_model_bias(const struct kt_model *m,
				     uint32_t layer, uint32_t expert)
{
	if (!m->bias)
		return NULL;
	return m->bias + ((size_t)layer * m->n_experts + expert) *
			 core_model_bias_stride(m);
}

/* Whether the experts are plain silu(g) * u of the unpadded H and I
 * without biases, one down type for all layers: what the GPU kernels and
 * the .ktw format know. */
static inline bool core_model_is_plain(const struct kt_model *m)
{
	return m->act == KT_ACT_SILU && !m->bias && !m->layer_down_quant &&
	       core_model_hidden_io(m) == m->hidden &&
	       core_model_inter_io(m) == m->inter;
}

static inline struct core_expert *core_model_expert(const struct kt_model *m,
						    uint32_t layer,
						    uint32_t expert)
{
	return &m->experts[(size_t)layer * m->n_experts + expert];
}

#endif /* KT_CORE_MODEL_H */
