/* SPDX-License-Identifier: MIT */
/*
 * reader.h - bulk reads of many file spans into memory: io_uring with a
 * deep queue and registered (fixed) buffers, or pread when io_uring is
 * unavailable. A callback sees each span as soon as all its bytes are in.
 */
#ifndef KT_URING_READER_H
#define KT_URING_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One span: @len bytes at @file_off go to @dst. */
struct ur_span {
	uint64_t file_off;
	uint64_t len;
	uint8_t *dst;
};

/*
 * Called once per span, in completion order, from a helper thread when the
 * machine has a second CPU (else, or with @sync_cb, from the caller's);
 * nonzero aborts the read and is returned.
 */
typedef int (*ur_span_fn)(void *arg, size_t idx, const struct ur_span *s);

struct ur_read_opts {
	uint32_t block;		/* bytes per request (0: 4 MiB) */
	uint32_t depth;		/* requests in flight (0: 32) */
	bool no_uring;		/* pread only */
	bool no_fixed;		/* io_uring without registered buffers */
	uint8_t *region;	/* memory holding every dst, registered in */
	uint64_t region_len;	/* windows as the reads reach them */
	bool sync_cb;		/* run callbacks on the calling thread */
	bool no_populate;	/* do not fault @region in ahead of reads */
	/*
	 * Tests only (NULL otherwise): called before each step that can fail,
	 * with the step's name: "uring_init" (falls back to pread),
	 * "register" (falls back to unregistered reads), "submit", "cqe"
	 * (the completion reads as -errno), "read" (one pread). A -errno
	 * return fails that step as the kernel would have.
	 */
	int (*fault)(const char *site);
};

struct ur_read_stats {
	bool io_uring;		/* io_uring did the reads */
	bool fixed;		/* into registered buffers */
	uint64_t bytes;
	uint64_t requests;
};

/*
 * Read @n spans, sorted by @file_off and not overlapping; spans adjacent
 * in the file and in memory are merged into requests of @o->block bytes.
 * With an O_DIRECT @fd, offsets, lengths and @dst must be 4 KiB aligned.
 * Return: 0; -EIO a short read (file ends) or a device error; the -errno
 * of a failed read or of @fn.
 */
int ur_read_spans(int fd, const struct ur_span *spans, size_t n,
		  const struct ur_read_opts *o, ur_span_fn fn, void *arg,
		  struct ur_read_stats *st);

/* io_uring_setup works here (not disabled by sysctl or seccomp). */
bool ur_available(void);

#endif /* KT_URING_READER_H */
