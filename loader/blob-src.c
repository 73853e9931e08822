// SPDX-License-Identifier: MIT
/*
 * blob-src.c - read one expert's packed blob from the .ktw a model was
 * opened from, after the open: the GPU upload of experts the host holds
 * no copy of. O_DIRECT pread into the upload staging, CRC32C checked as
 * the load checks it. Documentation/placement.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/crc32c.h"
#include "ktcore/core.h"
#include "ktcore/model.h"
#include "loader/blob-src.h"
#include "loader/error.h"
#include "loader/fault.h"
#include "loader/io.h"

struct ldr_blob_src {
	char *path;
	int fd;			/* -1 when mapped */
	bool direct;		/* fd has O_DIRECT */
	bool verify;
	const uint8_t *map;	/* the whole file, or NULL */
	struct ktw_header hdr;
	int32_t *layer_ids;	/* [n_layers] for messages */
	uint64_t *off;		/* [n_layers * n_experts] */
	uint32_t *crc;
};

static int open_fd(struct ldr_blob_src *s, bool direct)
{
	int fd = LDR_FAULT_CALL("open") ? -1 :
		 open(s->path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));

	if (fd < 0)
		return -errno;
	s->fd = fd;
	s->direct = direct;
	return 0;
}

int ldr_blob_src_open(const struct ldr_ktw *k, const uint8_t *map,
		      bool verify, struct ldr_blob_src **out)
{
	struct ldr_blob_src *s;
	uint64_t i;
	int ret;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->fd = -1;
	s->path = strdup(k->path);
	s->layer_ids = malloc(4ull * k->hdr.n_layers);
	s->off = malloc(k->n_entries * sizeof(*s->off));
	s->crc = malloc(k->n_entries * sizeof(*s->crc));
	if (!s->path || !s->layer_ids || !s->off || !s->crc) {
		ret = -ENOMEM;
		goto err;
	}
	memcpy(s->layer_ids, k->layer_ids, 4ull * k->hdr.n_layers);
	for (i = 0; i < k->n_entries; i++) {
		s->off[i] = k->table[i].offset;
		s->crc[i] = k->table[i].crc;
	}
	s->hdr = k->hdr;
	s->verify = verify;
	s->map = map;
	if (!map) {
		/* kept from the open: a file replaced later (a new staging,
		 * a new conversion) is not mixed into this model */
		ret = open_fd(s, true);
		if (ret == -EINVAL)	/* no O_DIRECT on this file system */
			ret = open_fd(s, false);
		if (ret) {
			ldr_err(ret, "%s: %s (kept open to upload GPU experts from it)",
				k->path, strerror(-ret));
			goto err;
		}
	}
	*out = s;
	return 0;
err:
	ldr_blob_src_close(s);
	return ret;
}

void ldr_blob_src_close(struct ldr_blob_src *s)
{
	if (!s)
		return;
	if (s->fd >= 0)
		close(s->fd);
	free(s->path);
	free(s->layer_ids);
	free(s->off);
	free(s->crc);
	free(s);
}

static int fail(const struct ldr_blob_src *s, const struct kt_ctx *ctx,
		int err, uint32_t layer, uint32_t expert, const char *why)
{
	ldr_err(err, "%s: layer %d (index %u), expert %u: %s", s->path,
		s->layer_ids[layer], layer, expert, why);
	core_log(ctx, KT_LOG_ERROR, "gpu upload: %s", kt_last_error());
	return err;
}

int ldr_blob_src_read(struct ldr_blob_src *s, const struct kt_ctx *ctx,
		      uint32_t layer, uint32_t expert, uint8_t *dst)
{
	uint64_t i = (uint64_t)layer * s->hdr.n_experts + expert;
	size_t len = s->hdr.blob_stride;
	uint32_t crc;
	char why[96];
	int ret;

	if (layer >= s->hdr.n_layers || expert >= s->hdr.n_experts)
		return -EINVAL;
	if (s->map) {
		memcpy(dst, s->map + s->off[i], len);
	} else {
		ret = ldr_pread_full(s->fd, dst, len, s->off[i]);
		if (ret == -EINVAL && s->direct) {
			/* took O_DIRECT at open but not on reads: once */
			int old = s->fd;

			ret = open_fd(s, false);
			if (ret)
				return fail(s, ctx, ret, layer, expert,
					    "cannot reopen the file without O_DIRECT");
			close(old);
			ret = ldr_pread_full(s->fd, dst, len, s->off[i]);
		}
		if (ret) {
			snprintf(why, sizeof(why), "read for the GPU upload failed: %s",
				 strerror(-ret));
			return fail(s, ctx, -EIO, layer, expert, why);
		}
	}
	if (!s->verify)
		return 0;
	crc = kern_crc32c(0, dst, s->hdr.expert_bytes);
	if (crc != s->crc[i]) {
		snprintf(why, sizeof(why), "checksum %08x, expected %08x",
			 crc, s->crc[i]);
		return fail(s, ctx, -EIO, layer, expert, why);
	}
	if (!ldr_ktw_tail_zero(&s->hdr, dst))
		return fail(s, ctx, -EIO, layer, expert,
			    "nonzero padding after the blob");
	return 0;
}
