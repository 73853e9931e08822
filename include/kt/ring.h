/* SPDX-License-Identifier: MIT */
/*
 * ring.h - the submission/completion rings of kt and their inline helpers.
 * One ring per submitting thread: the SQ and the CQ are each single-producer
 * single-consumer, so the hot path is plain loads and stores (no syscall
 * while the workers poll). Documentation/rings.md draws the barrier pairs.
 */
#ifndef KT_RING_H
#define KT_RING_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kt_op {
	KT_OP_NOP = 0,
	KT_OP_MOE = 1,
	KT_OP_PREFETCH = 2,	/* kt_prep_prefetch(), kt/cache.h */
	KT_OP_COUNT
};

/**
 * struct kt_sqe - one submitted op; filled with kt_prep_*().
 * @opcode: KT_OP_*.
 * @user_data: echoed in the completion.
 * @model: model of a KT_OP_MOE.
 * @moe: arguments of a KT_OP_MOE.
 */
struct kt_sqe {
	uint8_t opcode;
	uint8_t pad[7];
	uint64_t user_data;
	struct kt_model *model;
	struct kt_moe_args moe;
	uint64_t reserved[3];
};

_Static_assert(sizeof(struct kt_sqe) == 128, "an sqe is two cache lines");

/**
 * struct kt_cqe - one completion.
 * @user_data: the sqe's @user_data.
 * @res: 0 or a count on success, -errno on failure.
 */
struct kt_cqe {
	uint64_t user_data;
	int32_t res;
	uint32_t flags;
};

#define KT_RING_CACHELINE 64

/*
 * The indices shared by the submitter and the workers. Each index has one
 * writer and sits on its own cache line, so the two sides never write the
 * same line.
 */
struct kt_ring_shared {
	uint32_t sq_tail;		/* written by the submitter */
	uint8_t pad0[KT_RING_CACHELINE - 4];
	uint32_t sq_head;		/* written by the worker */
	uint8_t pad1[KT_RING_CACHELINE - 4];
	uint32_t cq_tail;		/* written by the worker */
	uint8_t pad2[KT_RING_CACHELINE - 4];
	uint32_t cq_head;		/* written by the submitter */
	uint32_t cq_waiting;		/* submitter sleeps on cq_tail */
	uint8_t pad3[KT_RING_CACHELINE - 8];
};

_Static_assert(offsetof(struct kt_ring_shared, sq_head) == 64,
	       "sq_head must have its own cache line");
_Static_assert(offsetof(struct kt_ring_shared, cq_tail) == 128,
	       "cq_tail must have its own cache line");
_Static_assert(offsetof(struct kt_ring_shared, cq_head) == 192,
	       "cq_head must have its own cache line");

/**
 * struct kt_ring - a submitter's handle; owned by one thread.
 * Fields are read by the inline helpers; treat them as private.
 */
struct kt_ring {
	struct kt_ring_shared *sh;
	struct kt_sqe *sqes;
	struct kt_cqe *cqes;
	const uint32_t *workers_asleep;	/* nonzero: kt_submit must wake */
	struct kt_ctx *ctx;
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint32_t sqe_tail;		/* next sqe, not yet published */
	uint32_t spin;			/* kt_wait_cqe polls this often */
	int32_t eventfd;
	uint32_t reserved[7];
};

/* Ordering helpers: the only ones kt uses on shared indices. */
#define kt_load_acquire(p)	__atomic_load_n((p), __ATOMIC_ACQUIRE)
#define kt_store_release(p, v)	__atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define kt_load_relaxed(p)	__atomic_load_n((p), __ATOMIC_RELAXED)
#define kt_smp_mb()		__atomic_thread_fence(__ATOMIC_SEQ_CST)

static inline void kt_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/**
 * kt_ring_init() - create the rings of one submitting thread.
 * @ctx: context whose workers serve the ring.
 * @entries: SQ size, a power of two from 1 to 32768; the CQ is twice it.
 * @ring: caller's handle, filled on success.
 *
 * Context: any thread; allocates.
 * Return: 0; -EINVAL @entries not a power of two or too big; -ENOMEM;
 *	   -EBUSY the context already has its maximum of 64 rings.
 */
int kt_ring_init(struct kt_ctx *ctx, unsigned int entries,
		 struct kt_ring *ring);

/**
 * kt_ring_exit() - detach and free a ring; ops in flight are finished
 *	first (their completions are dropped).
 * @ring: ring, may be zeroed (then nothing happens).
 *
 * Context: the owning thread; blocks until workers drop the ring.
 */
void kt_ring_exit(struct kt_ring *ring);

/**
 * kt_ring_register_eventfd() - signal @fd after each completion, for
 *	callers that sleep in epoll.
 * @ring: ring.
 * @fd: an eventfd, or -1 to stop signalling. The caller keeps ownership.
 *
 * Return: 0; -EINVAL @fd is negative but not -1.
 */
int kt_ring_register_eventfd(struct kt_ring *ring, int fd);

/**
 * kt_ring_set_spin() - how many times kt_wait_cqe() polls before it sleeps.
 * @ring: ring.
 * @spin: polls; 0 sleeps at once. The default is 16384, or 64 when the
 *	  context has a worker on every CPU the process may use: polling
 *	  then takes a core from a worker until the next time slice.
 *
 * Context: the owning thread.
 */
static inline void kt_ring_set_spin(struct kt_ring *ring, uint32_t spin)
{
	ring->spin = spin;
}

/* Out-of-line halves of the helpers below: the syscalls. */
void kt_ring_wake_workers(struct kt_ring *ring);
int kt_ring_wait_cq(struct kt_ring *ring, uint32_t seen_tail);

/**
 * kt_get_sqe() - the next free submission entry.
 * @ring: ring.
 * Return: an entry to fill, or NULL when the SQ is full.
 */
static inline struct kt_sqe *kt_get_sqe(struct kt_ring *ring)
{
	/* acquire: pairs with the worker's release of sq_head (W1), so the
	 * slot is free before we write it */
	uint32_t head = kt_load_acquire(&ring->sh->sq_head);

	if (ring->sqe_tail - head >= ring->sq_entries)
		return NULL;
	return &ring->sqes[ring->sqe_tail++ & (ring->sq_entries - 1)];
}

/**
 * kt_prep_nop() - an op that completes with res 0; measures round trips.
 * @sqe: entry from kt_get_sqe().
 * @user_data: echoed in the completion.
 */
static inline void kt_prep_nop(struct kt_sqe *sqe, uint64_t user_data)
{
	sqe->opcode = KT_OP_NOP;
	sqe->user_data = user_data;
	sqe->model = NULL;
}

/**
 * kt_prep_moe() - one MoE layer; see struct kt_moe_args.
 * @sqe: entry from kt_get_sqe().
 * @m: model.
 * @layer: layer index within @m.
 * @args: copied into @sqe; the buffers it points at are not.
 * @user_data: echoed in the completion.
 */
static inline void kt_prep_moe(struct kt_sqe *sqe, struct kt_model *m,
			       uint32_t layer, const struct kt_moe_args *args,
			       uint64_t user_data)
{
	sqe->opcode = KT_OP_MOE;
	sqe->user_data = user_data;
	sqe->model = m;
	sqe->moe = *args;
	sqe->moe.layer = layer;
}

/**
 * kt_submit() - publish the entries taken since the last call.
 * @ring: ring.
 * Return: the number of entries published.
 *
 * Context: the owning thread; a syscall only when the workers sleep.
 */
static inline int kt_submit(struct kt_ring *ring)
{
	uint32_t old = kt_load_relaxed(&ring->sh->sq_tail);

	/* release: pairs with the worker's acquire of sq_tail (W2), so the
	 * sqe contents are visible before the new tail */
	kt_store_release(&ring->sh->sq_tail, ring->sqe_tail);
	/* full barrier: pairs with the worker's barrier between setting
	 * workers_asleep and rereading sq_tail (W3); one of us sees the other */
	kt_smp_mb();
	if (kt_load_relaxed(ring->workers_asleep))
		kt_ring_wake_workers(ring);
	return (int)(ring->sqe_tail - old);
}

/**
 * kt_peek_cqe() - the oldest completion, if any.
 * @ring: ring.
 * @cqe: set to the completion; valid until kt_cqe_seen().
 * Return: 0; -EAGAIN when the CQ is empty.
 */
static inline int kt_peek_cqe(struct kt_ring *ring, struct kt_cqe **cqe)
{
	uint32_t head = ring->sh->cq_head;
	/* acquire: pairs with the worker's release of cq_tail (W4), so the
	 * cqe contents are read after they were written */
	uint32_t tail = kt_load_acquire(&ring->sh->cq_tail);

	if (head == tail)
		return -EAGAIN;
	*cqe = &ring->cqes[head & (ring->cq_entries - 1)];
	return 0;
}

/**
 * kt_cqe_seen() - release the completion returned by a peek or wait.
 * @ring: ring.
 */
static inline void kt_cqe_seen(struct kt_ring *ring)
{
	/* release: pairs with the worker's acquire of cq_head (W5), so our
	 * read of the cqe is done before its slot is reused */
	kt_store_release(&ring->sh->cq_head, ring->sh->cq_head + 1);
}

/**
 * kt_wait_cqe() - wait for a completion: poll a while, then sleep.
 * @ring: ring.
 * @cqe: set to the completion; valid until kt_cqe_seen().
 * Return: 0; -ETIME never (waits forever); -EINVAL on a detached ring.
 *
 * Context: the owning thread; may sleep on a futex.
 */
static inline int kt_wait_cqe(struct kt_ring *ring, struct kt_cqe **cqe)
{
	for (;;) {
		uint32_t i;

		for (i = 0; i < ring->spin; i++) {
			if (!kt_peek_cqe(ring, cqe))
				return 0;
			kt_cpu_relax();
		}
		if (!kt_peek_cqe(ring, cqe))
			return 0;
		int ret = kt_ring_wait_cq(ring, ring->sh->cq_head);
		if (ret && ret != -EAGAIN)
			return ret;
	}
}

#ifdef __cplusplus
}
#endif

#endif /* KT_RING_H */
