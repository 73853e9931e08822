// SPDX-License-Identifier: MIT
/*
 * stats.c - quantiles of timing samples (linear interpolation between
 * order statistics, the numpy default, so p50 of an even count is the
 * mean of the middle two) and the monotonic clock.
 */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "tools/stats.h"

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/**
 * stats_sort() - sort samples in increasing order, in place.
 * @v: samples.
 * @n: count.
 */
void stats_sort(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_dbl);
}

/**
 * stats_quantile() - the @q quantile of sorted samples.
 * @sorted: samples in increasing order.
 * @n: count.
 * @q: 0 .. 1 (0.5 median, 0.9 p90); clamped to that range.
 * Return: the interpolated value; NAN when @n is 0.
 */
double stats_quantile(const double *sorted, size_t n, double q)
{
	double pos, frac;
	size_t lo;

	if (!n)
		return NAN;
	if (q <= 0)
		return sorted[0];
	if (q >= 1)
		return sorted[n - 1];
	pos = q * (double)(n - 1);
	lo = (size_t)pos;
	frac = pos - (double)lo;
	if (lo + 1 >= n)
		return sorted[n - 1];
	return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

/**
 * stats_now_ns() - CLOCK_MONOTONIC in nanoseconds.
 * Return: the time.
 */
uint64_t stats_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
