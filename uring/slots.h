/* SPDX-License-Identifier: MIT */
/*
 * slots.h - reads into the slots of an expert cache: one io_uring kept
 * open for the model's life, the slot pool registered as fixed buffers,
 * the file as a fixed file, a deep queue; pread when io_uring is missing.
 */
#ifndef KT_URING_SLOTS_H
#define KT_URING_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ur_slots;

/*
 * A request is done: @res is the bytes read or -errno. Called from
 * ur_slots_read() (when queue and backlog are full, or at once with pread),
 * ur_slots_submit() and ur_slots_reap(), on the caller's thread.
 */
typedef void (*ur_slot_done_fn)(void *arg, uint64_t tag, int res);

struct ur_slots_opts {
	uint32_t depth;		/* requests in flight (0: 64) */
	uint32_t backlog;	/* more that may wait for room: a read
				 * blocks only when these are taken too */
	bool sqpoll;		/* a kernel thread polls the SQ */
	bool no_uring;		/* pread only */
	bool no_fixed;		/* no registered buffers or file */
	uint8_t *region;	/* the slot pool, registered when allowed */
	uint64_t region_len;
	uint64_t unit;		/* a buffer never splits a unit (a slot) */
};

struct ur_slots_info {
	bool io_uring;
	bool fixed_buffers;
	bool fixed_file;
	bool sqpoll;
	uint32_t depth;
};

int ur_slots_create(int fd, const struct ur_slots_opts *o,
		    ur_slot_done_fn fn, void *arg, struct ur_slots **out);
/* Wait for every request in flight (their callbacks run), then free. */
void ur_slots_destroy(struct ur_slots *s);

/*
 * Queue a read of @len bytes at @off into @dst, tagged @tag. Returns 0 or
 * -errno (nothing queued, no callback for it).
 */
int ur_slots_read(struct ur_slots *s, uint64_t tag, uint64_t off,
		  uint8_t *dst, uint32_t len);
/* Hand the queued reads to the kernel. */
int ur_slots_submit(struct ur_slots *s);
/* Run the callbacks of finished reads; with @wait, at least one. Count. */
int ur_slots_reap(struct ur_slots *s, bool wait);
unsigned int ur_slots_inflight(const struct ur_slots *s);
void ur_slots_get_info(const struct ur_slots *s, struct ur_slots_info *info);

#endif /* KT_URING_SLOTS_H */
