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

struct core_gpu {
	struct gpu_dev *d;
	struct core_gpu_stage ring;	/* ops of rings and kt_moe_forward */
};

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

/* Handler of KT_OP_MOE: core_moe_op() with the GPU experts split off. */
int core_moe_gpu_op(struct kt_ctx *ctx, const struct kt_sqe *sqe);

/* Free a stage's buffers (the context must be current). */
void core_gpu_stage_free(struct gpu_dev *d, struct core_gpu_stage *st);

#endif /* KT_CORE_MOE_GPU_H */
