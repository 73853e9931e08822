/* SPDX-License-Identifier: MIT */
/*
 * stats.h - order statistics of timing samples, and the monotonic clock
 * the benchmarks read.
 */
#ifndef KT_TOOLS_STATS_H
#define KT_TOOLS_STATS_H

#include <stddef.h>
#include <stdint.h>

void stats_sort(double *v, size_t n);
double stats_quantile(const double *sorted, size_t n, double q);
uint64_t stats_now_ns(void);

#endif /* KT_TOOLS_STATS_H */
