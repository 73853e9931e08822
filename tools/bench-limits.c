// SPDX-License-Identifier: MIT
/*
 * bench-limits.c - the machine limits every bench case is compared with:
 * read bandwidth and compute peaks of the context in use, measured in the
 * same run; and the packed size of an expert, for the bytes touched.
 */
#include <errno.h>

#include "tools/bench.h"
#include "tools/sys.h"

/* Large enough to defeat the last-level cache many times over. */
static uint64_t bw_buffer_bytes(const struct bench_cfg *cfg)
{
	uint64_t want = 8 * sys_l3_bytes(), avail = sys_mem_available();

	if (cfg->bw_bytes)
		return cfg->bw_bytes;
	if (want < (1ull << 30))
		want = 1ull << 30;
	if (avail && want > avail / 4)
		want = avail / 4;
	return want;
}

/**
 * bench_limits_measure() - read bandwidth and int8 / bf16 peaks of @ctx.
 * @ctx: the context the cases run on (same workers, same ISA).
 * @cfg: --bw-size and --limit-ms.
 * @l: filled.
 * Return: 0, or the -errno of the first measurement that failed.
 */
int bench_limits_measure(struct kt_ctx *ctx, const struct bench_cfg *cfg,
			 struct bench_limits *l)
{
	int ret;

	l->isa = kt_ctx_isa(ctx);
	l->threads = kt_ctx_threads(ctx);
	l->bw_bytes = bw_buffer_bytes(cfg);
	ret = kt_ctx_measure_read_bw(ctx, l->bw_bytes, cfg->limit_ms,
				     &l->read_gbps);
	if (ret)
		return ret;
	ret = kt_ctx_measure_peak(ctx, KT_QUANT_INT8, cfg->limit_ms,
				  &l->peak_int8_tops);
	if (ret)
		return ret;
	return kt_ctx_measure_peak(ctx, KT_QUANT_BF16, cfg->limit_ms,
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
	return q == KT_QUANT_BF16 ? l->peak_bf16_tops : l->peak_int8_tops;
}
