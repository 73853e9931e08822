// SPDX-License-Identifier: MIT
/*
 * sys.c - L3 size from sysfs and available memory from /proc/meminfo, for
 * sizing the benchmark's rotation of layers and refusing what cannot fit.
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tools/opts.h"
#include "tools/sys.h"

/* Sysfs writes cache sizes as "32768K". */
static uint64_t read_cache_size(const char *path)
{
	char buf[64];
	uint64_t v = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	if (fgets(buf, sizeof(buf), f)) {
		buf[strcspn(buf, "\n")] = '\0';
		if (opt_size(buf, &v))
			v = 0;
	}
	fclose(f);
	return v;
}

/**
 * sys_l3_bytes() - size of the last-level cache seen by CPU 0.
 *
 * The highest cache index of CPU 0 is taken, so a machine without an L3
 * reports its L2. The size is one slice (one CCD on AMD parts): the
 * benchmark multiplies it by a margin anyway.
 * Return: bytes; 32 MiB when sysfs says nothing.
 */
uint64_t sys_l3_bytes(void)
{
	char path[96];
	uint64_t best = 0;
	int i;

	for (i = 0; i < 8; i++) {
		uint64_t v;

		snprintf(path, sizeof(path),
			 "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
		v = read_cache_size(path);
		if (v > best)
			best = v;
	}
	return best ? best : 32ull << 20;
}

static uint64_t meminfo(const char *key)
{
	char line[128];
	size_t klen = strlen(key);
	unsigned long long kb;
	uint64_t v = 0;
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, klen) || line[klen] != ':')
			continue;
		if (sscanf(line + klen + 1, "%llu", &kb) == 1)
			v = (uint64_t)kb << 10;
		break;
	}
	fclose(f);
	return v;
}

/**
 * sys_mem_available() - MemAvailable: what can be allocated without swapping.
 * Return: bytes; 0 when unknown.
 */
uint64_t sys_mem_available(void)
{
	return meminfo("MemAvailable");
}

/**
 * sys_mem_total() - MemTotal.
 * Return: bytes; 0 when unknown.
 */
uint64_t sys_mem_total(void)
{
	return meminfo("MemTotal");
}

/**
 * sys_cpus_usable() - CPUs this process may run on (its affinity mask,
 *	which a container or taskset may have narrowed).
 * Return: the count, at least 1.
 */
unsigned int sys_cpus_usable(void)
{
	cpu_set_t set;
	long n;

	if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) > 0)
		return (unsigned int)CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned int)n : 1;
}

/**
 * sys_stderr_tty() - whether progress lines may be drawn on stderr.
 * Return: true when stderr is a terminal.
 */
bool sys_stderr_tty(void)
{
	return isatty(STDERR_FILENO) == 1;
}
