// SPDX-License-Identifier: MIT
/*
 * ring-debug.c - the check behind the ring helpers' KT_DEBUG mode
 * (include/kt/ring.h): a ring used after kt_ring_exit(), or by a thread
 * that did not create it, aborts with a message instead of corrupting
 * the ring or reading freed memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ktcore/core.h"

KT_EXPORT void __kt_ring_debug_check(const struct kt_ring *ring,
				     const char *fn)
{
	uint32_t me = (uint32_t)gettid();

	if (!ring || !ring->sh) {
		fprintf(stderr, "kt: misuse: %s() on a ring released by kt_ring_exit() (or never initialised)\n",
			fn);
		abort();
	}
	if (ring->owner != me) {
		fprintf(stderr, "kt: misuse: %s() from thread %u on a ring of thread %u: a ring belongs to the thread that created it (two threads on one ring corrupt it; give each thread its own ring)\n",
			fn, me, ring->owner);
		abort();
	}
}
