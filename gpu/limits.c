// SPDX-License-Identifier: MIT
/*
 * limits.c - what this GPU can do at best, measured: pinned copy rates
 * each way, the HBM read rate (a streaming kernel), the dense bf16 tensor
 * rate (an mma loop from registers). The yardsticks of `kt bench --gpu`.
 */
#include <errno.h>
#include <string.h>

#include "gpu/gpu.h"

/* Time @reps enqueues of @what on @s with events; ms per rep. */
struct timer {
	CUevent a, b;
};

static int timer_start(struct gpu_dev *d, struct timer *t, CUstream s)
{
	int ret = gpu_check(d, d->cu.event_create(&t->a, CU_EVENT_DEFAULT),
			    "cuEventCreate");

	if (ret)
		return ret;
	ret = gpu_check(d, d->cu.event_create(&t->b, CU_EVENT_DEFAULT),
			"cuEventCreate");
	if (ret) {
		d->cu.event_destroy(t->a);
		return ret;
	}
	return gpu_check(d, d->cu.event_record(t->a, s), "cuEventRecord");
}

static int timer_stop(struct gpu_dev *d, struct timer *t, CUstream s,
		      float *ms)
{
	int ret = gpu_check(d, d->cu.event_record(t->b, s), "cuEventRecord");

	if (!ret)
		ret = gpu_check(d, d->cu.event_synchronize(t->b),
				"cuEventSynchronize");
	if (!ret)
		ret = gpu_check(d, d->cu.event_elapsed_time(ms, t->a, t->b),
				"cuEventElapsedTime");
	d->cu.event_destroy(t->a);
	d->cu.event_destroy(t->b);
	return ret;
}

int gpu_measure(struct gpu_dev *d, struct gpu_limits *l)
{
	const size_t bytes = 256ull << 20, reps = 8;
	CUstream s = d->stream;
	CUdeviceptr buf = 0, out = 0;
	void *host = NULL;
	struct timer t;
	float ms;
	size_t i;
	int ret;

	memset(l, 0, sizeof(*l));
	ret = gpu_dev_compute_ok(d);
	if (ret)
		return ret;
	ret = gpu_dev_push(d);
	if (ret)
		return ret;
	ret = gpu_check(d, d->cu.mem_alloc(&buf, bytes), "cuMemAlloc");
	if (ret)
		goto out;
	ret = gpu_check(d, d->cu.mem_alloc(&out, 4u << 20), "cuMemAlloc");
	if (ret)
		goto out;
	ret = gpu_check(d, d->cu.mem_alloc_host(&host, bytes),
			"cuMemAllocHost");
	if (ret)
		goto out;
	memset(host, 1, bytes);
	/* warm both directions once, then time each */
	ret = gpu_check(d, d->cu.memcpy_htod_async(buf, host, bytes, s),
			"cuMemcpyHtoDAsync");
	if (!ret)
		ret = gpu_check(d, d->cu.stream_synchronize(s),
				"cuStreamSynchronize");
	if (!ret)
		ret = timer_start(d, &t, s);
	for (i = 0; !ret && i < reps; i++)
		ret = gpu_check(d, d->cu.memcpy_htod_async(buf, host, bytes, s),
				"cuMemcpyHtoDAsync");
	if (!ret)
		ret = timer_stop(d, &t, s, &ms);
	if (ret)
		goto out;
	l->h2d_gbps = bytes * reps / (ms * 1e6);
	ret = timer_start(d, &t, s);
	for (i = 0; !ret && i < reps; i++)
		ret = gpu_check(d, d->cu.memcpy_dtoh_async(host, buf, bytes, s),
				"cuMemcpyDtoHAsync");
	if (!ret)
		ret = timer_stop(d, &t, s, &ms);
	if (ret)
		goto out;
	l->d2h_gbps = bytes * reps / (ms * 1e6);
	{
		size_t n = bytes / 16;
		void *params[] = { &buf, &n, &out };
		unsigned int grid = (unsigned int)d->sms * 8;

		ret = timer_start(d, &t, s);
		for (i = 0; !ret && i < reps + 1; i++)
			ret = gpu_check(d, d->cu.launch_kernel(
					d->fn[GPU_FN_READ_BW], grid, 1, 1, 512,
					1, 1, 0, s, params, NULL),
					"launch read_bw");
		if (!ret)
			ret = timer_stop(d, &t, s, &ms);
		if (ret)
			goto out;
		l->hbm_gbps = bytes * (reps + 1) / (ms * 1e6);
	}
	{
		int iters = 4096;
		void *params[] = { &out, &iters };
		unsigned int grid = (unsigned int)d->sms * 4, block = 256;

		ret = timer_start(d, &t, s);
		if (!ret)
			ret = gpu_check(d, d->cu.launch_kernel(
					d->fn[GPU_FN_MMA_PEAK], grid, 1, 1,
					block, 1, 1, 0, s, params, NULL),
					"launch mma_peak");
		if (!ret)
			ret = timer_stop(d, &t, s, &ms);
		if (ret)
			goto out;
		/* per warp and iteration: 8 mma of 16 x 8 x 16, 2 flops each */
		l->bf16_tflops = (double)grid * (block / 32) * iters * 8 *
			(16.0 * 8 * 16 * 2) / (ms * 1e9);
	}
out:
	if (host)
		d->cu.mem_free_host(host);
	if (out)
		d->cu.mem_free(out);
	if (buf)
		d->cu.mem_free(buf);
	gpu_dev_pop(d);
	return ret;
}
