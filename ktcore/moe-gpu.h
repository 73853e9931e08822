/* SPDX-License-Identifier: MIT */
/*
 * moe-gpu.h - the context's GPU (gpu/ opened for kt_ctx_opts.gpu_mask),
 * experts uploaded from a model's host copy, and the MoE op that runs the
 * GPU-resident experts on the GPU while the CPU runs the others.
 */
#ifndef KT_CORE_MOE_GPU_H
#define KT_CORE_MOE_GPU_H

#include <stdint.h>
#include <kt/kt.h>

#include "gpu/gpu.h"
#include "ktcore/model.h"

/*
 * struct core_gpu_stage - buffers of one op stream (ring ops or stream-
 * ordered ops), grown to the largest op seen, never per op otherwise.
 * @pin: page-locked host memory (cuMemAllocHost): copies are DMA.
 * @dev: device scratch. @held: per expert of the layer, 1 when the op
 * holds its GPU copy (gpu_table_get), 2 when it is not on the GPU.
 */
struct core_gpu_stage {
	uint8_t *pin;
	size_t pin_bytes;
	CUdeviceptr dev;
	size_t dev_bytes;
	uint8_t *held;
	CUdeviceptr *base;
	uint64_t *skip;
	uint32_t *count;	/* [2 * n_experts + 1]: start, fill */
	uint32_t *hlist;	/* experts held by the op */
	uint32_t n_held;
	float *ycpu;		/* f32 CPU part, [chunk][H] */
	uint32_t n_experts;	/* size of the per-expert arrays */
	size_t ycpu_bytes;
};

struct core_gpu_stream;

struct core_gpu {
	struct gpu_dev *d;
	struct core_gpu_stage ring;	/* ops of rings and kt_moe_forward */
	struct core_gpu_stream *strm;	/* stream-ordered ops (moe-stream.c) */
};

/*
 * kt_model_destroy(), first: stream-ordered ops of @m still in flight end
 * here. One submitted and not synced is a misuse (kt: misuse:, aborts in
 * a KT_DEBUG build; else logged, the stream synchronised, the op finished
 * without its y); ops past their sync are waited for on their stream.
 */
void core_gpu_stream_model_gone(struct kt_model *m);

/* kt_ctx_destroy(): stop the stream helper, free its buffers. */
void core_gpu_stream_free(struct kt_ctx *ctx);

/* kt_ctx_create(): open the GPU of @mask (0: none). */
int core_gpu_open(struct kt_ctx *ctx, uint64_t mask);
/* kt_ctx_destroy(), after the workers stopped. */
void core_gpu_close(struct kt_ctx *ctx);
/* kt_model_destroy(): free the model's GPU copies. */
void core_gpu_model_free(struct kt_model *m);

/* One expert, packed host layout -> device layout (@gl->total bytes). */
int core_gpu_pack_expert(const struct kt_model *m,
			 const struct core_expert *ex,
			 const struct gpu_layout *gl, uint8_t *dst);

/*
 * Free (@layer, @expert)'s GPU copy, also of an expert without a host copy
 * (kt_model_gpu_evict() refuses those): for the residency backend, which
 * checks itself. 0; -ENOENT not resident; -EINVAL; -ENODEV.
 */
int core_gpu_evict(struct kt_model *m, uint32_t layer, uint32_t expert);

/*
 * kt_model_open() with KT_MODEL_F_GPU_UPLOAD: upload every expert of @m
 * without a host copy (the ones its masks left out) through m->blob_read
 * (read from the .ktw, or packed from the GGUF file or folder), then
 * attach the residency table with them as the initial GPU set. 0 or the
 * first -errno (logged); what was uploaded is freed with the model.
 */
int core_gpu_upload_absent(struct kt_model *m);

/*
 * Whether kt_model_open() with KT_MODEL_F_GPU_UPLOAD can put @m's experts
 * on its context's GPU, asked before they are read (@m's geometry, quant
 * and biases set). 0; -ENODEV no GPU; -EOPNOTSUPP no kernels for them,
 * or the GPU cannot run kt's; logged, and *@why (static text) says why.
 */
int core_gpu_upload_check(const struct kt_model *m, const char **why);

/*
 * Serve @m's residency table (kt_model_place()) with the context's GPU,
 * once. 0 (also when @m has a table); -ENODEV no GPU; -ENOMEM.
 */
int core_gpu_place_attach(struct kt_model *m);

/* Handler of KT_OP_MOE: core_moe_op() with the GPU experts split off. */
int core_moe_gpu_op(struct kt_ctx *ctx, const struct kt_sqe *sqe);

/* Free a stage's buffers. */
void core_gpu_stage_free(struct gpu_dev *d, struct core_gpu_stage *st);

/* ---- shared by the ring op (moe-gpu.c) and stream ops (moe-stream.c) --- */

/* Where one chunk's parts are, in the pinned and the device buffer. */
struct core_gpu_lay {
	size_t x, slot_tok, slot_w, tok_slot, groups, front;
	size_t ygpu, ids, w, pin_total;
	size_t a, ypart, y, ycpu, dev_total;
};

void core_gpu_chunk_layout(struct core_gpu_lay *l, uint32_t tc, uint32_t k,
			   uint32_t H, uint32_t I, uint32_t E, size_t esz);
/* Grow @st for a chunk of @l, @E experts, @ycpu bytes of CPU output. */
int core_gpu_stage_reserve(struct gpu_dev *d, struct core_gpu_stage *st,
			   const struct core_gpu_lay *l, uint32_t E,
			   size_t ycpu);

/* One op's constant part. */
struct core_gpu_op {
	struct kt_ctx *ctx;
	struct gpu_dev *d;
	struct kt_model *m;
	struct gpu_table *t;
	struct core_gpu_stage *st;
	const struct kt_sqe *sqe;
	const struct kt_moe_args *a;
	bool dev_mode;
	size_t esz, idsz;
	uint32_t H, I, E, k;
	struct core_gpu_lay l;
};

/*
 * Plan the GPU part of @tc tokens (@ids, @w on the host) into the pinned
 * staging: slots, groups, each token's slots, the CPU skip mask. Takes the
 * op's holds on GPU experts met first here. Returns the CPU pairs left;
 * @n_groups and @max_m describe the GPU part.
 */
uint32_t core_gpu_plan(struct core_gpu_op *o, const void *ids, const float *w,
		       uint32_t tc, uint32_t *n_groups, uint32_t *max_m);
/* The checks of moe.c's validate(), KT_MOE_F_DEVICE allowed. */
int core_gpu_check_args(const struct kt_ctx *ctx, const struct kt_sqe *sqe);

/* Tokens per GPU chunk: bounds the device scratch (slots x (H + I)). */
#define GPU_CHUNK	1024u
/* From this many slots of one expert the tensor-core tiles pay off. */
#define MMA_MIN_M	16u
/* core_gpu_stage.held[] */
#define HELD_GPU	1
#define HELD_CPU	2

/* Drop the op's holds. */
void core_gpu_release(struct core_gpu_op *o);

#endif /* KT_CORE_MOE_GPU_H */
