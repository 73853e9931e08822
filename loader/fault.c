// SPDX-License-Identifier: MIT
/*
 * fault.c - the counter behind KT_FAULT=site:nth (fault.h), compiled into
 * test builds only (-DKT_FAULT_INJECT). One armed site at a time; the
 * count is atomic because the converter writes from several threads.
 */
#ifdef KT_FAULT_INJECT
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ktcore/fault.h"
#include "loader/fault.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char site[32];
static unsigned long nth, hits;
static int armed = -1;		/* -1: KT_FAULT not read yet */

static void arm(const char *spec)
{
	char s[32];
	unsigned long n;

	site[0] = '\0';
	nth = hits = 0;
	armed = 0;
	if (spec && sscanf(spec, "%31[a-z]:%lu", s, &n) == 2 && n) {
		snprintf(site, sizeof(site), "%s", s);
		nth = n;
		armed = 1;
	}
}

/* the runtime's calls (ktcore/fault.h) count on the same sites */
__attribute__((constructor)) static void install_core_hook(void)
{
	core_fault_hook = ldr_fault;
}

void ldr_fault_set(const char *spec)
{
	pthread_mutex_lock(&lock);
	arm(spec);
	pthread_mutex_unlock(&lock);
}

unsigned long ldr_fault_hits(void)
{
	unsigned long h;

	pthread_mutex_lock(&lock);
	h = hits;
	pthread_mutex_unlock(&lock);
	return h;
}

int ldr_fault(const char *at)
{
	int ret = 0;

	pthread_mutex_lock(&lock);
	if (armed < 0)
		arm(getenv("KT_FAULT"));
	if (armed && !strcmp(at, site) && ++hits == nth)
		ret = !strcmp(at, "alloc") || !strcmp(at, "mmap") ? -ENOMEM :
		      !strcmp(at, "write") || !strcmp(at, "fallocate") ? -ENOSPC :
		      -EIO;
	pthread_mutex_unlock(&lock);
	return ret;
}
#endif /* KT_FAULT_INJECT */
