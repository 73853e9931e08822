// SPDX-License-Identifier: MIT
/*
 * probe.c - is a CUDA driver usable here: libcuda.so.1 opened with dlopen,
 * initialised, asked for its version and device count, closed again.
 */
#include <dlfcn.h>
#include <string.h>

#include "gpu/gpu.h"

typedef int (*cu_init_fn)(unsigned int flags);
typedef int (*cu_int_fn)(int *out);

void gpu_probe(struct gpu_probe *p)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	cu_init_fn cu_init;
	cu_int_fn cu_version, cu_count;

	memset(p, 0, sizeof(*p));
	if (!lib)
		return;
	cu_init = (cu_init_fn)dlsym(lib, "cuInit");
	cu_version = (cu_int_fn)dlsym(lib, "cuDriverGetVersion");
	cu_count = (cu_int_fn)dlsym(lib, "cuDeviceGetCount");
	/* CUDA_SUCCESS is 0 */
	if (cu_init && cu_version && cu_count && !cu_init(0)) {
		p->driver = true;
		if (cu_version(&p->version))
			p->version = 0;
		if (cu_count(&p->devices))
			p->devices = 0;
	}
	dlclose(lib);
}
