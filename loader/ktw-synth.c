// SPDX-License-Identifier: MIT
/*
 * ktw-synth.c - kt_ktw_write_synth(): a .ktw of random experts, packed by
 * the kernels' packer, for benchmarks on files larger than memory and for
 * tests that need a model on disk without a checkpoint.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/crc32c.h"
#include "kernels/pack.h"
#include "ktcore/core.h"
#include "loader/error.h"
#include "loader/io.h"
#include "loader/ktw.h"

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Weights of a trained layer's scale: uniform in [-1/16, 1/16). */
static void fill(float *w, size_t n, uint64_t *s)
{
	size_t i;

	for (i = 0; i < n; i++)
		w[i] = (float)((double)(rng_next(s) >> 11) /
			       (double)(1ull << 53) - 0.5) / 8.0f;
}

static int pack_one(const struct kern_pack_layout *lay, uint64_t seed,
		    float *f, uint8_t *blob)
{
	size_t n = (size_t)lay->hidden * lay->inter;
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;

	fill(f, 3 * n, &s);
	return kern_pack_expert(lay, f, f + n, f + 2 * n, KT_DTYPE_F32, blob);
}

KT_EXPORT int kt_ktw_write_synth(const struct kt_ktw_synth *o)
{
	struct kern_pack_layout lay;
	struct ktw_header h;
	struct ldr_geom g;
	struct ktw_entry *table = NULL;
	int32_t *ids = NULL;
	uint8_t *blobs = NULL, *meta = NULL;
	uint32_t *crcs = NULL;
	float *f = NULL;
	char *tmp = NULL;
	uint64_t n, i, distinct, stride;
	int fd = -1, ret;

	ldr_err_clear();
	if (!o || o->sz < offsetof(struct kt_ktw_synth, reserved) || !o->path)
		return ldr_err(-EINVAL, "kt_ktw_write_synth: options and path are required");
	ret = ldr_geom_init(&g, o->quant, o->hidden, o->inter,
			    (o->quant == KT_QUANT_INT4 ||
			     o->quant == KT_QUANT_FP8) && !o->group_size ? 128 :
			    o->group_size);
	if (ret)
		return ret;
	if (!o->n_experts || o->n_experts > 65536 || !o->n_layers ||
	    o->n_layers > 4096 || (uint64_t)o->n_experts * o->n_layers > (1u << 22))
		return ldr_err(-EINVAL, "kt_ktw_write_synth: %u layers x %u experts out of range",
			       o->n_layers, o->n_experts);
	kern_pack_layout((enum kt_quant)o->quant, o->hidden, o->inter,
			 g.group_size, &lay);
	n = (uint64_t)o->n_layers * o->n_experts;
	distinct = o->distinct && o->distinct < n ? o->distinct : n;
	table = calloc(n, sizeof(*table));
	ids = calloc(o->n_layers, sizeof(*ids));
	crcs = calloc(distinct, sizeof(*crcs));
	f = malloc(3ull * o->hidden * o->inter * sizeof(*f));
	if (asprintf(&tmp, "%s.tmp.%d", o->path, (int)getpid()) < 0)
		tmp = NULL;
	if (!table || !ids || !crcs || !f || !tmp) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < o->n_layers; i++)
		ids[i] = (int32_t)i;
	ret = ldr_ktw_layout(&h, &g, o->n_layers, o->n_experts, table);
	if (ret)
		goto out;
	h.top_k = o->top_k;
	memcpy(h.arch, "synthetic", 9);
	stride = h.blob_stride;
	/* the distinct blobs in memory when few, else packed one at a time */
	blobs = aligned_alloc(4096, (distinct < n ? distinct : 1) * stride);
	if (!blobs) {
		ret = -ENOMEM;
		goto out;
	}
	fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = ldr_err(-errno, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	/* a full disk fails now, not after minutes of writing */
	if (fallocate(fd, 0, 0, (off_t)h.file_size) && errno == ENOSPC) {
		ret = ldr_err(-ENOSPC, "%s: no space for %llu bytes", tmp,
			      (unsigned long long)h.file_size);
		goto out;
	}
	if (ftruncate(fd, (off_t)h.file_size)) {
		ret = ldr_err(-errno, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	for (i = 0; i < n; i++) {
		uint8_t *b = blobs + (distinct < n ? i % distinct : 0) * stride;

		if (distinct == n || i < distinct) {
			memset(b, 0, stride);
			ret = pack_one(&lay, o->seed + i, f, b);
			if (ret)
				goto out;
			crcs[i % distinct] = kern_crc32c(0, b, h.expert_bytes);
		}
		table[i].crc = crcs[i % distinct];
		ret = ldr_pwrite_full(fd, b, stride, table[i].offset);
		if (ret) {
			ldr_err(ret, "%s: write: %s", tmp, strerror(-ret));
			goto out;
		}
		if (o->progress)
			o->progress(o->progress_arg, (i + 1) * stride, n * stride);
	}
	ldr_ktw_seal(&h, ids, table);
	meta = calloc(1, h.data_off);
	if (!meta) {
		ret = -ENOMEM;
		goto out;
	}
	memcpy(meta, &h, sizeof(h));
	memcpy(meta + h.layers_off, ids, 4ull * o->n_layers);
	memcpy(meta + h.table_off, table, n * sizeof(*table));
	ret = ldr_pwrite_full(fd, meta, h.data_off, 0);
	if (!ret && fsync(fd))
		ret = -errno;
	if (ret) {
		ldr_err(ret, "%s: %s", tmp, strerror(-ret));
		goto out;
	}
	/* tens of GB written leave no page cache behind them: a benchmark
	 * that follows starts cold, and other processes keep their memory */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	fd = -1;
	if (rename(tmp, o->path)) {
		ret = ldr_err(-errno, "%s: rename: %s", o->path, strerror(errno));
		goto out;
	}
out:
	if (fd >= 0)
		close(fd);
	if (ret && tmp)
		unlink(tmp);
	free(tmp);
	free(meta);
	free(blobs);
	free(f);
	free(crcs);
	free(ids);
	free(table);
	return ret;
}
