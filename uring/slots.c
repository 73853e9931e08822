// SPDX-License-Identifier: MIT
/*
 * slots.c - the expert cache's reader: requests into slot memory kept in
 * flight across ops (a prefetch returns before its reads are done), the
 * pool registered once as fixed buffers and the file as fixed file 0.
 * Requests past the queue depth wait in a backlog, handed to the kernel
 * as earlier ones complete, so that queuing a whole layer never blocks.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>

#include "uring/reader.h"
#include "uring/slots.h"

#define US_DEF_DEPTH	64u
#define US_MAX_DEPTH	4096u
#define US_MAX_BUF	(1ull << 30)	/* the kernel's limit per buffer */
#define US_MAX_BUFS	16384u
#define US_MAX_BACKLOG	(1u << 22)

struct us_req {
	uint64_t tag;
	uint64_t off;
	uint8_t *dst;
	uint32_t len;
	int buf;		/* fixed buffer, or -1 */
	int32_t next;		/* free list, or the backlog */
};

struct ur_slots {
	int fd;
	ur_slot_done_fn fn;
	void *arg;
	bool uring;
	struct io_uring ring;
	struct ur_slots_info info;
	uint8_t *region;
	uint64_t region_len;
	uint64_t buf_len;	/* bytes per registered buffer */
	struct us_req *reqs;	/* [depth + backlog] */
	int32_t free_head;
	int32_t wait_head, wait_tail;	/* the backlog, oldest first */
	unsigned int inflight;	/* requests taken from @reqs */
	unsigned int busy;	/* prepared for the kernel: <= depth */
	unsigned int queued;	/* prepared, not yet submitted */
};

static int register_pool(struct ur_slots *s, const struct ur_slots_opts *o)
{
	uint64_t unit = o->unit ? o->unit : 4096, per, n, i;
	struct iovec *iov;
	int ret;

	if (unit > US_MAX_BUF)
		return -EINVAL;
	per = US_MAX_BUF / unit;
	s->buf_len = per * unit;
	n = (o->region_len + s->buf_len - 1) / s->buf_len;
	if (!n || n > US_MAX_BUFS)
		return -EINVAL;
	iov = calloc(n, sizeof(*iov));
	if (!iov)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		uint64_t start = i * s->buf_len;

		iov[i].iov_base = o->region + start;
		iov[i].iov_len = o->region_len - start < s->buf_len ?
				 o->region_len - start : s->buf_len;
	}
	ret = io_uring_register_buffers(&s->ring, iov, (unsigned int)n);
	free(iov);
	return ret;
}

static int uring_setup(struct ur_slots *s, const struct ur_slots_opts *o)
{
	struct io_uring_params p;
	int ret;

	memset(&p, 0, sizeof(p));
	if (o->sqpoll) {
		p.flags |= IORING_SETUP_SQPOLL;
		p.sq_thread_idle = 50;
	}
	ret = io_uring_queue_init_params(s->info.depth, &s->ring, &p);
	if (ret < 0 && o->sqpoll) {
		/* SQPOLL needs privileges on older kernels: without it */
		memset(&p, 0, sizeof(p));
		ret = io_uring_queue_init_params(s->info.depth, &s->ring, &p);
	}
	if (ret < 0)
		return ret;
	s->info.sqpoll = p.flags & IORING_SETUP_SQPOLL;
	s->info.io_uring = true;
	if (o->no_fixed)
		return 0;
	/* pinning may be refused (RLIMIT_MEMLOCK): plain reads then */
	if (o->region && o->region_len && !register_pool(s, o)) {
		s->region = o->region;
		s->region_len = o->region_len;
		s->info.fixed_buffers = true;
	}
	if (!io_uring_register_files(&s->ring, &s->fd, 1))
		s->info.fixed_file = true;
	return 0;
}

int ur_slots_create(int fd, const struct ur_slots_opts *o,
		    ur_slot_done_fn fn, void *arg, struct ur_slots **out)
{
	struct ur_slots *s;
	uint32_t depth = o && o->depth ? o->depth : US_DEF_DEPTH, i, n;
	uint32_t backlog = o ? o->backlog : 0;

	if (fd < 0 || !fn || !out)
		return -EINVAL;
	if (depth > US_MAX_DEPTH)
		depth = US_MAX_DEPTH;
	if (backlog > US_MAX_BACKLOG)
		backlog = US_MAX_BACKLOG;
	n = depth + backlog;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->reqs = calloc(n, sizeof(*s->reqs));
	if (!s->reqs) {
		free(s);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		s->reqs[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
	s->wait_head = s->wait_tail = -1;
	s->fd = fd;
	s->fn = fn;
	s->arg = arg;
	s->info.depth = depth;
	if (!(o && o->no_uring) && ur_available() &&
	    !uring_setup(s, o ? o : &(struct ur_slots_opts){ 0 }))
		s->uring = true;
	*out = s;
	return 0;
}

static void prep(struct ur_slots *s, uint32_t idx)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
	struct us_req *r = &s->reqs[idx];
	int fd = s->info.fixed_file ? 0 : s->fd;

	/* the SQ has depth entries and at most depth requests are busy */
	if (r->buf >= 0)
		io_uring_prep_read_fixed(sqe, fd, r->dst, r->len, r->off,
					 r->buf);
	else
		io_uring_prep_read(sqe, fd, r->dst, r->len, r->off);
	if (s->info.fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, idx);
	s->busy++;
	s->queued++;
}

static void req_free(struct ur_slots *s, uint32_t idx)
{
	s->reqs[idx].next = s->free_head;
	s->free_head = (int32_t)idx;
	s->inflight--;
}

/* The oldest requests of the backlog into the room the kernel has. */
static void promote(struct ur_slots *s)
{
	while (s->busy < s->info.depth && s->wait_head >= 0) {
		uint32_t idx = (uint32_t)s->wait_head;

		s->wait_head = s->reqs[idx].next;
		if (s->wait_head < 0)
			s->wait_tail = -1;
		prep(s, idx);
	}
}

int ur_slots_submit(struct ur_slots *s)
{
	int ret;

	if (!s->uring || !s->queued)
		return 0;
	do
		ret = io_uring_submit(&s->ring);
	while (ret == -EINTR);
	if (ret < 0)
		return ret;
	s->queued = 0;
	return 0;
}

int ur_slots_reap(struct ur_slots *s, bool wait)
{
	struct io_uring_cqe *cqe;
	int n = 0, ret;

	if (!s->uring || !s->inflight)
		return 0;
	ret = ur_slots_submit(s);
	if (ret)
		return ret;
	for (;;) {
		if (wait && !n)
			ret = io_uring_wait_cqe(&s->ring, &cqe);
		else
			ret = io_uring_peek_cqe(&s->ring, &cqe);
		if (ret == -EINTR)
			continue;
		if (ret)
			break;
		{
			uint32_t idx = (uint32_t)io_uring_cqe_get_data64(cqe);
			int res = cqe->res;
			uint64_t tag = s->reqs[idx].tag;

			io_uring_cqe_seen(&s->ring, cqe);
			s->busy--;
			if (res == -EAGAIN || res == -EINTR) {
				prep(s, idx);
				ur_slots_submit(s);
				continue;
			}
			req_free(s, idx);
			n++;
			s->fn(s->arg, tag, res);
			promote(s);
		}
	}
	ret = ur_slots_submit(s);
	return ret ? ret : n;
}

static int read_sync(struct ur_slots *s, uint64_t off, uint8_t *dst,
		     uint32_t len)
{
	uint32_t done = 0;

	while (done < len) {
		ssize_t got = pread(s->fd, dst + done, len - done,
				    (off_t)(off + done));

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (!got)
			break;
		done += (uint32_t)got;
	}
	return (int)done;
}

int ur_slots_read(struct ur_slots *s, uint64_t tag, uint64_t off,
		  uint8_t *dst, uint32_t len)
{
	struct us_req *r;
	uint32_t idx;
	int ret;

	if (len > INT32_MAX)
		return -EINVAL;
	if (!s->uring) {
		s->fn(s->arg, tag, read_sync(s, off, dst, len));
		return 0;
	}
	while (s->free_head < 0) {
		ret = ur_slots_reap(s, true);
		if (ret < 0)
			return ret;
	}
	idx = (uint32_t)s->free_head;
	r = &s->reqs[idx];
	s->free_head = r->next;
	s->inflight++;
	r->tag = tag;
	r->off = off;
	r->dst = dst;
	r->len = len;
	r->buf = -1;
	if (s->info.fixed_buffers && dst >= s->region &&
	    dst + len <= s->region + s->region_len &&
	    (uint64_t)(dst - s->region) / s->buf_len ==
	    (uint64_t)(dst + len - 1 - s->region) / s->buf_len)
		r->buf = (int)((uint64_t)(dst - s->region) / s->buf_len);
	if (s->busy < s->info.depth) {
		prep(s, idx);
		return 0;
	}
	r->next = -1;
	if (s->wait_tail >= 0)
		s->reqs[s->wait_tail].next = (int32_t)idx;
	else
		s->wait_head = (int32_t)idx;
	s->wait_tail = (int32_t)idx;
	return 0;
}

unsigned int ur_slots_inflight(const struct ur_slots *s)
{
	return s->inflight;
}

void ur_slots_get_info(const struct ur_slots *s, struct ur_slots_info *info)
{
	*info = s->info;
}

void ur_slots_destroy(struct ur_slots *s)
{
	if (!s)
		return;
	if (s->uring) {
		/* the kernel may still write into slot memory: wait */
		while (s->inflight && ur_slots_reap(s, true) >= 0)
			;
		/* exit unpins the pool later, from a kernel worker: unpin
		 * now, so that the caller's free of it frees (hugepages) */
		if (s->info.fixed_buffers && !s->inflight)
			io_uring_unregister_buffers(&s->ring);
		io_uring_queue_exit(&s->ring);
	}
	free(s->reqs);
	free(s);
}
