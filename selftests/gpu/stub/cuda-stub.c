// SPDX-License-Identifier: MIT
/*
 * cuda-stub.c - a stand-in libcuda.so.1 for the gpu selftests: the entry
 * points kt resolves, on host memory, streams run at enqueue time, kt's
 * kernels done on the CPU in f32; it counts calls and live handles and
 * fails call number N on request (cuStubSetFailAt, or KT_CUDA_STUB_FAIL).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cu.h"
#include "gpu/ffn-abi.h"
#include "gpu/layout.h"

#define EXPORT __attribute__((visibility("default")))

static long calls, fail_at = -1, live, launches;
static int devices = 1;

__attribute__((constructor)) static void stub_init(void)
{
	const char *f = getenv("KT_CUDA_STUB_FAIL");
	const char *d = getenv("KT_CUDA_STUB_DEVICES");

	if (f && *f)
		fail_at = atol(f);
	if (d && *d)
		devices = atoi(d);
}

/* Every entry point: count the call; fail it with @err when it is the one. */
static int enter(CUresult err)
{
	long n = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);

	return n == fail_at ? err : 0;
}

#define ENTER(err) do { CUresult r_ = enter(err); if (r_) return r_; } while (0)

static void live_add(long v)
{
	__atomic_add_fetch(&live, v, __ATOMIC_SEQ_CST);
}

/* ---- test controls ---------------------------------------------------- */

EXPORT void cuStubSetFailAt(long n) { fail_at = n; calls = 0; }
EXPORT long cuStubCalls(void) { return calls; }
EXPORT long cuStubLive(void) { return live; }
EXPORT long cuStubLaunches(void) { return launches; }

/* ---- the driver ----------------------------------------------------------- */

EXPORT CUresult cuInit(unsigned int f) { ENTER(CUDA_ERROR_NO_DEVICE); return 0; }
EXPORT CUresult cuDriverGetVersion(int *v)
{ ENTER(CUDA_ERROR_INVALID_VALUE); *v = 12080; return 0; }
EXPORT CUresult cuDeviceGetCount(int *n)
{ ENTER(CUDA_ERROR_INVALID_VALUE); *n = devices; return 0; }
EXPORT CUresult cuDeviceGet(CUdevice *d, int o)
{
	ENTER(CUDA_ERROR_INVALID_DEVICE);
	if (o < 0 || o >= devices)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = o;
	return 0;
}
EXPORT CUresult cuDeviceGetName(char *s, int len, CUdevice d)
{ ENTER(CUDA_ERROR_INVALID_VALUE); snprintf(s, len, "kt stub GPU"); return 0; }
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
	ENTER(CUDA_ERROR_INVALID_VALUE);
	*v = attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 :
	     attr == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? 4 : 0;
	return 0;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d)
{ ENTER(CUDA_ERROR_INVALID_VALUE); *b = 1ull << 34; return 0; }
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	ENTER(CUDA_ERROR_OUT_OF_MEMORY);
	*c = (CUcontext)(uintptr_t)(0x1000 + d);
	live_add(1);
	return 0;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{ live_add(-1); ENTER(CUDA_ERROR_INVALID_DEVICE); return 0; }
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c)
{ ENTER(201 /* INVALID_CONTEXT */); return 0; }
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c)
{ ENTER(CUDA_ERROR_INVALID_VALUE); if (c) *c = NULL; return 0; }

struct stub_fn {
	char name[64];
};

EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *img)
{
	ENTER(209 /* NO_BINARY_FOR_GPU */);
	*m = malloc(16);
	live_add(1);
	return 0;
}
EXPORT CUresult cuModuleUnload(CUmodule m)
{ free(m); live_add(-1); ENTER(CUDA_ERROR_INVALID_VALUE); return 0; }

/* Functions live as long as the module; the stub keeps a fixed pool. */
static struct stub_fn fns[64];
static int n_fns;

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *n)
{
	int i;

	ENTER(CUDA_ERROR_NOT_FOUND);
	if (strncmp(n, "kt_", 3))
		return CUDA_ERROR_NOT_FOUND;
	for (i = 0; i < n_fns; i++)
		if (!strcmp(fns[i].name, n))
			break;
	if (i == n_fns) {
		if (n_fns == 64)
			return CUDA_ERROR_OUT_OF_MEMORY;
		snprintf(fns[n_fns++].name, sizeof(fns[0].name), "%s", n);
	}
	*f = (CUfunction)&fns[i];
	return 0;
}
EXPORT CUresult cuFuncSetAttribute(CUfunction f, int a, int v)
{ ENTER(CUDA_ERROR_INVALID_VALUE); return 0; }

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t b)
{
	void *q;

	ENTER(CUDA_ERROR_OUT_OF_MEMORY);
	q = malloc(b ? b : 1);
	if (!q)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* garbage, as on a device: kt must write what it reads */
	memset(q, 0x7f, b);
	*p = (CUdeviceptr)(uintptr_t)q;
	live_add(1);
	return 0;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	free((void *)(uintptr_t)p);
	live_add(-1);
	ENTER(CUDA_ERROR_INVALID_VALUE);
	return 0;
}
EXPORT CUresult cuMemAllocHost_v2(void **p, size_t b)
{
	ENTER(CUDA_ERROR_OUT_OF_MEMORY);
	*p = malloc(b ? b : 1);
	if (!*p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	live_add(1);
	return 0;
}
EXPORT CUresult cuMemFreeHost(void *p)
{ free(p); live_add(-1); ENTER(CUDA_ERROR_INVALID_VALUE); return 0; }
EXPORT CUresult cuMemHostRegister_v2(void *p, size_t b, unsigned int f)
{ ENTER(CUDA_ERROR_OUT_OF_MEMORY); live_add(1); return 0; }
EXPORT CUresult cuMemHostUnregister(void *p)
{ live_add(-1); ENTER(CUDA_ERROR_INVALID_VALUE); return 0; }

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t b)
{ ENTER(CUDA_ERROR_INVALID_VALUE); memcpy((void *)(uintptr_t)d, s, b); return 0; }
EXPORT CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t b)
{ ENTER(CUDA_ERROR_INVALID_VALUE); memcpy(d, (void *)(uintptr_t)s, b); return 0; }
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t b,
				     CUstream st)
{ ENTER(CUDA_ERROR_INVALID_VALUE); memcpy((void *)(uintptr_t)d, s, b); return 0; }
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t b,
				     CUstream st)
{ ENTER(CUDA_ERROR_INVALID_VALUE); memcpy(d, (void *)(uintptr_t)s, b); return 0; }
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t b,
				     CUstream st)
{
	ENTER(CUDA_ERROR_INVALID_VALUE);
	memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, b);
	return 0;
}
EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n,
				 CUstream st)
{
	uint32_t *p = (uint32_t *)(uintptr_t)d;
	size_t i;

	ENTER(CUDA_ERROR_INVALID_VALUE);
	for (i = 0; i < n; i++)
		p[i] = v;
	return 0;
}

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int f)
{ ENTER(CUDA_ERROR_OUT_OF_MEMORY); *s = malloc(8); live_add(1); return 0; }
EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{ free(s); live_add(-1); ENTER(CUDA_ERROR_INVALID_VALUE); return 0; }
EXPORT CUresult cuStreamSynchronize(CUstream s)
{ ENTER(CUDA_ERROR_LAUNCH_FAILED); return 0; }
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int f)
{ ENTER(CUDA_ERROR_INVALID_VALUE); return 0; }
EXPORT CUresult cuEventCreate(CUevent *e, unsigned int f)
{ ENTER(CUDA_ERROR_OUT_OF_MEMORY); *e = malloc(8); live_add(1); return 0; }
EXPORT CUresult cuEventDestroy_v2(CUevent e)
{ free(e); live_add(-1); ENTER(CUDA_ERROR_INVALID_VALUE); return 0; }
EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{ ENTER(CUDA_ERROR_INVALID_VALUE); return 0; }
EXPORT CUresult cuEventSynchronize(CUevent e)
{ ENTER(CUDA_ERROR_LAUNCH_FAILED); return 0; }
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{ ENTER(CUDA_ERROR_INVALID_VALUE); *ms = 1.0f; return 0; }
#ifndef STUB_OLD	/* the old-driver build lacks this entry point */
EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *arg)
{ ENTER(CUDA_ERROR_INVALID_VALUE); fn(arg); return 0; }
#endif

EXPORT CUresult cuGetErrorName(CUresult r, const char **s)
{
	if (r == CUDA_ERROR_OUT_OF_MEMORY) {
		*s = "CUDA_ERROR_OUT_OF_MEMORY";
		return 0;
	}
	return CUDA_ERROR_INVALID_VALUE;	/* kt falls back to its table */
}

/* ---- kt's kernels, on the host ---------------------------------------- */

static float bf16f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static float f32_to_bf16f(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
	memcpy(&f, &u, 4);
	return f;
}

/* Element (n, k) of a device-layout matrix [N][K], dequantized. */
static float wget(int q, uint64_t w, uint64_t s, uint32_t K, uint32_t G,
		  uint32_t n, uint32_t k)
{
	const uint8_t *p = (const uint8_t *)(uintptr_t)w;
	const float *sc = (const float *)(uintptr_t)s;

	if (q == GPU_Q_INT8)
		return (float)(int8_t)p[(size_t)n * K + k] * sc[n];
	if (q == GPU_Q_INT4) {
		uint8_t b = p[((size_t)n * K + k) / 2];
		int nib = k % 2 ? b >> 4 : b & 15;

		return (float)(nib - 8) * sc[(size_t)n * (K / G) + k / G];
	}
	return bf16f(((const uint16_t *)p)[(size_t)n * K + k]);
}

static float xget(const struct gpu_ffn_args *a, uint32_t t, uint32_t k)
{
	if (a->x_bf16)
		return bf16f(((const uint16_t *)(uintptr_t)a->x)[(size_t)t * a->H + k]);
	return ((const float *)(uintptr_t)a->x)[(size_t)t * a->H + k];
}

static void host_gate_up(int q, const struct gpu_ffn_args *a)
{
	const struct gpu_group *g = (const void *)(uintptr_t)a->groups;
	const int32_t *tok = (const void *)(uintptr_t)a->slot_tok;
	float *act = (float *)(uintptr_t)a->a;
	uint32_t i, s, n, k;

	for (i = 0; i < a->n_groups; i++)
		for (s = g[i].slot0; s < g[i].slot0 + g[i].m; s++)
			for (n = 0; n < a->I; n++) {
				float gs = 0, us = 0;

				for (k = 0; k < a->H; k++) {
					float x = xget(a, tok[s], k);

					gs += wget(q, g[i].w[0], g[i].s[0], a->H,
						   a->group, n, k) * x;
					us += wget(q, g[i].w[1], g[i].s[1], a->H,
						   a->group, n, k) * x;
				}
				act[(size_t)s * a->I + n] =
					gs / (1.0f + expf(-gs)) * us;
			}
}

static void host_down(int q, const struct gpu_ffn_args *a)
{
	const struct gpu_group *g = (const void *)(uintptr_t)a->groups;
	const float *act = (const float *)(uintptr_t)a->a;
	const float *sw = (const float *)(uintptr_t)a->slot_w;
	float *yp = (float *)(uintptr_t)a->ypart;
	uint32_t i, s, n, k;

	for (i = 0; i < a->n_groups; i++)
		for (s = g[i].slot0; s < g[i].slot0 + g[i].m; s++)
			for (n = 0; n < a->H; n++) {
				float d = 0;

				for (k = 0; k < a->I; k++)
					d += wget(q, g[i].w[2], g[i].s[2],
						  a->I, a->group, n, k) *
					     act[(size_t)s * a->I + k];
				yp[(size_t)s * a->H + n] = d * sw[s];
			}
}

static void host_reduce(const struct gpu_ffn_args *a)
{
	const int32_t *ts = (const void *)(uintptr_t)a->tok_slot;
	const float *yp = (const float *)(uintptr_t)a->ypart;
	float *y = (float *)(uintptr_t)a->y;
	uint32_t t, j, h;

	for (t = 0; t < a->tokens; t++)
		for (h = 0; h < a->H; h++) {
			float s = 0;

			for (j = 0; j < a->top_k; j++)
				if (ts[t * a->top_k + j] >= 0)
					s += yp[(size_t)ts[t * a->top_k + j] *
						a->H + h];
			y[(size_t)t * a->H + h] = s;
		}
}

static void host_combine(const struct gpu_combine_args *c)
{
	uint32_t n = c->count ? *(const uint32_t *)(uintptr_t)c->count * c->H :
		     c->n, i;

	for (i = 0; i < n && i < c->n; i++) {
		float v = (c->ya ? ((const float *)(uintptr_t)c->ya)[i] : 0) +
			  (c->yb ? ((const float *)(uintptr_t)c->yb)[i] : 0);

		if (c->y_bf16) {
			uint16_t *y = (uint16_t *)(uintptr_t)c->y;
			uint32_t u;
			float r;

			if (c->acc)
				v += bf16f(y[i]);
			r = f32_to_bf16f(v);
			memcpy(&u, &r, 4);
			y[i] = (uint16_t)(u >> 16);
		} else {
			float *y = (float *)(uintptr_t)c->y;

			y[i] = c->acc ? y[i] + v : v;
		}
	}
}

static int quant_of(const char *name)
{
	if (strstr(name, "int8"))
		return GPU_Q_INT8;
	if (strstr(name, "int4"))
		return GPU_Q_INT4;
	return GPU_Q_BF16;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy,
			       unsigned int gz, unsigned int bx,
			       unsigned int by, unsigned int bz,
			       unsigned int shmem, CUstream s, void **params,
			       void **extra)
{
	const char *name = ((const struct stub_fn *)f)->name;

	ENTER(CUDA_ERROR_LAUNCH_FAILED);
	__atomic_add_fetch(&launches, 1, __ATOMIC_SEQ_CST);
	if (!strncmp(name, "kt_gu_", 6))
		host_gate_up(quant_of(name), params[0]);
	else if (!strncmp(name, "kt_down_", 8))
		host_down(quant_of(name), params[0]);
	else if (!strcmp(name, "kt_reduce"))
		host_reduce(params[0]);
	else if (!strcmp(name, "kt_combine"))
		host_combine(params[0]);
	return 0;
}
