// SPDX-License-Identifier: MIT
/*
 * route-file.c - the routing counters of a model saved to and loaded from
 * a small file (layout: Documentation/cache.md). A loaded file is hostile
 * input: its size, magic, version, geometry and CRC32C are all checked
 * before a counter changes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "kernels/crc32c.h"
#include "ktcore/cache.h"
#include "ktcore/core.h"
#include "ktcore/model.h"
#include "loader/error.h"
#include "loader/route-format.h"

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = write(fd, b, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

KT_EXPORT int kt_model_route_save(const struct kt_model *m, const char *path)
{
	struct ldr_route_hdr h;
	uint64_t n, i, *buf;
	uint32_t tail[2];
	char tmp[4096];
	int fd, ret;

	if (!m || !path)
		return ldr_err(-EINVAL, "kt_model_route_save: model and path are required");
	n = (uint64_t)m->n_layers * m->n_experts;
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >=
	    (int)sizeof(tmp))
		return ldr_err(-EINVAL, "%s: path too long", path);
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, LDR_ROUTE_MAGIC, 8);
	h.major = LDR_ROUTE_MAJOR;
	h.header_size = LDR_ROUTE_HDR;
	h.n_layers = m->n_layers;
	h.n_experts = m->n_experts;
	buf = calloc(n ? n : 1, 8);
	if (!buf)
		return -ENOMEM;
	for (i = 0; i < n && m->route; i++)
		buf[i] = __atomic_load_n(&m->route[i], __ATOMIC_RELAXED);
	tail[0] = kern_crc32c(kern_crc32c(0, &h, sizeof(h)), buf, n * 8);
	tail[1] = 0;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = ldr_err(-errno, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	ret = write_all(fd, &h, sizeof(h));
	if (!ret)
		ret = write_all(fd, buf, n * 8);
	if (!ret)
		ret = write_all(fd, tail, sizeof(tail));
	if (!ret && fsync(fd))
		ret = -errno;
	if (close(fd) && !ret)
		ret = -errno;
	if (!ret && rename(tmp, path))
		ret = -errno;
	if (ret) {
		unlink(tmp);
		ldr_err(ret, "%s: %s", path, strerror(-ret));
	}
out:
	free(buf);
	return ret;
}

static int read_all(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		ssize_t r = read(fd, b, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (!r)
			return -EIO;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/*
 * Read and check @path for @nl x @ne counters into @buf (nl x ne words);
 * nothing else is touched, so a bad file changes nothing.
 */
static int route_read(const char *path, uint32_t nl, uint32_t ne,
		      uint64_t *buf)
{
	uint64_t want = ldr_route_file_size((uint64_t)nl * ne);
	struct stat st;
	uint8_t *file = NULL;
	size_t len;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ldr_err(-errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st)) {
		ret = ldr_err(-errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = ldr_err(-EINVAL, "%s: not a regular file", path);
		goto out;
	}
	/* no more than a file of the right size: the geometry bounds it */
	len = (uint64_t)st.st_size < want ? (size_t)st.st_size : (size_t)want;
	file = malloc(len ? len : 1);
	if (!file) {
		ret = -ENOMEM;
		goto out;
	}
	ret = read_all(fd, file, len);
	if (ret) {
		ldr_err(ret, "%s: short read", path);
		goto out;
	}
	ret = ldr_route_parse(path, file, len, (uint64_t)st.st_size, nl, ne,
			      buf);
out:
	free(file);
	close(fd);
	return ret;
}

KT_EXPORT int kt_route_file_read(const char *path, uint32_t n_layers,
				 uint32_t n_experts, uint64_t *counts)
{
	if (!path || !counts || !n_layers || !n_experts)
		return ldr_err(-EINVAL, "kt_route_file_read: path, counts and the geometry are required");
	return route_read(path, n_layers, n_experts, counts);
}

KT_EXPORT int kt_model_route_load(struct kt_model *m, const char *path)
{
	uint64_t n, i, *buf;
	int ret;

	if (!m || !path)
		return ldr_err(-EINVAL, "kt_model_route_load: model and path are required");
	ret = core_stats_reserve(m);
	if (ret)
		return ret;
	n = (uint64_t)m->n_layers * m->n_experts;
	buf = malloc(n ? n * 8 : 8);
	if (!buf)
		return -ENOMEM;
	ret = route_read(path, m->n_layers, m->n_experts, buf);
	for (i = 0; !ret && i < n; i++)
		__atomic_store_n(&m->route[i], buf[i], __ATOMIC_RELAXED);
	free(buf);
	return ret;
}
