// SPDX-License-Identifier: MIT
/*
 * moe-stream.c - MoE ops ordered on a caller's CUDA stream, with no host
 * wait: copies to pinned staging, a host function that plans the op and
 * starts the CPU part on a kt thread, the GPU kernels; the sync call adds
 * a host function that waits for the CPU part, its copy, and the sum.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ktcore/ctx.h"
#include "ktcore/moe.h"
#include "ktcore/moe-gpu.h"

/* Ops that may be submitted and not yet past their sync on the stream. */
#define STREAM_OPS	4

enum { OP_FREE, OP_SUBMITTED, OP_SYNCED };
enum { CPU_IDLE, CPU_WANTED, CPU_DONE };

/* One op between submit and the end of its sync on the stream. */
struct sop {
	struct core_gpu_stream *s;
	struct kt_sqe sqe;		/* the caller's op, kept */
	uint8_t *held;			/* [E] taken at submit */
	CUdeviceptr *base;
	uint32_t *hlist;
	uint32_t n_held;
	const volatile uint32_t *word;	/* run-time token count, or NULL */
	uint32_t T, tc, cpu;
	int slot_state;			/* OP_*: the submitter's view */
	int cpu_state;			/* CPU_*: under s->mu */
	int res;
};

struct core_gpu_stream {
	struct kt_ctx *ctx;
	struct core_gpu_stage st;	/* shared: the stream orders its use */
	float *ycpu;			/* pinned [GPU_CHUNK][H] */
	size_t ycpu_bytes;
	CUstream stream;		/* of the op in flight */
	struct sop ops[STREAM_OPS];
	uint32_t next;			/* next slot to use */
	uint32_t n_experts;
	pthread_t thr;
	bool thr_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct sop *want;		/* the CPU part asked for (under mu) */
	bool stop;
	int last_err;
};

/* The layout of @o plus one pinned and one device word: the token count. */
static void layout(struct core_gpu_op *o, uint32_t T, size_t *pin_count,
		   size_t *dev_count)
{
	core_gpu_chunk_layout(&o->l, T, o->k, o->H, o->I, o->E, o->esz);
	*pin_count = o->l.pin_total;
	*dev_count = o->l.dev_total;
	o->l.pin_total += 256;
	o->l.dev_total += 256;
}

static void op_init(struct core_gpu_op *o, struct core_gpu_stream *s,
		    const struct kt_sqe *sqe)
{
	struct kt_model *m = (struct kt_model *)sqe->model;

	memset(o, 0, sizeof(*o));
	o->ctx = s->ctx;
	o->d = s->ctx->gpu->d;
	o->m = m;
	o->t = __atomic_load_n(&m->gpu, __ATOMIC_ACQUIRE);
	o->st = &s->st;
	o->sqe = sqe;
	o->a = &sqe->moe;
	o->dev_mode = true;
	o->esz = o->a->x_dtype == KT_DTYPE_BF16 ? 2 : 4;
	o->idsz = o->a->ids_dtype == KT_DTYPE_I64 ? 8 : 4;
	o->H = m->hidden;
	o->I = m->inter;
	o->E = m->n_experts;
	o->k = o->a->top_k;
}

/* ---- the CPU part, on kt's stream thread -------------------------------- */

static int cpu_part(struct kt_ctx *ctx, void *arg)
{
	struct sop *p = arg;
	struct core_gpu_stream *s = p->s;
	struct core_gpu_op o;
	struct kt_sqe sub = p->sqe;

	op_init(&o, s, &p->sqe);
	{
		size_t pc, dc;

		layout(&o, p->T, &pc, &dc);
	}
	sub.moe.x = s->st.pin + o.l.x;
	sub.moe.ids = s->st.pin + o.l.ids;
	sub.moe.w = (const float *)(s->st.pin + o.l.w);
	sub.moe.y = s->ycpu;
	sub.moe.tokens = p->tc;
	sub.moe.y_dtype = KT_DTYPE_F32;
	sub.moe.flags = 0;
	sub.moe.skip_mask = s->st.skip;
	return core_moe_cpu_part(ctx, &sub);
}

static void *stream_thread(void *arg)
{
	struct core_gpu_stream *s = arg;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct sop *p;

		while (!s->want && !s->stop)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->stop)
			break;
		p = s->want;
		s->want = NULL;
		pthread_mutex_unlock(&s->mu);
		p->res = core_ctx_exec(s->ctx, cpu_part, p);
		pthread_mutex_lock(&s->mu);
		p->cpu_state = CPU_DONE;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* ---- host functions, run by the driver in stream order ------------------ */

/* After the copies of ids, w, x: plan, then start the CPU part. */
static void host_plan(void *arg)
{
	struct sop *p = arg;
	struct core_gpu_stream *s = p->s;
	struct core_gpu_op o;
	size_t pc, dc, G;
	uint32_t ng, mm, t, j;
	struct gpu_group *grp;
	int32_t *tok_slot;

	op_init(&o, s, &p->sqe);
	layout(&o, p->T, &pc, &dc);
	p->tc = p->word ? *p->word : p->T;
	if (p->tc > p->T)
		p->tc = p->T;
	/* the holds taken at submit become the stage's */
	memcpy(s->st.held, p->held, o.E);
	memcpy(s->st.base, p->base, o.E * sizeof(*p->base));
	s->st.n_held = 0;
	p->cpu = p->tc ? core_gpu_plan(&o, s->st.pin + o.l.ids,
				       (const float *)(s->st.pin + o.l.w),
				       p->tc, &ng, &mm) : 0;
	if (!p->tc)
		ng = 0;
	/* the kernels were sized for T: empty groups and tokens beyond tc */
	G = (size_t)p->T * o.k < o.E ? (size_t)p->T * o.k : o.E;
	grp = (struct gpu_group *)(s->st.pin + o.l.groups);
	for (; ng < G; ng++)
		grp[ng].m = 0;
	tok_slot = (int32_t *)(s->st.pin + o.l.tok_slot);
	for (t = p->tc; t < p->T; t++)
		for (j = 0; j < o.k; j++)
			tok_slot[t * o.k + j] = -1;
	*(uint32_t *)(s->st.pin + pc) = p->tc;
	pthread_mutex_lock(&s->mu);
	if (p->cpu) {
		p->cpu_state = CPU_WANTED;
		s->want = p;
		pthread_cond_broadcast(&s->cv);
	} else {
		p->cpu_state = CPU_DONE;
		p->res = 0;
	}
	pthread_mutex_unlock(&s->mu);
}

/* Before the copy of the CPU part: wait for it. */
static void host_wait(void *arg)
{
	struct sop *p = arg;
	struct core_gpu_stream *s = p->s;
	size_t n = (size_t)p->T * p->sqe.model->hidden;

	pthread_mutex_lock(&s->mu);
	while (p->cpu_state != CPU_DONE)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	/* no CPU expert, or a failed CPU part: add nothing */
	if (!p->cpu || p->res)
		memset(s->ycpu, 0, n * 4);
}

/* After the sum: the op's holds go, its slot is free. */
static void host_done(void *arg)
{
	struct sop *p = arg;
	struct core_gpu_stream *s = p->s;
	struct gpu_table *t = p->sqe.model->gpu;
	uint32_t i;

	for (i = 0; i < p->n_held; i++)
		gpu_table_put(t, p->sqe.moe.layer, p->hlist[i]);
	p->n_held = 0;
	__atomic_store_n(&s->last_err, p->res, __ATOMIC_RELAXED);
	pthread_mutex_lock(&s->mu);
	p->cpu_state = CPU_IDLE;
	/* release: the submitter reuses the slot after this */
	__atomic_store_n(&p->slot_state, OP_FREE, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&s->mu);
}

/* ---- the calls ------------------------------------------------------------ */

static int stream_get(struct kt_ctx *ctx, struct core_gpu_stream **out)
{
	struct core_gpu *g = ctx->gpu;
	struct core_gpu_stream *s = g->strm;

	if (s) {
		*out = s;
		return 0;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->ctx = ctx;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (pthread_create(&s->thr, NULL, stream_thread, s)) {
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
		free(s);
		return -EAGAIN;
	}
	s->thr_started = true;
	g->strm = s;
	*out = s;
	return 0;
}

void core_gpu_stream_free(struct kt_ctx *ctx)
{
	struct core_gpu_stream *s = ctx->gpu ? ctx->gpu->strm : NULL;
	struct gpu_dev *d;
	unsigned int i;

	if (!s)
		return;
	d = ctx->gpu->d;
	pthread_mutex_lock(&s->mu);
	/* a CPU part asked for (an op never synced) runs out first: the
	 * workers are still there */
	for (i = 0; i < STREAM_OPS; i++)
		while (s->ops[i].cpu_state == CPU_WANTED)
			pthread_cond_wait(&s->cv, &s->mu);
	s->stop = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (s->thr_started)
		pthread_join(s->thr, NULL);
	if (s->ycpu) {
		int pushed = !gpu_dev_push(d);

		gpu_check(d, d->cu.mem_free_host(s->ycpu), "cuMemFreeHost");
		if (pushed)
			gpu_dev_pop(d);
	}
	core_gpu_stage_free(d, &s->st);
	for (i = 0; i < STREAM_OPS; i++) {
		free(s->ops[i].held);
		free(s->ops[i].base);
		free(s->ops[i].hlist);
	}
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	ctx->gpu->strm = NULL;
}

/* Per-op arrays of @E experts for every slot. */
static int ops_reserve(struct core_gpu_stream *s, uint32_t E)
{
	unsigned int i;

	if (s->n_experts >= E)
		return 0;
	for (i = 0; i < STREAM_OPS; i++) {
		struct sop *p = &s->ops[i];

		free(p->held);
		free(p->base);
		free(p->hlist);
		p->held = calloc(E, 1);
		p->base = calloc(E, sizeof(*p->base));
		p->hlist = calloc(E, 4);
		if (!p->held || !p->base || !p->hlist) {
			s->n_experts = 0;
			return -ENOMEM;
		}
	}
	s->n_experts = E;
	return 0;
}

static bool all_free(struct core_gpu_stream *s)
{
	unsigned int i;

	for (i = 0; i < STREAM_OPS; i++)
		if (__atomic_load_n(&s->ops[i].slot_state, __ATOMIC_ACQUIRE) !=
		    OP_FREE)
			return false;
	return true;
}

/* Grow what the op needs; only while no op is in flight. */
static int stream_reserve(struct core_gpu_stream *s, struct core_gpu_op *o,
			  uint32_t T)
{
	struct gpu_dev *d = o->d;
	size_t pc, dc, ybytes = (size_t)T * o->H * 4;
	int ret;

	layout(o, T, &pc, &dc);
	if (s->st.pin_bytes >= o->l.pin_total &&
	    s->st.dev_bytes >= o->l.dev_total && s->st.n_experts >= o->E &&
	    s->n_experts >= o->E && s->ycpu_bytes >= ybytes)
		return 0;
	if (!all_free(s))
		return -EBUSY;
	ret = core_gpu_stage_reserve(d, &s->st, &o->l, o->E, 0);
	if (!ret)
		ret = ops_reserve(s, o->E);
	if (!ret && s->ycpu_bytes < ybytes) {
		void *p = NULL;

		if (s->ycpu)
			gpu_check(d, d->cu.mem_free_host(s->ycpu),
				  "cuMemFreeHost");
		s->ycpu = NULL;
		s->ycpu_bytes = 0;
		ret = gpu_check(d, d->cu.mem_alloc_host(&p, ybytes),
				"cuMemAllocHost (CPU part)");
		if (!ret) {
			s->ycpu = p;
			s->ycpu_bytes = ybytes;
		}
	}
	return ret;
}

/* Everything after the copies; @p is the op's slot. */
static int enqueue_submit(struct core_gpu_stream *s, struct core_gpu_op *o,
			  struct sop *p, CUstream cs)
{
	struct gpu_dev *d = o->d;
	const struct kt_moe_args *a = o->a;
	size_t pc, dc, S = (size_t)p->T * o->k;
	uint32_t G = S < o->E ? (uint32_t)S : o->E;
	struct gpu_ffn_args fa;
	int ret;

	layout(o, p->T, &pc, &dc);
	ret = gpu_check(d, d->cu.memcpy_dtoh_async(s->st.pin + o->l.ids,
			(CUdeviceptr)(uintptr_t)a->ids, S * o->idsz, cs),
			"cuMemcpyDtoHAsync (ids)");
	if (!ret)
		ret = gpu_check(d, d->cu.memcpy_dtoh_async(s->st.pin + o->l.w,
				(CUdeviceptr)(uintptr_t)a->w, S * 4, cs),
				"cuMemcpyDtoHAsync (w)");
	if (!ret)
		ret = gpu_check(d, d->cu.memcpy_dtoh_async(s->st.pin + o->l.x,
				(CUdeviceptr)(uintptr_t)a->x,
				(size_t)p->T * o->H * o->esz, cs),
				"cuMemcpyDtoHAsync (x)");
	if (!ret)
		ret = gpu_check(d, d->cu.launch_host_func(cs, host_plan, p),
				"cuLaunchHostFunc (plan)");
	/* the plan and the token count, read from pinned memory when the
	 * stream gets here (after host_plan wrote them) */
	if (!ret)
		ret = gpu_check(d, d->cu.memcpy_htod_async(
				s->st.dev + o->l.slot_tok,
				s->st.pin + o->l.slot_tok,
				o->l.front - o->l.slot_tok, cs),
				"cuMemcpyHtoDAsync (plan)");
	if (!ret)
		ret = gpu_check(d, d->cu.memcpy_htod_async(s->st.dev + dc,
				s->st.pin + pc, 4, cs),
				"cuMemcpyHtoDAsync (count)");
	if (ret || !G)
		return ret;
	memset(&fa, 0, sizeof(fa));
	fa.groups = s->st.dev + o->l.groups;
	fa.x = (CUdeviceptr)(uintptr_t)a->x;
	fa.slot_tok = s->st.dev + o->l.slot_tok;
	fa.slot_w = s->st.dev + o->l.slot_w;
	fa.tok_slot = s->st.dev + o->l.tok_slot;
	fa.a = s->st.dev + o->l.a;
	fa.ypart = s->st.dev + o->l.ypart;
	fa.y = s->st.dev + o->l.y;
	fa.H = o->H;
	fa.I = o->I;
	fa.group = o->m->group_size;
	fa.n_groups = G;
	fa.x_bf16 = a->x_dtype == KT_DTYPE_BF16;
	fa.top_k = o->k;
	fa.tokens = p->T;
	/* routing is known only on the stream: size the grid for the most
	 * slots an expert can get, empty groups return at once */
	return gpu_ffn_launch(d, o->m->quant, &fa, p->T, p->T,
			      p->T >= 4 * MMA_MIN_M, cs);
}

KT_EXPORT int kt_moe_stream_submit(struct kt_ctx *ctx, struct kt_model *m,
				   const struct kt_moe_args *args, void *stream,
				   const volatile uint32_t *tokens_word)
{
	struct core_gpu_stream *s;
	struct core_gpu_op o;
	struct sop *p;
	struct kt_sqe sqe;
	uint32_t e;
	int ret;

	if (!ctx || !m || !args)
		return -EINVAL;
	if (!ctx->gpu)
		return -ENODEV;
	memset(&sqe, 0, sizeof(sqe));
	sqe.opcode = KT_OP_MOE;
	sqe.model = m;
	sqe.moe = *args;
	sqe.moe.flags |= KT_MOE_F_DEVICE;
	ret = core_gpu_check_args(ctx, &sqe);
	if (ret || args->tokens > GPU_CHUNK || args->reserved[0] ||
	    args->reserved[1] || args->pad0 || args->pad1)
		return ret ? ret : -EINVAL;
	ret = gpu_dev_compute_ok(ctx->gpu->d);
	if (ret)
		return ret;
	ret = stream_get(ctx, &s);
	if (ret)
		return ret;
	/* one op between submit and sync */
	if (__atomic_load_n(&s->ops[(s->next - 1) % STREAM_OPS].slot_state,
			    __ATOMIC_ACQUIRE) == OP_SUBMITTED)
		return -EBUSY;
	p = &s->ops[s->next % STREAM_OPS];
	if (__atomic_load_n(&p->slot_state, __ATOMIC_ACQUIRE) != OP_FREE ||
	    (s->stream != (CUstream)stream && !all_free(s)))
		return -EBUSY;
	ret = gpu_dev_push(ctx->gpu->d);
	if (ret)
		return ret;
	op_init(&o, s, &sqe);
	ret = stream_reserve(s, &o, args->tokens);
	if (ret)
		goto out;
	p->s = s;
	p->sqe = sqe;
	p->word = tokens_word;
	p->T = args->tokens;
	p->n_held = 0;
	p->res = 0;
	/* hold every resident expert of the layer until the op's end: the
	 * routing is known only when the stream gets there */
	for (e = 0; e < o.E; e++) {
		p->held[e] = HELD_CPU;
		if (o.t && !gpu_table_get(o.t, args->layer, e, &p->base[e])) {
			p->held[e] = HELD_GPU;
			p->hlist[p->n_held++] = e;
		}
	}
	o.sqe = &p->sqe;
	o.a = &p->sqe.moe;
	ret = enqueue_submit(s, &o, p, (CUstream)stream);
	if (ret) {
		/* what was enqueued may still run host_plan: wait it out */
		gpu_check(o.d, o.d->cu.stream_synchronize((CUstream)stream),
			  "cuStreamSynchronize");
		pthread_mutex_lock(&s->mu);
		while (p->cpu_state == CPU_WANTED)
			pthread_cond_wait(&s->cv, &s->mu);
		p->cpu_state = CPU_IDLE;
		pthread_mutex_unlock(&s->mu);
		for (e = 0; e < p->n_held; e++)
			gpu_table_put(o.t, args->layer, p->hlist[e]);
		p->n_held = 0;
		goto out;
	}
	s->stream = (CUstream)stream;
	__atomic_store_n(&p->slot_state, OP_SUBMITTED, __ATOMIC_RELAXED);
	s->next++;
out:
	gpu_dev_pop(ctx->gpu->d);
	return ret;
}

KT_EXPORT int kt_moe_stream_sync(struct kt_ctx *ctx, void *stream)
{
	struct core_gpu_stream *s;
	struct core_gpu_op o;
	struct sop *p;
	size_t pc, dc;
	struct gpu_combine_args c;
	struct gpu_dev *d;
	int ret;

	if (!ctx || !ctx->gpu || !ctx->gpu->strm)
		return -EINVAL;
	s = ctx->gpu->strm;
	p = &s->ops[(s->next - 1) % STREAM_OPS];
	if (__atomic_load_n(&p->slot_state, __ATOMIC_ACQUIRE) != OP_SUBMITTED ||
	    s->stream != (CUstream)stream)
		return -EINVAL;
	d = ctx->gpu->d;
	ret = gpu_dev_push(d);
	if (ret) {
		/* nothing enqueued: finish the op here */
		host_wait(p);
		host_done(p);
		return ret;
	}
	op_init(&o, s, &p->sqe);
	layout(&o, p->T, &pc, &dc);
	ret = gpu_check(d, d->cu.launch_host_func(s->stream, host_wait, p),
			"cuLaunchHostFunc (wait)");
	if (!ret)
		ret = gpu_check(d, d->cu.memcpy_htod_async(s->st.dev + o.l.ycpu,
				s->ycpu, (size_t)p->T * o.H * 4, s->stream),
				"cuMemcpyHtoDAsync (CPU part)");
	memset(&c, 0, sizeof(c));
	c.y = (CUdeviceptr)(uintptr_t)p->sqe.moe.y;
	c.ya = s->st.dev + o.l.ycpu;
	c.yb = s->st.dev + o.l.y;	/* the reduce wrote every row */
	c.count = s->st.dev + dc;
	c.n = p->T * o.H;
	c.H = o.H;
	c.y_bf16 = p->sqe.moe.y_dtype == KT_DTYPE_BF16;
	c.acc = !!(p->sqe.moe.flags & KT_MOE_F_ACCUMULATE);
	if (!ret)
		ret = gpu_combine_launch(d, &c, s->stream);
	if (!ret) {
		/* before host_done may run: it frees the slot */
		__atomic_store_n(&p->slot_state, OP_SYNCED, __ATOMIC_RELAXED);
		ret = gpu_check(d, d->cu.launch_host_func(s->stream, host_done,
				p), "cuLaunchHostFunc (done)");
		if (!ret)
			goto out;
	}
	/* a step failed: let what was enqueued run out, finish the op here
	 * (host_wait again is harmless), so no hold or slot is left */
	gpu_check(d, d->cu.stream_synchronize(s->stream),
		  "cuStreamSynchronize");
	host_wait(p);
	host_done(p);
out:
	gpu_dev_pop(d);
	return ret;
}

void core_gpu_stream_model_gone(struct kt_model *m)
{
	struct kt_ctx *ctx = m ? m->ctx : NULL;
	struct core_gpu_stream *s;
	struct gpu_dev *d;
	bool waited = false;
	unsigned int i;
	int pushed;

	if (!ctx || !ctx->gpu || !ctx->gpu->strm)
		return;
	s = ctx->gpu->strm;
	d = ctx->gpu->d;
	for (i = 0; i < STREAM_OPS; i++) {
		struct sop *p = &s->ops[i];
		int st = __atomic_load_n(&p->slot_state, __ATOMIC_ACQUIRE);

		if (st == OP_FREE || p->sqe.model != m)
			continue;
		pushed = !gpu_dev_push(d);
		if (!waited) {
			/* the op's kernels and host functions read the
			 * model's GPU and host experts: let the stream run
			 * out first */
			gpu_check(d, d->cu.stream_synchronize(s->stream),
				  "cuStreamSynchronize (kt_model_destroy)");
			waited = true;
		}
		if (st == OP_SUBMITTED) {
			core_misuse(ctx, "kt_model_destroy() on a model with a stream op not synced: call kt_moe_stream_sync() and let the stream pass it first; the op is finished without writing its y");
			/* as a failed sync does: the CPU part runs out, the
			 * holds go, the slot is free */
			host_wait(p);
			host_done(p);
		} else if (__atomic_load_n(&p->slot_state, __ATOMIC_ACQUIRE) !=
			   OP_FREE) {
			/* past its sync and the stream ran out, but the
			 * driver did not call host_done (a failed stream):
			 * finish it here */
			core_log(ctx, KT_LOG_ERROR,
				 "kt_model_destroy: a synced stream op never completed on its stream; finished here");
			host_wait(p);
			host_done(p);
		}
		if (pushed)
			gpu_dev_pop(d);
	}
}

KT_EXPORT int kt_ctx_gpu_last_error(const struct kt_ctx *ctx)
{
	if (!ctx || !ctx->gpu || !ctx->gpu->strm)
		return 0;
	return __atomic_load_n(&ctx->gpu->strm->last_err, __ATOMIC_RELAXED);
}
