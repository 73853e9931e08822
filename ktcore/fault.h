/* SPDX-License-Identifier: MIT */
/*
 * fault.h - fault injection in the runtime's own system calls, for test
 * builds only (-DKT_FAULT_INJECT, make fault-check): the loader's counter
 * (loader/fault.h, KT_FAULT=site:nth) installs itself as the hook. In
 * other builds core_fault() is a constant 0 and compiles away.
 */
#ifndef KT_CORE_FAULT_H
#define KT_CORE_FAULT_H

#include <errno.h>

#ifdef KT_FAULT_INJECT
/* -errno to fail the call at @site now, else 0; NULL: never fails */
extern int (*core_fault_hook)(const char *site);

static inline int core_fault(const char *site)
{
	return core_fault_hook ? core_fault_hook(site) : 0;
}
#else
static inline int core_fault(const char *site)
{
	(void)site;
	return 0;
}
#endif

/* Fail a call returning -1/errno: `if (CORE_FAULT_CALL("mbind") || mbind(...))` */
static inline int core_fault_call(const char *site)
{
	int err = core_fault(site);

	if (err)
		errno = -err;
	return err != 0;
}

#endif /* KT_CORE_FAULT_H */
