// SPDX-License-Identifier: MIT
/*
 * bench-limits.c - the machine limits every bench case is compared with:
 * read bandwidth and compute peaks of the context in use, measured in the
 * same run; and the packed size of an expert, for the bytes touched.
 */
#include <errno.h>
#include <stdlib.h>

#include "tools/bench.h"
#include "tools/sys.h"

/* Large enough to defeat the last-level cache many times over. */
static uint64_t bw_buffer_bytes(const struct bench_cfg *cfg)
{
	uint64_t want = 8 * sys_l3_bytes(), avail = sys_mem_available();

	if (cfg->bw_bytes)
		return cfg->bw_bytes;
	if (want < (512ull << 20))
		want = 512ull << 20;
	if (avail && want > avail / 4)
		want = avail / 4;
	return want;
}

/*
 * Each limit is the median of a few short runs: on a shared machine single
 * runs stray both ways (a run beside a noisy neighbour understates; we
 * have also seen one read twice the usual bandwidth), and the median of
 * five ignores two strays either way.
 */
#define LIMIT_REPS	5
/* Per run when --limit-ms is not given. */
#define LIMIT_BW_MS	200
#define LIMIT_PEAK_MS	100

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* @what: 0 read bandwidth, else the peak of that kt_quant. */
static int median_limit(struct kt_ctx *ctx, int what, uint64_t bytes,
			uint32_t ms, double *median)
{
	double v[LIMIT_REPS];
	int i, ret;

	for (i = 0; i < LIMIT_REPS; i++) {
		ret = what ? kt_ctx_measure_peak(ctx, (enum kt_quant)what, ms,
						 &v[i]) :
			     kt_ctx_measure_read_bw(ctx, bytes, ms, &v[i]);
		if (ret)
			return ret;
	}
	qsort(v, LIMIT_REPS, sizeof(v[0]), cmp_double);
	*median = v[LIMIT_REPS / 2];
	return 0;
}

/**
 * bench_limits_measure() - read bandwidth and int8 / bf16 peaks of @ctx,
 *	each the median of LIMIT_REPS runs.
 * @ctx: the context the cases run on (same workers, same ISA).
 * @cfg: --bw-size and --limit-ms.
 * @l: filled.
 * Return: 0, or the -errno of the first measurement that failed.
 */
int bench_limits_measure(struct kt_ctx *ctx, const struct bench_cfg *cfg,
			 struct bench_limits *l)
{
	uint32_t bw_ms = cfg->limit_ms ? cfg->limit_ms : LIMIT_BW_MS;
	uint32_t peak_ms = cfg->limit_ms ? cfg->limit_ms : LIMIT_PEAK_MS;
	int ret;

	l->isa = kt_ctx_isa(ctx);
	l->threads = kt_ctx_threads(ctx);
	l->bw_bytes = bw_buffer_bytes(cfg);
	ret = median_limit(ctx, 0, l->bw_bytes, bw_ms, &l->read_gbps);
	if (ret)
		return ret;
	ret = median_limit(ctx, KT_QUANT_INT8, 0, peak_ms,
			   &l->peak_int8_tops);
	if (ret)
		return ret;
	return median_limit(ctx, KT_QUANT_BF16, 0, peak_ms,
			    &l->peak_bf16_tops);
}

/**
 * bench_limits_peak() - the peak that bounds a method: INT4 runs on the
 *	int8 units after unpacking.
 * @l: limits.
 * @q: quantization.
 * Return: tera-ops per second.
 */
double bench_limits_peak(const struct bench_limits *l, enum kt_quant q)
{
	return q == KT_QUANT_BF16 || q == KT_QUANT_FP8 ||
	       q == KT_QUANT_MXFP4 ? l->peak_bf16_tops :
	       l->peak_int8_tops;
}
