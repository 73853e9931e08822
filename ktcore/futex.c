// SPDX-License-Identifier: MIT
/*
 * futex.c - private futex wait and wake, kept apart so that the rings and
 * the pools share them without depending on each other.
 */
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ktcore/futex.h"

int core_futex_wait(uint32_t *addr, uint32_t val)
{
	if (syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0))
		return -errno;
	return 0;
}

int core_futex_wait_until(uint32_t *addr, uint32_t val, uint64_t deadline_ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(deadline_ns / 1000000000ull),
		.tv_nsec = (long)(deadline_ns % 1000000000ull),
	};

	/* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time, so a
	 * retry after EINTR does not stretch the wait */
	if (syscall(SYS_futex, addr, FUTEX_WAIT_BITSET_PRIVATE, val, &ts, NULL,
		    FUTEX_BITSET_MATCH_ANY))
		return -errno;
	return 0;
}

void core_futex_wake(uint32_t *addr, int n)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
