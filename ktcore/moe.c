// SPDX-License-Identifier: MIT
/*
 * moe.c - the MoE op executor: validate, then per token chunk prepare
 * activations and route, run gate+up and down tasks on every node's slice
 * of the intermediate dimension, and sum the nodes in a fixed order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp.h"
#include "kernels/kern.h"
#include "kernels/pack.h"
#include "ktcore/cache.h"
#include "ktcore/core.h"
#include "ktcore/mem.h"
#include "ktcore/model.h"
#include "ktcore/moe.h"
#include "ktcore/residency.h"

/* Scratch per node is sized to hold this many bytes for a token chunk. */
#define MOE_SCRATCH_BUDGET	(512ull << 20)
#define MOE_MIN_CHUNK		16u
#define MOE_MAX_CHUNK		8192u
/* Slots (token, expert pairs) a chunk holds, per token, before it is cut. */
#define MOE_SLOTS_PER_TOKEN	8u
/* Tasks per worker a phase aims for, so that the last ones balance. */
#define MOE_TASKS_PER_WORKER	4u

/*
 * Down takes column blocks of up to this many, the same number for every
 * worker: each call reads a chunk's tiles of its block as one stream, and
 * narrower blocks restarted the streams (and the hardware prefetcher)
 * more often and paid each call's setup more often (decode: 256-column
 * blocks restarted them every 16 row blocks; prefill: Documentation/
 * kernels.md, "Down column blocks").
 */
#define MOE_DOWN_COLS		1024u

/* Up to this many x elements (over nodes) the leader prepares alone. */
#define MOE_INLINE_PREPARE	32768u

#define CACHELINE 64
#define PAGE_BYTES 4096

/*
 * Each worker's kernel scratch starts on its own page, this far from the
 * next worker's and from the arrays around it. Back to back, the worker
 * whose scratch lay above the other's ran the FP8 prefill down 1.7x
 * slower than it on the same work (Zen 5, two workers; which worker was
 * slow followed the buffer, not the thread or the columns). The likely
 * cause: the lower worker walks its partial sums at a 2 KiB stride, its
 * hardware prefetchers run on past them into the other's scratch, and
 * each line they took misses on the owner's next write. Gaps of 4 and 16
 * KiB kept about half of the loss, 64 KiB and more none
 * (Documentation/kernels.md, "Worker scratch apart").
 */
#define MOE_SCRATCH_GAP	(64u << 10)

/*
 * Floats of padding after each partial y row. Rows of H = 2048 floats are
 * 8 KiB apart, so a down task's column block of every token fell into the
 * same few cache sets (1/8 of L2's): the block's y rows, read and written
 * once per expert, thrashed. One line of padding spreads them (a small
 * gain at T = 512, within the noise of one run).
 */
#define MOE_YPART_PAD	16u

/* One expert's slots in a token chunk, cut at KERN_MAX_M. */
struct moe_group {
	uint32_t expert;
	uint32_t slot0;
	uint32_t m;
};

/* What every scratch buffer is sized for: the maxima over models. */
struct moe_dims {
	unsigned int hidden;
	unsigned int experts;
	unsigned int slice;	/* most intermediate rows of one node */
	unsigned int chunks;	/* most KC chunks of one node */
	unsigned int tokens;	/* token chunk */
	unsigned int slots;	/* slot chunk */
	size_t xrb;		/* prepared x row */
	size_t arb;		/* prepared intermediate row of a slice */
	size_t wsb;		/* a worker's stride: its scratch and a gap */
	unsigned int threads;	/* workers of the node */
};

/*
 * One node's scratch, on that node. The plan fields are written by the
 * node's worker 0 in the prepare phase and read by all after the join.
 */
struct moe_node {
	uint32_t next_gu __attribute__((aligned(CACHELINE)));
	uint32_t next_down __attribute__((aligned(CACHELINE)));
	struct moe_dims d __attribute__((aligned(CACHELINE)));
	size_t bytes;
	int node;
	unsigned int i0, i1;	/* this node's slice (of the current model) */

	/* plan of the current chunk */
	uint32_t n_groups;
	uint32_t rb, n_rb;	/* gate+up row block and blocks per group */
	uint32_t n_gu;		/* gate+up tasks */
	uint32_t cb, n_down;	/* down column block and tasks */

	uint8_t *xact;		/* [tokens][xrb] */
	uint32_t *count;	/* [experts + 1] first slot of each expert */
	uint32_t *fill;		/* [experts] next free slot */
	uint32_t *slot_tok;	/* [slots] token within the chunk */
	float *slot_w;		/* [slots] */
	struct moe_group *groups;	/* [max_groups()] */
	uint32_t *done;		/* [groups][chunks] blocks finished */
	float *a;		/* [slots][slice] */
	uint8_t *aact;		/* [slots][arb] */
	float *ypart;		/* [tokens][hidden + MOE_YPART_PAD] */
	uint8_t *wscratch;	/* a gap, then [threads][wsb] */
	/* [threads + 1][hidden]: an x row zero-padded to the packed H, for
	 * each worker and the leader (prepare_inline()) */
	float *xpad;
};

/* Largest token chunk; tests lower it to cover chunking with small T. */
unsigned int core_moe_max_chunk = MOE_MAX_CHUNK;

struct moe_priv {
	unsigned int n_nodes;
	struct moe_node *nodes[KT_MAX_NODES];
};

/* One op's parameters, shared by every worker of every phase. */
struct moe_job {
	struct kt_ctx *ctx;
	const struct kt_model *m;
	const struct kt_moe_args *args;
	const struct kern_quant_ops *qo;	/* gate/up and x */
	const struct kern_quant_ops *qd;	/* down and its activations */
	struct moe_priv *priv;
	const struct core_expert *experts;	/* of the layer */
	/* H: width of x and y rows; HK: the packed H (gate/up's K, down's
	 * N), larger where the model is padded to the tiles */
	unsigned int H, HK, I, E, k, kc, group;
	/* the node that adds down's biases: the first with a slice */
	unsigned int bias_node;
	unsigned int t0, tc;	/* the chunk's tokens */
	size_t xrb, crb;
	/* expert cache: a gate+up pass computes the experts whose bytes
	 * came in for it, ready[e] == pass (ready NULL: one pass for all) */
	const uint8_t *ready;
	uint8_t pass;
};

static size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

static unsigned int max_groups(const struct moe_dims *d)
{
	return d->slots / KERN_MAX_M + d->experts + 1;
}

/* Lay out (p != NULL) or size (p == NULL) a node's scratch. */
static size_t node_layout(struct moe_node *n, uint8_t *p,
			  const struct moe_dims *d)
{
	size_t off = align_up(sizeof(*n), CACHELINE);

#define CARVE(field, bytes) do {					\
		if (p)							\
			n->field = (void *)(p + off);			\
		off = align_up(off + (bytes), CACHELINE);		\
	} while (0)
	CARVE(xact, (size_t)d->tokens * d->xrb);
	CARVE(count, (size_t)(d->experts + 1) * 4);
	CARVE(fill, (size_t)d->experts * 4);
	CARVE(slot_tok, (size_t)d->slots * 4);
	CARVE(slot_w, (size_t)d->slots * 4);
	CARVE(groups, (size_t)max_groups(d) * sizeof(struct moe_group));
	CARVE(done, (size_t)max_groups(d) * d->chunks * 4);
	CARVE(a, (size_t)d->slots * d->slice * 4);
	CARVE(aact, (size_t)d->slots * d->arb);
	CARVE(ypart, (size_t)d->tokens * (d->hidden + MOE_YPART_PAD) * 4);
	off = align_up(off, PAGE_BYTES);
	CARVE(wscratch, MOE_SCRATCH_GAP + (size_t)d->threads * d->wsb);
	CARVE(xpad, (size_t)(d->threads + 1) * d->hidden * 4);
#undef CARVE
	return off;
}

/* worker @id's kernel scratch: after a gap, on its own pages */
static void *worker_scratch(const struct moe_node *n, unsigned int id)
{
	return n->wscratch + MOE_SCRATCH_GAP + (size_t)id * n->d.wsb;
}

static void priv_free(void *p)
{
	struct moe_priv *priv = p;
	unsigned int i;

	for (i = 0; i < priv->n_nodes; i++)
		if (priv->nodes[i])
			core_node_free(priv->nodes[i], priv->nodes[i]->bytes);
	free(priv);
}

/*
 * The ops for @q: the context's variant, else the best lower one the CPU
 * runs that implements @q (a variant may lack a quantization).
 */
static const struct kern_quant_ops *pick_ops(const struct kt_ctx *ctx,
					     enum kt_quant q)
{
	uint32_t flags = core_cpu_flags();
	int isa;

	for (isa = kt_ctx_isa(ctx); isa != KT_ISA_AUTO;
	     isa = core_isa_lower((enum kt_isa)isa)) {
		const struct kern_quant_ops *qo =
			kern_quant_ops_get(kern_ops_get((enum kt_isa)isa), q);

		if (qo && core_isa_runs((enum kt_isa)isa, flags))
			return qo;
	}
	return NULL;
}

/* What @m needs on node @node_idx. */
static void dims_of(const struct kt_ctx *ctx, const struct kt_model *m,
		    const struct kern_quant_ops *qo,
		    const struct kern_quant_ops *qd, unsigned int node_idx,
		    struct moe_dims *d)
{
	size_t wsd;
	unsigned int n_nodes = core_ctx_nodes(ctx), i0, i1, slice = 0, j;
	struct kern_geom g = {
		.hidden = m->hidden, .inter = m->inter,
		.group = m->group_size, .kc = m->down_chunk,
	};
	for (j = 0; j < n_nodes; j++) {
		kern_node_slice(m->inter, m->down_chunk, n_nodes, j, &i0, &i1);
		if (i1 - i0 > slice)
			slice = i1 - i0;
	}
	memset(d, 0, sizeof(*d));
	d->hidden = m->hidden;
	d->experts = m->n_experts;
	d->slice = slice;
	d->chunks = slice / m->down_chunk;
	d->xrb = qo->act_row_bytes(m->hidden, m->group_size);
	d->arb = d->chunks * qd->act_row_bytes(m->down_chunk, m->group_size);
	/* one worker scratch serves both kernels of a mixed model */
	d->wsb = qo->scratch_bytes(&g, KERN_MAX_M);
	wsd = qd->scratch_bytes(&g, KERN_MAX_M);
	if (wsd > d->wsb)
		d->wsb = wsd;
	d->wsb = align_up(d->wsb, PAGE_BYTES) + MOE_SCRATCH_GAP;
	d->threads = core_ctx_node_threads(ctx, node_idx);
}

/* The token chunk: as many tokens as the budget holds for @d's rows. */
static void dims_chunk(struct moe_dims *d)
{
	size_t per_token = d->xrb + (size_t)d->hidden * 4 +
		MOE_SLOTS_PER_TOKEN * ((size_t)d->slice * 4 + d->arb + 8);
	unsigned int t;

	for (t = MOE_MAX_CHUNK; t > MOE_MIN_CHUNK; t /= 2)
		if (t <= core_moe_max_chunk)
			break;
	for (; t > MOE_MIN_CHUNK; t /= 2)
		if ((size_t)t * per_token <= MOE_SCRATCH_BUDGET)
			break;
	d->tokens = t;
	d->slots = t * MOE_SLOTS_PER_TOKEN;
}

static bool dims_fit(const struct moe_dims *have, const struct moe_dims *need)
{
	return have->hidden >= need->hidden &&
	       have->experts >= need->experts &&
	       have->slice >= need->slice && have->chunks >= need->chunks &&
	       have->xrb >= need->xrb && have->arb >= need->arb &&
	       have->wsb >= need->wsb && have->threads >= need->threads;
}

static void dims_max(struct moe_dims *d, const struct moe_dims *o)
{
#define MAXF(f) do { if (o->f > d->f) d->f = o->f; } while (0)
	MAXF(hidden);
	MAXF(experts);
	MAXF(slice);
	MAXF(chunks);
	MAXF(xrb);
	MAXF(arb);
	MAXF(wsb);
	MAXF(threads);
#undef MAXF
}

struct reserve_arg {
	const struct kt_model *m;
	const struct kern_quant_ops *qo, *qd;
};

static int reserve_fn(struct kt_ctx *ctx, void *p)
{
	const struct reserve_arg *ra = p;
	struct moe_priv *priv = core_ctx_priv(ctx);
	unsigned int n_nodes = core_ctx_nodes(ctx), j;

	if (!priv) {
		priv = calloc(1, sizeof(*priv));
		if (!priv)
			return -ENOMEM;
		priv->n_nodes = n_nodes;
		core_ctx_set_priv(ctx, priv, priv_free);
	}
	for (j = 0; j < n_nodes; j++) {
		struct moe_node *old = priv->nodes[j], *n;
		struct moe_dims need, d;
		size_t bytes;
		uint8_t *p8;

		dims_of(ctx, ra->m, ra->qo, ra->qd, j, &need);
		if (old && dims_fit(&old->d, &need))
			continue;
		d = need;
		if (old)
			dims_max(&d, &old->d);
		dims_chunk(&d);
		bytes = node_layout(NULL, NULL, &d);
		p8 = core_node_alloc(ctx, core_ctx_node_id(ctx, j), bytes);
		if (!p8)
			return -ENOMEM;
		n = (struct moe_node *)p8;
		memset(n, 0, sizeof(*n));
		n->d = d;
		n->bytes = bytes;
		n->node = core_ctx_node_id(ctx, j);
		node_layout(n, p8, &d);
		if (old)
			core_node_free(old, old->bytes);
		priv->nodes[j] = n;
		core_log(ctx, KT_LOG_DEBUG,
			 "moe scratch node %d: %zu MiB, chunk %u tokens",
			 n->node, bytes >> 20, d.tokens);
	}
	return 0;
}

int core_moe_reserve(struct kt_ctx *ctx, const struct kt_model *m)
{
	struct reserve_arg ra = { .m = m };
	uint32_t l;
	int ret;

	if (!ctx || !m)
		return -EINVAL;
	ra.qo = pick_ops(ctx, m->quant);
	/* scratch for every down type of the model's layers */
	for (l = 0, ret = 0; l < m->n_layers && !ret; l++) {
		enum kt_quant qd = core_model_down_quant(m, l);

		if (l && qd == core_model_down_quant(m, l - 1))
			continue;
		ra.qd = pick_ops(ctx, qd);
		if (!ra.qo || !ra.qd) {
			core_log(ctx, KT_LOG_ERROR, "no kernels for %s on %s",
				 kt_quant_name(ra.qo ? qd : m->quant),
				 kt_isa_name(kt_ctx_isa(ctx)));
			return -EINVAL;
		}
		ret = core_ctx_exec(ctx, reserve_fn, &ra);
		if (!m->layer_down_quant)
			break;
	}
	/* last: a model that failed here holds no counters */
	if (!ret)
		ret = core_stats_reserve(m);
	return ret;
}

/* ---- phase 1: prepare activations, route --------------------------------- */

static bool skipped(const struct kt_moe_args *a, int64_t e)
{
	return a->skip_mask && (a->skip_mask[e / 64] >> (e % 64) & 1);
}

static bool valid_expert(const struct moe_job *j, int64_t e)
{
	return e >= 0 && e < j->E && j->experts[e].present &&
	       !skipped(j->args, e);
}

/*
 * Counting sort of the chunk's (token, expert) pairs by expert, tokens in
 * order: deterministic. A token naming an expert twice gets one slot with
 * the weights summed, so that a kernel call never sees a y row twice.
 */
static void route(const struct moe_job *j, struct moe_node *n)
{
	const struct kt_moe_args *a = j->args;
	uint32_t *start = n->count, *fill = n->fill;
	size_t base = (size_t)j->t0 * j->k;
	unsigned int t, s, e, g = 0;

	memset(start, 0, (size_t)(j->E + 1) * 4);
	for (t = 0; t < j->tc * j->k; t++) {
		int64_t id = core_moe_id(a->ids, a->ids_dtype, base + t);

		if (valid_expert(j, id))
			start[id + 1]++;
	}
	for (e = 0; e < j->E; e++) {
		start[e + 1] += start[e];
		fill[e] = start[e];
	}
	for (t = 0; t < j->tc; t++) {
		for (s = 0; s < j->k; s++) {
			size_t i = base + (size_t)t * j->k + s;
			int64_t id = core_moe_id(a->ids, a->ids_dtype, i);

			if (!valid_expert(j, id))
				continue;
			if (fill[id] > start[id] &&
			    n->slot_tok[fill[id] - 1] == t) {
				n->slot_w[fill[id] - 1] += a->w[i];
				continue;
			}
			n->slot_tok[fill[id]] = t;
			n->slot_w[fill[id]] = a->w[i];
			fill[id]++;
		}
	}
	for (e = 0; e < j->E; e++) {
		uint32_t s0;

		for (s0 = start[e]; s0 < fill[e]; s0 += KERN_MAX_M) {
			n->groups[g].expert = e;
			n->groups[g].slot0 = s0;
			n->groups[g].m = fill[e] - s0 < KERN_MAX_M ?
				fill[e] - s0 : KERN_MAX_M;
			g++;
		}
	}
	n->n_groups = g;
}

/*
 * Gate+up rows per task. Blocks divide KC, or are whole chunks (a multiple
 * of KC that divides the slice), so that each chunk is finished by one task
 * or shared evenly. Whole chunks go to nodes whose groups average enough
 * tokens for the many-token kernels: those gather their activations into
 * tile order once per call, so fewer, taller calls gather less (one per
 * group and node at best instead of one per KC rows).
 */
static unsigned int plan_rows(const struct moe_job *j,
			      const struct moe_node *n, unsigned int want)
{
	unsigned int slice = n->i1 - n->i0, nch = slice / j->kc, c, rb;
	/* groups are in slot order: the last one ends the node's slots */
	unsigned int slots = n->n_groups ? n->groups[n->n_groups - 1].slot0 +
			     n->groups[n->n_groups - 1].m : 0;

	if (j->qo->gate_up_many && n->n_groups &&
	    slots / n->n_groups >= j->qo->many_min_m)
		for (c = nch; c > 1; c--)
			if (nch % c == 0 && n->n_groups * (nch / c) >= want)
				return c * j->kc;
	rb = j->kc;
	while (rb > 16 && n->n_groups * (slice / rb) < want)
		rb /= 2;
	return rb;
}

/* the down column block: the largest of at most MOE_DOWN_COLS, a multiple
 * of 16, that splits @H into a multiple of @threads blocks; 0 if none is
 * at least 256 */
static unsigned int down_cols(unsigned int H, unsigned int threads)
{
	unsigned int tasks;

	for (tasks = threads; H / tasks >= 256; tasks += threads)
		if (H % tasks == 0 && (H / tasks) % 16 == 0 &&
		    H / tasks <= MOE_DOWN_COLS)
			return H / tasks;
	return 0;
}

/*
 * Task sizes: gate+up the largest row blocks that still give every worker
 * a few tasks (plan_rows()); down blocks divide H (down_cols(), else the
 * largest that give every worker a few).
 */
static void plan(const struct moe_job *j, struct moe_node *n,
		 unsigned int threads)
{
	unsigned int want = threads * MOE_TASKS_PER_WORKER;
	unsigned int slice = n->i1 - n->i0, cb;

	n->rb = plan_rows(j, n, want);
	n->n_rb = slice / n->rb;
	n->n_gu = n->n_groups * n->n_rb;
	memset(n->done, 0, (size_t)n->n_groups * (slice / j->kc) * 4);
	n->cb = down_cols(j->H, threads);
	if (!n->cb) {
		cb = 256;
		while (cb > 16 && (j->H / cb < want || j->H % cb))
			cb /= 2;
		n->cb = cb;
	}
	n->n_down = j->H / n->cb;
	__atomic_store_n(&n->next_gu, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&n->next_down, 0, __ATOMIC_RELAXED);
}

/*
 * x rows of a model padded to the tiles, one at a time through @pad:
 * widened to f32 (exact) and zero beyond H, so that the prepared row is
 * the one of the padded x.
 */
static void prepare_padded(const struct moe_job *j, struct moe_node *n,
			   unsigned int t0, unsigned int t1, float *pad)
{
	const struct kt_moe_args *a = j->args;
	unsigned int t, c;

	memset(pad + j->H, 0, (size_t)(j->HK - j->H) * 4);
	for (t = t0; t < t1; t++) {
		size_t row = ((size_t)j->t0 + t) * j->H;

		if (a->x_dtype == KT_DTYPE_BF16)
			for (c = 0; c < j->H; c++)
				pad[c] = kern_bf16_to_f32(
					((const uint16_t *)a->x)[row + c]);
		else
			memcpy(pad, (const float *)a->x + row, (size_t)j->H * 4);
		j->qo->act_prepare(pad, (size_t)j->HK * 4, KT_DTYPE_F32, 1,
				   j->HK, j->group, n->xact + t * j->xrb,
				   j->xrb);
	}
}

/*
 * Quantize the chunk's x rows [t0, t1) into node @n's buffer; @slot is
 * the caller's xpad row (worker id, or threads for the leader).
 */
static void prepare_rows(const struct moe_job *j, struct moe_node *n,
			 unsigned int t0, unsigned int t1, unsigned int slot)
{
	const struct kt_moe_args *a = j->args;
	size_t esz = a->x_dtype == KT_DTYPE_BF16 ? 2 : 4;

	if (t1 <= t0)
		return;
	if (j->HK != j->H) {
		prepare_padded(j, n, t0, t1,
			       n->xpad + (size_t)slot * n->d.hidden);
		return;
	}
	j->qo->act_prepare((const uint8_t *)a->x +
			   ((size_t)j->t0 + t0) * j->H * esz,
			   (size_t)j->H * esz, a->x_dtype, t1 - t0,
			   j->H, j->group, n->xact + t0 * j->xrb, j->xrb);
}

static void phase_prepare(void *arg, const struct core_worker_info *w)
{
	const struct moe_job *j = arg;
	struct moe_node *n = j->priv->nodes[w->node_idx];

	if (w->id == 0) {
		route(j, n);
		plan(j, n, w->n_node);
	}
	prepare_rows(j, n, j->tc * w->id / w->n_node,
		     j->tc * (w->id + 1) / w->n_node, w->id);
}

/*
 * Few tokens (decode): the leader prepares every node itself, which costs
 * less than a fork-join; the result is the same.
 */
static void prepare_inline(const struct moe_job *j)
{
	unsigned int i;

	for (i = 0; i < j->priv->n_nodes; i++) {
		struct moe_node *n = j->priv->nodes[i];

		route(j, n);
		plan(j, n, core_ctx_node_threads(j->ctx, i));
		prepare_rows(j, n, 0, j->tc, n->d.threads);
	}
}

/* ---- phase 2: gate + up, intermediate quantized per finished chunk ------- */

/*
 * The epilogue of @expert's gate+up where it is not plain silu(g) * u:
 * its biases and the model's activation. Return: false for plain.
 */
static bool glu_of(const struct moe_job *j, uint32_t expert,
		   struct kern_glu *glu)
{
	const struct kt_model *m = j->m;
	const float *b = core_model_bias(m, j->args->layer, expert);

	if (m->act == KT_ACT_SILU && !b)
		return false;
	glu->act = m->act;
	glu->alpha = m->act_alpha;
	glu->limit = m->act_limit;
	glu->gate_bias = b;
	glu->up_bias = b ? b + m->inter : NULL;
	return true;
}

/*
 * Task @t of group @g wrote rows [r0, r0 + rb) of the intermediate: count
 * it in each chunk it touches; the task that completes a chunk quantizes
 * it (for down).
 */
static void gate_up_done(const struct moe_job *j, struct moe_node *n,
			 const struct moe_group *g, uint32_t t,
			 unsigned int r0)
{
	unsigned int slice = n->i1 - n->i0, nch = slice / j->kc;
	unsigned int per_chunk = n->rb < j->kc ? j->kc / n->rb : 1;
	unsigned int c, c1 = (r0 + n->rb + j->kc - 1) / j->kc;

	for (c = r0 / j->kc; c < c1; c++) {
		uint32_t *done = &n->done[(t / n->n_rb) * nch + c];

		/* acq_rel: the last block of a chunk sees the other blocks'
		 * rows of a (their release), then quantizes the whole chunk */
		if (__atomic_add_fetch(done, 1, __ATOMIC_ACQ_REL) != per_chunk)
			continue;
		j->qd->act_prepare(n->a + (size_t)g->slot0 * slice +
				   c * j->kc, (size_t)slice * 4, KT_DTYPE_F32,
				   g->m, j->kc, j->group,
				   n->aact + (size_t)g->slot0 * n->d.arb +
				   c * j->crb, n->d.arb);
	}
}

static void phase_gate_up(void *arg, const struct core_worker_info *w)
{
	const struct moe_job *j = arg;
	struct moe_node *n = j->priv->nodes[w->node_idx];
	unsigned int slice = n->i1 - n->i0;
	void *scratch = worker_scratch(n, w->id);
	uint32_t t;

	/* relaxed: the counter only hands out indices; the data each task
	 * reads was published by the phase join */
	while ((t = __atomic_fetch_add(&n->next_gu, 1, __ATOMIC_RELAXED)) <
	       n->n_gu) {
		const struct moe_group *g = &n->groups[t / n->n_rb];
		const struct core_expert *ex = &j->experts[g->expert];
		unsigned int r0 = (t % n->n_rb) * n->rb;	/* in slice */
		struct kern_gate_up_args ga = {
			.gate = &ex->gate, .up = &ex->up, .N = j->I, .K = j->HK,
			.group = j->group, .n0 = n->i0 + r0,
			.n1 = n->i0 + r0 + n->rb, .act = n->xact,
			.act_stride = j->xrb,
			.act_rows = n->slot_tok + g->slot0, .m = g->m,
			.out = n->a + (size_t)g->slot0 * slice + r0,
			.out_stride = slice, .scratch = scratch,
		};
		struct kern_glu glu;

		/* pass 1 takes the resident experts, each later one those
		 * whose reads completed since */
		if (j->ready && j->ready[g->expert] != j->pass)
			continue;
		if (glu_of(j, g->expert, &glu))
			ga.glu = &glu;
		if (j->qo->gate_up_many && g->m >= j->qo->many_min_m)
			j->qo->gate_up_many(&ga);
		else
			j->qo->gate_up(&ga);
		gate_up_done(j, n, g, t, r0);
	}
}

/* ---- phase 3: down, per column block over every expert in order ---------- */

/*
 * y[t][n0:n1] = (sum of the nodes' partial y, in node order) for every
 * token of the chunk, converted to y's dtype, added to y if accumulating.
 */
static void store_rows(const struct moe_job *j, unsigned int n0,
		       unsigned int n1, unsigned int n_src)
{
	const struct kt_moe_args *a = j->args;
	bool acc = a->flags & KT_MOE_F_ACCUMULATE;
	float sum[256];
	unsigned int t, c, c0, s, len;

	for (t = 0; t < j->tc; t++) {
		size_t row = (size_t)(j->t0 + t) * j->H;

		for (c0 = n0; c0 < n1; c0 += len) {
			const float *v = j->priv->nodes[0]->ypart +
				(size_t)t * (j->H + MOE_YPART_PAD) + c0;

			len = n1 - c0 < 256 ? n1 - c0 : 256;
			if (n_src > 1) {
				memcpy(sum, v, len * 4);
				for (s = 1; s < n_src; s++) {
					const float *p = j->priv->nodes[s]->ypart +
						(size_t)t * (j->H + MOE_YPART_PAD) +
						c0;

					for (c = 0; c < len; c++)
						sum[c] += p[c];
				}
				v = sum;
			}
			if (a->y_dtype == KT_DTYPE_BF16) {
				uint16_t *y = (uint16_t *)a->y + row + c0;

				for (c = 0; c < len; c++)
					y[c] = kern_f32_to_bf16(acc ?
						kern_bf16_to_f32(y[c]) + v[c] :
						v[c]);
			} else if (acc) {
				float *y = (float *)a->y + row + c0;

				for (c = 0; c < len; c++)
					y[c] += v[c];
			} else {
				memcpy((float *)a->y + row + c0, v, len * 4);
			}
		}
	}
}

/*
 * y += w * bias for the tokens of one down call (on one node only, so
 * that the bias is added once): after the expert's sum, in a fixed order.
 */
static void add_down_bias(const struct moe_job *j,
			  const struct kern_down_args *da, uint32_t expert)
{
	const float *b = core_model_bias(j->m, j->args->layer, expert);
	unsigned int i, c;

	if (!b)
		return;
	b += 2 * (size_t)j->I;
	for (i = 0; i < da->m; i++) {
		float *y = da->y + da->y_rows[i] * da->y_stride;

		for (c = da->n0; c < da->n1; c++)
			y[c] += da->w[i] * b[c];
	}
}

static void phase_down(void *arg, const struct core_worker_info *w)
{
	const struct moe_job *j = arg;
	struct moe_node *n = j->priv->nodes[w->node_idx];
	bool last = j->priv->n_nodes == 1;
	void *scratch = worker_scratch(n, w->id);
	uint32_t t;

	/* relaxed: as in phase_gate_up */
	while ((t = __atomic_fetch_add(&n->next_down, 1, __ATOMIC_RELAXED)) <
	       n->n_down) {
		unsigned int n0 = t * n->cb, n1 = n0 + n->cb, i, g;

		for (i = 0; i < j->tc; i++)
			memset(n->ypart + (size_t)i * (j->H + MOE_YPART_PAD) +
			       n0, 0, n->cb * 4);
		for (g = 0; n->i1 > n->i0 && g < n->n_groups; g++) {
			const struct moe_group *gr = &n->groups[g];
			struct kern_down_args da = {
				.down = &j->experts[gr->expert].down,
				.N = j->HK, .K = j->I, .kc = j->kc,
				.group = j->group, .n0 = n0, .n1 = n1,
				.k0 = n->i0, .k1 = n->i1,
				.act = n->aact + (size_t)gr->slot0 * n->d.arb,
				.act_stride = n->d.arb, .m = gr->m,
				.y_rows = n->slot_tok + gr->slot0,
				.w = n->slot_w + gr->slot0, .y = n->ypart,
				.y_stride = j->H + MOE_YPART_PAD,
				.scratch = scratch,
				/* the next expert's tiles of this column
				 * block can be fetched while this one's
				 * are reused (kernels prefetch into L2) */
				.next_down = g + 1 < n->n_groups ?
					&j->experts[n->groups[g + 1].expert].down :
					NULL,
			};

			if (j->qd->down_many && gr->m >= j->qd->many_min_m)
				j->qd->down_many(&da);
			else
				j->qd->down(&da);
			if (n == j->priv->nodes[j->bias_node])
				add_down_bias(j, &da, gr->expert);
		}
		if (last)
			store_rows(j, n0, n1, 1);
	}
}

/* ---- phase 4 (several nodes): sum the nodes' partial outputs ------------- */

static void phase_reduce(void *arg, const struct core_worker_info *w)
{
	const struct moe_job *j = arg;
	unsigned int nw = 0, i, blocks = j->H / 16, b0, b1;

	for (i = 0; i < j->priv->n_nodes; i++)
		nw += j->priv->nodes[i]->d.threads;
	/* static split of 16-column blocks over every worker */
	b0 = blocks * w->global / nw;
	b1 = blocks * (w->global + 1) / nw;
	if (b1 > b0)
		store_rows(j, b0 * 16, b1 * 16, j->priv->n_nodes);
}

/* ---- the op -------------------------------------------------------------- */

static int validate(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	const struct kt_model *m = sqe->model;
	const struct kt_moe_args *a = &sqe->moe;

	if (!m || m->ctx != ctx)
		return -EINVAL;
	if (!a->x || !a->ids || !a->w || !a->y)
		return -EINVAL;
	if (!a->tokens || a->tokens > KT_MOE_MAX_TOKENS)
		return -EINVAL;
	if (!a->top_k || a->top_k > KT_MOE_MAX_TOPK)
		return -EINVAL;
	if (a->layer >= m->n_layers)
		return -EINVAL;
	if (a->flags & ~KT_MOE_F_ACCUMULATE)
		return -EINVAL;
	if (a->x_dtype != KT_DTYPE_F32 && a->x_dtype != KT_DTYPE_BF16)
		return -EINVAL;
	if (a->y_dtype != KT_DTYPE_F32 && a->y_dtype != KT_DTYPE_BF16)
		return -EINVAL;
	if (a->ids_dtype != KT_DTYPE_I32 && a->ids_dtype != KT_DTYPE_I64)
		return -EINVAL;
	return 0;
}

/*
 * @a with the layer's GPU experts of @rs added to its skip mask, in @ga
 * (the mask in the model's scratch: only the leader runs ops); @a itself
 * when none of the layer's experts is on the GPU.
 */
static const struct kt_moe_args *gpu_skip(const struct kt_model *m,
					  const struct core_res_snap *rs,
					  const struct kt_moe_args *a,
					  struct kt_moe_args *ga)
{
	const uint64_t *g = core_res_layer(m, rs, a->layer);
	uint64_t *sk = core_residency_scratch(m), any = 0;
	uint32_t i, W = (m->n_experts + 63) / 64;

	for (i = 0; i < W; i++) {
		sk[i] = g[i] | (a->skip_mask ? a->skip_mask[i] : 0);
		any |= g[i];
	}
	if (!any)
		return a;
	*ga = *a;
	ga->skip_mask = sk;
	return ga;
}

static int moe_op(struct kt_ctx *ctx, const struct kt_sqe *sqe,
		  bool residency)
{
	const struct kt_model *m = sqe->model;
	const struct kt_moe_args *a = &sqe->moe;
	struct moe_priv *priv = core_ctx_priv(ctx);
	struct core_cache_op cop = { 0 };
	const struct core_res_snap *rs = NULL;
	struct kt_moe_args ga;
	struct moe_dims need;
	struct moe_job j;
	unsigned int i, chunk, rslot = 0;
	int ret;

	ret = validate(ctx, sqe);
	if (ret)
		return ret;
	memset(&j, 0, sizeof(j));
	j.qo = pick_ops(ctx, m->quant);
	j.qd = pick_ops(ctx, core_model_down_quant(m, a->layer));
	if (!j.qo || !j.qd)
		return -EOPNOTSUPP;
	if (!priv || priv->n_nodes != core_ctx_nodes(ctx))
		goto unreserved;
	for (i = 0; i < priv->n_nodes; i++) {
		dims_of(ctx, m, j.qo, j.qd, i, &need);
		if (!priv->nodes[i] || !dims_fit(&priv->nodes[i]->d, &need))
			goto unreserved;
		kern_node_slice(m->inter, m->down_chunk, priv->n_nodes, i,
				&priv->nodes[i]->i0, &priv->nodes[i]->i1);
	}
	/* a node without a slice runs no down call: fewer chunks than nodes */
	for (j.bias_node = 0; j.bias_node + 1 < priv->n_nodes &&
	     priv->nodes[j.bias_node]->i1 == priv->nodes[j.bias_node]->i0;
	     j.bias_node++)
		;
	/* the GPU set this op runs with, whole (ktcore/residency.h): its
	 * experts are the GPU's, skipped here like the op's own skip_mask */
	rs = residency ? core_residency_get(m, &rslot) : NULL;
	if (rs)
		a = gpu_skip(m, rs, a, &ga);
	/* routing counters; with a cache, reads of the missing experts */
	ret = core_cache_op_begin(ctx, m, a, &cop);
	if (ret)
		goto out;
	j.ctx = ctx;
	j.m = m;
	j.args = a;
	j.priv = priv;
	j.experts = core_model_expert(m, a->layer, 0);
	j.H = core_model_hidden_io(m);
	j.HK = m->hidden;
	j.I = m->inter;
	j.E = m->n_experts;
	j.k = a->top_k;
	j.kc = m->down_chunk;
	j.group = m->group_size;
	j.xrb = j.qo->act_row_bytes(j.HK, j.group);
	j.crb = j.qd->act_row_bytes(j.kc, j.group);
	/* every node takes the same chunk: the smallest that fits all */
	chunk = KT_MOE_MAX_TOKENS;
	for (i = 0; i < priv->n_nodes; i++) {
		const struct moe_dims *d = &priv->nodes[i]->d;

		if (d->tokens < chunk)
			chunk = d->tokens;
		if (d->slots / j.k < chunk)
			chunk = d->slots / j.k;
	}
	for (j.t0 = 0; j.t0 < a->tokens; j.t0 += j.tc) {
		j.tc = a->tokens - j.t0 < chunk ? a->tokens - j.t0 : chunk;
		if ((size_t)j.tc * j.H * priv->n_nodes <= MOE_INLINE_PREPARE)
			prepare_inline(&j);
		else
			core_ctx_run(ctx, phase_prepare, &j);
		if (cop.ready) {
			/* each expert computes as soon as it is in, while
			 * the others are read */
			j.ready = cop.ready;
			for (j.pass = 1; ; j.pass = cop.pass) {
				core_ctx_run(ctx, phase_gate_up, &j);
				if (!cop.ready)
					break;
				ret = core_cache_op_wait_some(ctx, m, &cop);
				if (ret < 0)
					break;
				for (i = 0; i < priv->n_nodes; i++)
					priv->nodes[i]->next_gu = 0;
			}
			if (ret < 0)
				break;
			ret = 0;
			j.ready = NULL;
		} else {
			core_ctx_run(ctx, phase_gate_up, &j);
		}
		core_ctx_run(ctx, phase_down, &j);
		if (priv->n_nodes > 1)
			core_ctx_run(ctx, phase_reduce, &j);
	}
out:
	core_cache_op_end(m, &cop, a->tokens);
	if (rs)
		core_residency_put(m, rslot);
	return ret;

unreserved:
	core_log(ctx, KT_LOG_ERROR,
		 "moe: scratch not reserved for this model (core_moe_reserve)");
	return -EINVAL;
}

int core_moe_op(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	return moe_op(ctx, sqe, true);
}

int core_moe_cpu_part(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	return moe_op(ctx, sqe, false);
}
