/* SPDX-License-Identifier: MIT */
/*
 * gpu.h - what the CUDA backend offers ktcore: the probe, a device opened
 * for a context (driver, primary context, embedded kernels, a stream), the
 * per-model table of experts on the device, and the FFN launches.
 */
#ifndef KT_GPU_GPU_H
#define KT_GPU_GPU_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <kt/kt.h>

#include "gpu/cu.h"
#include "gpu/ffn-abi.h"
#include "gpu/layout.h"

/*
 * struct gpu_probe - what libcuda.so.1 reports.
 * @driver: the library loads and cuInit() succeeds.
 * @version: cuDriverGetVersion() (e.g. 12040), 0 when unknown.
 * @devices: cuDeviceGetCount(), 0 when unknown.
 * @kernels: this build embeds device kernels (nvcc was present).
 * @why: when no GPU is usable, why, in one sentence; else "".
 */
struct gpu_probe {
	bool driver;
	bool kernels;
	int version;
	int devices;
	char why[160];
};

/* Load the driver, ask it, unload it. Never fails: no driver is an answer. */
void gpu_probe(struct gpu_probe *p);

/* ---- the embedded fatbin (gpu/fatbin.S, or none) ------------------------ */

/* The image for cuModuleLoadData, or NULL when nvcc was not present. */
const void *gpu_fatbin(size_t *bytes);

/* ---- a device opened for a context -------------------------------------- */

typedef void (*gpu_log_fn)(void *arg, enum kt_log_level level,
			   const char *msg);

enum gpu_fn_id {
	GPU_FN_GU_GEMV_INT8,
	GPU_FN_GU_GEMV_INT4,
	GPU_FN_GU_GEMV_BF16,
	GPU_FN_DOWN_GEMV_INT8,
	GPU_FN_DOWN_GEMV_INT4,
	GPU_FN_DOWN_GEMV_BF16,
	GPU_FN_GU_MMA_INT8,
	GPU_FN_GU_MMA_INT4,
	GPU_FN_GU_MMA_BF16,
	GPU_FN_DOWN_MMA_INT8,
	GPU_FN_DOWN_MMA_INT4,
	GPU_FN_DOWN_MMA_BF16,
	GPU_FN_REDUCE,
	GPU_FN_COMBINE,
	GPU_FN_MMA_PEAK,
	GPU_FN_READ_BW,
	GPU_FN_COUNT
};

/*
 * struct gpu_dev - one GPU as a context uses it. @mod is NULL when this
 * build has no kernels or the driver refused them (@why says which): the
 * device still allocates and copies, compute answers -EOPNOTSUPP.
 */
struct gpu_dev {
	struct gpu_cu cu;
	int ordinal;
	CUdevice dev;
	CUcontext cuctx;
	CUmodule mod;
	CUfunction fn[GPU_FN_COUNT];
	CUstream stream;
	int cc_major, cc_minor, sms;
	size_t total_mem;
	char name[96];
	char why[160];
	gpu_log_fn log;
	void *log_arg;
};

/*
 * gpu_dev_open() - load the driver, retain device @ordinal's primary
 *	context, load the embedded kernels, create a stream.
 * Return: 0; -ENODEV no driver or no such device (logged with the reason);
 *	   other -errno from the driver (gpu_cu_errno()).
 */
int gpu_dev_open(int ordinal, gpu_log_fn log, void *log_arg,
		 struct gpu_dev **out);
void gpu_dev_close(struct gpu_dev *d);

/* Make @d's context current on this thread / undo it. */
int gpu_dev_push(struct gpu_dev *d);
void gpu_dev_pop(struct gpu_dev *d);

/*
 * gpu_check() - 0 for CUDA_SUCCESS, else log "@what: NAME" at error level
 *	and return the -errno of @r.
 */
int gpu_check(const struct gpu_dev *d, CUresult r, const char *what);

/* Compute is possible: kernels loaded. Else -EOPNOTSUPP, logged. */
int gpu_dev_compute_ok(const struct gpu_dev *d);

/* ---- experts on the device ---------------------------------------------- */

/*
 * struct gpu_slot - one (layer, expert) of a table. @state is
 * GPU_SLOT_EMPTY or GPU_SLOT_RESIDENT; @refs counts ops that hold @base
 * (gpu_table_get()); eviction clears @state first, then waits for @refs
 * to drain, so a running op never loses its weights.
 */
struct gpu_slot {
	CUdeviceptr base;
	uint32_t state;
	uint32_t refs;
};

#define GPU_SLOT_EMPTY		0u
#define GPU_SLOT_RESIDENT	1u

struct gpu_table {
	struct gpu_dev *d;
	struct gpu_layout lay;
	uint32_t n_layers, n_experts;
	struct gpu_slot *slots;		/* [n_layers * n_experts] */
	uint32_t *layer_count;		/* [n_layers] resident experts */
	uint64_t bytes;			/* device bytes held */
	uint32_t generation;		/* bumped by every upload/evict */
	pthread_mutex_t lock;		/* upload/evict */
	/* upload staging: page-aligned host memory registered with the
	 * driver once (copies from it are DMA), grown, never per expert */
	pthread_mutex_t stage_lock;	/* held from gpu_table_stage() on */
	uint8_t *stage;
	size_t stage_bytes;
};

int gpu_table_create(struct gpu_dev *d, const struct gpu_layout *lay,
		     uint32_t n_layers, uint32_t n_experts,
		     struct gpu_table **out);
/* Frees every expert; no op may hold one. */
void gpu_table_destroy(struct gpu_table *t);

/*
 * gpu_table_upload() - copy one expert in the device layout (@host,
 *	@t->lay.total bytes) to the device and make it resident. Replaces a
 *	resident copy in place: ops that hold the old copy finish on it
 *	(the call waits for them), later ones get the new one; the expert
 *	is never absent in between.
 * Context: any thread; blocks for the copy. Serialised with evictions.
 * Return: 0; -EINVAL out of range; -errno of the driver (-ENOMEM).
 */
int gpu_table_upload(struct gpu_table *t, uint32_t layer, uint32_t expert,
		     const void *host);

/*
 * gpu_table_evict() - make an expert non-resident and free its memory
 *	once no op holds it (waits for them).
 * Return: 0; -ENOENT not resident; -EINVAL out of range.
 */
int gpu_table_evict(struct gpu_table *t, uint32_t layer, uint32_t expert);

/*
 * gpu_table_stage() - take the table's upload staging, at least @bytes of
 *	4 KiB-aligned host memory registered with the driver (grown once
 *	when too small, kept until the table goes), for one expert's source
 *	and device-layout bytes. Held until gpu_table_unstage(): uploads
 *	through it are serialised.
 * Context: any thread; may block for the driver.
 * Return: 0 (*@buf set, staging held); -ENOMEM; -errno of the driver
 *	   (logged); nothing held on an error.
 */
int gpu_table_stage(struct gpu_table *t, size_t bytes, uint8_t **buf);
void gpu_table_unstage(struct gpu_table *t);

/* Resident now (a snapshot). */
bool gpu_table_resident(const struct gpu_table *t, uint32_t layer,
			uint32_t expert);
/* Resident experts of @layer (a snapshot; 0 lets an op skip the GPU). */
uint32_t gpu_table_layer_count(const struct gpu_table *t, uint32_t layer);

/*
 * gpu_table_get() - hold a resident expert for one op: its base address
 *	stays valid until gpu_table_put(). Return: 0; -ENOENT not resident.
 */
int gpu_table_get(struct gpu_table *t, uint32_t layer, uint32_t expert,
		  CUdeviceptr *base);
void gpu_table_put(struct gpu_table *t, uint32_t layer, uint32_t expert);

/* ---- launches (the context must be current) ----------------------------- */

/*
 * gpu_ffn_launch() - enqueue gate+up, down and the per-token reduction of
 *	one op on @s (struct gpu_ffn_args describes the device buffers).
 *	@mma picks the tensor-core tiles (prefill) over the GEMV kernels.
 * Return: 0; -EOPNOTSUPP no kernels; -errno of the driver.
 */
int gpu_ffn_launch(struct gpu_dev *d, enum kt_quant q,
		   const struct gpu_ffn_args *a, uint32_t max_m, uint32_t tokens,
		   bool mma, CUstream s);

/* Measured limits of a device (gpu/limits.c). */
struct gpu_limits {
	double h2d_gbps;
	double d2h_gbps;
	double hbm_gbps;
	double bf16_tflops;
};

/* Copy rates, HBM read rate, dense bf16 mma rate; blocks ~1 s. */
int gpu_measure(struct gpu_dev *d, struct gpu_limits *l);

/* Enqueue kt_combine (struct gpu_combine_args) on @s. */
int gpu_combine_launch(struct gpu_dev *d, const struct gpu_combine_args *c,
		       CUstream s);

#endif /* KT_GPU_GPU_H */
