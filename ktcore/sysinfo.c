// SPDX-License-Identifier: MIT
/*
 * sysinfo.c - what the host offers kt: CPU features and model, NUMA nodes
 * and their physical cores, free hugepages per size, io_uring, the CUDA
 * driver (kt_sysinfo_get).
 */
#include <dirent.h>
#include <errno.h>
#include <linux/io_uring.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gpu/gpu.h"
#include "ktcore/ctx.h"

static uint64_t read_u64(const char *path)
{
	unsigned long long v = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void hugepages_fill(struct kt_sysinfo *si)
{
	const char *dir = "/sys/kernel/mm/hugepages";
	struct dirent *de;
	DIR *d = opendir(dir);
	unsigned int i;

	if (!d)
		return;
	while ((de = readdir(d)) && si->n_hpage_sizes < 4) {
		unsigned long long kb;

		if (sscanf(de->d_name, "hugepages-%llukB", &kb) == 1)
			si->hpage_kb[si->n_hpage_sizes++] = kb;
	}
	closedir(d);
	qsort(si->hpage_kb, si->n_hpage_sizes, sizeof(uint64_t), cmp_u64);
	for (i = 0; i < si->n_hpage_sizes; i++) {
		char path[128];

		snprintf(path, sizeof(path), "%s/hugepages-%llukB/free_hugepages",
			 dir, (unsigned long long)si->hpage_kb[i]);
		si->hpage_free[i] = read_u64(path);
	}
}

static bool io_uring_works(void)
{
	struct io_uring_params p;
	long fd;

	memset(&p, 0, sizeof(p));
	fd = syscall(__NR_io_uring_setup, 1, &p);
	if (fd < 0)
		return false;
	close((int)fd);
	return true;
}

static int core_sysinfo_fill(struct kt_sysinfo *si)
{
	struct kt_ctx_opts o = { .sz = sizeof(o) };
	struct core_topo t;
	unsigned int i;
	int ret;

	memset(si, 0, sizeof(*si));
	si->cpu_flags = core_cpu_flags();
	core_cpu_model(si->cpu_model, sizeof(si->cpu_model));
	si->best_isa = core_isa_best(si->cpu_flags);
	ret = core_topo_discover(&t, &o, 0);
	if (ret)
		return ret;
	si->n_nodes = t.n_nodes;
	for (i = 0; i < t.n_nodes; i++) {
		long long mem = numa_available() >= 0 ?
				numa_node_size64(t.node_id[i], NULL) : 0;

		si->node_ids[i] = t.node_id[i];
		si->node_cores[i] = t.n_cpus[i];
		si->node_mem_mb[i] = mem > 0 ? (uint64_t)mem >> 20 : 0;
	}
	core_topo_free(&t);
	hugepages_fill(si);
	si->io_uring = io_uring_works();
	return 0;
}

KT_EXPORT int kt_sysinfo_get(struct kt_sysinfo *si)
{
	struct gpu_probe gp;
	int ret;

	if (!si)
		return -EINVAL;
	ret = core_sysinfo_fill(si);
	if (ret)
		return ret;
	gpu_probe(&gp);
	si->cuda_driver = gp.driver;
	si->cuda_version = gp.version;
	si->cuda_devices = gp.devices;
	si->cuda_kernels = gp.kernels;
	/* gpu_probe() keeps its reasons within this size */
	memcpy(si->cuda_why, gp.why, sizeof(si->cuda_why) - 1);
	si->cuda_why[sizeof(si->cuda_why) - 1] = 0;
	return 0;
}
