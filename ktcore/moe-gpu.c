// SPDX-License-Identifier: MIT
/*
 * moe-gpu.c - one MoE op on both devices: each token's (expert, weight)
 * pairs are split into GPU-resident experts and CPU ones; the GPU part is
 * enqueued (pinned staging, async copies, kernels) and runs while the CPU
 * part runs in core_moe_op(); the two partial outputs are summed in f32.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp.h"
#include "ktcore/cache.h"
#include "ktcore/ctx.h"
#include "ktcore/moe.h"
#include "ktcore/moe-gpu.h"

/* From this many elements the host sum runs on every worker. */
#define SUM_SPLIT_MIN	(64u * 1024)

static size_t al(size_t v)
{
	return (v + 255) / 256 * 256;
}

void core_gpu_chunk_layout(struct core_gpu_lay *l, uint32_t tc, uint32_t k,
			 uint32_t H, uint32_t I, uint32_t E, size_t esz)
{
	size_t S = (size_t)tc * k, G = S < E ? S : E;

	/* the front part (x, then the plan) goes to the device in one copy */
	l->x = 0;
	l->slot_tok = al((size_t)tc * H * esz);
	l->slot_w = l->slot_tok + al(S * 4);
	l->tok_slot = l->slot_w + al(S * 4);
	l->groups = l->tok_slot + al(S * 4);
	l->front = l->groups + al(G * sizeof(struct gpu_group));
	l->ygpu = l->front;
	l->ids = l->ygpu + al((size_t)tc * H * 4);
	l->w = l->ids + al(S * 8);
	l->pin_total = l->w + al(S * 4);
	l->a = l->front;
	l->ypart = l->a + al(S * I * 4);
	l->y = l->ypart + al(S * H * 4);
	l->ycpu = l->y + al((size_t)tc * H * 4);
	l->dev_total = l->ycpu + al((size_t)tc * H * 4);
}

void core_gpu_stage_free(struct gpu_dev *d, struct core_gpu_stage *st)
{
	int pushed = !gpu_dev_push(d);

	if (st->pin)
		gpu_check(d, d->cu.mem_free_host(st->pin), "cuMemFreeHost");
	if (st->dev)
		gpu_check(d, d->cu.mem_free(st->dev), "cuMemFree");
	if (pushed)
		gpu_dev_pop(d);
	free(st->held);
	free(st->base);
	free(st->skip);
	free(st->count);
	free(st->hlist);
	free(st->ycpu);
	memset(st, 0, sizeof(*st));
}

/*
 * Grow @st to hold one chunk of @l and @E experts (the context is
 * current). Only an op larger than any before allocates.
 */
int core_gpu_stage_reserve(struct gpu_dev *d, struct core_gpu_stage *st,
			 const struct core_gpu_lay *l, uint32_t E, size_t ycpu)
{
	int ret;

	if (st->pin_bytes < l->pin_total) {
		void *p = NULL;

		if (st->pin)
			gpu_check(d, d->cu.mem_free_host(st->pin),
				  "cuMemFreeHost");
		st->pin = NULL;
		st->pin_bytes = 0;
		ret = gpu_check(d, d->cu.mem_alloc_host(&p, l->pin_total),
				"cuMemAllocHost (staging)");
		if (ret)
			return ret;
		st->pin = p;
		st->pin_bytes = l->pin_total;
	}
	if (st->dev_bytes < l->dev_total) {
		CUdeviceptr p = 0;

		if (st->dev)
			gpu_check(d, d->cu.mem_free(st->dev), "cuMemFree");
		st->dev = 0;
		st->dev_bytes = 0;
		ret = gpu_check(d, d->cu.mem_alloc(&p, l->dev_total),
				"cuMemAlloc (scratch)");
		if (ret)
			return ret;
		st->dev = p;
		st->dev_bytes = l->dev_total;
	}
	if (st->n_experts < E) {
		free(st->held);
		free(st->base);
		free(st->skip);
		free(st->count);
		free(st->hlist);
		st->held = calloc(E, 1);
		st->base = calloc(E, sizeof(*st->base));
		st->skip = calloc((E + 63) / 64, 8);
		st->count = calloc(2 * (size_t)E + 1, 4);
		st->hlist = calloc(E, 4);
		st->n_experts = E;
		if (!st->held || !st->base || !st->skip || !st->count ||
		    !st->hlist) {
			st->n_experts = 0;
			return -ENOMEM;
		}
	}
	if (st->ycpu_bytes < ycpu) {
		free(st->ycpu);
		st->ycpu = malloc(ycpu);
		st->ycpu_bytes = st->ycpu ? ycpu : 0;
		if (!st->ycpu)
			return -ENOMEM;
	}
	return 0;
}

/* The op's hold on expert @e's GPU copy, taken at its first pair. */
static int hold(struct core_gpu_op *o, uint32_t e)
{
	struct core_gpu_stage *st = o->st;

	if (!st->held[e]) {
		if (o->t && !gpu_table_get(o->t, o->a->layer, e, &st->base[e])) {
			st->held[e] = HELD_GPU;
			st->hlist[st->n_held++] = e;
		} else {
			st->held[e] = HELD_CPU;
		}
	}
	return st->held[e];
}

void core_gpu_release(struct core_gpu_op *o)
{
	struct core_gpu_stage *st = o->st;
	uint32_t i;

	for (i = 0; i < st->n_held; i++)
		gpu_table_put(o->t, o->a->layer, st->hlist[i]);
	st->n_held = 0;
	memset(st->held, 0, o->E);
}

/*
 * Plan the GPU part of tokens [t0, t0 + tc): slots sorted by expert
 * (tokens in order, a token naming an expert twice gets one slot), a group
 * per expert, each token's slots; and the CPU skip mask.
 * Returns the CPU pairs left.
 */
uint32_t core_gpu_plan(struct core_gpu_op *o, const void *ids, const float *w,
		     uint32_t tc, uint32_t *n_groups, uint32_t *max_m)
{
	struct core_gpu_stage *st = o->st;
	const struct core_expert *ex = core_model_expert(o->m, o->a->layer, 0);
	uint8_t *pin = st->pin;
	int32_t *slot_tok = (int32_t *)(pin + o->l.slot_tok);
	float *slot_w = (float *)(pin + o->l.slot_w);
	int32_t *tok_slot = (int32_t *)(pin + o->l.tok_slot);
	struct gpu_group *grp = (struct gpu_group *)(pin + o->l.groups);
	uint32_t *start = st->count, *fill = st->count + o->E + 1;
	const uint64_t *skip_in = o->a->skip_mask;
	uint32_t t, j, e, cpu = 0, g = 0, mm = 0;
	size_t n = (size_t)tc * o->k, i;

	memset(start, 0, (size_t)(o->E + 1) * 4);
	for (i = 0; i < n; i++) {
		int64_t id = core_moe_id(ids, o->a->ids_dtype, i);

		if (id < 0 || id >= o->E ||
		    (skip_in && (skip_in[id / 64] >> (id % 64) & 1)))
			continue;
		if (hold(o, (uint32_t)id) == HELD_GPU)
			start[id + 1]++;
		else if (ex[id].present)
			cpu++;
	}
	for (e = 0; e < o->E; e++) {
		start[e + 1] += start[e];
		fill[e] = start[e];
	}
	for (t = 0; t < tc; t++) {
		for (j = 0; j < o->k; j++) {
			int64_t id = core_moe_id(ids, o->a->ids_dtype,
					     (size_t)t * o->k + j);

			tok_slot[t * o->k + j] = -1;
			if (id < 0 || id >= o->E ||
			    st->held[id] != HELD_GPU ||
			    (skip_in && (skip_in[id / 64] >> (id % 64) & 1)))
				continue;
			if (fill[id] > start[id] &&
			    slot_tok[fill[id] - 1] == (int32_t)t) {
				slot_w[fill[id] - 1] += w[(size_t)t * o->k + j];
				continue;
			}
			slot_tok[fill[id]] = (int32_t)t;
			slot_w[fill[id]] = w[(size_t)t * o->k + j];
			tok_slot[t * o->k + j] = (int32_t)fill[id];
			fill[id]++;
		}
	}
	for (e = 0; e < o->E; e++) {
		const struct gpu_layout *gl;
		int p;

		if (fill[e] == start[e])
			continue;
		gl = &o->t->lay;	/* a GPU slot: the table exists */
		for (p = 0; p < 3; p++) {
			grp[g].w[p] = st->base[e] + gl->off[GPU_GATE_Q + p];
			grp[g].s[p] = gl->bytes[GPU_GATE_S + p] ?
				st->base[e] + gl->off[GPU_GATE_S + p] : 0;
		}
		grp[g].slot0 = start[e];
		grp[g].m = fill[e] - start[e];
		if (grp[g].m > mm)
			mm = grp[g].m;
		g++;
	}
	/* the CPU skips what the caller skips and what the GPU runs */
	memset(st->skip, 0, (size_t)(o->E + 63) / 64 * 8);
	for (e = 0; e < o->E; e++)
		if ((skip_in && (skip_in[e / 64] >> (e % 64) & 1)) ||
		    st->held[e] == HELD_GPU)
			st->skip[e / 64] |= 1ull << (e % 64);
	*n_groups = g;
	*max_m = mm;
	return cpu;
}

/*
 * Enqueue the GPU part of a planned chunk on kt's stream. @whole: the GPU
 * part is all of y (no CPU part, no accumulation), so y comes back in the
 * caller's dtype, converted on the device, and is only copied on the host.
 */
static int gpu_part(struct core_gpu_op *o, uint32_t t0, uint32_t tc,
		    uint32_t n_groups, uint32_t max_m, bool whole)
{
	struct gpu_dev *d = o->d;
	struct core_gpu_stage *st = o->st;
	CUstream s = d->stream;
	struct gpu_ffn_args fa = {
		.groups = st->dev + o->l.groups,
		.x = st->dev + o->l.x,
		.slot_tok = st->dev + o->l.slot_tok,
		.slot_w = st->dev + o->l.slot_w,
		.tok_slot = st->dev + o->l.tok_slot,
		.a = st->dev + o->l.a,
		.ypart = st->dev + o->l.ypart,
		.y = st->dev + o->l.y,
		.H = o->H, .I = o->I, .group = o->m->group_size,
		.n_groups = n_groups,
		.x_bf16 = o->a->x_dtype == KT_DTYPE_BF16,
		.top_k = o->k, .tokens = tc,
	};
	size_t from = o->l.x, yfrom = o->l.y, ysz = 4;
	int ret;

	if (o->dev_mode) {
		/* the kernels read the caller's x where it is */
		fa.x = (CUdeviceptr)(uintptr_t)o->a->x +
			(size_t)t0 * o->H * o->esz;
		from = o->l.slot_tok;
	} else {
		memcpy(st->pin, (const uint8_t *)o->a->x +
		       (size_t)t0 * o->H * o->esz, (size_t)tc * o->H * o->esz);
	}
	ret = gpu_check(d, d->cu.memcpy_htod_async(st->dev + from,
			st->pin + from, o->l.front - from, s),
			"cuMemcpyHtoDAsync (activations)");
	if (!ret)
		ret = gpu_ffn_launch(d, o->m->quant, &fa, max_m, tc,
				     max_m >= MMA_MIN_M, s);
	if (ret || o->dev_mode)
		return ret;
	if (whole && o->a->y_dtype == KT_DTYPE_BF16) {
		/* no CPU part: its device space takes y in bf16 */
		struct gpu_combine_args c = {
			.y = st->dev + o->l.ycpu, .ya = st->dev + o->l.y,
			.n = tc * o->H, .H = o->H, .y_bf16 = 1,
		};

		ret = gpu_combine_launch(d, &c, s);
		if (ret)
			return ret;
		yfrom = o->l.ycpu;
		ysz = 2;
	}
	return gpu_check(d, d->cu.memcpy_dtoh_async(st->pin + o->l.ygpu,
			 st->dev + yfrom, (size_t)tc * o->H * ysz, s),
			 "cuMemcpyDtoHAsync (y)");
}

/* One chunk's host sum, shared by the workers that split it. */
struct sum_job {
	struct core_gpu_op *o;
	size_t base;		/* first element of the chunk in y */
	size_t n;		/* elements of the chunk */
	size_t per;		/* elements per worker */
	bool cpu_ran, cpu_in_y, gpu_ran;
};

/* Elements [i0, i1) of the chunk: (y if accumulating) + CPU + GPU part. */
static void sum_range(const struct sum_job *j, size_t i0, size_t i1)
{
	struct core_gpu_op *o = j->o;
	const float *yg = (const float *)(o->st->pin + o->l.ygpu);
	const float *yc = o->st->ycpu;
	bool acc = o->a->flags & KT_MOE_F_ACCUMULATE;
	size_t i;

	if (o->a->y_dtype == KT_DTYPE_F32) {
		float *y = (float *)o->a->y + j->base;

		for (i = i0; i < i1; i++) {
			/* y holds the CPU part only when the CPU ran */
			float v = (j->cpu_ran && j->cpu_in_y) || acc ? y[i] : 0.0f;

			if (j->cpu_ran && !j->cpu_in_y)
				v += yc[i];
			y[i] = j->gpu_ran ? v + yg[i] : v;
		}
		return;
	}
	{
		uint16_t *y = (uint16_t *)o->a->y + j->base;

		for (i = i0; i < i1; i++) {
			float v = acc ? kern_bf16_to_f32(y[i]) : 0.0f;

			if (j->cpu_ran)
				v += yc[i];
			if (j->gpu_ran)
				v += yg[i];
			y[i] = kern_f32_to_bf16(v);
		}
	}
}

static void sum_worker(void *arg, const struct core_worker_info *w)
{
	const struct sum_job *j = arg;
	size_t i0 = (size_t)w->global * j->per;

	if (i0 < j->n)
		sum_range(j, i0, i0 + j->per < j->n ? i0 + j->per : j->n);
}

/*
 * y rows of the chunk = (y if accumulating) + CPU part + GPU part, on
 * every worker once the chunk is large enough to pay for waking them (the
 * bf16 rounding alone is a millisecond for 512 tokens on one core).
 */
static void sum_host(struct core_gpu_op *o, uint32_t t0, uint32_t tc, bool cpu_ran,
		     bool cpu_in_y, bool gpu_ran)
{
	struct sum_job j = {
		.o = o, .base = (size_t)t0 * o->H, .n = (size_t)tc * o->H,
		.cpu_ran = cpu_ran, .cpu_in_y = cpu_in_y, .gpu_ran = gpu_ran,
	};
	unsigned int nw = o->ctx->n_workers;

	if (nw < 2 || j.n < SUM_SPLIT_MIN) {
		sum_range(&j, 0, j.n);
		return;
	}
	/* shares of 32 elements: where y is 64-byte aligned, no cache line
	 * is written by two workers */
	j.per = ((j.n + nw - 1) / nw + 31) & ~(size_t)31;
	core_ctx_run(o->ctx, sum_worker, &j);
}

static int run_chunk(struct core_gpu_op *o, uint32_t t0, uint32_t tc)
{
	struct gpu_dev *d = o->d;
	struct core_gpu_stage *st = o->st;
	const void *ids = (const uint8_t *)o->a->ids + (size_t)t0 * o->k * o->idsz;
	const float *w = o->a->w + (size_t)t0 * o->k;
	const void *x = (const uint8_t *)o->a->x + (size_t)t0 * o->H * o->esz;
	uint32_t n_groups, max_m, cpu;
	struct kt_sqe sub;
	bool cpu_in_y, whole;
	int ret, ret2;

	if (o->dev_mode) {
		/* routing and the CPU experts need x, ids and w on the host */
		CUstream s = d->stream;
		size_t S = (size_t)tc * o->k;

		ret = gpu_check(d, d->cu.memcpy_dtoh_async(st->pin + o->l.ids,
				(CUdeviceptr)(uintptr_t)ids, S * o->idsz, s),
				"cuMemcpyDtoHAsync (ids)");
		if (!ret)
			ret = gpu_check(d, d->cu.memcpy_dtoh_async(
					st->pin + o->l.w,
					(CUdeviceptr)(uintptr_t)w, S * 4, s),
					"cuMemcpyDtoHAsync (w)");
		if (!ret)
			ret = gpu_check(d, d->cu.memcpy_dtoh_async(
					st->pin + o->l.x,
					(CUdeviceptr)(uintptr_t)x,
					(size_t)tc * o->H * o->esz, s),
					"cuMemcpyDtoHAsync (x)");
		if (!ret)
			ret = gpu_check(d, d->cu.stream_synchronize(s),
					"cuStreamSynchronize");
		if (ret)
			return ret;
		ids = st->pin + o->l.ids;
		w = (const float *)(st->pin + o->l.w);
		x = st->pin + o->l.x;
	}
	cpu = core_gpu_plan(o, ids, w, tc, &n_groups, &max_m);
	whole = !cpu && n_groups && !(o->a->flags & KT_MOE_F_ACCUMULATE);
	if (n_groups) {
		ret = gpu_part(o, t0, tc, n_groups, max_m, whole);
		if (ret)
			goto sync;
	}
	/* meanwhile the CPU experts, straight into y when y is f32 on the
	 * host (the GPU part is added after), else into f32 scratch */
	cpu_in_y = !o->dev_mode && o->a->y_dtype == KT_DTYPE_F32;
	ret = 0;
	if (cpu) {
		sub = *o->sqe;
		sub.moe.x = x;
		sub.moe.ids = ids;
		sub.moe.w = w;
		sub.moe.tokens = tc;
		sub.moe.skip_mask = st->skip;
		sub.moe.flags = o->a->flags & ~KT_MOE_F_DEVICE;
		if (cpu_in_y) {
			sub.moe.y = (float *)o->a->y + (size_t)t0 * o->H;
		} else {
			sub.moe.y = st->ycpu;
			sub.moe.y_dtype = KT_DTYPE_F32;
			sub.moe.flags &= ~KT_MOE_F_ACCUMULATE;
		}
		ret = core_moe_cpu_part(o->ctx, &sub);
	} else {
		/* no CPU part to count the chunk's routes (placement reads
		 * the heat of the GPU's experts too) */
		struct kt_moe_args routed = *o->a;

		routed.ids = ids;
		routed.tokens = tc;
		core_stats_count(o->m, &routed);
	}
sync:
	ret2 = gpu_check(d, d->cu.stream_synchronize(d->stream),
			 "cuStreamSynchronize");
	if (ret || ret2)
		return ret ? ret : ret2;
	if (!o->dev_mode && whole) {
		size_t ysz = o->a->y_dtype == KT_DTYPE_BF16 ? 2 : 4;

		memcpy((uint8_t *)o->a->y + (size_t)t0 * o->H * ysz,
		       o->st->pin + o->l.ygpu, (size_t)tc * o->H * ysz);
		return 0;
	}
	if (!o->dev_mode) {
		sum_host(o, t0, tc, cpu != 0, cpu_in_y, n_groups != 0);
		return 0;
	}
	{
		struct gpu_combine_args c = {
			.y = (CUdeviceptr)(uintptr_t)o->a->y +
				(size_t)t0 * o->H * (o->a->y_dtype ==
						     KT_DTYPE_BF16 ? 2 : 4),
			.ya = cpu ? st->dev + o->l.ycpu : 0,
			.yb = n_groups ? st->dev + o->l.y : 0,
			.n = tc * o->H, .H = o->H,
			.y_bf16 = o->a->y_dtype == KT_DTYPE_BF16,
			.acc = !!(o->a->flags & KT_MOE_F_ACCUMULATE),
		};

		ret = 0;
		if (cpu)
			ret = gpu_check(d, d->cu.memcpy_htod_async(
					st->dev + o->l.ycpu, st->ycpu,
					(size_t)tc * o->H * 4, d->stream),
					"cuMemcpyHtoDAsync (CPU part)");
		if (!ret)
			ret = gpu_combine_launch(d, &c, d->stream);
		if (!ret)
			ret = gpu_check(d, d->cu.stream_synchronize(d->stream),
					"cuStreamSynchronize");
		return ret;
	}
}

int core_gpu_check_args(const struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	const struct kt_model *m = sqe->model;
	const struct kt_moe_args *a = &sqe->moe;

	if (!m || m->ctx != ctx || !a->x || !a->ids || !a->w || !a->y ||
	    !a->tokens || a->tokens > KT_MOE_MAX_TOKENS || !a->top_k ||
	    a->top_k > KT_MOE_MAX_TOPK || a->layer >= m->n_layers ||
	    (a->flags & ~KT_MOE_F_ALL) ||
	    (a->x_dtype != KT_DTYPE_F32 && a->x_dtype != KT_DTYPE_BF16) ||
	    (a->y_dtype != KT_DTYPE_F32 && a->y_dtype != KT_DTYPE_BF16) ||
	    (a->ids_dtype != KT_DTYPE_I32 && a->ids_dtype != KT_DTYPE_I64))
		return -EINVAL;
	return 0;
}

int core_moe_gpu_op(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	const struct kt_moe_args *a = &sqe->moe;
	struct kt_model *m = (struct kt_model *)sqe->model;
	bool dev_mode = a->flags & KT_MOE_F_DEVICE;
	struct gpu_table *t = NULL;
	struct core_gpu_op o;
	uint32_t t0, tc, chunk;
	int ret;

	if (m && m->ctx == ctx && a->layer < m->n_layers)
		t = __atomic_load_n(&m->gpu, __ATOMIC_ACQUIRE);
	if (!dev_mode && (!ctx->gpu || !t))
		return core_moe_op(ctx, sqe);
	/* the device table alone says what is on the GPU (moe.h) */
	if (!dev_mode && !gpu_table_layer_count(t, a->layer))
		return core_moe_cpu_part(ctx, sqe);
	if (!ctx->gpu) {
		core_log(ctx, KT_LOG_ERROR,
			 "moe: KT_MOE_F_DEVICE without a GPU in the context");
		return -ENODEV;
	}
	ret = core_gpu_check_args(ctx, sqe);
	if (ret)
		return ret;
	ret = gpu_dev_compute_ok(ctx->gpu->d);
	if (ret)
		return ret;
	memset(&o, 0, sizeof(o));
	o.ctx = ctx;
	o.d = ctx->gpu->d;
	o.m = m;
	o.t = t;
	o.st = &ctx->gpu->ring;
	o.sqe = sqe;
	o.a = a;
	o.dev_mode = dev_mode;
	o.esz = a->x_dtype == KT_DTYPE_BF16 ? 2 : 4;
	o.idsz = a->ids_dtype == KT_DTYPE_I64 ? 8 : 4;
	o.H = m->hidden;
	o.I = m->inter;
	o.E = m->n_experts;
	o.k = a->top_k;
	chunk = a->tokens < GPU_CHUNK ? a->tokens : GPU_CHUNK;
	core_gpu_chunk_layout(&o.l, chunk, o.k, o.H, o.I, o.E, o.esz);
	ret = gpu_dev_push(o.d);
	if (ret)
		return ret;
	ret = core_gpu_stage_reserve(o.d, o.st, &o.l, o.E, (size_t)chunk * o.H * 4);
	if (ret)
		goto out;
	for (t0 = 0; t0 < a->tokens && !ret; t0 += tc) {
		tc = a->tokens - t0 < chunk ? a->tokens - t0 : chunk;
		ret = run_chunk(&o, t0, tc);
	}
	if (o.t)
		core_gpu_release(&o);
	else
		memset(o.st->held, 0, o.E);
out:
	gpu_dev_pop(o.d);
	return ret;
}
