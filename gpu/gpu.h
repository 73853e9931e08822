/* SPDX-License-Identifier: MIT */
/*
 * gpu.h - what the CUDA backend offers ktcore. The driver is loaded with
 * dlopen, so kt builds and runs where none is installed.
 */
#ifndef KT_GPU_GPU_H
#define KT_GPU_GPU_H

#include <stdbool.h>

/*
 * struct gpu_probe - what libcuda.so.1 reports.
 * @driver: the library loads and cuInit() succeeds.
 * @version: cuDriverGetVersion() (e.g. 12040), 0 when unknown.
 * @devices: cuDeviceGetCount(), 0 when unknown.
 */
struct gpu_probe {
	bool driver;
	int version;
	int devices;
};

/* Load the driver, ask it, unload it. Never fails: no driver is an answer. */
void gpu_probe(struct gpu_probe *p);

#endif /* KT_GPU_GPU_H */
