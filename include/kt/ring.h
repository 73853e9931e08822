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
#include <string.h>

/*
 * The helpers below are static inline for C and C++ callers. libkt also
 * exports each of them under the same name (ktcore/ring-ffi.c defines
 * KT_RING_INLINE empty before including this header), so ctypes, cffi, Go
 * or Rust reach the whole ring API through dlsym.
 */
#ifndef KT_RING_INLINE
#define KT_RING_INLINE static inline
#endif

#ifdef __cplusplus
#define __KT_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define __KT_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum kt_op {
	KT_OP_NOP = 0,
	KT_OP_MOE = 1,
	KT_OP_PREFETCH = 2,	/* kt_prep_prefetch(), kt/cache.h */
	KT_OP_COUNT
};

/* No KT_SQE_F_* flag is defined yet: sqe->flags must be 0. */
#define KT_SQE_F_ALL		0u

/**
 * struct kt_sqe - one submitted op; filled with kt_prep_*(), which write
 *	every field.
 * @opcode: KT_OP_*; any other value completes with -EINVAL.
 * @flags: KT_SQE_F_*; unknown bits complete with -EINVAL.
 * @pad: must be zero.
 * @user_data: echoed in the completion.
 * @model: model of a KT_OP_MOE; NULL for KT_OP_NOP.
 * @moe: arguments of a KT_OP_MOE; all zero for KT_OP_NOP.
 * @reserved: must be zero (room for later fields).
 */
struct kt_sqe {
	uint8_t opcode;
	uint8_t flags;
	uint8_t pad[6];
	uint64_t user_data;
	struct kt_model *model;
	struct kt_moe_args moe;
	uint64_t reserved[3];
};

__KT_STATIC_ASSERT(sizeof(struct kt_sqe) == 128, "an sqe is two cache lines");

/**
 * struct kt_cqe - one completion.
 * @user_data: the sqe's @user_data.
 * @res: 0 or a count on success, -errno on failure (-EINVAL for an sqe
 *	 with an unknown opcode or flag, or non-zero pad/reserved bytes).
 * @flags: 0 (no KT_CQE_F_* is defined yet).
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
	uint32_t orphaned;		/* kt_ctx_destroy() came first */
	uint8_t pad3[KT_RING_CACHELINE - 12];
};

__KT_STATIC_ASSERT(offsetof(struct kt_ring_shared, sq_head) == 64,
		   "sq_head must have its own cache line");
__KT_STATIC_ASSERT(offsetof(struct kt_ring_shared, cq_tail) == 128,
		   "cq_tail must have its own cache line");
__KT_STATIC_ASSERT(offsetof(struct kt_ring_shared, cq_head) == 192,
		   "cq_head must have its own cache line");

/**
 * struct kt_ring - a submitter's handle; owned by one thread.
 * Fields are read by the inline helpers; treat them as private. A ring
 * that kt_ring_exit() released (or whose init failed) is all zero.
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
	uint32_t owner;			/* thread id of kt_ring_init's caller */
	uint32_t reserved[6];
};

/*
 * Internal to the ring (liburing's __io_uring_* convention): the ordering
 * helpers and the out-of-line halves of the inline helpers. They are not
 * API; only the kt_* names are. Documentation/rings.md lists them.
 */
#define __kt_load_acquire(p)	__atomic_load_n((p), __ATOMIC_ACQUIRE)
#define __kt_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define __kt_load_relaxed(p)	__atomic_load_n((p), __ATOMIC_RELAXED)
#define __kt_smp_mb()		__atomic_thread_fence(__ATOMIC_SEQ_CST)

static inline void __kt_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Wake the leader worker, which sleeps on its futex. */
void __kt_ring_wake_workers(struct kt_ring *ring);
/*
 * Sleep until cq_tail moves past @seen_tail. 0 (recheck the CQ), or
 * -EINVAL on a detached ring.
 */
int __kt_ring_wait_cq(struct kt_ring *ring, uint32_t seen_tail);

/*
 * Misuse checks. With KT_DEBUG defined (kt's debug build, make DEBUG=1,
 * defines it for the exported twins; define it when compiling your code to
 * check its inline calls too), every helper first calls this, which aborts
 * with a "kt: misuse:" message when @ring was released by kt_ring_exit()
 * (or never initialised) or is used by a thread other than the one that
 * created it. Without KT_DEBUG the helpers never call it.
 */
void __kt_ring_debug_check(const struct kt_ring *ring, const char *fn);
#ifdef KT_DEBUG
#define __KT_RING_DEBUG_CHECK(ring)	__kt_ring_debug_check((ring), __func__)
#else
#define __KT_RING_DEBUG_CHECK(ring)	((void)0)
#endif

/* Rings one context serves at most. */
#define KT_RING_MAX_PER_CTX 64

/**
 * kt_ring_init() - create the rings of one submitting thread.
 * @ctx: context whose workers serve the ring.
 * @entries: SQ size, a power of two from 1 to 32768; the CQ is twice it.
 * @ring: caller's handle, filled on success (zeroed on failure).
 *
 * Context: any thread; allocates.
 * Return: 0; -EINVAL @entries not a power of two or too big; -ENOMEM;
 *	   -EBUSY the context already has its maximum of 64 rings
 *	   (KT_RING_MAX_PER_CTX; the context's own work takes none of them).
 */
int kt_ring_init(struct kt_ctx *ctx, unsigned int entries,
		 struct kt_ring *ring);

/**
 * kt_ring_exit() - detach and free a ring. The ops the leader has
 *	already taken from it run to the end first (their completions are
 *	dropped); entries it has not taken are dropped.
 * @ring: ring, may be zeroed (then nothing happens).
 *
 * Exit rings before kt_ctx_destroy(). A ring still attached when its
 * context is destroyed is cut off from it: it completes nothing more, and
 * the only calls left for it are kt_peek_cqe()/kt_wait_cqe() (-EINVAL)
 * and kt_ring_exit(), which then frees its memory without touching the
 * context (kt_submit() on it is a use after free).
 *
 * Context: the owning thread; sleeps (a futex) while the leader runs an
 * op, never polls for it.
 */
void kt_ring_exit(struct kt_ring *ring);

/**
 * kt_ring_register_eventfd() - signal @fd after each completion, for
 *	callers that sleep in epoll.
 * @ring: ring.
 * @fd: an eventfd, or -1 to stop signalling. The caller keeps ownership.
 *
 * Return: 0; -EINVAL @fd is negative but not -1, or the ring is detached.
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
KT_RING_INLINE void kt_ring_set_spin(struct kt_ring *ring, uint32_t spin)
{
	ring->spin = spin;
}

/**
 * kt_get_sqe() - the next free submission entry.
 * @ring: ring.
 * Return: an entry to fill, or NULL when the SQ is full or the ring is
 *	   detached.
 */
KT_RING_INLINE struct kt_sqe *kt_get_sqe(struct kt_ring *ring)
{
	uint32_t head;

	__KT_RING_DEBUG_CHECK(ring);
	if (__builtin_expect(!ring->sh, 0))
		return NULL;
	/* acquire: pairs with the worker's release of sq_head (W1), so the
	 * slot is free before we write it */
	head = __kt_load_acquire(&ring->sh->sq_head);
	if (ring->sqe_tail - head >= ring->sq_entries)
		return NULL;
	return &ring->sqes[ring->sqe_tail++ & (ring->sq_entries - 1)];
}

/**
 * kt_prep_nop() - an op that completes with res 0; measures round trips.
 * @sqe: entry from kt_get_sqe(); every field is written.
 * @user_data: echoed in the completion.
 */
KT_RING_INLINE void kt_prep_nop(struct kt_sqe *sqe, uint64_t user_data)
{
	/* every field, so stale bytes of a reused slot never reach the
	 * consumer's zero checks (the fields one by one: a memset of the
	 * whole entry trips g++/gcc -Warray-bounds after a NULL check) */
	sqe->opcode = KT_OP_NOP;
	sqe->flags = 0;
	memset(sqe->pad, 0, sizeof(sqe->pad));
	sqe->user_data = user_data;
	sqe->model = NULL;
	memset(&sqe->moe, 0, sizeof(sqe->moe));
	memset(sqe->reserved, 0, sizeof(sqe->reserved));
}

/**
 * kt_prep_moe() - one MoE layer; see struct kt_moe_args.
 * @sqe: entry from kt_get_sqe(); every field is written.
 * @m: model.
 * @layer: layer index within @m (overrides @args->layer).
 * @args: copied into @sqe as is (its pad and reserved fields must be
 *	  zero); the buffers it points at are not copied.
 * @user_data: echoed in the completion.
 */
KT_RING_INLINE void kt_prep_moe(struct kt_sqe *sqe, struct kt_model *m,
				uint32_t layer, const struct kt_moe_args *args,
				uint64_t user_data)
{
	sqe->opcode = KT_OP_MOE;
	sqe->flags = 0;
	memset(sqe->pad, 0, sizeof(sqe->pad));
	sqe->user_data = user_data;
	sqe->model = m;
	sqe->moe = *args;
	sqe->moe.layer = layer;
	memset(sqe->reserved, 0, sizeof(sqe->reserved));
}

/**
 * kt_submit() - publish the entries taken since the last call.
 * @ring: ring.
 * Return: the number of entries published; -EINVAL on a detached ring.
 *
 * Context: the owning thread; a syscall only when the workers sleep.
 */
KT_RING_INLINE int kt_submit(struct kt_ring *ring)
{
	uint32_t old;

	__KT_RING_DEBUG_CHECK(ring);
	if (__builtin_expect(!ring->sh, 0))
		return -EINVAL;
	old = __kt_load_relaxed(&ring->sh->sq_tail);
	/* release: pairs with the worker's acquire of sq_tail (W2), so the
	 * sqe contents are visible before the new tail */
	__kt_store_release(&ring->sh->sq_tail, ring->sqe_tail);
	/* full barrier: pairs with the worker's barrier between setting
	 * workers_asleep and rereading sq_tail (W3); one of us sees the other */
	__kt_smp_mb();
	if (__kt_load_relaxed(ring->workers_asleep))
		__kt_ring_wake_workers(ring);
	return (int)(ring->sqe_tail - old);
}

/**
 * kt_peek_cqe() - the oldest completion, if any.
 * @ring: ring.
 * @cqe: set to the completion; valid until kt_cqe_seen().
 * Return: 0; -EAGAIN when the CQ is empty; -EINVAL on a detached ring.
 */
KT_RING_INLINE int kt_peek_cqe(struct kt_ring *ring, struct kt_cqe **cqe)
{
	uint32_t head, tail;

	__KT_RING_DEBUG_CHECK(ring);
	if (__builtin_expect(!ring->sh, 0))
		return -EINVAL;
	head = ring->sh->cq_head;
	/* acquire: pairs with the worker's release of cq_tail (W4), so the
	 * cqe contents are read after they were written */
	tail = __kt_load_acquire(&ring->sh->cq_tail);
	if (head == tail)
		return -EAGAIN;
	*cqe = &ring->cqes[head & (ring->cq_entries - 1)];
	return 0;
}

/**
 * kt_cqe_seen() - release the completion returned by a peek or wait.
 * @ring: ring; nothing happens on a released one.
 */
KT_RING_INLINE void kt_cqe_seen(struct kt_ring *ring)
{
	__KT_RING_DEBUG_CHECK(ring);
	if (__builtin_expect(!ring->sh, 0))
		return;
	/* release: pairs with the worker's acquire of cq_head (W5), so our
	 * read of the cqe is done before its slot is reused */
	__kt_store_release(&ring->sh->cq_head, ring->sh->cq_head + 1);
}

/**
 * kt_wait_cqe() - wait for a completion: poll a while, then sleep.
 * @ring: ring.
 * @cqe: set to the completion; valid until kt_cqe_seen().
 * Return: 0; -EINVAL on a detached ring (after kt_ring_exit(), or whose
 *	   context was destroyed). Never -ETIME: see kt_wait_cqe_timeout().
 *
 * Context: the owning thread; may sleep on a futex.
 */
KT_RING_INLINE int kt_wait_cqe(struct kt_ring *ring, struct kt_cqe **cqe)
{
	for (;;) {
		uint32_t i;
		int ret;

		for (i = 0; i < ring->spin; i++) {
			ret = kt_peek_cqe(ring, cqe);
			if (ret != -EAGAIN)
				return ret;
			__kt_cpu_relax();
		}
		ret = kt_peek_cqe(ring, cqe);
		if (ret != -EAGAIN)
			return ret;
		ret = __kt_ring_wait_cq(ring, ring->sh->cq_head);
		if (ret)
			return ret;
	}
}

/**
 * kt_wait_cqe_timeout() - kt_wait_cqe() that gives up after @timeout_ns.
 * @ring: ring.
 * @cqe: set to the completion; valid until kt_cqe_seen().
 * @timeout_ns: nanoseconds to wait at most (0: only look).
 * Return: 0; -ETIME nothing completed in time; -EINVAL on a detached ring.
 *
 * Context: the owning thread; may sleep on a futex.
 */
int kt_wait_cqe_timeout(struct kt_ring *ring, struct kt_cqe **cqe,
			uint64_t timeout_ns);

#ifdef __cplusplus
}
#endif

#endif /* KT_RING_H */
