// SPDX-License-Identifier: MIT
/*
 * dev.c - one GPU opened for a context: the driver, the device's primary
 * context, the embedded kernels (cuModuleLoadData) and kt's stream.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"

static const char *const fn_names[GPU_FN_COUNT] = {
	[GPU_FN_GU_GEMV_INT8] = "kt_gu_gemv_int8",
	[GPU_FN_GU_GEMV_INT4] = "kt_gu_gemv_int4",
	[GPU_FN_GU_GEMV_BF16] = "kt_gu_gemv_bf16",
	[GPU_FN_DOWN_GEMV_INT8] = "kt_down_gemv_int8",
	[GPU_FN_DOWN_GEMV_INT4] = "kt_down_gemv_int4",
	[GPU_FN_DOWN_GEMV_BF16] = "kt_down_gemv_bf16",
	[GPU_FN_GU_MMA_INT8] = "kt_gu_mma_int8",
	[GPU_FN_GU_MMA_INT4] = "kt_gu_mma_int4",
	[GPU_FN_GU_MMA_BF16] = "kt_gu_mma_bf16",
	[GPU_FN_DOWN_MMA_INT8] = "kt_down_mma_int8",
	[GPU_FN_DOWN_MMA_INT4] = "kt_down_mma_int4",
	[GPU_FN_DOWN_MMA_BF16] = "kt_down_mma_bf16",
	[GPU_FN_REDUCE] = "kt_reduce",
	[GPU_FN_COMBINE] = "kt_combine",
	[GPU_FN_MMA_PEAK] = "kt_mma_peak",
	[GPU_FN_READ_BW] = "kt_read_bw",
};

static void dev_log(const struct gpu_dev *d, enum kt_log_level level,
		    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void dev_log(const struct gpu_dev *d, enum kt_log_level level,
		    const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (!d->log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	d->log(d->log_arg, level, msg);
}

int gpu_check(const struct gpu_dev *d, CUresult r, const char *what)
{
	if (r == CUDA_SUCCESS)
		return 0;
	dev_log(d, KT_LOG_ERROR, "gpu %d: %s: %s", d->ordinal, what,
		gpu_cu_name(&d->cu, r));
	return gpu_cu_errno(r);
}

int gpu_dev_push(struct gpu_dev *d)
{
	return gpu_check(d, d->cu.ctx_push(d->cuctx), "cuCtxPushCurrent");
}

void gpu_dev_pop(struct gpu_dev *d)
{
	CUcontext c;

	gpu_check(d, d->cu.ctx_pop(&c), "cuCtxPopCurrent");
}

int gpu_dev_compute_ok(const struct gpu_dev *d)
{
	if (d->mod)
		return 0;
	dev_log(d, KT_LOG_ERROR, "gpu %d: no kernels: %s", d->ordinal, d->why);
	return -EOPNOTSUPP;
}

/* The embedded kernels; their absence is an answer, not a failure. */
static int dev_load_module(struct gpu_dev *d)
{
	size_t bytes, i;
	const void *img = gpu_fatbin(&bytes);
	CUresult r;

	if (!img) {
		snprintf(d->why, sizeof(d->why),
			 "this kt was built without nvcc (no device kernels)");
		dev_log(d, KT_LOG_WARN, "gpu %d: %s", d->ordinal, d->why);
		return 0;
	}
	r = d->cu.module_load_data(&d->mod, img);
	if (r) {
		snprintf(d->why, sizeof(d->why),
			 "the driver refused kt's kernels for sm_%d%d: %s",
			 d->cc_major, d->cc_minor, gpu_cu_name(&d->cu, r));
		dev_log(d, KT_LOG_WARN, "gpu %d: %s", d->ordinal, d->why);
		d->mod = NULL;
		return gpu_cu_errno(r) == -ENOMEM ? -ENOMEM : 0;
	}
	for (i = 0; i < GPU_FN_COUNT; i++) {
		r = d->cu.module_get_function(&d->fn[i], d->mod, fn_names[i]);
		if (r) {
			snprintf(d->why, sizeof(d->why),
				 "kernel %s missing from the fatbin: %s",
				 fn_names[i], gpu_cu_name(&d->cu, r));
			dev_log(d, KT_LOG_WARN, "gpu %d: %s", d->ordinal,
				d->why);
			d->cu.module_unload(d->mod);
			d->mod = NULL;
			return 0;
		}
	}
	return 0;
}

int gpu_dev_open(int ordinal, gpu_log_fn log, void *log_arg,
		 struct gpu_dev **out)
{
	struct gpu_dev *d;
	int n = 0, ret;
	CUresult r;

	*out = NULL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->ordinal = ordinal;
	d->log = log;
	d->log_arg = log_arg;
	ret = gpu_cu_load(&d->cu, d->why, sizeof(d->why));
	if (ret) {
		dev_log(d, KT_LOG_ERROR, "gpu %d: %s", ordinal, d->why);
		free(d);
		return ret;
	}
	ret = gpu_check(d, d->cu.init(0), "cuInit");
	if (ret)
		goto err_unload;
	ret = gpu_check(d, d->cu.device_get_count(&n), "cuDeviceGetCount");
	if (ret)
		goto err_unload;
	if (ordinal < 0 || ordinal >= n) {
		dev_log(d, KT_LOG_ERROR,
			"gpu %d: no such device (the driver reports %d)",
			ordinal, n);
		ret = -ENODEV;
		goto err_unload;
	}
	ret = gpu_check(d, d->cu.device_get(&d->dev, ordinal), "cuDeviceGet");
	if (ret)
		goto err_unload;
	if (d->cu.device_get_name(d->name, sizeof(d->name), d->dev))
		snprintf(d->name, sizeof(d->name), "GPU %d", ordinal);
	r = d->cu.device_get_attribute(&d->cc_major,
			CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
	if (!r)
		r = d->cu.device_get_attribute(&d->cc_minor,
			CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev);
	if (!r)
		r = d->cu.device_get_attribute(&d->sms,
			CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev);
	if (!r)
		r = d->cu.device_total_mem(&d->total_mem, d->dev);
	ret = gpu_check(d, r, "device attributes");
	if (ret)
		goto err_unload;
	ret = gpu_check(d, d->cu.primary_ctx_retain(&d->cuctx, d->dev),
			"cuDevicePrimaryCtxRetain");
	if (ret)
		goto err_unload;
	ret = gpu_dev_push(d);
	if (ret)
		goto err_release;
	ret = dev_load_module(d);
	if (ret)
		goto err_pop;
	ret = gpu_check(d, d->cu.stream_create(&d->stream,
					       CU_STREAM_NON_BLOCKING),
			"cuStreamCreate");
	if (ret)
		goto err_module;
	gpu_dev_pop(d);
	dev_log(d, KT_LOG_INFO, "gpu %d: %s, sm_%d%d, %d SMs, %zu MiB%s",
		ordinal, d->name, d->cc_major, d->cc_minor, d->sms,
		d->total_mem >> 20, d->mod ? "" : " (no kernels)");
	*out = d;
	return 0;

err_module:
	if (d->mod)
		d->cu.module_unload(d->mod);
err_pop:
	gpu_dev_pop(d);
err_release:
	d->cu.primary_ctx_release(d->dev);
err_unload:
	gpu_cu_unload(&d->cu);
	free(d);
	return ret;
}

void gpu_dev_close(struct gpu_dev *d)
{
	int pushed;

	if (!d)
		return;
	/* a failed push is logged; the handles are released regardless,
	 * as they name their context themselves */
	pushed = !gpu_dev_push(d);
	gpu_check(d, d->cu.stream_synchronize(d->stream),
		  "cuStreamSynchronize");
	gpu_check(d, d->cu.stream_destroy(d->stream), "cuStreamDestroy");
	if (d->mod)
		gpu_check(d, d->cu.module_unload(d->mod), "cuModuleUnload");
	if (pushed)
		gpu_dev_pop(d);
	gpu_check(d, d->cu.primary_ctx_release(d->dev),
		  "cuDevicePrimaryCtxRelease");
	gpu_cu_unload(&d->cu);
	free(d);
}
