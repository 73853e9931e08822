/* SPDX-License-Identifier: MIT */
/*
 * gpu.h - kt's GPU: the device a context opened (kt_ctx_opts.gpu_mask),
 * experts resident on it, and MoE ops ordered on a caller's CUDA stream.
 * Included by kt/kt.h; no CUDA header is needed (streams are void *).
 */
#ifndef KT_GPU_H
#define KT_GPU_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kt_ctx;
struct kt_model;
struct kt_moe_args;

/**
 * struct kt_gpu_info - the GPU a context uses.
 * @ordinal: CUDA device ordinal.
 * @cc_major: compute capability, major.
 * @cc_minor: compute capability, minor.
 * @sms: streaming multiprocessors.
 * @total_mem: device memory in bytes.
 * @kernels: kt's kernels loaded: experts can run on it.
 * @name: the driver's name of the device.
 * @why: when @kernels is false, why (no nvcc at build, or the driver
 *	 refused the fatbin); else "".
 */
struct kt_gpu_info {
	int32_t ordinal;
	int32_t cc_major;
	int32_t cc_minor;
	uint32_t sms;
	uint64_t total_mem;
	bool kernels;
	char name[96];
	char why[160];
	uint32_t reserved[8];
};

/**
 * kt_ctx_gpu_info() - which GPU @ctx uses.
 * @ctx: context.
 * @info: filled on success.
 *
 * Context: any thread.
 * Return: 0; -ENODEV the context has no GPU (kt_ctx_opts.gpu_mask 0).
 */
int kt_ctx_gpu_info(const struct kt_ctx *ctx, struct kt_gpu_info *info);

/**
 * struct kt_gpu_limits - what a GPU does at best, measured.
 * @h2d_gbps: pinned host to device copy, GB/s (1e9 bytes per second).
 * @d2h_gbps: pinned device to host copy, GB/s.
 * @hbm_gbps: device memory read by a streaming kernel, GB/s.
 * @bf16_tflops: dense bf16 tensor-core rate (mma from registers), TFLOPS.
 */
struct kt_gpu_limits {
	double h2d_gbps;
	double d2h_gbps;
	double hbm_gbps;
	double bf16_tflops;
	double reserved[4];
};

/**
 * kt_ctx_gpu_measure() - measure the limits of @ctx's GPU (256 MiB copies
 *	and reads, an mma loop); the yardsticks of `kt bench --gpu`.
 * @ctx: context with a GPU.
 * @l: filled on success.
 *
 * Context: any thread but a worker; blocks about a second.
 * Return: 0; -ENODEV no GPU; -EOPNOTSUPP no kernels; -errno of the driver.
 */
int kt_ctx_gpu_measure(struct kt_ctx *ctx, struct kt_gpu_limits *l);

/**
 * kt_model_gpu_upload() - copy one expert to the context's GPU, in kt's
 *	device layout; from then on ops of @m run it there (and skip it on
 *	the CPU). An expert already resident is replaced.
 * @m: model; its host copy of the expert is the source and stays. An
 *	expert without one (masked at load, or a model with an expert
 *	cache) is read from the .ktw @m was opened from, checked, into a
 *	staging buffer of @m (one expert, registered once) and repacked
 *	there: it takes no host memory of its own.
 * @layer: layer index.
 * @expert: expert index.
 *
 * Context: any thread but a worker; blocks for the read and the copy;
 *	safe while ops of @m run (an op uses the residency it saw when it
 *	started). Uploads of one model are serialised.
 * Return: 0; -EINVAL out of range; -ENODEV no GPU in the context;
 *	   -EOPNOTSUPP no kernels for the GPU (see kt_ctx_gpu_info()) or
 *	   for @m's quantization, or an expert without a host copy of a
 *	   GGUF file or checkpoint folder after its open (packed at load,
 *	   the source is not kept: KT_MODEL_F_GPU_UPLOAD uploads such
 *	   experts at open); -ENOENT
 *	   the expert is not in host memory and @m has no file
 *	   (kt_model_create()); -EIO its blob did not read or check (the
 *	   log and kt_last_error() name it); -ENOMEM host or device memory.
 */
int kt_model_gpu_upload(struct kt_model *m, uint32_t layer, uint32_t expert);

/**
 * kt_model_gpu_evict() - free one expert's GPU copy; ops that hold it
 *	finish first (the call waits for them).
 * @m: model.
 * @layer: layer index.
 * @expert: expert index.
 *
 * An expert without a host copy (masked at load) is refused: the GPU
 * holds its only copy, and nothing could compute it afterwards.
 * Context: any thread but a worker; may block.
 * Return: 0; -ENOENT not resident; -EINVAL out of range, or the expert
 *	   has no host copy (logged); -ENODEV no GPU.
 */
int kt_model_gpu_evict(struct kt_model *m, uint32_t layer, uint32_t expert);

/**
 * kt_model_gpu_resident() - is an expert on the GPU now.
 * @m: model.
 * @layer: layer index.
 * @expert: expert index.
 * Return: 1 resident; 0 not (or no GPU); -EINVAL out of range.
 */
int kt_model_gpu_resident(const struct kt_model *m, uint32_t layer,
			  uint32_t expert);

/**
 * kt_moe_stream_submit() - enqueue one MoE op on a caller's CUDA stream.
 *	kt copies x, ids and w (device addresses; KT_MOE_F_DEVICE is
 *	implied) to its pinned staging on @stream, the GPU experts run on
 *	@stream, and the CPU part starts when the copy completes (a host
 *	function on @stream). y is written by kt_moe_stream_sync().
 * @ctx: context with a GPU.
 * @m: model.
 * @args: the op; @args->tokens is the most tokens (the buffers' size).
 * @stream: a CUstream of the context's device (NULL: the legacy stream).
 * @tokens_word: optional pinned host word read when the copy completes:
 *	the op's token count (0 .. @args->tokens), so a captured graph may
 *	replay with another count. NULL: @args->tokens.
 *
 * One op per context may be between submit and sync.
 * Context: any thread but a worker; does not wait for the GPU.
 * Return: 0; -EINVAL bad arguments; -EBUSY an op is already submitted;
 *	   -ENODEV no GPU; -EOPNOTSUPP no kernels; -errno of the driver.
 */
int kt_moe_stream_submit(struct kt_ctx *ctx, struct kt_model *m,
			 const struct kt_moe_args *args, void *stream,
			 const volatile uint32_t *tokens_word);

/**
 * kt_moe_stream_sync() - enqueue on @stream the wait for the CPU part of
 *	the op kt_moe_stream_submit() enqueued, and the sum of both parts
 *	into its y (device memory).
 * @ctx: context.
 * @stream: the same stream.
 *
 * Context: the submitting thread; does not wait for the GPU.
 * Return: 0; -EINVAL no op submitted or another stream; -errno of the
 *	   driver. The op's own result (0 or -errno) is reported by the
 *	   next kt_moe_stream_submit() or kt_ctx_gpu_last_error().
 */
int kt_moe_stream_sync(struct kt_ctx *ctx, void *stream);

/**
 * kt_ctx_gpu_last_error() - the result of the last stream-ordered op's
 *	CPU part, once the stream has passed its sync point.
 * @ctx: context.
 * Return: 0 or the -errno that op's CPU part returned.
 */
int kt_ctx_gpu_last_error(const struct kt_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif /* KT_GPU_H */
