/* SPDX-License-Identifier: MIT */
/*
 * npy.h - NumPy .npy files (v1/v2/v3, C order, little-endian) for kt
 * forward: the header parsed from memory (fuzzed), the file read whole.
 */
#ifndef KT_TOOLS_NPY_H
#define KT_TOOLS_NPY_H

#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_HEADER	(1u << 20)	/* far above any real header */

struct npy {
	char descr[16];
	uint32_t ndim;
	uint64_t shape[4];
	uint64_t esz;		/* bytes per element */
	void *data;
	size_t bytes;		/* of the data, from the shape */
};

/*
 * Bytes of preamble plus header from the first @n (>= 12, or the whole
 * file) bytes; 0 when they are not the start of a .npy file.
 */
size_t npy_prefix_len(const uint8_t *pre, size_t n);

/*
 * Parse the preamble and header dict in @buf (@len >= npy_prefix_len()):
 * descr, C order, shape, element size and data bytes. The offset of the
 * data (> 0), or -EINVAL with a message in @msg (no file name: the caller
 * adds it).
 */
int npy_parse(const uint8_t *buf, size_t len, struct npy *a, char *msg,
	      size_t msg_len);

/* Read @path whole into @a; -errno with a message on stderr naming it. */
int npy_read(const char *path, struct npy *a);
void npy_free(struct npy *a);

#endif /* KT_TOOLS_NPY_H */
