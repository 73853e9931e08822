// SPDX-License-Identifier: MIT
/*
 * io.c - whole-buffer pread/pwrite, O_DIRECT-aligned buffers, and the
 * removal of temporaries that killed processes left.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "loader/fault.h"
#include "loader/io.h"

/*
 * Read or write all of [p, p + len) at @off, again after a short transfer
 * or EINTR; a transfer of 0 bytes (end of file, a full disk) is -EIO.
 */
static int io_full(int fd, uint8_t *p, size_t len, uint64_t off, bool wr)
{
	while (len) {
		ssize_t n;

		if (LDR_FAULT_CALL(wr ? "write" : "read"))
			n = -1;
		else if (wr)
			n = pwrite(fd, p, len, (off_t)off);
		else
			n = pread(fd, p, len, (off_t)off);
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

int ldr_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	return io_full(fd, buf, len, off, false);
}

int ldr_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	/* pwrite() only reads the buffer */
	return io_full(fd, (uint8_t *)(uintptr_t)buf, len, off, true);
}

void *ldr_io_buf_alloc(size_t len)
{
	void *p;

	len = (len + 4095) & ~(size_t)4095;
	if (ldr_fault("alloc") || posix_memalign(&p, 4096, len ? len : 4096))
		return NULL;
	return p;
}

unsigned int ldr_remove_stale_temps(const char *dir, const char *prefix)
{
	size_t plen = strlen(prefix);
	unsigned int n = 0;
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char *end, path[4096];
		long pid;

		if (strncmp(de->d_name, prefix, plen))
			continue;
		errno = 0;
		pid = strtol(de->d_name + plen, &end, 10);
		if (errno || *end || end == de->d_name + plen || pid <= 0 ||
		    pid == getpid())
			continue;
		/* only a pid that runs no more: a live one may still write */
		if (!kill((pid_t)pid, 0) || errno != ESRCH)
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) <
		    (int)sizeof(path) && !unlink(path))
			n++;
	}
	closedir(d);
	return n;
}
