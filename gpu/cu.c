// SPDX-License-Identifier: MIT
/*
 * cu.c - libcuda.so.1 opened with dlopen: every entry point kt calls
 * resolved by name, and the one table from CUresult to -errno.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cu.h"

#define CU_LIB_DEFAULT	"libcuda.so.1"

/*
 * Entry points: the versioned name first (what cuda.h's macros call), the
 * plain one for drivers older than that version.
 */
static const struct cu_sym {
	const char *name;
	const char *fallback;
	size_t off;
	int optional;
} cu_syms[] = {
#define SYM(field, name, fb, opt) { name, fb, offsetof(struct gpu_cu, field), opt }
	SYM(init, "cuInit", NULL, 0),
	SYM(driver_get_version, "cuDriverGetVersion", NULL, 0),
	SYM(device_get_count, "cuDeviceGetCount", NULL, 0),
	SYM(device_get, "cuDeviceGet", NULL, 0),
	SYM(device_get_name, "cuDeviceGetName", NULL, 0),
	SYM(device_get_attribute, "cuDeviceGetAttribute", NULL, 0),
	SYM(device_total_mem, "cuDeviceTotalMem_v2", NULL, 0),
	SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain", NULL, 0),
	SYM(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2",
	    "cuDevicePrimaryCtxRelease", 0),
	SYM(ctx_push, "cuCtxPushCurrent_v2", NULL, 0),
	SYM(ctx_pop, "cuCtxPopCurrent_v2", NULL, 0),
	SYM(module_load_data, "cuModuleLoadData", NULL, 0),
	SYM(module_unload, "cuModuleUnload", NULL, 0),
	SYM(module_get_function, "cuModuleGetFunction", NULL, 0),
	SYM(func_set_attribute, "cuFuncSetAttribute", NULL, 0),
	SYM(mem_alloc, "cuMemAlloc_v2", NULL, 0),
	SYM(mem_free, "cuMemFree_v2", NULL, 0),
	SYM(mem_alloc_host, "cuMemAllocHost_v2", NULL, 0),
	SYM(mem_free_host, "cuMemFreeHost", NULL, 0),
	SYM(mem_host_register, "cuMemHostRegister_v2", NULL, 0),
	SYM(mem_host_unregister, "cuMemHostUnregister", NULL, 0),
	SYM(memcpy_htod, "cuMemcpyHtoD_v2", NULL, 0),
	SYM(memcpy_dtoh, "cuMemcpyDtoH_v2", NULL, 0),
	SYM(memcpy_htod_async, "cuMemcpyHtoDAsync_v2", NULL, 0),
	SYM(memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2", NULL, 0),
	SYM(memcpy_dtod_async, "cuMemcpyDtoDAsync_v2", NULL, 0),
	SYM(memset_d32_async, "cuMemsetD32Async", NULL, 0),
	SYM(stream_create, "cuStreamCreate", NULL, 0),
	SYM(stream_destroy, "cuStreamDestroy_v2", NULL, 0),
	SYM(stream_synchronize, "cuStreamSynchronize", NULL, 0),
	SYM(stream_wait_event, "cuStreamWaitEvent", NULL, 0),
	SYM(event_create, "cuEventCreate", NULL, 0),
	SYM(event_destroy, "cuEventDestroy_v2", NULL, 0),
	SYM(event_record, "cuEventRecord", NULL, 0),
	SYM(event_synchronize, "cuEventSynchronize", NULL, 0),
	SYM(event_elapsed_time, "cuEventElapsedTime_v2",
	    "cuEventElapsedTime", 0),
	SYM(launch_kernel, "cuLaunchKernel", NULL, 0),
	SYM(launch_host_func, "cuLaunchHostFunc", NULL, 0),
	SYM(get_error_name, "cuGetErrorName", NULL, 1),
	SYM(get_error_string, "cuGetErrorString", NULL, 1),
#undef SYM
};

const char *gpu_cu_path(void)
{
	const char *env = getenv("KT_CUDA_LIB");

	return env && *env ? env : CU_LIB_DEFAULT;
}

int gpu_cu_load(struct gpu_cu *cu, char *why, size_t why_len)
{
	const char *path = gpu_cu_path();
	size_t i;

	memset(cu, 0, sizeof(*cu));
	cu->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!cu->dl) {
		const char *e = dlerror();

		snprintf(why, why_len, "no CUDA driver: cannot load %s (%s)",
			 path, e ? e : "not found");
		return -ENODEV;
	}
	for (i = 0; i < sizeof(cu_syms) / sizeof(cu_syms[0]); i++) {
		const struct cu_sym *s = &cu_syms[i];
		void *f = dlsym(cu->dl, s->name);

		if (!f && s->fallback)
			f = dlsym(cu->dl, s->fallback);
		if (!f && !s->optional) {
			snprintf(why, why_len,
				 "CUDA driver %s lacks %s (driver too old?)",
				 path, s->name);
			dlclose(cu->dl);
			memset(cu, 0, sizeof(*cu));
			return -EOPNOTSUPP;
		}
		memcpy((char *)cu + s->off, &f, sizeof(f));
	}
	return 0;
}

void gpu_cu_unload(struct gpu_cu *cu)
{
	if (cu->dl)
		dlclose(cu->dl);
	memset(cu, 0, sizeof(*cu));
}

/* The one translation table: driver result -> errno and a name. */
static const struct cu_err {
	CUresult r;
	int err;
	const char *name;
} cu_errs[] = {
	{ 1, EINVAL, "CUDA_ERROR_INVALID_VALUE" },
	{ 2, ENOMEM, "CUDA_ERROR_OUT_OF_MEMORY" },
	{ 3, ENODEV, "CUDA_ERROR_NOT_INITIALIZED" },
	{ 4, ENODEV, "CUDA_ERROR_DEINITIALIZED" },
	{ 34, ENODEV, "CUDA_ERROR_STUB_LIBRARY" },
	{ 35, EOPNOTSUPP, "CUDA_ERROR_INSUFFICIENT_DRIVER" },
	{ 36, EOPNOTSUPP, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER" },
	{ 46, EBUSY, "CUDA_ERROR_DEVICE_UNAVAILABLE" },
	{ 100, ENODEV, "CUDA_ERROR_NO_DEVICE" },
	{ 101, ENODEV, "CUDA_ERROR_INVALID_DEVICE" },
	{ 102, ENODEV, "CUDA_ERROR_DEVICE_NOT_LICENSED" },
	{ 200, EINVAL, "CUDA_ERROR_INVALID_IMAGE" },
	{ 201, EINVAL, "CUDA_ERROR_INVALID_CONTEXT" },
	{ 205, ENOMEM, "CUDA_ERROR_MAP_FAILED" },
	{ 209, EOPNOTSUPP, "CUDA_ERROR_NO_BINARY_FOR_GPU" },
	{ 214, EIO, "CUDA_ERROR_ECC_UNCORRECTABLE" },
	{ 216, EBUSY, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE" },
	{ 218, EOPNOTSUPP, "CUDA_ERROR_INVALID_PTX" },
	{ 221, EOPNOTSUPP, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND" },
	{ 222, EOPNOTSUPP, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" },
	{ 223, EOPNOTSUPP, "CUDA_ERROR_JIT_COMPILATION_DISABLED" },
	{ 400, EINVAL, "CUDA_ERROR_INVALID_HANDLE" },
	{ 401, EINVAL, "CUDA_ERROR_ILLEGAL_STATE" },
	{ 500, ENOENT, "CUDA_ERROR_NOT_FOUND" },
	{ 600, EAGAIN, "CUDA_ERROR_NOT_READY" },
	{ 700, EFAULT, "CUDA_ERROR_ILLEGAL_ADDRESS" },
	{ 701, ENOSPC, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" },
	{ 702, ETIME, "CUDA_ERROR_LAUNCH_TIMEOUT" },
	{ 709, ENODEV, "CUDA_ERROR_CONTEXT_IS_DESTROYED" },
	{ 710, EIO, "CUDA_ERROR_ASSERT" },
	{ 712, EEXIST, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED" },
	{ 713, ENOENT, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED" },
	{ 714, EIO, "CUDA_ERROR_HARDWARE_STACK_ERROR" },
	{ 715, EIO, "CUDA_ERROR_ILLEGAL_INSTRUCTION" },
	{ 716, EFAULT, "CUDA_ERROR_MISALIGNED_ADDRESS" },
	{ 719, EIO, "CUDA_ERROR_LAUNCH_FAILED" },
	{ 800, EPERM, "CUDA_ERROR_NOT_PERMITTED" },
	{ 801, EOPNOTSUPP, "CUDA_ERROR_NOT_SUPPORTED" },
	{ 802, ENODEV, "CUDA_ERROR_SYSTEM_NOT_READY" },
	{ 803, ENODEV, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" },
	{ 804, EOPNOTSUPP, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE" },
	{ 900, EOPNOTSUPP, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED" },
	{ 901, EINVAL, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED" },
	{ 909, ETIME, "CUDA_ERROR_TIMEOUT" },
	{ 999, EIO, "CUDA_ERROR_UNKNOWN" },
};

static const struct cu_err *cu_err_find(CUresult r)
{
	size_t i;

	for (i = 0; i < sizeof(cu_errs) / sizeof(cu_errs[0]); i++)
		if (cu_errs[i].r == r)
			return &cu_errs[i];
	return NULL;
}

int gpu_cu_errno(CUresult r)
{
	const struct cu_err *e;

	if (r == CUDA_SUCCESS)
		return 0;
	e = cu_err_find(r);
	/* a code this table does not know is still a failure of the driver */
	return e ? -e->err : -EIO;
}

const char *gpu_cu_name(const struct gpu_cu *cu, CUresult r)
{
	const struct cu_err *e = cu_err_find(r);
	const char *s = NULL;

	if (r == CUDA_SUCCESS)
		return "CUDA_SUCCESS";
	if (cu && cu->get_error_name && !cu->get_error_name(r, &s) && s)
		return s;
	return e ? e->name : "CUDA error (unknown code)";
}
