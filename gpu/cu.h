/* SPDX-License-Identifier: MIT */
/*
 * cu.h - the slice of the CUDA driver API kt calls, declared here with the
 * ABI of cuda.h (the values are the driver's), so that kt builds where no
 * toolkit is installed; every function is reached through struct gpu_cu.
 */
#ifndef KT_GPU_CU_H
#define KT_GPU_CU_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;			/* enum cudaError_enum */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;	/* CUdeviceptr_v2 */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef void (*CUhostFn)(void *userData);

#define CUDA_SUCCESS				0
#define CUDA_ERROR_INVALID_VALUE		1
#define CUDA_ERROR_OUT_OF_MEMORY		2
#define CUDA_ERROR_NOT_INITIALIZED		3
#define CUDA_ERROR_NO_DEVICE			100
#define CUDA_ERROR_INVALID_DEVICE		101
#define CUDA_ERROR_NOT_FOUND			500
#define CUDA_ERROR_NOT_READY			600
#define CUDA_ERROR_LAUNCH_FAILED		719
#define CUDA_ERROR_NOT_SUPPORTED		801

#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT		16
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR		75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR		76
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN	97
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES		8
#define CU_STREAM_NON_BLOCKING			0x1
#define CU_EVENT_DEFAULT			0x0
#define CU_EVENT_DISABLE_TIMING			0x2
#define CU_MEMHOSTREGISTER_PORTABLE		0x01
#define CU_MEMHOSTALLOC_PORTABLE		0x01

/*
 * struct gpu_cu - libcuda.so.1 opened with dlopen and the entry points kt
 * uses, resolved by name (the _v2 name where the driver has one). The
 * optional ones may be NULL: get_error_name, get_error_string.
 */
struct gpu_cu {
	void *dl;
	CUresult (*init)(unsigned int flags);
	CUresult (*driver_get_version)(int *v);
	CUresult (*device_get_count)(int *n);
	CUresult (*device_get)(CUdevice *d, int ordinal);
	CUresult (*device_get_name)(char *name, int len, CUdevice d);
	CUresult (*device_get_attribute)(int *v, int attr, CUdevice d);
	CUresult (*device_total_mem)(size_t *bytes, CUdevice d);
	CUresult (*primary_ctx_retain)(CUcontext *c, CUdevice d);
	CUresult (*primary_ctx_release)(CUdevice d);
	CUresult (*ctx_push)(CUcontext c);
	CUresult (*ctx_pop)(CUcontext *c);
	CUresult (*module_load_data)(CUmodule *m, const void *image);
	CUresult (*module_unload)(CUmodule m);
	CUresult (*module_get_function)(CUfunction *f, CUmodule m,
					const char *name);
	CUresult (*func_set_attribute)(CUfunction f, int attr, int v);
	CUresult (*mem_alloc)(CUdeviceptr *p, size_t bytes);
	CUresult (*mem_free)(CUdeviceptr p);
	CUresult (*mem_alloc_host)(void **p, size_t bytes);
	CUresult (*mem_free_host)(void *p);
	CUresult (*mem_host_register)(void *p, size_t bytes,
				      unsigned int flags);
	CUresult (*mem_host_unregister)(void *p);
	CUresult (*memcpy_htod)(CUdeviceptr dst, const void *src,
				size_t bytes);
	CUresult (*memcpy_dtoh)(void *dst, CUdeviceptr src, size_t bytes);
	CUresult (*memcpy_htod_async)(CUdeviceptr dst, const void *src,
				      size_t bytes, CUstream s);
	CUresult (*memcpy_dtoh_async)(void *dst, CUdeviceptr src,
				      size_t bytes, CUstream s);
	CUresult (*memcpy_dtod_async)(CUdeviceptr dst, CUdeviceptr src,
				      size_t bytes, CUstream s);
	CUresult (*memset_d32_async)(CUdeviceptr dst, unsigned int v,
				     size_t n, CUstream s);
	CUresult (*stream_create)(CUstream *s, unsigned int flags);
	CUresult (*stream_destroy)(CUstream s);
	CUresult (*stream_synchronize)(CUstream s);
	CUresult (*stream_wait_event)(CUstream s, CUevent e,
				      unsigned int flags);
	CUresult (*event_create)(CUevent *e, unsigned int flags);
	CUresult (*event_destroy)(CUevent e);
	CUresult (*event_record)(CUevent e, CUstream s);
	CUresult (*event_synchronize)(CUevent e);
	CUresult (*event_elapsed_time)(float *ms, CUevent a, CUevent b);
	CUresult (*launch_kernel)(CUfunction f, unsigned int gx,
				  unsigned int gy, unsigned int gz,
				  unsigned int bx, unsigned int by,
				  unsigned int bz, unsigned int shmem,
				  CUstream s, void **params, void **extra);
	CUresult (*launch_host_func)(CUstream s, CUhostFn fn, void *arg);
	CUresult (*get_error_name)(CUresult r, const char **s);
	CUresult (*get_error_string)(CUresult r, const char **s);
};

/* The library dlopen opens: $KT_CUDA_LIB, else libcuda.so.1. */
const char *gpu_cu_path(void);

/*
 * gpu_cu_load() - dlopen the driver and resolve every entry point.
 * @cu: filled on success; release with gpu_cu_unload().
 * @why: on failure, a sentence saying what is missing.
 * Return: 0; -ENODEV no library; -EOPNOTSUPP a required symbol is missing.
 */
int gpu_cu_load(struct gpu_cu *cu, char *why, size_t why_len);
void gpu_cu_unload(struct gpu_cu *cu);

/* -errno of a CUresult (0 for CUDA_SUCCESS); one table for all of kt. */
int gpu_cu_errno(CUresult r);

/*
 * "CUDA_ERROR_OUT_OF_MEMORY (out of memory)": the driver's own name and
 * text where it offers them, else the table's. Never NULL.
 */
const char *gpu_cu_name(const struct gpu_cu *cu, CUresult r);

#endif /* KT_GPU_CU_H */
