// SPDX-License-Identifier: MIT
/*
 * residency.c - the GPU residency table of a model and its re-placement
 * (kt_model_place, kt_model_replace) while ops run: an SRCU-like pair of
 * reader counts lets a writer publish a new set and wait only for the ops
 * that may still hold the old one. Documentation/placement.md.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ktcore/core.h"
#include "ktcore/model.h"
#include "ktcore/place.h"
#include "ktcore/moe-gpu.h"
#include "ktcore/residency.h"

struct core_residency {
	/* the published set; readers load it between get and put */
	struct core_res_snap *cur;
	/* publications so far; its parity picks the readers[] an op joins */
	uint32_t epoch;
	uint8_t pad0[60];
	uint32_t readers[2];	/* ops inside get .. put, by epoch parity */
	uint8_t pad1[56];
	pthread_mutex_t lock;	/* writers: kt_model_place() */
	struct core_place_backend be;
	uint64_t words;		/* per layer */
	uint64_t *scratch;	/* the leader's combined skip mask */
};

static struct core_res_snap *snap_new(const struct kt_model *m, uint64_t W)
{
	return calloc(1, sizeof(struct core_res_snap) +
		      (size_t)(W * m->n_layers * 8));
}

static uint64_t popcount_all(const uint64_t *b, uint64_t n)
{
	uint64_t c = 0, i;

	for (i = 0; i < n; i++)
		c += (uint64_t)__builtin_popcountll(b[i]);
	return c;
}

/* Bits past E in each layer's last word are not experts: clear them. */
static void clip(const struct kt_model *m, uint64_t W, uint64_t *bits)
{
	uint32_t l;

	if (m->n_experts % 64 == 0)
		return;
	for (l = 0; l < m->n_layers; l++)
		bits[l * W + W - 1] &= (1ull << (m->n_experts % 64)) - 1;
}

int core_residency_attach(struct kt_model *m,
			  const struct core_place_backend *be,
			  const uint64_t *initial)
{
	struct core_residency *r;
	uint64_t W;

	if (!m || !be || !be->upload || !be->evict)
		return -EINVAL;
	if (m->residency)
		return -EBUSY;
	W = KT_PLACE_WORDS(m->n_experts);
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->cur = snap_new(m, W);
	r->scratch = calloc((size_t)W, 8);
	if (!r->cur || !r->scratch) {
		free(r->cur);
		free(r->scratch);
		free(r);
		return -ENOMEM;
	}
	if (initial)
		memcpy(r->cur->bits, initial, (size_t)(W * m->n_layers * 8));
	clip(m, W, r->cur->bits);
	r->cur->gen = 1;
	r->cur->count = popcount_all(r->cur->bits, W * m->n_layers);
	r->words = W;
	r->be = *be;
	pthread_mutex_init(&r->lock, NULL);
	/* release: pairs with the acquire in core_residency_get(); ops of
	 * other threads see a built table (the caller attaches before ops
	 * use the GPU, so this is belt and braces) */
	__atomic_store_n(&m->residency, r, __ATOMIC_RELEASE);
	return 0;
}

const struct core_res_snap *core_residency_get(const struct kt_model *m,
					       unsigned int *slot)
{
	struct core_residency *r = __atomic_load_n(&m->residency,
						   __ATOMIC_ACQUIRE);
	unsigned int p;

	if (!r)
		return NULL;
	for (;;) {
		/* seq_cst (R1): the epoch, our count and the recheck are
		 * ordered against the writer's store of cur, its epoch flip
		 * and its loads of readers[] (W1, W2): if the recheck still
		 * sees parity p, a writer that retires the set we load below
		 * waits for readers[p], which holds us */
		p = __atomic_load_n(&r->epoch, __ATOMIC_SEQ_CST) & 1;
		__atomic_fetch_add(&r->readers[p], 1, __ATOMIC_SEQ_CST);
		if ((__atomic_load_n(&r->epoch, __ATOMIC_SEQ_CST) & 1) == p)
			break;
		/* a publication came between: join the new parity */
		__atomic_fetch_sub(&r->readers[p], 1, __ATOMIC_RELEASE);
	}
	*slot = p;
	/* seq_cst (R2): after the recheck, so a set retired before it is
	 * never loaded; pairs with the writer's store of cur (W1) */
	return __atomic_load_n(&r->cur, __ATOMIC_SEQ_CST);
}

void core_residency_put(const struct kt_model *m, unsigned int slot)
{
	/* release (R3): our reads of the set happen before the writer's
	 * acquire of readers[] (W2) and its free */
	__atomic_fetch_sub(&m->residency->readers[slot & 1], 1,
			   __ATOMIC_RELEASE);
}

const uint64_t *core_res_layer(const struct kt_model *m,
			       const struct core_res_snap *s, uint32_t layer)
{
	return s->bits + layer * m->residency->words;
}

uint64_t *core_residency_scratch(const struct kt_model *m)
{
	return m->residency->scratch;
}

void core_residency_free(struct kt_model *m)
{
	struct core_residency *r = m ? m->residency : NULL;

	if (!r)
		return;
	if (r->be.release)
		r->be.release(r->be.arg);
	pthread_mutex_destroy(&r->lock);
	free(r->cur);
	free(r->scratch);
	free(r);
	m->residency = NULL;
}

/* Publish @s and return once no op can hold the set it replaced. */
static struct core_res_snap *publish(struct core_residency *r,
				     struct core_res_snap *s)
{
	struct core_res_snap *old = r->cur;
	struct timespec ts = { 0, 20000 };
	uint32_t e;

	s->gen = old->gen + 1;
	/* seq_cst (W1): pairs with the reader's load of cur (R2) */
	__atomic_store_n(&r->cur, s, __ATOMIC_SEQ_CST);
	e = __atomic_load_n(&r->epoch, __ATOMIC_RELAXED);
	/* seq_cst (W1): the flip after the store; pairs with the reader's
	 * epoch loads (R1): a reader that rechecks after it loads the new
	 * set */
	__atomic_store_n(&r->epoch, e + 1, __ATOMIC_SEQ_CST);
	/* seq_cst (W2): pairs with the readers' counts (R1, R3); ops last
	 * one MoE layer, so sleep a little between looks */
	while (__atomic_load_n(&r->readers[e & 1], __ATOMIC_SEQ_CST))
		nanosleep(&ts, NULL);
	return old;
}

static bool bit(const uint64_t *b, uint64_t i)
{
	return b[i / 64] >> (i % 64) & 1;
}

/* Call @fn on every (layer, expert) of @a and not of @b. */
static int each_diff(const struct kt_model *m, uint64_t W, const uint64_t *a,
		     const uint64_t *b,
		     int (*fn)(void *, uint32_t, uint32_t), void *arg,
		     uint32_t *n_done)
{
	uint32_t l, e;
	int ret;

	for (l = 0; l < m->n_layers; l++)
		for (e = 0; e < m->n_experts; e++) {
			if (!bit(a + l * W, e) || bit(b + l * W, e))
				continue;
			ret = fn(arg, l, e);
			if (ret)
				return ret;
			(*n_done)++;
		}
	return 0;
}

/* Undo the first @n uploads of a placement that failed. */
static void unwind_uploads(struct kt_model *m, struct core_residency *r,
			   const uint64_t *want, const uint64_t *cur,
			   uint32_t n)
{
	uint32_t l, e;

	for (l = 0; l < m->n_layers && n; l++)
		for (e = 0; e < m->n_experts && n; e++)
			if (bit(want + l * r->words, e) &&
			    !bit(cur + l * r->words, e)) {
				r->be.evict(r->be.arg, l, e);
				n--;
			}
}

KT_EXPORT int kt_model_place(struct kt_model *m, const uint64_t *masks)
{
	struct core_residency *r;
	struct core_res_snap *s, *old;
	uint32_t up = 0, down = 0, l, e;
	uint64_t W;
	int ret;

	if (!m || !masks)
		return -EINVAL;
	ret = core_gpu_place_attach(m);	/* the GPU as the backend, once */
	if (ret && ret != -ENODEV)
		return ret;
	r = m->residency;
	if (!r)
		return -ENODEV;
	W = r->words;
	s = snap_new(m, W);
	if (!s)
		return -ENOMEM;
	memcpy(s->bits, masks, (size_t)(W * m->n_layers * 8));
	clip(m, W, s->bits);
	s->count = popcount_all(s->bits, W * m->n_layers);
	pthread_mutex_lock(&r->lock);
	old = r->cur;
	/* an expert leaves the GPU only to a host that can compute it */
	for (l = 0; l < m->n_layers; l++)
		for (e = 0; e < m->n_experts; e++)
			if (bit(old->bits + l * W, e) &&
			    !bit(s->bits + l * W, e) &&
			    !core_model_expert(m, l, e)->present) {
				core_log(m->ctx, KT_LOG_ERROR,
					 "kt_model_place: layer %u expert %u has no host copy and cannot leave the GPU",
					 l, e);
				ret = -EINVAL;
				goto out_unlock;
			}
	ret = each_diff(m, W, s->bits, old->bits, r->be.upload, r->be.arg,
			&up);
	if (ret) {
		core_log(m->ctx, KT_LOG_ERROR,
			 "kt_model_place: upload failed (%d) after %u experts; nothing changed",
			 ret, up);
		unwind_uploads(m, r, s->bits, old->bits, up);
		goto out_unlock;
	}
	old = publish(r, s);
	s = NULL;
	for (l = 0; l < m->n_layers; l++)
		for (e = 0; e < m->n_experts; e++) {
			int err;

			if (!bit(old->bits + l * W, e) ||
			    bit(r->cur->bits + l * W, e))
				continue;
			err = r->be.evict(r->be.arg, l, e);
			if (err)
				core_log(m->ctx, KT_LOG_WARN,
					 "kt_model_place: evicting layer %u expert %u failed (%d)",
					 l, e, err);
			down++;
		}
	free(old);
	ret = (int)(up + down);
	core_log(m->ctx, KT_LOG_DEBUG,
		 "kt_model_place: %u uploaded, %u evicted, %llu on the GPU",
		 up, down, (unsigned long long)r->cur->count);
out_unlock:
	pthread_mutex_unlock(&r->lock);
	free(s);
	return ret;
}

KT_EXPORT int kt_model_replace(struct kt_model *m,
			       const struct kt_place_opts *opts)
{
	struct kt_place_opts o;
	struct core_residency *r;
	const struct core_res_snap *cur;
	uint64_t *masks, *forced, *counts, W;
	uint32_t n, l, e;
	unsigned int slot;
	int ret;

	if (!m || !opts || CORE_OPTS_GET(&o, opts, counts))
		return -EINVAL;
	ret = core_gpu_place_attach(m);
	if (ret && ret != -ENODEV)
		return ret;
	r = m->residency;
	if (!r)
		return -ENODEV;
	if (o.n_layers || o.n_experts || o.counts)
		return -EINVAL;
	o.n_layers = m->n_layers;
	o.n_experts = m->n_experts;
	W = r->words;
	counts = calloc((size_t)m->n_layers * m->n_experts, 8);
	masks = calloc((size_t)(W * m->n_layers), 8);
	forced = calloc((size_t)W, 8);
	ret = -ENOMEM;
	if (!counts || !masks || !forced)
		goto out;
	for (l = 0; l < m->n_layers; l++)
		kt_model_route_counts(m, l, counts + (size_t)l * m->n_experts);
	o.counts = counts;
	ret = kt_place_plan(&o, masks);
	if (ret < 0)
		goto out;
	ret = core_place_check(&o, &n);
	if (ret)
		goto out;
	/* experts without a host copy keep their GPU places; the plan's
	 * layer is redone around them (frequency: the hottest of the rest) */
	cur = core_residency_get(m, &slot);
	for (l = 0; l < m->n_layers; l++) {
		const uint64_t *g = cur->bits + l * W;
		uint64_t *p = masks + l * W;
		uint32_t want = 0, kept = 0;
		bool lost = false;

		memset(forced, 0, (size_t)W * 8);
		for (e = 0; e < m->n_experts; e++) {
			want += bit(p, e);
			if (bit(g, e) && !core_model_expert(m, l, e)->present) {
				forced[e / 64] |= 1ull << (e % 64);
				kept++;
				lost |= !bit(p, e);
			}
		}
		if (lost)
			core_place_top(counts + (size_t)l * m->n_experts,
				       m->n_experts, want > kept ? want : kept,
				       forced, p);
	}
	core_residency_put(m, slot);
	ret = kt_model_place(m, masks);
out:
	free(counts);
	free(masks);
	free(forced);
	return ret;
}

KT_EXPORT int kt_model_gpu_experts(const struct kt_model *m, uint32_t layer,
				   uint64_t *mask)
{
	const struct core_res_snap *s;
	unsigned int slot;
	uint64_t W;
	int n;

	if (!m || !mask || layer >= m->n_layers)
		return -EINVAL;
	W = KT_PLACE_WORDS(m->n_experts);
	s = core_residency_get(m, &slot);
	if (!s) {
		memset(mask, 0, (size_t)W * 8);
		return 0;
	}
	memcpy(mask, core_res_layer(m, s, layer), (size_t)W * 8);
	core_residency_put(m, slot);
	n = (int)popcount_all(mask, W);
	return n;
}
