// SPDX-License-Identifier: MIT
/*
 * mem.c - memory bound to one NUMA node for scratch and weights: 2 MiB
 * hugepages when reserved, else transparent hugepages, else 4 KiB pages
 * (one warning each time kt falls back a step).
 */
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdbool.h>
#include <sys/mman.h>

#include "ktcore/core.h"

#define HUGE_2M (2ul << 20)

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static void bind_node(void *p, size_t size, int node)
{
	unsigned long mask[KT_MAX_NODES / (8 * sizeof(unsigned long)) + 1] = { 0 };

	if (node < 0 || node >= KT_MAX_NODES || numa_available() < 0)
		return;
	mask[node / (8 * sizeof(unsigned long))] |=
		1ul << (node % (8 * sizeof(unsigned long)));
	/* preferred, not bind: a full node should not fail an allocation */
	mbind(p, size, MPOL_PREFERRED, mask, KT_MAX_NODES + 1, 0);
}

void *core_node_alloc(int node, size_t size)
{
	static bool warned_huge;
	size_t len = round_up(size ? size : 1, HUGE_2M);
	void *p;

	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB,
		 -1, 0);
	if (p == MAP_FAILED) {
		if (!__atomic_exchange_n(&warned_huge, true, __ATOMIC_RELAXED))
			core_logv_global(KT_LOG_INFO,
					 "no 2 MiB hugepages free (vm.nr_hugepages); using transparent hugepages");
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		madvise(p, len, MADV_HUGEPAGE);
	}
	bind_node(p, len, node);
	return p;
}

void core_node_free(void *p, size_t size)
{
	if (p)
		munmap(p, round_up(size ? size : 1, HUGE_2M));
}
