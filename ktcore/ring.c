// SPDX-License-Identifier: MIT
/*
 * ring.c - the out-of-line half of the rings: creation, registration with
 * the leader, detaching safely while it polls, and the futex sleeps.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ktcore/ctx.h"

#define RING_MAX_ENTRIES 32768
#define RING_DEFAULT_SPIN (1u << 14)
/* Polls before sleeping when workers hold every CPU: a polling waiter
 * would only take a core from a worker until the next time slice. */
#define RING_SHARED_CPU_SPIN 64u

int core_ring_init_at(struct kt_ctx *ctx, unsigned int entries,
		      struct kt_ring *ring, uint32_t start)
{
	struct core_ring_slot *r;
	size_t sq_bytes, cq_bytes;
	unsigned int i;
	int ret = -EBUSY;

	if (!ctx || !ring || !entries || entries > RING_MAX_ENTRIES ||
	    (entries & (entries - 1)))
		return -EINVAL;
	memset(ring, 0, sizeof(*ring));
	sq_bytes = entries * sizeof(struct kt_sqe);
	cq_bytes = 2 * entries * sizeof(struct kt_cqe);
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	/* aligned_alloc wants a size that is a multiple of the alignment */
	cq_bytes = (cq_bytes + KT_RING_CACHELINE - 1) &
		   ~(size_t)(KT_RING_CACHELINE - 1);
	r->sh = aligned_alloc(KT_RING_CACHELINE,
			      sizeof(*r->sh) + sq_bytes + cq_bytes);
	if (!r->sh) {
		free(r);
		return -ENOMEM;
	}
	memset(r->sh, 0, sizeof(*r->sh) + sq_bytes + cq_bytes);
	r->sqes = (struct kt_sqe *)(r->sh + 1);
	r->cqes = (struct kt_cqe *)((char *)r->sqes + sq_bytes);
	r->sq_entries = entries;
	r->cq_entries = 2 * entries;
	r->eventfd = -1;
	r->sh->sq_head = r->sh->sq_tail = start;
	r->sh->cq_head = r->sh->cq_tail = start;

	pthread_mutex_lock(&ctx->rings_lock);
	for (i = 0; i < CORE_MAX_RINGS; i++) {
		if (!ctx->rings[i]) {
			/* release: the leader sees a fully built slot */
			kt_store_release(&ctx->rings[i], r);
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&ctx->rings_lock);
	if (ret) {
		free(r->sh);
		free(r);
		return ret;
	}
	ring->sh = r->sh;
	ring->sqes = r->sqes;
	ring->cqes = r->cqes;
	ring->workers_asleep = &ctx->workers_asleep;
	ring->ctx = ctx;
	ring->sqe_tail = start;
	ring->sq_entries = r->sq_entries;
	ring->cq_entries = r->cq_entries;
	ring->spin = ctx->cpus_busy ? RING_SHARED_CPU_SPIN : RING_DEFAULT_SPIN;
	ring->eventfd = -1;
	return 0;
}

KT_EXPORT int kt_ring_init(struct kt_ctx *ctx, unsigned int entries,
			   struct kt_ring *ring)
{
	return core_ring_init_at(ctx, entries, ring, 0);
}

static struct core_ring_slot **ring_slot(struct kt_ring *ring)
{
	unsigned int i;

	for (i = 0; i < CORE_MAX_RINGS; i++)
		if (ring->ctx->rings[i] && ring->ctx->rings[i]->sh == ring->sh)
			return &ring->ctx->rings[i];
	return NULL;
}

KT_EXPORT void kt_ring_exit(struct kt_ring *ring)
{
	struct kt_ctx *ctx = ring ? ring->ctx : NULL;
	struct core_ring_slot **slot, *r;
	uint64_t epoch;

	if (!ctx)
		return;
	pthread_mutex_lock(&ctx->rings_lock);
	slot = ring_slot(ring);
	r = slot ? *slot : NULL;
	if (slot)
		__atomic_store_n(slot, NULL, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&ctx->rings_lock);
	/*
	 * The leader bumps ring_epoch to odd before it loads the slots and to
	 * even after its pass (seq_cst both sides): if it may still hold @r,
	 * we see an odd epoch here and wait for that pass to end.
	 */
	epoch = __atomic_load_n(&ctx->ring_epoch, __ATOMIC_SEQ_CST);
	if (epoch & 1)
		while (__atomic_load_n(&ctx->ring_epoch, __ATOMIC_SEQ_CST) ==
		       epoch)
			kt_cpu_relax();
	if (r) {
		free(r->sh);
		free(r);
	}
	memset(ring, 0, sizeof(*ring));
}

KT_EXPORT int kt_ring_register_eventfd(struct kt_ring *ring, int fd)
{
	struct core_ring_slot **slot;
	int ret = 0;

	if (!ring || !ring->ctx || fd < -1)
		return -EINVAL;
	pthread_mutex_lock(&ring->ctx->rings_lock);
	slot = ring_slot(ring);
	if (slot)
		__atomic_store_n(&(*slot)->eventfd, fd, __ATOMIC_RELEASE);
	else
		ret = -EINVAL;
	pthread_mutex_unlock(&ring->ctx->rings_lock);
	if (!ret)
		ring->eventfd = fd;
	return ret;
}

KT_EXPORT void kt_ring_wake_workers(struct kt_ring *ring)
{
	__atomic_add_fetch(&ring->ctx->wake_seq, 1, __ATOMIC_RELEASE);
	core_futex_wake(&ring->ctx->wake_seq, 1);
}

KT_EXPORT int kt_ring_wait_cq(struct kt_ring *ring, uint32_t seen_tail)
{
	struct kt_ring_shared *sh = ring->sh;
	int ret = 0;

	if (!sh)
		return -EINVAL;
	kt_store_release(&sh->cq_waiting, 1);
	/* full barrier: pairs with the leader's barrier between publishing
	 * cq_tail and reading cq_waiting (W6) */
	kt_smp_mb();
	if (kt_load_acquire(&sh->cq_tail) == seen_tail) {
		ret = core_futex_wait(&sh->cq_tail, seen_tail);
		if (ret == -EAGAIN || ret == -EINTR)
			ret = 0;
	}
	kt_store_release(&sh->cq_waiting, 0);
	return ret;
}
