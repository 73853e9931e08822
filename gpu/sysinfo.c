// SPDX-License-Identifier: MIT
/*
 * sysinfo.c - kt_sysinfo_get(): the host report from ktcore plus the CUDA
 * driver, probed with dlopen so that kt runs where no driver is installed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include "ktcore/core.h"

typedef int (*cu_init_fn)(unsigned int flags);
typedef int (*cu_int_fn)(int *out);

static void cuda_probe(struct kt_sysinfo *si)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	cu_init_fn cu_init;
	cu_int_fn cu_version, cu_count;

	si->cuda_devices = 0;
	si->cuda_version = 0;
	if (!lib)
		return;
	cu_init = (cu_init_fn)dlsym(lib, "cuInit");
	cu_version = (cu_int_fn)dlsym(lib, "cuDriverGetVersion");
	cu_count = (cu_int_fn)dlsym(lib, "cuDeviceGetCount");
	/* CUDA_SUCCESS is 0 */
	if (cu_init && cu_version && cu_count && !cu_init(0)) {
		si->cuda_driver = true;
		if (cu_version(&si->cuda_version))
			si->cuda_version = 0;
		if (cu_count(&si->cuda_devices))
			si->cuda_devices = 0;
	}
	dlclose(lib);
}

KT_EXPORT int kt_sysinfo_get(struct kt_sysinfo *si)
{
	int ret;

	if (!si)
		return -EINVAL;
	ret = core_sysinfo_fill(si);
	if (ret)
		return ret;
	cuda_probe(si);
	return 0;
}
