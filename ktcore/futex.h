/* SPDX-License-Identifier: MIT */
/*
 * futex.h - the sleeps and wake-ups of ktcore (rings, pools, the private job
 * slot): private futexes on 32-bit words, nothing else.
 */
#ifndef KT_CORE_FUTEX_H
#define KT_CORE_FUTEX_H

#include <stdint.h>

/* Sleep while *@addr == @val. 0, or -EAGAIN/-EINTR (recheck and retry). */
int core_futex_wait(uint32_t *addr, uint32_t val);
/*
 * As core_futex_wait(), but only until CLOCK_MONOTONIC reaches
 * @deadline_ns: then -ETIMEDOUT.
 */
int core_futex_wait_until(uint32_t *addr, uint32_t val, uint64_t deadline_ns);
void core_futex_wake(uint32_t *addr, int n);

#endif /* KT_CORE_FUTEX_H */
