/* SPDX-License-Identifier: MIT */
/*
 * hugetlb.h - for selftests that need free 2 MiB hugepages or a hugetlbfs
 * mount: reserve and mount them, and leave the undoing to the harness
 * (kt_test_restore_*), which runs it after the test even on a timeout.
 */
#ifndef KT_SELFTESTS_HUGETLB_H
#define KT_SELFTESTS_HUGETLB_H

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kt_test.h"

#define TH_NR_2M "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
#define TH_FREE_2M "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"

/* The number in a sysfs or procfs file, -1 when unreadable. */
static inline long th_read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/*
 * Make @pages 2 MiB hugepages free, raising their count when needed (root
 * only); the old count comes back after the test.
 * Return: 0, or -1 with a reason to skip in @why.
 */
static inline int th_reserve_2m(long pages, const char **why)
{
	long nr = th_read_long(TH_NR_2M);
	FILE *f;

	if (nr < 0 || th_read_long(TH_FREE_2M) < 0) {
		*why = "no 2 MiB hugepage support";
		return -1;
	}
	if (th_read_long(TH_FREE_2M) >= pages)
		return 0;
	if (geteuid()) {
		*why = "no free 2 MiB hugepages and not root to reserve some";
		return -1;
	}
	if (kt_test_restore_file(TH_NR_2M)) {
		*why = "cannot record vm.nr_hugepages to restore it";
		return -1;
	}
	f = fopen(TH_NR_2M, "w");
	if (!f || fprintf(f, "%ld\n", nr + pages) < 0 || fclose(f)) {
		*why = "cannot raise vm.nr_hugepages";
		return -1;
	}
	if (th_read_long(TH_FREE_2M) < pages) {
		*why = "the kernel found no free 2 MiB pages to reserve";
		return -1;
	}
	return 0;
}

/*
 * Mount hugetlbfs with 2 MiB pages at @dir (made here); unmounted and
 * removed after the test. Return: 0, or -1 with @why (errno set).
 */
static inline int th_mount_2m(const char *dir, const char **why)
{
	if (mkdir(dir, 0700) && errno != EEXIST) {
		*why = "cannot make the mount point";
		return -1;
	}
	if (kt_test_restore_mount(dir)) {
		*why = "cannot record the mount to undo it";
		return -1;
	}
	if (mount("kt-test", dir, "hugetlbfs", 0, "pagesize=2M")) {
		*why = "cannot mount hugetlbfs";
		return -1;
	}
	return 0;
}

/*
 * A hugetlbfs mount at @dir with @pages free 2 MiB pages for it, as root.
 * Return: 0, or -1 with a reason to skip in @why (static or @buf).
 */
static inline int th_staging_mount(const char *dir, long pages,
				   const char **why, char *buf, size_t n)
{
	if (geteuid()) {
		*why = "needs root to reserve hugepages and mount hugetlbfs";
		return -1;
	}
	if (th_reserve_2m(pages, why))
		return -1;
	if (th_mount_2m(dir, why)) {
		snprintf(buf, n, "%s: %s", *why, strerror(errno));
		*why = buf;
		return -1;
	}
	return 0;
}

#endif /* KT_SELFTESTS_HUGETLB_H */
