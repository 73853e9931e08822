// SPDX-License-Identifier: MIT
/*
 * ring.c - both halves of the rings: creation and detaching, the sleeps of
 * a submitter (producer side), and the leader's service loop that checks,
 * runs and completes each entry (consumer side), plus the private job slot
 * through which kt_moe_forward() and core_ctx_exec() reach the leader.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ktcore/ctx.h"
#include "ktcore/futex.h"

#define RING_MAX_ENTRIES 32768
#define RING_DEFAULT_SPIN (1u << 14)
/* Polls before sleeping when workers hold every CPU: a polling waiter
 * would only take a core from a worker until the next time slice. */
#define RING_SHARED_CPU_SPIN 64u

/* ---- producer half: rings of submitting threads ------------------------- */

uint32_t core_ring_default_spin(const struct kt_ctx *ctx)
{
	return ctx->cpus_busy ? RING_SHARED_CPU_SPIN : RING_DEFAULT_SPIN;
}

int core_ring_init_at(struct kt_ctx *ctx, unsigned int entries,
		      struct kt_ring *ring, uint32_t start)
{
	struct core_ring_slot *r;
	size_t sq_bytes, cq_bytes;
	unsigned int i;
	int ret = -EBUSY;

	if (ring)
		memset(ring, 0, sizeof(*ring));
	if (!ctx || !ring || !entries || entries > RING_MAX_ENTRIES ||
	    (entries & (entries - 1)))
		return -EINVAL;
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
			__kt_store_release(&ctx->rings[i], r);
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
	ring->spin = core_ring_default_spin(ctx);
	ring->eventfd = -1;
	ring->owner = (uint32_t)gettid();
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

/* Return once no leader pass can still hold a slot cleared before. */
static void ring_epoch_wait(struct kt_ctx *ctx)
{
	uint32_t epoch;

	/*
	 * The leader bumps ring_epoch to odd before it loads the slots and
	 * to even after (seq_cst both), then reads epoch_waiters (seq_cst):
	 * E1 pairs our count of waiters and read of the epoch with its bump
	 * and read of the count, so it wakes us or we see the even epoch.
	 */
	__atomic_add_fetch(&ctx->epoch_waiters, 1, __ATOMIC_SEQ_CST);
	epoch = __atomic_load_n(&ctx->ring_epoch, __ATOMIC_SEQ_CST);
	if (epoch & 1)
		while (__atomic_load_n(&ctx->ring_epoch, __ATOMIC_SEQ_CST) ==
		       epoch)
			core_futex_wait(&ctx->ring_epoch, epoch);
	__atomic_sub_fetch(&ctx->epoch_waiters, 1, __ATOMIC_SEQ_CST);
}

KT_EXPORT void kt_ring_exit(struct kt_ring *ring)
{
	struct kt_ctx *ctx = ring ? ring->ctx : NULL;
	struct core_ring_slot **slot, *r;

	if (!ctx || !ring->sh)
		return;
	__KT_RING_DEBUG_CHECK(ring);
	/* acquire: pairs with core_rings_orphan()'s release (O1); the
	 * context is gone, only the ring's own memory is left to free */
	if (__kt_load_acquire(&ring->sh->orphaned)) {
		free(ring->sh);
		memset(ring, 0, sizeof(*ring));
		return;
	}
	pthread_mutex_lock(&ctx->rings_lock);
	slot = ring_slot(ring);
	r = slot ? *slot : NULL;
	if (slot)
		__atomic_store_n(slot, NULL, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&ctx->rings_lock);
	ring_epoch_wait(ctx);
	if (r) {
		free(r->sh);
		free(r);
	}
	memset(ring, 0, sizeof(*ring));
}

void core_rings_orphan(struct kt_ctx *ctx)
{
	unsigned int i;

	for (i = 0; i < CORE_MAX_RINGS; i++) {
		struct core_ring_slot *r = ctx->rings[i];

		if (!r)
			continue;
		core_log(ctx, KT_LOG_WARN,
			 "kt_ctx_destroy: a ring is still attached; call kt_ring_exit() first");
		/* release: pairs with kt_ring_exit()'s and
		 * __kt_ring_wait_cq()'s acquire (O1) */
		__kt_store_release(&r->sh->orphaned, 1);
		core_futex_wake(&r->sh->cq_tail, INT_MAX);
		ctx->rings[i] = NULL;
		free(r);
	}
}

KT_EXPORT int kt_ring_register_eventfd(struct kt_ring *ring, int fd)
{
	struct core_ring_slot **slot;
	int ret = 0;

	__KT_RING_DEBUG_CHECK(ring);
	if (!ring || !ring->ctx || !ring->sh || fd < -1 ||
	    __kt_load_acquire(&ring->sh->orphaned))
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

static void wake_leader(struct kt_ctx *ctx)
{
	__atomic_add_fetch(&ctx->wake_seq, 1, __ATOMIC_RELEASE);
	core_futex_wake(&ctx->wake_seq, 1);
}

KT_EXPORT void __kt_ring_wake_workers(struct kt_ring *ring)
{
	wake_leader(ring->ctx);
}

/* Sleep until cq_tail leaves @seen_tail, or until @deadline_ns (0: none). */
static int wait_cq(struct kt_ring_shared *sh, uint32_t seen_tail,
		   uint64_t deadline_ns)
{
	int ret = 0;

	__kt_store_release(&sh->cq_waiting, 1);
	/* full barrier: pairs with the leader's barrier between publishing
	 * cq_tail and reading cq_waiting (W6) */
	__kt_smp_mb();
	if (__kt_load_acquire(&sh->cq_tail) == seen_tail &&
	    !__kt_load_acquire(&sh->orphaned)) {
		ret = deadline_ns ?
		      core_futex_wait_until(&sh->cq_tail, seen_tail,
					    deadline_ns) :
		      core_futex_wait(&sh->cq_tail, seen_tail);
		if (ret == -EAGAIN || ret == -EINTR)
			ret = 0;
	}
	__kt_store_release(&sh->cq_waiting, 0);
	/* acquire: O1, a ring cut off while we slept */
	if (__kt_load_acquire(&sh->orphaned))
		return -EINVAL;
	return ret == -ETIMEDOUT ? -ETIME : ret;
}

KT_EXPORT int __kt_ring_wait_cq(struct kt_ring *ring, uint32_t seen_tail)
{
	if (!ring->sh)
		return -EINVAL;
	return wait_cq(ring->sh, seen_tail, 0);
}

KT_EXPORT int kt_wait_cqe_timeout(struct kt_ring *ring, struct kt_cqe **cqe,
				  uint64_t timeout_ns)
{
	uint64_t now, deadline;
	uint32_t i;
	int ret;

	__KT_RING_DEBUG_CHECK(ring);
	if (!ring || !cqe || !ring->sh)
		return -EINVAL;
	now = core_now_ns();
	deadline = timeout_ns > UINT64_MAX - now ? UINT64_MAX :
		   now + timeout_ns;
	for (i = 0; i < ring->spin && timeout_ns; i++) {
		ret = kt_peek_cqe(ring, cqe);
		if (ret != -EAGAIN)
			return ret;
		__kt_cpu_relax();
	}
	for (;;) {
		ret = kt_peek_cqe(ring, cqe);
		if (ret != -EAGAIN)
			return ret;
		if (core_now_ns() >= deadline)
			return -ETIME;
		ret = wait_cq(ring->sh, ring->sh->cq_head, deadline);
		if (ret && ret != -ETIME)
			return ret;
	}
}

/* ---- the private job slot ------------------------------------------------ */

int core_sync_run(struct kt_ctx *ctx, const struct core_sync_job *job)
{
	uint32_t seq, i;
	int res;

	pthread_mutex_lock(&ctx->sync_lock);
	ctx->sync_job = *job;
	seq = ctx->sync_posted + 1;
	/* release: pairs with the leader's acquire of sync_posted (S1), so
	 * the job is written before it is seen */
	__kt_store_release(&ctx->sync_posted, seq);
	/* full barrier: the W3 handshake, as in kt_submit() */
	__kt_smp_mb();
	if (__kt_load_relaxed(&ctx->workers_asleep))
		wake_leader(ctx);
	/* acquire: pairs with the leader's release of sync_done (S2), so
	 * the job's result and writes are visible */
	for (i = 0; __kt_load_acquire(&ctx->sync_done) != seq; i++) {
		if (i < ctx->sync_spin) {
			__kt_cpu_relax();
			continue;
		}
		__kt_store_release(&ctx->sync_waiting, 1);
		/* full barrier: pairs with the leader's barrier between
		 * publishing sync_done and reading sync_waiting (S3) */
		__kt_smp_mb();
		if (__kt_load_acquire(&ctx->sync_done) != seq)
			core_futex_wait(&ctx->sync_done, seq - 1);
		__kt_store_release(&ctx->sync_waiting, 0);
	}
	res = ctx->sync_job.res;
	pthread_mutex_unlock(&ctx->sync_lock);
	return res;
}

/* ---- consumer half: the leader checks, runs and completes ops ------------ */

static int __attribute__((format(printf, 3, 4)))
sqe_reject(struct kt_ctx *ctx, const struct kt_sqe *sqe, const char *fmt, ...)
{
	char why[160];
	va_list ap;

	if (ctx->log_level < KT_LOG_DEBUG)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	core_log(ctx, KT_LOG_DEBUG, "op %#" PRIx64 " rejected: %s",
		 sqe->user_data, why);
	return -EINVAL;
}

/*
 * Fields an op does not use, and fields no op uses yet, must be zero: so a
 * stale or stray byte is refused today and can gain a meaning later.
 */
static int sqe_check(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	static const struct kt_moe_args no_args;
	const struct kt_moe_args *a = &sqe->moe;
	unsigned int i;

	if (sqe->opcode >= KT_OP_COUNT)
		return sqe_reject(ctx, sqe, "unknown opcode %u", sqe->opcode);
	if (sqe->flags & ~KT_SQE_F_ALL)
		return sqe_reject(ctx, sqe, "unknown flags %#x", sqe->flags);
	for (i = 0; i < sizeof(sqe->pad); i++)
		if (sqe->pad[i])
			return sqe_reject(ctx, sqe, "pad[%u] is not zero", i);
	for (i = 0; i < sizeof(sqe->reserved) / sizeof(sqe->reserved[0]); i++)
		if (sqe->reserved[i])
			return sqe_reject(ctx, sqe, "reserved[%u] is not zero",
					  i);
	if (sqe->opcode == KT_OP_NOP) {
		if (sqe->model)
			return sqe_reject(ctx, sqe, "a NOP has a model");
		if (memcmp(a, &no_args, sizeof(*a)))
			return sqe_reject(ctx, sqe, "a NOP has moe arguments");
		return 0;
	}
	if (a->flags & ~KT_MOE_F_ALL)
		return sqe_reject(ctx, sqe, "unknown moe.flags %#x", a->flags);
	if (a->pad0 || a->pad1)
		return sqe_reject(ctx, sqe, "moe.pad%u is not zero",
				  a->pad0 ? 0 : 1);
	for (i = 0; i < sizeof(a->reserved) / sizeof(a->reserved[0]); i++)
		if (a->reserved[i])
			return sqe_reject(ctx, sqe,
					  "moe.reserved[%u] is not zero", i);
	return 0;
}

static int op_dispatch(struct kt_ctx *ctx, const struct kt_sqe *sqe)
{
	int ret = sqe_check(ctx, sqe);

	if (ret)
		return ret;
	if (!ctx->handlers[sqe->opcode])
		return sqe->opcode == KT_OP_NOP ? 0 : -EOPNOTSUPP;
	return ctx->handlers[sqe->opcode](ctx, sqe);
}

static void post_cqe(struct core_ring_slot *r, uint64_t user_data, int res)
{
	struct kt_ring_shared *sh = r->sh;
	uint32_t tail = sh->cq_tail;
	struct kt_cqe *cqe = &r->cqes[tail & (r->cq_entries - 1)];
	int efd;

	cqe->user_data = user_data;
	cqe->res = res;
	cqe->flags = 0;
	/* release: pairs with the submitter's acquire of cq_tail (W4) */
	__kt_store_release(&sh->cq_tail, tail + 1);
	/* full barrier: pairs with wait_cq()'s barrier between setting
	 * cq_waiting and rereading cq_tail (W6) */
	__kt_smp_mb();
	if (__kt_load_relaxed(&sh->cq_waiting))
		core_futex_wake(&sh->cq_tail, 1);
	efd = __atomic_load_n(&r->eventfd, __ATOMIC_ACQUIRE);
	if (efd >= 0) {
		uint64_t one = 1;

		if (write(efd, &one, sizeof(one)) < 0) {
			/* a full eventfd counter still wakes epoll */
		}
	}
}

/* Run what one ring has queued, as far as its CQ has room. */
static unsigned int serve_ring(struct kt_ctx *ctx, struct core_ring_slot *r)
{
	struct kt_ring_shared *sh = r->sh;
	uint32_t head = sh->sq_head;
	/* acquire: pairs with kt_submit()'s release of sq_tail (W2) */
	uint32_t tail = __kt_load_acquire(&sh->sq_tail);
	unsigned int n = 0;

	if (tail - head > r->sq_entries) {
		/* only a racing second submitter moves the tail this far:
		 * drop what this ring holds rather than run stale entries */
		core_misuse(ctx, "a ring's SQ tail is %u entries past its head, more than its %u: two threads submit on it; its queued entries are dropped",
			    tail - head, r->sq_entries);
		__kt_store_release(&sh->sq_head, tail);
		return 0;
	}
	while (head != tail) {
		struct kt_sqe sqe;

		/* acquire: pairs with kt_cqe_seen()'s release of cq_head (W5) */
		if (sh->cq_tail - __kt_load_acquire(&sh->cq_head) >=
		    r->cq_entries)
			break;
		sqe = r->sqes[head & (r->sq_entries - 1)];
		head++;
		/* release: pairs with kt_get_sqe()'s acquire of sq_head (W1);
		 * the entry was copied, so the submitter may reuse it */
		__kt_store_release(&sh->sq_head, head);
		post_cqe(r, sqe.user_data, op_dispatch(ctx, &sqe));
		n++;
	}
	return n;
}

/* Run the private job, if one was posted. */
static unsigned int serve_sync(struct kt_ctx *ctx)
{
	uint32_t done = __kt_load_relaxed(&ctx->sync_done);
	struct core_sync_job *job = &ctx->sync_job;

	/* acquire: pairs with core_sync_run()'s release of sync_posted (S1) */
	if (__kt_load_acquire(&ctx->sync_posted) == done)
		return 0;
	job->res = job->fn ? job->fn(ctx, job->arg) :
			     op_dispatch(ctx, &job->sqe);
	/* release: pairs with core_sync_run()'s acquire of sync_done (S2) */
	__kt_store_release(&ctx->sync_done, done + 1);
	/* full barrier: pairs with core_sync_run()'s barrier between
	 * setting sync_waiting and rereading sync_done (S3) */
	__kt_smp_mb();
	if (__kt_load_relaxed(&ctx->sync_waiting))
		core_futex_wake(&ctx->sync_done, 1);
	return 1;
}

/* A pass over the ring slots starts: odd epoch (see ring_epoch_wait). */
static void epoch_begin(struct kt_ctx *ctx)
{
	__atomic_add_fetch(&ctx->ring_epoch, 1, __ATOMIC_SEQ_CST);
}

static void epoch_end(struct kt_ctx *ctx)
{
	__atomic_add_fetch(&ctx->ring_epoch, 1, __ATOMIC_SEQ_CST);
	/* seq_cst: the other half of E1 */
	if (__atomic_load_n(&ctx->epoch_waiters, __ATOMIC_SEQ_CST))
		core_futex_wake(&ctx->ring_epoch, INT_MAX);
}

/* Whether a ring or the job slot has work; an epoch like a serving pass. */
static bool work_pending(struct kt_ctx *ctx)
{
	bool pending = __kt_load_relaxed(&ctx->sync_posted) !=
		       __kt_load_relaxed(&ctx->sync_done);
	unsigned int i;

	epoch_begin(ctx);
	for (i = 0; i < CORE_MAX_RINGS && !pending; i++) {
		struct core_ring_slot *r =
			__atomic_load_n(&ctx->rings[i], __ATOMIC_SEQ_CST);

		pending = r && __kt_load_relaxed(&r->sh->sq_tail) !=
			       r->sh->sq_head;
	}
	epoch_end(ctx);
	return pending;
}

void core_leader_loop(struct core_worker *w)
{
	struct kt_ctx *ctx = w->ctx;
	uint64_t t0 = core_now_ns();
	unsigned int spins = 0;

	for (;;) {
		unsigned int i, n = 0;

		epoch_begin(ctx);
		for (i = 0; i < CORE_MAX_RINGS; i++) {
			struct core_ring_slot *r =
				__atomic_load_n(&ctx->rings[i], __ATOMIC_SEQ_CST);

			if (r)
				n += serve_ring(ctx, r);
		}
		epoch_end(ctx);
		n += serve_sync(ctx);
		if (n) {
			t0 = core_now_ns();
			continue;
		}
		if (__kt_load_acquire(&ctx->stop))
			break;
		__kt_cpu_relax();
		if (++spins % 64)
			continue;
		uint64_t now = core_now_ns();

		if (now - t0 < ctx->spin_ns)
			continue;
		uint32_t seq = __kt_load_relaxed(&ctx->wake_seq);

		__kt_store_release(&ctx->workers_asleep, 1);
		/* full barrier: pairs with kt_submit()'s and core_sync_run()'s
		 * barrier between publishing work and reading
		 * workers_asleep (W3) */
		__kt_smp_mb();
		if (!work_pending(ctx) && !__kt_load_relaxed(&ctx->stop)) {
			core_stat_add(&w->sleeps, 1);
			core_futex_wait(&ctx->wake_seq, seq);
		}
		__kt_store_release(&ctx->workers_asleep, 0);
		core_stat_add(&w->spin_ns, now - t0);
		t0 = core_now_ns();
	}
}
