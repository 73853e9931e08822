// SPDX-License-Identifier: MIT
/*
 * io.c - whole-buffer pread/pwrite and O_DIRECT-aligned buffers.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "loader/fault.h"
#include "loader/io.h"

int ldr_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = LDR_FAULT_CALL("read") ? -1 :
			    pread(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!n)
			return -EIO;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

int ldr_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = LDR_FAULT_CALL("write") ? -1 :
			    pwrite(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!n)
			return -EIO;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

void *ldr_io_buf_alloc(size_t len)
{
	void *p;

	len = (len + 4095) & ~(size_t)4095;
	if (ldr_fault("alloc") || posix_memalign(&p, 4096, len ? len : 4096))
		return NULL;
	return p;
}
