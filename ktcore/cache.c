// SPDX-License-Identifier: MIT
/*
 * cache.c - expert slots for a model larger than its memory budget: every
 * op makes room for its experts and reads the missing ones with io_uring
 * while the executor computes the resident ones; eviction by frequency
 * with ageing; pinning; prefetch. Everything here runs on the leader
 * worker, so the slot states need no locks. Documentation/cache.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/crc32c.h"
#include "kernels/pack.h"
#include "ktcore/cache.h"
#include "ktcore/core.h"
#include "ktcore/mem.h"
#include "ktcore/model.h"
#include "ktcore/moe.h"
#include "uring/slots.h"

#define CACHE_DEF_BLOCK	(1u << 20)
#define CACHE_DEF_DEPTH	64u
#define CACHE_SPIN_NS	50000u	/* poll the CQ this long before sleeping */
/* internal: a read whose bytes did not match the file's CRC32C */
#define CACHE_EBADSUM	EBADMSG

enum slot_state {
	SLOT_FREE,
	SLOT_FILLING,	/* reads in flight: nobody reads the bytes */
	SLOT_LOADED,	/* reads done (or failed: err), not yet checked */
	SLOT_READY,	/* bytes in and checked: ops compute from it */
};

struct core_slot {
	int64_t owner;		/* layer * E + expert; -1 when free */
	double floor;		/* a prefetch's fresh use: its key's least */
	uint64_t used_gen;	/* the op that uses it: not evictable */
	uint32_t pins;
	uint32_t pending;	/* requests in flight */
	uint8_t state;
	bool prefetched;	/* read ahead, not used since */
	int err;		/* first failure of the fill */
};

struct core_cache {
	struct kt_ctx *ctx;
	struct kt_model *m;
	uint8_t *pool;
	size_t pool_len;
	struct core_mem mem;	/* the pool */
	uint32_t n_slots, L, E;
	uint64_t stride;
	struct kern_pack_layout lay;
	uint64_t *file_off;	/* [L * E] */
	uint32_t *crc;		/* [L * E] */
	int32_t *slot_of;	/* [L * E] slot, or -1 */
	uint8_t *verified;	/* [L * E] a read of it was checked */
	double *heat;		/* [L * E] aged use count, as a key */
	uint8_t *ready;		/* [E] of the current op */
	uint64_t *mark;		/* [E] gen of the op that needs it */
	uint32_t *need;		/* [E] experts of the current op */
	uint32_t *routed;	/* [E] its tokens routed to each */
	uint32_t n_need, layer;
	uint32_t *check;	/* [E] slots to checksum */
	uint32_t *pend;		/* [E] experts of the op still out */
	uint8_t *pick;		/* [E] scratch of most_likely() */
	int32_t *picked;	/* [E] */
	struct core_slot *slots;
	int fd;
	char *path;
	struct ur_slots *io;
	uint64_t gen;
	double inv_half;	/* 1 / half-life in ops */
	uint32_t flags, block, prefetch_next;
	bool verify;
	uint32_t pinned;	/* slots with pins */
	uint64_t io_t0;		/* when the queue last became busy */
	struct kt_cache_stats st;
};

void (*core_cache_fault)(uint32_t layer, uint32_t expert, uint8_t *dst,
			 uint32_t len, int *res);
uint64_t core_cache_not_ready;

uint64_t core_cache_min_budget(const struct kt_model *m, uint64_t stride)
{
	return (uint64_t)m->n_experts * stride;
}

static uint8_t *slot_mem(const struct core_cache *c, uint32_t s)
{
	return c->pool + (size_t)s * c->stride;
}

/* ---- reads ----------------------------------------------------------------- */

static void io_done(void *arg, uint64_t tag, int res)
{
	struct core_cache *c = arg;
	uint32_t s = (uint32_t)(tag >> 32), len = (uint32_t)tag;
	struct core_slot *sl = &c->slots[s];

	if (core_cache_fault)
		core_cache_fault((uint32_t)(sl->owner / c->E),
				 (uint32_t)(sl->owner % c->E), slot_mem(c, s),
				 (uint32_t)c->stride, &res);
	c->st.reads++;
	if (res > 0)
		c->st.bytes_read += (uint64_t)res;
	if (res < 0 && !sl->err)
		sl->err = res;
	else if (res >= 0 && (uint32_t)res != len && !sl->err)
		sl->err = -EIO;		/* short: the file changed under us */
	if (!--sl->pending) {
		sl->state = SLOT_LOADED;
		if (sl->err)
			c->st.io_errors++;
	}
	if (!ur_slots_inflight(c->io)) {
		uint64_t now = core_now_ns();

		c->st.io_ns += now - c->io_t0;
		c->io_t0 = now;	/* pread: the next request starts here */
	}
}

/* Point expert @ge at slot @s and queue its reads. */
static int slot_fill(struct core_cache *c, uint32_t s, uint32_t ge)
{
	struct core_slot *sl = &c->slots[s];
	struct core_expert *ex = &c->m->experts[ge];
	uint8_t *dst = slot_mem(c, s);
	uint32_t nreq = (uint32_t)((c->stride + c->block - 1) / c->block), i;
	int ret = 0;

	sl->owner = ge;
	sl->state = SLOT_FILLING;
	sl->err = 0;
	sl->pending = nreq;
	c->slot_of[ge] = (int32_t)s;
	kern_pack_mat(&c->lay, KERN_MAT_GATE, dst, &ex->gate);
	kern_pack_mat(&c->lay, KERN_MAT_UP, dst, &ex->up);
	kern_pack_mat(&c->lay, KERN_MAT_DOWN, dst, &ex->down);
	if (core_cache_fault)
		core_cache_fault(ge / c->E, ge % c->E, NULL, 0, &ret);
	if (!ur_slots_inflight(c->io))
		c->io_t0 = core_now_ns();
	for (i = 0; i < nreq && !ret; i++) {
		uint64_t off = (uint64_t)i * c->block;
		uint32_t len = (uint32_t)(c->stride - off < c->block ?
					  c->stride - off : c->block);

		ret = ur_slots_read(c->io, (uint64_t)s << 32 | len,
				    c->file_off[ge] + off, dst + off, len);
		if (ret)
			break;
	}
	if (ret) {
		/* the requests not queued will never complete */
		sl->pending -= nreq - i;
		if (!sl->err)
			sl->err = ret;
		if (!sl->pending) {
			sl->state = SLOT_LOADED;
			c->st.io_errors++;
		}
	}
	return ret;
}

static void slot_release(struct core_cache *c, uint32_t s)
{
	struct core_slot *sl = &c->slots[s];

	if (sl->owner >= 0)
		c->slot_of[sl->owner] = -1;
	sl->owner = -1;
	sl->state = SLOT_FREE;
	sl->err = 0;
	sl->prefetched = false;
}

/* A failed fill that nobody waits for is free room, and retried later. */
static bool slot_failed(const struct core_slot *sl)
{
	return sl->state == SLOT_LOADED && sl->err;
}

static double slot_key(const struct core_cache *c, const struct core_slot *sl)
{
	double h = c->heat[sl->owner];

	return sl->prefetched && sl->floor > h ? sl->floor : h;
}

/*
 * The slot to fill next: a free one, else the unpinned one with the
 * smallest key that no running op uses and no read is filling; only when
 * its key is below @below. -1 when none.
 */
static int64_t pick_victim(const struct core_cache *c, double below)
{
	int64_t best = -1;
	double bk = INFINITY;
	uint32_t s;

	for (s = 0; s < c->n_slots; s++) {
		const struct core_slot *sl = &c->slots[s];
		double k;

		if (sl->owner < 0)
			return s;
		if (sl->pins || sl->used_gen == c->gen ||
		    sl->state == SLOT_FILLING)
			continue;
		k = slot_failed(sl) ? -INFINITY : slot_key(c, sl);
		if (k < bk) {
			bk = k;
			best = s;
		}
	}
	return best >= 0 && bk < below ? best : -1;
}

static double key_now(const struct core_cache *c)
{
	if (c->flags & KT_CACHE_F_LRU)
		return (double)c->gen;
	return (double)c->gen * c->inv_half;
}

/*
 * An op routed @tokens to expert @ge: its count, aged by 2^(-ops /
 * half-life), grows by that many. Stored as key = log2(count) + gen /
 * half-life so that keys of experts last used at different times compare
 * without touching each. The count is the expert's, kept while it is out
 * of the cache too: a cold expert read for one op is the next victim, not
 * a hot one that happened to be re-read lately. Counting tokens, not ops,
 * ranks the experts of a prefill op (which needs nearly all of a layer)
 * by how often decode will want them, so that a long prompt's sweep over
 * more experts than fit keeps the same hot ones instead of evicting in
 * turn what the next layer's sweep is about to read again.
 */
static void touch(struct core_cache *c, uint32_t ge, uint32_t tokens)
{
	double now = key_now(c);

	if (c->flags & KT_CACHE_F_LRU)
		c->heat[ge] = now;
	else
		c->heat[ge] = log2(exp2(c->heat[ge] - now) + tokens) + now;
}

static void evict(struct core_cache *c, uint32_t s)
{
	if (c->slots[s].owner >= 0 && !slot_failed(&c->slots[s]))
		c->st.evictions++;
	slot_release(c, s);
}

/* ---- checks ---------------------------------------------------------------- */

struct crc_job {
	struct core_cache *c;
	uint32_t n;
	uint32_t next;
};

static void crc_run(void *arg, const struct core_worker_info *w)
{
	struct crc_job *j = arg;
	struct core_cache *c = j->c;
	uint32_t i;

	/* relaxed: hands out indices; slots were published by the fork */
	while ((i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n) {
		struct core_slot *sl = &c->slots[c->check[i]];

		if (kern_crc32c(0, slot_mem(c, c->check[i]),
				c->m->expert_bytes) != c->crc[sl->owner])
			sl->err = -CACHE_EBADSUM;	/* only this worker's */
	}
}

static void log_failure(struct core_cache *c, const struct core_slot *sl)
{
	uint32_t l = (uint32_t)(sl->owner / c->E), e = (uint32_t)(sl->owner % c->E);

	if (sl->err == -CACHE_EBADSUM)
		core_log(c->ctx, KT_LOG_ERROR,
			 "%s: layer %d (index %u), expert %u: checksum mismatch",
			 c->path, c->m->layer_ids[l], l, e);
	else
		core_log(c->ctx, KT_LOG_ERROR,
			 "%s: layer %d (index %u), expert %u: read failed: %s",
			 c->path, c->m->layer_ids[l], l, e, strerror(-sl->err));
}

static bool filling(const struct core_cache *c, uint32_t ge)
{
	int32_t s = c->slot_of[ge];

	return s >= 0 && c->slots[s].state == SLOT_FILLING;
}

/* With @all, whether one of @ges is filling; else whether all are. */
static bool must_wait(const struct core_cache *c, const uint32_t *ges,
		      uint32_t n, bool all)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (filling(c, ges[i]) == all)
			return all;
	return !all && n;
}

/*
 * Wait until the slots of @ges are no longer filling (with !@all, until
 * one of them is not), check the first read of each that is in (all reads
 * with KT_CACHE_F_VERIFY_ALL) on every worker, and mark them ready; a
 * failed one is freed for the next op to retry. Slots still filling are
 * left as they are. Returns 0 or -EIO (the first failure logged).
 */
static int settle(struct core_cache *c, const uint32_t *ges, uint32_t n,
		  bool all, uint64_t *wait_ns)
{
	uint64_t t0 = core_now_ns();
	struct crc_job job = { .c = c };
	uint32_t i;
	int ret = 0;

	while (must_wait(c, ges, n, all)) {
		/* a completion due soon costs less polled than slept for: a
		 * woken thread waits for the scheduler */
		ret = ur_slots_reap(c->io, core_now_ns() - t0 >= CACHE_SPIN_NS);
		if (ret < 0)
			break;
		ret = 0;
	}
	if (ret < 0) {
		/* the ring itself failed: nothing can be waited for */
		core_log(c->ctx, KT_LOG_ERROR, "%s: io_uring: %s", c->path,
			 strerror(-ret));
		return -EIO;
	}
	for (i = 0; i < n; i++) {
		int32_t s = c->slot_of[ges[i]];
		struct core_slot *sl;

		if (s < 0)
			continue;
		sl = &c->slots[s];
		if (sl->state == SLOT_LOADED && !sl->err && c->verify &&
		    (!c->verified[ges[i]] || (c->flags & KT_CACHE_F_VERIFY_ALL)))
			c->check[job.n++] = (uint32_t)s;
	}
	if (job.n == 1)
		crc_run(&job, NULL);
	else if (job.n)
		core_ctx_run(c->ctx, crc_run, &job);
	for (i = 0; i < n; i++) {
		int32_t s = c->slot_of[ges[i]];
		struct core_slot *sl;

		if (s < 0) {
			ret = -EIO;	/* its reads could not even start */
			continue;
		}
		sl = &c->slots[s];
		if (sl->state != SLOT_LOADED)
			continue;
		if (sl->err) {
			if (!ret)
				log_failure(c, sl);
			if (sl->err == -CACHE_EBADSUM)
				c->st.io_errors++;
			ret = -EIO;
			slot_release(c, (uint32_t)s);
			continue;
		}
		sl->state = SLOT_READY;
		c->verified[ges[i]] = 1;
	}
	if (wait_ns)
		*wait_ns += core_now_ns() - t0;
	return ret;
}

/* ---- prefetch -------------------------------------------------------------- */

/*
 * Start reading experts @ids of @layer that are not in, into slots colder
 * than a fresh use or than the expert itself (a prefetch never pushes out
 * what is in use, or hotter than what it brings). Returns the reads
 * started.
 */
static int prefetch(struct core_cache *c, uint32_t layer, const int32_t *ids,
		    uint32_t n)
{
	uint32_t i;
	int started = 0;

	for (i = 0; i < n; i++) {
		uint32_t ge = layer * c->E + (uint32_t)ids[i];
		int32_t s = c->slot_of[ge];
		int64_t v;

		if (!c->m->experts[ge].present)
			continue;
		if (s >= 0 && slot_failed(&c->slots[s]))
			slot_release(c, (uint32_t)s);
		else if (s >= 0)
			continue;
		v = pick_victim(c, fmax(key_now(c), c->heat[ge]));
		if (v < 0)
			break;
		evict(c, (uint32_t)v);
		/* not a use: kept as hot as a fresh one until the op comes */
		c->slots[v].floor = key_now(c);
		c->slots[v].prefetched = true;
		c->st.prefetches++;
		if (slot_fill(c, (uint32_t)v, ge))
			break;
		started++;
	}
	ur_slots_submit(c->io);
	return started;
}

/* The @n experts of @layer with the most routed tokens (none with 0). */
static uint32_t most_likely(struct core_cache *c, uint32_t layer, uint32_t n)
{
	const uint64_t *cnt = c->m->route + (size_t)layer * c->E;
	uint32_t got = 0, e;

	if (!c->m->route)
		return 0;
	memset(c->pick, 0, c->E);
	while (got < n) {
		int64_t best = -1;
		uint64_t bc = 0;

		for (e = 0; e < c->E; e++) {
			uint64_t v = __atomic_load_n(&cnt[e], __ATOMIC_RELAXED);

			if (!c->pick[e] && v > bc) {
				bc = v;
				best = e;
			}
		}
		if (best < 0)
			break;
		c->pick[best] = 1;
		c->picked[got++] = (int32_t)best;
	}
	return got;
}

/* ---- the op hooks ---------------------------------------------------------- */

/*
 * Every expert of the op is in a ready slot: what the executor is about
 * to compute from (gate+up of the rest, down of all). Counted, for tests.
 */
static void check_ready(struct core_cache *c)
{
	uint32_t i;

	for (i = 0; i < c->n_need; i++) {
		int32_t sx = c->slot_of[c->layer * c->E + c->need[i]];

		if (sx < 0 || c->slots[sx].state != SLOT_READY)
			__atomic_fetch_add(&core_cache_not_ready, 1,
					   __ATOMIC_RELAXED);
	}
}

int core_cache_op_begin(struct kt_ctx *ctx, const struct kt_model *m,
			const struct kt_moe_args *a, struct core_cache_op *op)
{
	struct core_cache *c = m->cache;
	const struct core_expert *ex = core_model_expert(m, a->layer, 0);
	uint32_t t, s, i;
	int ret;

	op->ready = NULL;
	op->t0 = c ? core_now_ns() : 0;
	core_stats_count(m, a);
	if (!c)
		return 0;
	c->gen++;
	c->n_need = 0;
	c->layer = a->layer;
	for (t = 0; t < a->tokens; t++) {
		size_t base = (size_t)t * a->top_k;

		for (s = 0; s < a->top_k; s++) {
			int64_t id = core_moe_id(a->ids, a->ids_dtype,
						 base + s);

			if (id < 0 || id >= m->n_experts)
				continue;
			if (!ex[id].present || (a->skip_mask &&
			    (a->skip_mask[id / 64] >> (id % 64) & 1)))
				continue;
			if (c->mark[id] != c->gen) {
				c->mark[id] = c->gen;
				c->routed[id] = 0;
				c->need[c->n_need++] = (uint32_t)id;
			}
			c->routed[id]++;
		}
	}
	ur_slots_reap(c->io, false);
	/* the residents first: a miss's victim is never one of this op's */
	for (i = 0; i < c->n_need; i++) {
		uint32_t ge = a->layer * c->E + c->need[i];
		int32_t sx = c->slot_of[ge];
		struct core_slot *sl;

		touch(c, ge, c->routed[c->need[i]]);
		if (sx >= 0 && slot_failed(&c->slots[sx]))
			slot_release(c, (uint32_t)sx);
		else if (sx >= 0) {
			sl = &c->slots[sx];
			sl->used_gen = c->gen;
			if (sl->state == SLOT_FILLING)
				c->st.misses++;
			else
				c->st.hits++;
			if (sl->prefetched)
				c->st.prefetch_hits++;
			sl->prefetched = false;
		}
	}
	for (i = 0; i < c->n_need; i++) {
		uint32_t ge = a->layer * c->E + c->need[i];
		struct core_slot *sl;
		int64_t v;

		if (c->slot_of[ge] >= 0)
			continue;
		c->st.misses++;
		/* a slot is always there: pins leave room for a layer; the
		 * ones filling for prefetches free up as they complete */
		while ((v = pick_victim(c, INFINITY)) < 0 &&
		       ur_slots_inflight(c->io))
			if (ur_slots_reap(c->io, true) < 0)
				break;
		if (v < 0) {
			core_log(ctx, KT_LOG_ERROR, "%s: no free slot", c->path);
			return -EIO;
		}
		evict(c, (uint32_t)v);
		sl = &c->slots[v];
		sl->used_gen = c->gen;
		ret = slot_fill(c, (uint32_t)v, ge);
		if (ret) {
			ur_slots_submit(c->io);
			log_failure(c, sl);
			return -EIO;
		}
	}
	ret = ur_slots_submit(c->io);
	if (ret) {
		core_log(ctx, KT_LOG_ERROR, "%s: io_uring submit: %s", c->path,
			 strerror(-ret));
		return -EIO;
	}
	op->pass = 1;
	for (i = 0; i < c->n_need; i++) {
		int32_t sx = c->slot_of[a->layer * c->E + c->need[i]];

		c->ready[c->need[i]] = c->slots[sx].state == SLOT_READY;
		if (!c->ready[c->need[i]])
			op->ready = c->ready;
	}
	if (!op->ready)
		check_ready(c);
	if (c->prefetch_next && a->layer + 1 < c->L)
		prefetch(c, a->layer + 1, c->picked,
			 most_likely(c, a->layer + 1, c->prefetch_next));
	return 0;
}

int core_cache_op_wait_some(struct kt_ctx *ctx, const struct kt_model *m,
			    struct core_cache_op *op)
{
	struct core_cache *c = m->cache;
	uint32_t i, n = 0, got = 0;
	int ret;

	if (!c || !op->ready)
		return 0;
	/* what is still out, as global indices for settle() */
	for (i = 0; i < c->n_need; i++)
		if (!c->ready[c->need[i]])
			c->pend[n++] = c->layer * c->E + c->need[i];
	/* the last pass number left takes whatever remains */
	ret = settle(c, c->pend, n, op->pass == UINT8_MAX - 1,
		     &c->st.io_wait_ns);
	if (ret)
		return ret;
	op->pass++;
	for (i = 0; i < n; i++) {
		int32_t sx = c->slot_of[c->pend[i]];

		if (c->slots[sx].state == SLOT_READY) {
			c->ready[c->pend[i] - c->layer * c->E] = op->pass;
			got++;
		}
	}
	if (got == n) {
		op->ready = NULL;
		check_ready(c);
	}
	return (int)got;
}

void core_cache_op_end(const struct kt_model *m, struct core_cache_op *op,
		       uint32_t tokens)
{
	struct core_cache *c = m->cache;

	if (!c)
		return;
	c->st.ops++;
	c->st.tokens += tokens;
	c->st.op_ns += core_now_ns() - op->t0;
}

int core_cache_prefetch_op(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	const struct kt_moe_args *a = &sqe->moe;
	struct kt_model *m = sqe->model;
	struct core_cache *c;
	const int32_t *ids = a->ids;
	uint32_t i, n = a->tokens;

	if (!m || m->ctx != ctx || a->layer >= m->n_layers ||
	    n > m->n_experts || a->x || a->w || a->y || a->flags ||
	    a->skip_mask || a->ids_dtype != KT_DTYPE_I32)
		return -EINVAL;
	for (i = 0; ids && i < n; i++)
		if (ids[i] < 0 || (uint32_t)ids[i] >= m->n_experts)
			return -EINVAL;
	c = m->cache;
	if (!c)
		return 0;
	ur_slots_reap(c->io, false);
	if (!ids) {
		n = most_likely(c, a->layer, n);
		ids = c->picked;
	}
	return prefetch(c, a->layer, ids, n);
}

/* ---- the API --------------------------------------------------------------- */

KT_EXPORT void kt_prep_prefetch(struct kt_sqe *sqe, struct kt_model *m,
				uint32_t layer, const int32_t *experts,
				uint32_t n, uint64_t user_data)
{
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = KT_OP_PREFETCH;
	sqe->user_data = user_data;
	sqe->model = m;
	sqe->moe.ids = experts;
	sqe->moe.ids_dtype = KT_DTYPE_I32;
	sqe->moe.tokens = n;
	sqe->moe.top_k = 1;
	sqe->moe.layer = layer;
}

struct exec_arg {
	struct kt_model *m;
	uint32_t layer, expert;
	bool pin;
	struct kt_cache_stats *st;
	bool reset;
	const int32_t *ids;
	uint32_t n;
};

static int prefetch_fn(struct kt_ctx *ctx, void *p)
{
	struct exec_arg *x = p;
	struct kt_sqe sqe;

	kt_prep_prefetch(&sqe, x->m, x->layer, x->ids, x->n, 0);
	return core_cache_prefetch_op(ctx, &sqe);
}

KT_EXPORT int kt_model_prefetch(struct kt_ctx *ctx, struct kt_model *m,
				uint32_t layer, const int32_t *experts,
				uint32_t n)
{
	struct exec_arg x = { .m = m, .layer = layer, .ids = experts, .n = n };

	if (!ctx || !m)
		return -EINVAL;
	return core_ctx_exec(ctx, prefetch_fn, &x);
}

static int stats_fn(struct kt_ctx *ctx, void *p)
{
	struct exec_arg *x = p;
	struct core_cache *c = x->m->cache;
	uint32_t s;

	memset(x->st, 0, sizeof(*x->st));
	if (!c)
		return 0;
	*x->st = c->st;
	x->st->slots = c->n_slots;
	x->st->pinned = c->pinned;
	for (s = 0; s < c->n_slots; s++)
		x->st->used += c->slots[s].owner >= 0;
	if (x->reset)
		memset(&c->st, 0, sizeof(c->st));
	return 0;
}

KT_EXPORT int kt_model_cache_stats(struct kt_model *m,
				   struct kt_cache_stats *st, bool reset)
{
	struct exec_arg x = { .m = m, .st = st, .reset = reset };

	if (!m || !st)
		return -EINVAL;
	if (!m->cache) {
		memset(st, 0, sizeof(*st));
		return 0;
	}
	return core_ctx_exec(m->ctx, stats_fn, &x);
}

static int pin_fn(struct kt_ctx *ctx, void *p)
{
	struct exec_arg *x = p;
	struct core_cache *c = x->m->cache;
	uint32_t ge = x->layer * c->E + x->expert;
	int32_t s = c->slot_of[ge];
	int64_t v;
	int ret;

	if (!x->pin) {
		if (s < 0 || !c->slots[s].pins)
			return -EINVAL;
		if (!--c->slots[s].pins)
			c->pinned--;
		return 0;
	}
	if (s >= 0 && slot_failed(&c->slots[s])) {
		slot_release(c, (uint32_t)s);
		s = -1;
	}
	if ((s < 0 || !c->slots[s].pins) && c->pinned + c->E >= c->n_slots)
		return -ENOSPC;
	if (s < 0) {
		while ((v = pick_victim(c, INFINITY)) < 0 &&
		       ur_slots_inflight(c->io))
			if (ur_slots_reap(c->io, true) < 0)
				break;
		if (v < 0)
			return -ENOSPC;
		evict(c, (uint32_t)v);
		s = (int32_t)v;
		ret = slot_fill(c, (uint32_t)s, ge);
		ur_slots_submit(c->io);
		if (ret) {
			log_failure(c, &c->slots[s]);
			slot_release(c, (uint32_t)s);
			return -EIO;
		}
	}
	ret = settle(c, &ge, 1, true, NULL);
	if (ret)
		return ret;
	if (!c->slots[s].pins++)
		c->pinned++;
	return 0;
}

KT_EXPORT int kt_model_pin(struct kt_model *m, uint32_t layer, uint32_t expert,
			   bool pin)
{
	struct exec_arg x = { .m = m, .layer = layer, .expert = expert,
			      .pin = pin };

	if (!m || layer >= m->n_layers || expert >= m->n_experts)
		return -EINVAL;
	if (!m->cache)
		return 0;
	if (!core_model_expert(m, layer, expert)->present)
		return -EINVAL;
	return core_ctx_exec(m->ctx, pin_fn, &x);
}

/* ---- life ------------------------------------------------------------------ */

void core_cache_destroy(struct core_cache *c)
{
	if (!c)
		return;
	ur_slots_destroy(c->io);	/* waits: the kernel writes slots */
	if (c->fd >= 0)
		close(c->fd);
	core_mem_free(&c->mem);
	free(c->file_off);
	free(c->crc);
	free(c->slot_of);
	free(c->verified);
	free(c->heat);
	free(c->ready);
	free(c->mark);
	free(c->need);
	free(c->routed);
	free(c->pend);
	free(c->check);
	free(c->pick);
	free(c->picked);
	free(c->slots);
	free(c->path);
	free(c);
}

/*
 * The slots, every page on the node that computes on most of its bytes:
 * each slot holds one blob, so the blob's node spans repeat per slot.
 */
static int pool_alloc(struct core_cache *c, const struct core_mem_layout *pl)
{
	struct core_mem_layout lay = *pl;

	lay.start = 0;
	lay.stride = c->stride;
	lay.count = c->n_slots;
	return core_mem_alloc_spread(c->ctx, c->pool_len, 0, &lay, &c->mem);
}

static uint64_t first_off(const struct core_cache *c, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (c->m->experts[i].present)
			return c->file_off[i];
	return 0;
}

int core_cache_create(struct kt_ctx *ctx, struct kt_model *m,
		      const struct core_cache_desc *d)
{
	uint64_t min = core_cache_min_budget(m, d->blob_stride), n_present = 0;
	size_t n = (size_t)m->n_layers * m->n_experts, i;
	struct ur_slots_opts uo = { 0 };
	struct core_cache *c;
	uint64_t backlog;
	int ret = -ENOMEM;

	/* one slot layout serves every layer: a .ktw's one down type */
	if (m->layer_down_quant)
		return -EOPNOTSUPP;
	if (d->budget < min) {
		/* the caller records it for kt_last_error() */
		core_log(ctx, KT_LOG_DEBUG,
			 "%s: budget %llu bytes is below the minimum %llu (one layer: %u experts of %llu bytes)",
			 d->path, (unsigned long long)d->budget,
			 (unsigned long long)min, m->n_experts,
			 (unsigned long long)d->blob_stride);
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = -1;
	c->ctx = ctx;
	c->m = m;
	c->L = m->n_layers;
	c->E = m->n_experts;
	c->stride = d->blob_stride;
	c->verify = d->verify;
	c->flags = d->flags;
	c->prefetch_next = d->prefetch_next;
	c->block = d->io_block ? d->io_block : CACHE_DEF_BLOCK;
	c->inv_half = 1.0 / (d->halflife ? d->halflife : 64.0 * m->n_layers);
	for (i = 0; i < n; i++)
		n_present += m->experts[i].present;
	c->n_slots = (uint32_t)(d->budget / c->stride < n_present ?
				d->budget / c->stride : n_present);
	if (c->n_slots < c->E)
		c->n_slots = c->E;	/* a model with fewer experts present */
	kern_pack_layout_mix(m->quant, m->down_quant, m->hidden, m->inter,
			     m->group_size, &c->lay);
	c->path = strdup(d->path);
	c->file_off = malloc(n * sizeof(*c->file_off));
	c->crc = malloc(n * sizeof(*c->crc));
	c->slot_of = malloc(n * sizeof(*c->slot_of));
	c->verified = calloc(n, 1);
	c->heat = malloc(n * sizeof(*c->heat));
	c->ready = calloc(c->E, 1);
	c->mark = calloc(c->E, sizeof(*c->mark));
	c->need = calloc(c->E, sizeof(*c->need));
	c->routed = calloc(c->E, sizeof(*c->routed));
	c->pend = calloc(c->E, sizeof(*c->pend));
	c->check = calloc(c->E > c->n_slots ? c->E : c->n_slots,
			  sizeof(*c->check));
	c->pick = calloc(c->E, 1);
	c->picked = calloc(c->E, sizeof(*c->picked));
	c->slots = calloc(c->n_slots, sizeof(*c->slots));
	if (!c->path || !c->file_off || !c->crc || !c->slot_of ||
	    !c->verified || !c->heat || !c->ready || !c->mark || !c->need ||
	    !c->routed || !c->pend || !c->check || !c->pick || !c->picked || !c->slots)
		goto err;
	memcpy(c->file_off, d->file_off, n * sizeof(*c->file_off));
	memcpy(c->crc, d->crc, n * sizeof(*c->crc));
	for (i = 0; i < n; i++) {
		c->slot_of[i] = -1;
		c->heat[i] = -INFINITY;	/* never used */
	}
	for (i = 0; i < c->n_slots; i++)
		c->slots[i].owner = -1;
	c->pool_len = (size_t)c->n_slots * c->stride;
	ret = pool_alloc(c, d->place);
	if (ret)
		goto err;
	c->pool = c->mem.base;
	ret = -ENOMEM;
	c->fd = open(d->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	/* some file systems take O_DIRECT at open but not on reads: one
	 * page of the first blob tells (the pool is there to land it) */
	if (c->fd >= 0 && pread(c->fd, c->pool, 4096,
				(off_t)first_off(c, n)) != 4096) {
		close(c->fd);
		c->fd = -1;
	}
	if (c->fd < 0)
		c->fd = open(d->path, O_RDONLY | O_CLOEXEC);
	if (c->fd < 0) {
		ret = -errno;
		core_log(ctx, KT_LOG_ERROR, "%s: %s", d->path, strerror(errno));
		goto err;
	}
	uo.depth = d->io_depth ? d->io_depth : CACHE_DEF_DEPTH;
	/* every slot's fill at once: queuing an op's misses never waits */
	backlog = (uint64_t)c->n_slots * ((c->stride + c->block - 1) / c->block);
	uo.backlog = backlog < UINT32_MAX ? (uint32_t)backlog : UINT32_MAX;
	uo.sqpoll = d->flags & KT_CACHE_F_SQPOLL;
	uo.no_uring = d->no_uring;
	uo.no_fixed = d->flags & KT_CACHE_F_NO_FIXED;
	uo.region = c->pool;
	uo.region_len = c->pool_len;
	uo.unit = c->stride;
	ret = ur_slots_create(c->fd, &uo, io_done, c, &c->io);
	if (ret)
		goto err;
	m->cache = c;
	m->resident_bytes = c->pool_len;
	{
		struct ur_slots_info in;

		ur_slots_get_info(c->io, &in);
		core_log(ctx, KT_LOG_INFO,
			 "%s: cache of %u slots (%llu MiB, over %u nodes) for %llu experts; %s%s%s, depth %u",
			 d->path, c->n_slots,
			 (unsigned long long)(c->pool_len >> 20),
			 core_ctx_nodes(ctx),
			 (unsigned long long)n_present,
			 in.io_uring ? "io_uring" : "pread",
			 in.fixed_buffers ? ", fixed buffers" : "",
			 in.fixed_file ? ", fixed file" : "", in.depth);
	}
	return 0;
err:
	core_cache_destroy(c);
	return ret;
}
