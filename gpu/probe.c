// SPDX-License-Identifier: MIT
/*
 * probe.c - is a CUDA driver usable here: the driver loaded (gpu/cu.c),
 * initialised, asked for its version and device count, closed again; and
 * when none is usable, the reason in one sentence for `kt info`.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"

void gpu_probe(struct gpu_probe *p)
{
	struct gpu_cu cu;
	size_t fb;
	CUresult r;

	memset(p, 0, sizeof(*p));
	p->kernels = gpu_fatbin(&fb) != NULL;
	/* kt_sysinfo holds 54 characters of the reason: keep them short */
	switch (gpu_cu_load(&cu, p->why, sizeof(p->why))) {
	case 0:
		break;
	case -ENODEV:
		snprintf(p->why, sizeof(p->why),
			 "no CUDA driver (libcuda.so.1 not found)");
		return;
	default:
		snprintf(p->why, sizeof(p->why),
			 "CUDA driver too old (an entry point is missing)");
		return;
	}
	r = cu.init(0);
	if (r) {
		snprintf(p->why, sizeof(p->why), "cuInit failed: %s",
			 gpu_cu_name(&cu, r));
		goto out;
	}
	p->driver = true;
	if (cu.driver_get_version(&p->version))
		p->version = 0;
	if (cu.device_get_count(&p->devices))
		p->devices = 0;
	if (!p->devices)
		snprintf(p->why, sizeof(p->why),
			 "the CUDA driver reports no device");
	else if (!p->kernels)
		snprintf(p->why, sizeof(p->why),
			 "kt was built without nvcc: no GPU kernels");
out:
	gpu_cu_unload(&cu);
}
