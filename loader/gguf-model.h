/* SPDX-License-Identifier: MIT */
/*
 * gguf-model.h - a model from the expert tensors of a GGUF file, for
 * kt_model_open() (Documentation/formats.md).
 */
#ifndef KT_LOADER_GGUF_MODEL_H
#define KT_LOADER_GGUF_MODEL_H

#include <kt/kt.h>

#include "kernels/pack.h"
#include "loader/gguf.h"

/* one row block's worth of a file's blocks, unpacked */
struct ldr_gguf_bufs {
	int8_t *q;
	float *sc, *d, *dmin;
	uint8_t *s6, *m6;
};

/*
 * struct ldr_gguf_src - the MoE layers of a validated GGUF file.
 * @H, @I, @E, @top_k: geometry from the metadata, checked against
 *	every expert tensor. @n_layers MoE layers, @layer_ids their block
 *	numbers. @type: the ggml type of every gate and up tensor,
 *	@type_down of every down tensor (another block type in Q4_K_M files);
 *	@quant, @quant_down, @group and @lay: kt's layout it is repacked into,
 *	whose H and I are padded to the tiles (@lay.hidden >= @H) with zero
 *	weights where the file's are not multiples of them (gpt-oss 2880).
 *	@act: the gated activation of the architecture (gpt-oss: the clamped
 *	SwiGLU). @bias: [n_layers][gate, up, down] expert bias tensors
 *	(blk.L.ffn_*_exps.bias), NULL when the file has none.
 */
struct ldr_gguf_src {
	const struct ldr_gguf *g;
	char arch[32];
	uint64_t H, I, E, top_k, n_blocks, dense;
	uint32_t n_layers;
	int32_t *layer_ids;
	const struct ldr_gguf_tensor *(*t)[3];	/* [n_layers][gate, up, down] */
	uint32_t type;
	uint32_t type_down;
	enum kt_quant quant;
	enum kt_quant quant_down;
	unsigned int group;
	struct kern_pack_layout lay;
	struct ldr_gguf_bufs bf;
	enum kt_act act;
	const struct ldr_gguf_tensor *(*bias)[3];
	void *pad;	/* one matrix of a float type, padded */
	/*
	 * Down's type where it varies by layer (llama.cpp's Q4_K_M gives
	 * some layers Q6_K, the others Q4_K): @lays[n_layers] their layouts
	 * (@lay is layer 0's), @down_types the ggml types; NULL otherwise.
	 */
	struct kern_pack_layout *lays;
	uint32_t *down_types;
	bool down_varies;
};

/* The packed layout of MoE layer @layer. */
static inline const struct kern_pack_layout *
ldr_gguf_src_lay(const struct ldr_gguf_src *s, uint32_t layer)
{
	return s->lays ? &s->lays[layer] : &s->lay;
}

/* Whether @s runs as plain silu(g) * u on unpadded H and I without
 * biases (what a .ktw holds). */
static inline bool ldr_gguf_src_is_plain(const struct ldr_gguf_src *s)
{
	return s->act == KT_ACT_SILU && !s->bias && !s->lays &&
	       s->lay.hidden == s->H &&
	       s->lay.inter == s->I;
}

/* Open and plan @path: 0; -EINVAL, -EOPNOTSUPP, -ENOMEM with a message. */
int ldr_gguf_src_open(const char *path, struct ldr_gguf_src **out);
/* Repack expert @e of MoE layer @layer into @blob (@s->lay.total bytes);
 * one caller at a time (shared buffers). 0; -EINVAL a bad block scale. */
int ldr_gguf_src_pack(struct ldr_gguf_src *s, uint32_t layer, uint32_t e,
		      uint8_t *blob);
void ldr_gguf_src_close(struct ldr_gguf_src *s);
/* Expert @e of MoE layer @layer's biases as f32 into @dst (gate [lay.inter],
 * up [lay.inter], down [lay.hidden], zero padded); @s->bias must be set. */
void ldr_gguf_src_bias(const struct ldr_gguf_src *s, uint32_t layer,
		       uint32_t e, float *dst);

/*
 * ldr_gguf_convert() - kt_convert() of a GGUF @o->input: its expert blocks
 *	as kt holds them, written to the .ktw @o->output. @o->quant 0 (or the
 *	file's own); a GGUF file is never re-quantized.
 */
int ldr_gguf_convert(const struct kt_convert_opts *o);

/*
 * ldr_gguf_model_open() - validate @path, find its MoE layers and repack
 *	their expert blocks into node-placed memory.
 * @o: complete options (sz checked by the caller); expert_mask,
 *	layer_masks, KT_MODEL_F_NO_HUGEPAGE and KT_MODEL_F_GPU_UPLOAD (the
 *	masked experts packed one at a time and uploaded, loader/gpu-upload.h)
 *	are honoured, the rest of .ktw's options (io, budget, cache) do not
 *	apply.
 * Return: 0; -EINVAL bad file; -EOPNOTSUPP a type, architecture or
 *	geometry kt does not run (or the GPU does not, with the flag);
 *	-ENODEV the flag without a GPU; -ENOMEM; the driver's -errno.
 *	kt_last_error() says why; nothing stays allocated on failure.
 */
int ldr_gguf_model_open(struct kt_ctx *ctx, const char *path,
			const struct kt_model_opts *o, struct kt_model **out);

#endif /* KT_LOADER_GGUF_MODEL_H */
