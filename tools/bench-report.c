// SPDX-License-Identifier: MIT
/*
 * bench-report.c - what kt bench prints: a readable table, or with --json
 * one JSON object per line (a "limits" line, then one line per case).
 */
#include <stdio.h>

#include "tools/bench.h"
#include "tools/json.h"

static const char *dtype_name(enum kt_dtype d)
{
	return d == KT_DTYPE_BF16 ? "bf16" : d == KT_DTYPE_F16 ? "f16" : "f32";
}

/**
 * report_limits() - the machine limits of one context.
 * @cfg: configuration (--json).
 * @l: limits.
 */
void report_limits(const struct bench_cfg *cfg, const struct bench_limits *l)
{
	struct jw j;

	if (!cfg->json) {
		printf("limits: read %.1f GB/s, peak int8 %.3f TOPS, bf16 %.3f TOPS (%s, %u threads)\n",
		       l->read_gbps, l->peak_int8_tops, l->peak_bf16_tops,
		       kt_isa_name(l->isa), l->threads);
		fflush(stdout);
		return;
	}
	jw_begin(&j, stdout);
	jw_obj(&j, "limits");
	jw_str(&j, "isa", kt_isa_name(l->isa));
	jw_u64(&j, "threads", l->threads);
	jw_dbl(&j, "read_gbps", l->read_gbps);
	jw_dbl(&j, "peak_int8_tops", l->peak_int8_tops);
	jw_dbl(&j, "peak_int4_tops", l->peak_int8_tops);
	jw_dbl(&j, "peak_bf16_tops", l->peak_bf16_tops);
	jw_u64(&j, "bw_bytes", l->bw_bytes);
	jw_end(&j);
}

/**
 * report_setup() - the header of a block of cases (text only: in JSON
 *	every case line repeats the setup).
 * @s: setup.
 */
void report_setup(const struct bench_setup *s)
{
	const struct bench_cfg *c = s->cfg;

	if (c->json)
		return;
	printf("\n%s (H %u, I %u, E %u, k %u), %s", c->preset, c->hidden,
	       c->inter, c->experts, c->top_k, bench_method_name(s->quant));
	if (s->quant == KT_QUANT_INT4)
		printf(" g%u", c->group_size ? c->group_size : 128);
	printf(", %s, %u threads\n", kt_isa_name(s->isa), s->threads);
	printf("%u layer%s rotated, %.1f MB per expert, %.2f GB packed (made in %.1f s), %s weights, %s x/y, submit %s%s\n",
	       s->layers, s->layers == 1 ? "" : "s",
	       (double)s->expert_bytes * 1e-6,
	       (double)s->model_bytes * 1e-9, s->gen_s,
	       dtype_name(c->src_dtype), dtype_name(c->io_dtype),
	       c->use_forward ? "kt_moe_forward" : "ring",
	       c->use_forward ? "" : s->sleeps ? " (sleep)" : " (poll)");
	printf("%7s %10s %10s %9s %8s %8s %8s %s\n", "tokens", "median_us",
	       "p90_us", "MB", "GB/s", "TOPS", "roofline", "bound");
	fflush(stdout);
}

/**
 * report_case() - one timed case.
 * @s: its setup.
 * @r: result.
 */
void report_case(const struct bench_setup *s, const struct bench_case *r)
{
	const struct bench_cfg *c = s->cfg;
	struct jw j;

	if (!c->json) {
		printf("%7u %10.1f %10.1f %9.1f %8.1f %8.3f %8.2f %s\n",
		       r->tokens, r->median_us, r->p90_us,
		       (double)r->bytes * 1e-6, r->gbps, r->tops, r->roofline,
		       r->compute_bound ? "compute" : "memory");
		fflush(stdout);
		return;
	}
	jw_begin(&j, stdout);
	jw_str(&j, "preset", c->preset);
	jw_u64(&j, "hidden", c->hidden);
	jw_u64(&j, "inter", c->inter);
	jw_u64(&j, "experts", c->experts);
	jw_u64(&j, "top_k", c->top_k);
	jw_str(&j, "method", bench_method_name(s->quant));
	if (s->quant == KT_QUANT_INT4)
		jw_u64(&j, "group_size", c->group_size ? c->group_size : 128);
	jw_str(&j, "isa", kt_isa_name(s->isa));
	jw_u64(&j, "threads", s->threads);
	jw_u64(&j, "tokens", r->tokens);
	jw_u64(&j, "layers", s->layers);
	jw_u64(&j, "iters", r->iters);
	jw_str(&j, "submit", c->use_forward ? "forward" : "ring");
	if (!c->use_forward)
		jw_str(&j, "wait", s->sleeps ? "sleep" : "poll");
	jw_dbl(&j, "median_us", r->median_us);
	jw_dbl(&j, "p90_us", r->p90_us);
	jw_dbl(&j, "p99_us", r->p99_us);
	jw_dbl(&j, "min_us", r->min_us);
	jw_dbl(&j, "experts_touched", r->experts_touched);
	jw_u64(&j, "expert_bytes", s->expert_bytes);
	jw_u64(&j, "bytes", r->bytes);
	jw_u64(&j, "ops", r->ops);
	jw_dbl(&j, "gbps", r->gbps);
	jw_dbl(&j, "tops", r->tops);
	jw_dbl(&j, "roofline_us", r->roofline_us);
	jw_dbl(&j, "roofline", r->roofline);
	jw_str(&j, "bound", r->compute_bound ? "compute" : "memory");
	jw_end(&j);
}

/**
 * report_nop() - NOP round trips.
 * @cfg: configuration.
 * @isa: variant of the context.
 * @threads: its workers.
 * @n: result.
 */
void report_nop(const struct bench_cfg *cfg, enum kt_isa isa,
		unsigned int threads, const struct bench_nop *n)
{
	struct jw j;

	if (!cfg->json) {
		printf("nop round trip (submit -> completion, %s), %s, %u threads, %u ops:\n"
		       "  median %.2f us, p90 %.2f us, p99 %.2f us, min %.2f us; batches of %u: %.2f Mops/s\n",
		       n->sleeps ? "sleep" : "poll", kt_isa_name(isa), threads,
		       n->iters, n->median_us,
		       n->p90_us, n->p99_us, n->min_us, n->batch,
		       n->batch_mops);
		fflush(stdout);
		return;
	}
	jw_begin(&j, stdout);
	jw_str(&j, "op", "nop");
	jw_str(&j, "isa", kt_isa_name(isa));
	jw_u64(&j, "threads", threads);
	jw_u64(&j, "iters", n->iters);
	jw_str(&j, "wait", n->sleeps ? "sleep" : "poll");
	jw_dbl(&j, "median_us", n->median_us);
	jw_dbl(&j, "p90_us", n->p90_us);
	jw_dbl(&j, "p99_us", n->p99_us);
	jw_dbl(&j, "min_us", n->min_us);
	jw_u64(&j, "batch", n->batch);
	jw_dbl(&j, "batch_mops", n->batch_mops);
	jw_end(&j);
}
