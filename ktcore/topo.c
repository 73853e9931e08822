// SPDX-License-Identifier: MIT
/*
 * topo.c - which CPUs the workers run on: NUMA nodes from libnuma, one CPU
 * per physical core (SMT siblings left out), within the process affinity.
 * KT_FAKE_NUMA=N splits the cores into N nodes to exercise multi-node code
 * on a one-node machine.
 */
#include <errno.h>
#include <numa.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ktcore/ctx.h"

/* The first CPU listed in cpu's thread_siblings_list, or cpu itself. */
static int first_sibling(int cpu)
{
	char path[128];
	FILE *f;
	int first = cpu;

	snprintf(path, sizeof(path),
		 "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
		 cpu);
	f = fopen(path, "r");
	if (!f)
		return cpu;
	if (fscanf(f, "%d", &first) != 1)
		first = cpu;
	fclose(f);
	return first;
}

/* Physical cores of @node that we may run on, into @out; returns count. */
static unsigned int node_cores(int node, const cpu_set_t *allowed, int *out,
			       unsigned int max)
{
	unsigned int n = 0;
	int cpu;

	for (cpu = 0; cpu < CPU_SETSIZE && n < max; cpu++) {
		if (!CPU_ISSET(cpu, allowed))
			continue;
		if (numa_available() >= 0 && numa_node_of_cpu(cpu) != node)
			continue;
		if (first_sibling(cpu) != cpu && CPU_ISSET(first_sibling(cpu),
							   allowed))
			continue;
		out[n++] = cpu;
	}
	return n;
}

static int fake_split(struct core_topo *t, unsigned int parts)
{
	unsigned int total = 0, i, k = 0;
	int *all;

	for (i = 0; i < t->n_nodes; i++)
		total += t->n_cpus[i];
	if (!parts || parts > KT_MAX_NODES)
		return -EINVAL;
	all = calloc(total, sizeof(*all));
	if (!all)
		return -ENOMEM;
	for (i = 0; i < t->n_nodes; i++) {
		memcpy(all + k, t->cpus[i], t->n_cpus[i] * sizeof(int));
		k += t->n_cpus[i];
	}
	core_topo_free(t);
	for (i = 0; i < parts; i++) {
		unsigned int lo = total * i / parts, hi = total * (i + 1) / parts;

		/* more nodes than cores: each node takes one core, shared
		 * round-robin (slow, but the multi-node paths run) */
		if (parts > total) {
			lo = i % total;
			hi = lo + 1;
		}

		t->node_id[i] = numa_available() >= 0 ?
				numa_node_of_cpu(all[lo]) : 0;
		t->n_cpus[i] = hi - lo;
		t->cpus[i] = calloc(hi - lo, sizeof(int));
		if (!t->cpus[i]) {
			free(all);
			return -ENOMEM;
		}
		memcpy(t->cpus[i], all + lo, (hi - lo) * sizeof(int));
	}
	t->n_nodes = parts;
	t->fake = true;
	free(all);
	return 0;
}

/* Keep @threads workers in all, spread over nodes in proportion to cores. */
static void trim_threads(struct core_topo *t, unsigned int threads)
{
	unsigned int total = 0, i;

	for (i = 0; i < t->n_nodes; i++)
		total += t->n_cpus[i];
	if (!threads || threads >= total)
		return;
	if (threads < t->n_nodes)
		threads = t->n_nodes;	/* at least one worker per node */
	for (i = 0; i < t->n_nodes; i++) {
		unsigned int want = threads * (i + 1) / t->n_nodes -
				    threads * i / t->n_nodes;

		if (want > t->n_cpus[i])
			want = t->n_cpus[i];
		if (!want)
			want = 1;
		t->n_cpus[i] = want;
	}
}

int core_topo_discover(struct core_topo *t, const struct kt_ctx_opts *o,
		       unsigned int threads)
{
	int node_list[KT_MAX_NODES];
	unsigned int n_list = 0, i;
	const char *fake = getenv("KT_FAKE_NUMA");
	cpu_set_t allowed;
	int ret;

	memset(t, 0, sizeof(*t));
	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		return -errno;
	if (o && o->n_nodes) {
		if (o->n_nodes > KT_MAX_NODES)
			return -EINVAL;
		memcpy(node_list, o->nodes, o->n_nodes * sizeof(int));
		n_list = o->n_nodes;
	} else if (numa_available() >= 0) {
		int max = numa_max_node(), n;

		for (n = 0; n <= max && n_list < KT_MAX_NODES; n++)
			node_list[n_list++] = n;
	} else {
		node_list[n_list++] = 0;
	}
	for (i = 0; i < n_list; i++) {
		int *cpus = calloc(CORE_MAX_CPUS, sizeof(int));
		unsigned int n;

		if (!cpus)
			goto err_nomem;
		n = node_cores(node_list[i], &allowed, cpus, CORE_MAX_CPUS);
		if (!n) {
			free(cpus);
			if (o && o->n_nodes) {
				core_topo_free(t);
				return -ENODEV;	/* asked for a node without CPUs */
			}
			continue;
		}
		t->node_id[t->n_nodes] = node_list[i];
		t->n_cpus[t->n_nodes] = n;
		t->cpus[t->n_nodes++] = cpus;
	}
	if (!t->n_nodes)
		return -ENODEV;
	if (fake && *fake) {
		ret = fake_split(t, (unsigned int)strtoul(fake, NULL, 10));
		if (ret) {
			core_topo_free(t);
			return ret;
		}
	}
	trim_threads(t, threads);
	return 0;

err_nomem:
	core_topo_free(t);
	return -ENOMEM;
}

void core_topo_free(struct core_topo *t)
{
	unsigned int i;

	for (i = 0; i < t->n_nodes; i++) {
		free(t->cpus[i]);
		t->cpus[i] = NULL;
	}
}
