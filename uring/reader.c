// SPDX-License-Identifier: MIT
/*
 * reader.c - bulk span reads for model loading. io_uring keeps @depth
 * block-sized reads in flight; the destination region is registered as
 * fixed buffers one window at a time, just ahead of the reads, so pinning
 * (and first-touch zeroing) of window w+1 overlaps the I/O of window w.
 */
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "uring/reader.h"

#define UR_DEF_BLOCK	(4u << 20)
#define UR_DEF_DEPTH	32u
#define UR_MAX_DEPTH	1024u
#define UR_WINDOW	(64ull << 20)	/* registered in steps of this */
#define UR_MAX_WINDOWS	16384u		/* the kernel's buffer table limit */
#define UR_POPULATE_STEP (8ull << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

struct ur_req {
	uint64_t off;		/* where the remaining bytes are */
	uint8_t *dst;
	uint32_t len;
	uint64_t orig_off;	/* what the request covers, for accounting */
	uint32_t orig_len;
	size_t first;		/* first span it touches */
	int buf_index;		/* fixed buffer, or -1 */
	bool busy;
};

struct ur_state {
	const struct ur_span *spans;
	size_t n;
	uint64_t *left;		/* bytes still to arrive, per span */
	size_t cur;		/* next span to issue from */
	uint64_t cur_pos;	/* bytes of spans[cur] issued */
	uint32_t block;
	ur_span_fn fn;
	void *arg;
	/* fixed buffers */
	uint8_t *region;
	uint64_t region_len;
	uint64_t window;
	uint32_t n_windows;
	uint32_t registered;	/* windows [0, registered) are in the table */
	int (*fault)(const char *site);	/* ur_read_opts.fault */
	struct ur_read_stats *st;
	/* the helper thread: callbacks and populating ahead of the reads */
	bool helper;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t *queue;		/* spans complete, in completion order */
	size_t q_head, q_tail;	/* under @lock */
	bool q_done;		/* no more pushes */
	int helper_err;		/* first callback error (atomic) */
	uint64_t populated;	/* region bytes claimed for faulting (atomic) */
	bool populate;
	bool pop_stop;		/* reads are over (atomic) */
	bool pop_started;
	pthread_t pop_thread;
};

bool ur_available(void)
{
	static int avail = -1;
	struct io_uring ring;

	if (avail < 0) {
		/* KT_NO_URING: pread only (valgrind cannot see the kernel's
		 * io_uring writes into memory, and reports them unset) */
		const char *no = getenv("KT_NO_URING");

		avail = !(no && *no && strcmp(no, "0")) &&
			!io_uring_queue_init(2, &ring, 0);
		if (avail)
			io_uring_queue_exit(&ring);
	}
	return avail;
}

/*
 * Next request: from the cursor, up to @block bytes of spans contiguous in
 * the file and in memory, not crossing a registered window. False when done.
 */
static bool next_req(struct ur_state *s, struct ur_req *r)
{
	const struct ur_span *sp;
	uint64_t want, off;
	uint8_t *dst;

	while (s->cur < s->n && s->cur_pos == s->spans[s->cur].len) {
		s->cur++;
		s->cur_pos = 0;
	}
	if (s->cur >= s->n)
		return false;
	sp = &s->spans[s->cur];
	off = sp->file_off + s->cur_pos;
	dst = sp->dst + s->cur_pos;
	r->first = s->cur;
	r->buf_index = -1;
	want = s->block;
	if (s->n_windows && dst >= s->region &&
	    dst < s->region + s->region_len) {
		uint64_t rel = (uint64_t)(dst - s->region);
		uint64_t wend = (rel / s->window + 1) * s->window;

		r->buf_index = (int)(rel / s->window);
		if (want > wend - rel)
			want = wend - rel;
	}
	r->len = 0;
	for (;;) {
		uint64_t take = sp->len - s->cur_pos;

		if (take > want - r->len)
			take = want - r->len;
		r->len += (uint32_t)take;
		s->cur_pos += take;
		if (r->len == want || s->cur + 1 >= s->n)
			break;
		/* continue into the next span only when both sides touch */
		if (s->spans[s->cur + 1].file_off != sp->file_off + sp->len ||
		    s->spans[s->cur + 1].dst != sp->dst + sp->len)
			break;
		s->cur++;
		s->cur_pos = 0;
		sp = &s->spans[s->cur];
	}
	r->off = r->orig_off = off;
	r->dst = dst;
	r->orig_len = r->len;
	return true;
}

/* Bytes of a finished request reach their spans; full spans are handed on. */
static int account(struct ur_state *s, const struct ur_req *r)
{
	uint64_t end = r->orig_off + r->orig_len;
	size_t i;
	int ret;

	s->st->bytes += r->orig_len;
	s->st->requests++;
	for (i = r->first; i < s->n && s->spans[i].file_off < end; i++) {
		uint64_t a = s->spans[i].file_off, b = a + s->spans[i].len;

		if (a < r->orig_off)
			a = r->orig_off;
		if (b > end)
			b = end;
		if (b <= a)
			continue;
		s->left[i] -= b - a;
		if (s->left[i] || !s->fn)
			continue;
		if (s->helper) {
			pthread_mutex_lock(&s->lock);
			s->queue[s->q_tail++] = i;
			pthread_cond_signal(&s->cond);
			pthread_mutex_unlock(&s->lock);
			continue;
		}
		ret = s->fn(s->arg, i, &s->spans[i]);
		if (ret)
			return ret;
	}
	return __atomic_load_n(&s->helper_err, __ATOMIC_RELAXED);
}

/* Fault in the next step of the region; false when all of it is in. */
static bool populate_step(struct ur_state *s)
{
	uint64_t done, len, i;

	if (__atomic_load_n(&s->helper_err, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&s->pop_stop, __ATOMIC_RELAXED))
		return false;
	done = __atomic_fetch_add(&s->populated, UR_POPULATE_STEP,
				  __ATOMIC_RELAXED);
	if (done >= s->region_len)
		return false;
	len = s->region_len - done < UR_POPULATE_STEP ?
	      s->region_len - done : UR_POPULATE_STEP;
	if (madvise(s->region + done, len, MADV_POPULATE_WRITE)) {
		/* older kernels: a write per page does the same */
		for (i = 0; i < len; i += 4096)
			__atomic_store_n(&s->region[done + i], 0, __ATOMIC_RELAXED);
	}
	return true;
}

static void *populate_main(void *arg)
{
	while (populate_step(arg))
		;
	return NULL;
}

/*
 * The helper runs the callbacks (checksums) off the I/O thread, and in
 * between faults in the destination ahead of the reads, so that neither
 * first-touch zeroing nor hashing stalls the queue.
 */
static void *helper_main(void *arg)
{
	struct ur_state *s = arg;
	size_t i;
	int ret;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		if (s->q_head < s->q_tail) {
			i = s->queue[s->q_head++];
			pthread_mutex_unlock(&s->lock);
			if (!__atomic_load_n(&s->helper_err, __ATOMIC_RELAXED)) {
				ret = s->fn(s->arg, i, &s->spans[i]);
				if (ret)
					__atomic_store_n(&s->helper_err, ret,
							 __ATOMIC_RELAXED);
			}
			pthread_mutex_lock(&s->lock);
			continue;
		}
		if (s->q_done)
			break;
		if (s->populate) {
			pthread_mutex_unlock(&s->lock);
			if (!populate_step(s))
				s->populate = false;
			pthread_mutex_lock(&s->lock);
			continue;
		}
		if (s->q_head == s->q_tail && !s->q_done)
			pthread_cond_wait(&s->cond, &s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static void helper_start(struct ur_state *s, bool populate)
{
	s->queue = malloc((s->n ? s->n : 1) * sizeof(*s->queue));
	if (!s->queue)
		return;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->populate = populate && s->region && s->region_len;
	/* first touch of fresh memory can cost as much as the disk read
	 * (zeroing; in VMs, host faults): a second thread shares it */
	if (s->populate && !pthread_create(&s->pop_thread, NULL, populate_main, s))
		s->pop_started = true;
	if (pthread_create(&s->thread, NULL, helper_main, s)) {
		free(s->queue);
		s->queue = NULL;
		return;
	}
	s->helper = true;
}

/* Wait for the queued callbacks; their first error, if any. */
static int helper_stop(struct ur_state *s)
{
	if (!s->helper)
		return 0;
	__atomic_store_n(&s->pop_stop, true, __ATOMIC_RELAXED);
	pthread_mutex_lock(&s->lock);
	s->q_done = true;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	if (s->pop_started)
		pthread_join(s->pop_thread, NULL);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s->queue);
	s->helper = false;
	return s->helper_err;
}

/* -errno when the test hook fails @site, else 0 */
static int inject(const struct ur_state *s, const char *site)
{
	return s->fault ? s->fault(site) : 0;
}

static int read_pread(int fd, struct ur_state *s)
{
	struct ur_req r;
	int ret;

	while (next_req(s, &r)) {
		while (r.len) {
			int f = inject(s, "read");
			ssize_t got = f ? (errno = -f, -1) :
				      pread(fd, r.dst, r.len, (off_t)r.off);

			if (got < 0 && errno == EINTR)
				continue;
			if (got < 0)
				return -errno;
			if (!got)
				return -EIO;
			r.off += (uint64_t)got;
			r.dst += got;
			r.len -= (uint32_t)got;
		}
		ret = account(s, &r);
		if (ret)
			return ret;
	}
	return 0;
}

/* Register windows up to and including @w (sparse table, filled lazily). */
static int register_upto(struct io_uring *ring, struct ur_state *s, int w)
{
	while (s->registered <= (uint32_t)w) {
		uint64_t start = (uint64_t)s->registered * s->window;
		struct iovec iov = {
			.iov_base = s->region + start,
			.iov_len = s->region_len - start < s->window ?
				   s->region_len - start : s->window,
		};
		int ret = inject(s, "register");

		if (!ret)
			ret = io_uring_register_buffers_update_tag(ring,
								   s->registered,
								   &iov, NULL, 1);
		if (ret < 0)
			return ret;
		s->registered++;
	}
	return 0;
}

static void prep(struct io_uring_sqe *sqe, int fd, struct ur_req *r,
		 unsigned int slot)
{
	if (r->buf_index >= 0)
		io_uring_prep_read_fixed(sqe, fd, r->dst, r->len, r->off,
					 r->buf_index);
	else
		io_uring_prep_read(sqe, fd, r->dst, r->len, r->off);
	io_uring_sqe_set_data64(sqe, slot);
}

static int read_uring(int fd, struct ur_state *s, uint32_t depth,
		      bool fixed)
{
	struct ur_req *reqs;
	struct io_uring ring;
	unsigned int inflight = 0, hard_fails = 0, i;
	bool more = true, table = false;
	int ret, err = 0;

	ret = inject(s, "uring_init");
	if (!ret)
		ret = io_uring_queue_init(depth, &ring, 0);
	if (ret < 0)
		return ret;
	reqs = calloc(depth, sizeof(*reqs));
	if (!reqs) {
		io_uring_queue_exit(&ring);
		return -ENOMEM;
	}
	s->n_windows = 0;
	if (fixed && s->region && s->region_len) {
		s->window = UR_WINDOW;
		while ((s->region_len + s->window - 1) / s->window > UR_MAX_WINDOWS)
			s->window *= 2;
		if (!io_uring_register_buffers_sparse(&ring,
			(unsigned int)((s->region_len + s->window - 1) / s->window)))
			s->n_windows = (uint32_t)((s->region_len + s->window - 1) /
						  s->window);
		table = s->n_windows > 0;
	}
	s->st->io_uring = true;
	s->st->fixed = s->n_windows > 0;
	while (more || inflight) {
		struct io_uring_cqe *cqe;
		struct ur_req *r;

		/* fill the queue */
		while (more && !err && inflight < depth) {
			for (i = 0; i < depth && reqs[i].busy; i++)
				;
			r = &reqs[i];
			if (!next_req(s, r)) {
				more = false;
				break;
			}
			if (r->buf_index >= 0) {
				ret = register_upto(&ring, s, r->buf_index);
				if (ret < 0) {
					/* pinning refused (memlock): plain reads */
					s->n_windows = 0;
					s->st->fixed = false;
					r->buf_index = -1;
				}
			}
			r->busy = true;
			prep(io_uring_get_sqe(&ring), fd, r, i);
			inflight++;
		}
		if (err)
			more = false;
		if (!inflight)
			break;
		ret = inject(s, "submit");
		if (!ret)
			ret = io_uring_submit_and_wait(&ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			err = err ? err : ret;
			/* the kernel keeps refusing: give up; pages under I/O
			 * stay pinned by the kernel until the ring is torn down */
			if (++hard_fails > 1000)
				break;
		}
		while (!io_uring_peek_cqe(&ring, &cqe)) {
			unsigned int slot = (unsigned int)io_uring_cqe_get_data64(cqe);
			int res = inject(s, "cqe") ?: cqe->res;

			io_uring_cqe_seen(&ring, cqe);
			r = &reqs[slot];
			if (res == -EAGAIN || res == -EINTR) {
				prep(io_uring_get_sqe(&ring), fd, r, slot);
				continue;
			}
			if (res <= 0 || err) {
				if (!err)
					err = res < 0 ? res : -EIO;
				r->busy = false;
				inflight--;
				continue;
			}
			if ((uint32_t)res < r->len) {
				/* short read: ask for the rest */
				r->off += (uint32_t)res;
				r->dst += res;
				r->len -= (uint32_t)res;
				prep(io_uring_get_sqe(&ring), fd, r, slot);
				continue;
			}
			r->busy = false;
			inflight--;
			ret = account(s, r);
			if (ret && !err)
				err = ret;
		}
	}
	free(reqs);
	/*
	 * Unpin the windows now: io_uring_queue_exit() leaves the teardown,
	 * unpinning included, to a kernel worker that runs later, so the
	 * pages would stay pinned after we return. A hugetlbfs file (kt
	 * stage's copy) unlinked by then keeps its pages counted against
	 * the mount until that worker runs, and the next staging can find
	 * the mount full (-ENOSPC). Unregistering waits for the unpin (with
	 * reads still in flight, after a refused submit, it is left to exit).
	 */
	if (table && !inflight)
		io_uring_unregister_buffers(&ring);
	io_uring_queue_exit(&ring);
	return err;
}

int ur_read_spans(int fd, const struct ur_span *spans, size_t n,
		  const struct ur_read_opts *o, ur_span_fn fn, void *arg,
		  struct ur_read_stats *st)
{
	struct ur_read_stats dummy;
	struct ur_state s;
	uint32_t depth;
	size_t i;
	int ret;

	if (!st)
		st = &dummy;
	memset(st, 0, sizeof(*st));
	memset(&s, 0, sizeof(s));
	s.spans = spans;
	s.n = n;
	s.fn = fn;
	s.arg = arg;
	s.st = st;
	s.block = o && o->block ? o->block : UR_DEF_BLOCK;
	s.region = o ? o->region : NULL;
	s.region_len = o ? o->region_len : 0;
	s.fault = o ? o->fault : NULL;
	depth = o && o->depth ? o->depth : UR_DEF_DEPTH;
	if (depth > UR_MAX_DEPTH)
		depth = UR_MAX_DEPTH;
	s.left = malloc((n ? n : 1) * sizeof(*s.left));
	if (!s.left)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		s.left[i] = spans[i].len;
	for (i = 0; i < n; i++) {
		if (!spans[i].len) {
			ret = fn ? fn(arg, i, &spans[i]) : 0;
			if (ret)
				goto out;
		}
	}
	/* a second CPU hashes and faults in while this one drives the I/O */
	if (sysconf(_SC_NPROCESSORS_ONLN) > 1 && !(o && o->sync_cb) && fn)
		helper_start(&s, !(o && o->no_populate));
	if (!(o && o->no_uring) && ur_available()) {
		ret = read_uring(fd, &s, depth, !(o && o->no_fixed));
		/* io_uring_queue_init refused (memlock, seccomp): use pread;
		 * nothing was read, so nothing is read twice */
		if (st->io_uring)
			goto out;
	}
	ret = read_pread(fd, &s);
out:
	{
		int herr = helper_stop(&s);

		if (!ret)
			ret = herr;
	}
	free(s.left);
	return ret;
}
