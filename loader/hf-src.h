/* SPDX-License-Identifier: MIT */
/*
 * hf-src.h - the routed experts of a Hugging Face checkpoint folder, found,
 * checked and packed one expert at a time: the step kt_convert() (to a
 * .ktw) and kt_model_open() on a folder (to memory) share. GPT-OSS's
 * stacked experts (BF16 or MXFP4) are read as views of one expert each.
 */
#ifndef KT_LOADER_HF_SRC_H
#define KT_LOADER_HF_SRC_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/pack.h"
#include "loader/hfconfig.h"
#include "loader/ktw.h"
#include "loader/safetensors.h"

/* The source tensors of one (layer, expert, matrix). */
struct ldr_hf_mat {
	const struct ldr_st_tensor *w;
	const struct ldr_st_tensor *scale_inv;	/* FP8 sources only */
	/* compressed-tensors INT4: w is weight_packed, these its scales and
	 * weight_shape */
	const struct ldr_st_tensor *scale, *shape;
	bool chan;	/* FP8: scale_inv is a per-row weight_scale */
	/*
	 * GPT-OSS: w is the expert's slice of the stacked tensor (gate and up
	 * share gate_up_proj's, gate the even columns or rows, up the odd);
	 * mx its E8M0 scales (MXFP4 releases), bias its bias slice.
	 */
	const struct ldr_st_tensor *mx, *bias;
};

/*
 * struct ldr_hf_src - a checked plan: every tensor of @n_layers MoE layers
 * (checkpoint numbers @layer_ids) x cfg.n_experts experts found, with
 * dtype and shape checked, packed to @lay (@geom).
 */
struct ldr_hf_src {
	char *dir;
	struct ldr_hfconfig cfg;
	struct ldr_ckpt *ck;
	struct ldr_geom geom;
	struct kern_pack_layout lay;
	bool fp8_chan;		/* F8_E4M3 weights with per-row weight_scale */
	/* GPT-OSS: lay is of H and I padded to the tiles; the views of
	 * mats [n_layers * E * 6] */
	struct ldr_st_tensor *views;
	char prefix[256];
	int style;
	uint32_t n_layers;
	int32_t *layer_ids;
	struct ldr_hf_mat *mats;	/* [n_layers * E * 3] */
};

/* One packer's buffers (one per thread). */
struct ldr_hf_scratch {
	float *f32;	/* one dequantized, realigned or padded matrix */
	int8_t *q4;	/* INT4 sources: one matrix's values, then scales */
	uint8_t *mx;	/* MXFP4 kept: 16 rows of codes, then of E8M0 */
};

/*
 * ldr_hf_src_open() - read @dir's config.json, open its safetensors and
 *	find and check every expert tensor of the MoE layers numbered
 *	@first..@last (@last < 0: no limit).
 * @quant: enum kt_quant to pack to; 0 takes ldr_hf_default_quant().
 * @group_size: INT4 group (0: 128, or the checkpoint's own INT4 group).
 * Return: 0; -EINVAL (kt_last_error() names the file, tensor or key),
 *	-ENOENT, -ENOMEM; -EOPNOTSUPP a checkpoint a .ktw cannot hold
 *	(GPT-OSS: see ldr_hf_src_open_flags()). Nothing stays allocated on
 *	failure.
 */
int ldr_hf_src_open(const char *dir, int quant, uint32_t group_size,
		    int32_t first, int32_t last, struct ldr_hf_src **out);

/* Open sources a .ktw cannot hold too (GPT-OSS): for kt_model_open(). */
#define LDR_HF_F_ANY	1u

/*
 * ldr_hf_src_open_flags() - ldr_hf_src_open() with @flags (LDR_HF_F_*).
 *	Without LDR_HF_F_ANY (kt_convert(), which calls ldr_hf_src_open())
 *	a checkpoint that is not ldr_hf_src_is_plain() is refused with
 *	-EOPNOTSUPP ("a .ktw cannot hold ...") before any tensor is read.
 */
int ldr_hf_src_open_flags(const char *dir, int quant, uint32_t group_size,
			  int32_t first, int32_t last, unsigned int flags,
			  struct ldr_hf_src **out);
void ldr_hf_src_close(struct ldr_hf_src *s);

/*
 * Whether the experts are plain silu(g) * u of the checkpoint's own H and
 * I without biases (what a .ktw holds); false for GPT-OSS.
 */
bool ldr_hf_src_is_plain(const struct ldr_hf_src *s);

/*
 * ldr_hf_expert_bias() - expert @i's biases (GPT-OSS), as struct
 *	kt_model's bias holds them: gate [lay.inter], up [lay.inter], down
 *	[lay.hidden], f32, zero past the checkpoint's own sizes. A source
 *	without biases writes zeros.
 */
void ldr_hf_expert_bias(const struct ldr_hf_src *s, uint64_t i, float *dst);

/*
 * The quantization a checkpoint is packed to when none is asked for: its
 * own numbers kept as they are. compressed-tensors INT4 -> INT4 (its
 * group), F8_E4M3 with 128x128 block or per-row scales -> FP8, GPT-OSS's
 * MXFP4 -> MXFP4, anything else (BF16, F16, F32) -> BF16.
 */
int ldr_hf_default_quant(const struct ldr_hf_src *s);

int ldr_hf_scratch_init(const struct ldr_hf_src *s, struct ldr_hf_scratch *sc);
void ldr_hf_scratch_free(struct ldr_hf_scratch *sc);

/*
 * ldr_hf_pack_expert() - pack expert @i (= layer index * E + expert) into
 *	@dst (s->lay.total bytes; what lies beyond is not written). Any
 *	number of threads at once, each with its own @sc.
 * Return: 0 or the packer's -errno with kt_last_error() naming the tensor.
 */
int ldr_hf_pack_expert(const struct ldr_hf_src *s, struct ldr_hf_scratch *sc,
		       uint64_t i, uint8_t *dst);
/* Start reading expert @i's tensors (readahead). */
void ldr_hf_prefetch(const struct ldr_hf_src *s, uint64_t i);
/* Expert @i is packed: drop its source pages from the page cache. */
void ldr_hf_done(const struct ldr_hf_src *s, uint64_t i);

#endif /* KT_LOADER_HF_SRC_H */
