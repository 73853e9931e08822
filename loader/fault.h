/* SPDX-License-Identifier: MIT */
/*
 * fault.h - fault injection for tests: built with -DKT_FAULT_INJECT (make
 * fault-check), the loader's allocations and system calls on the convert,
 * open and verify paths can be made to fail one at a time. Elsewhere every
 * hook is a constant 0 and compiles away.
 */
#ifndef KT_LOADER_FAULT_H
#define KT_LOADER_FAULT_H

#include <errno.h>
#include <stdlib.h>

/* The sites, as named in KT_FAULT=site:nth. */
#define LDR_FAULT_SITES	"alloc open read write mmap fallocate fsync link rename " \
			"truncate mbind uring_init register submit cqe"

#ifdef KT_FAULT_INJECT
/*
 * -errno when the call at @site is the one to fail (KT_FAULT=site:nth:
 * the nth call at that site, counted from 1), else 0. The errno is what
 * the real call would give: ENOMEM for alloc and mmap, ENOSPC for write
 * and fallocate, EIO otherwise.
 */
int ldr_fault(const char *site);
/* Arm a new spec (NULL: none) and reset the counts; for the tests. */
void ldr_fault_set(const char *spec);
/* Calls seen at the armed site since ldr_fault_set(). */
unsigned long ldr_fault_hits(void);

/* the hook the loader hands the io_uring reader (ur_read_opts.fault) */
#define LDR_FAULT_HOOK	ldr_fault

/* failing allocations in the files that include this header */
#define malloc(n)	(ldr_fault("alloc") ? NULL : malloc(n))
#define calloc(n, s)	(ldr_fault("alloc") ? NULL : calloc(n, s))
#else
#define LDR_FAULT_HOOK	NULL

static inline int ldr_fault(const char *site)
{
	(void)site;
	return 0;
}
#endif

/* Fail a call returning -1/errno: `if (LDR_FAULT_CALL("fsync") || fsync(fd))` */
#define LDR_FAULT_CALL(site)	ldr_fault_errno(ldr_fault(site))

static inline int ldr_fault_errno(int err)
{
	if (err)
		errno = -err;
	return err != 0;
}

#endif /* KT_LOADER_FAULT_H */
