// SPDX-License-Identifier: MIT
/*
 * ktw-tools.c - kt_ktw_inspect(), kt_ktw_verify() and kt_ktw_stage(): the
 * file-level operations behind `kt inspect`, `kt verify` and `kt stage`.
 */
#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/vfs.h>

#include "kernels/pack.h"
#include "ktcore/core.h"
#include "ktcore/mem.h"
#include "loader/error.h"
#include "loader/fault.h"
#include "loader/io.h"
#include "loader/ktw.h"
#include "loader/placement.h"
#include "kernels/crc32c.h"
#include "uring/reader.h"

KT_EXPORT int kt_ktw_inspect(const char *path, struct kt_ktw_info *info,
			     int32_t *layer_ids, uint32_t max_layers)
{
	struct ldr_ktw *k;
	int ret;

	if (!path || !info)
		return ldr_err(-EINVAL, "kt_ktw_inspect: path and info are required");
	ret = ldr_ktw_open(path, 0, &k);
	if (ret)
		return ret;
	memset(info, 0, sizeof(*info));
	info->version_major = k->hdr.version_major;
	info->version_minor = k->hdr.version_minor;
	info->quant = (int)k->hdr.quant;
	info->down_quant = ldr_ktw_down_quant(&k->hdr);
	/* the model's own sizes, as kt_model_get_info() has them */
	info->hidden = k->hdr.hidden_io ? k->hdr.hidden_io : k->hdr.hidden;
	info->inter = k->hdr.inter_io ? k->hdr.inter_io : k->hdr.inter;
	info->hidden_packed = k->hdr.hidden;
	info->inter_packed = k->hdr.inter;
	info->act = k->hdr.act;
	info->act_alpha = k->hdr.act_alpha;
	info->act_limit = k->hdr.act_limit;
	info->bias = !!(k->hdr.flags & KTW_F_BIAS);
	info->n_experts = k->hdr.n_experts;
	info->n_layers = k->hdr.n_layers;
	info->group_size = k->hdr.group_size;
	info->top_k = k->hdr.top_k;
	info->expert_bytes = k->hdr.expert_bytes;
	info->file_size = k->hdr.file_size;
	info->data_bytes = k->n_entries * k->hdr.blob_stride;
	memcpy(info->arch, k->hdr.arch, sizeof(info->arch));
	info->arch[sizeof(info->arch) - 1] = '\0';
	info->hugetlbfs = k->hugetlbfs;
	if (layer_ids)
		memcpy(layer_ids, k->layer_ids, 4ull *
		       (max_layers < k->hdr.n_layers ? max_layers : k->hdr.n_layers));
	ldr_ktw_close(k);
	return 0;
}

struct check_ctx {
	const struct ldr_ktw *k;
	uint64_t first;		/* table index of span 0 */
	uint64_t span_base;	/* spans before the blobs (stage: 1) */
	uint64_t bad;
	bool stop_on_bad;
	uint64_t done_bytes;
	kt_progress_fn progress;
	void *progress_arg;
	uint64_t total;
	uint64_t bad_entry;	/* first bad blob, for the message */
	uint32_t bad_crc;
};

/* The callback may run on the reader's helper thread: message here. */
static void check_report(const struct check_ctx *c)
{
	const struct ktw_entry *e = &c->k->table[c->bad_entry];

	/* a matching checksum failed on the padding after the blob */
	if (c->bad_crc == e->crc)
		ldr_err(-EIO, "%s: layer %d (index %u), expert %u: nonzero padding after the blob",
			c->k->path, c->k->layer_ids[e->layer], e->layer,
			e->expert);
	else
		ldr_err(-EIO, "%s: layer %d (index %u), expert %u: checksum %08x, expected %08x",
			c->k->path, c->k->layer_ids[e->layer], e->layer,
			e->expert, c->bad_crc, e->crc);
}

static int check_span(void *arg, size_t idx, const struct ur_span *s)
{
	struct check_ctx *c = arg;
	const struct ktw_entry *e;
	uint32_t crc;

	c->done_bytes += s->len;
	if (c->progress)
		c->progress(c->progress_arg, c->done_bytes, c->total);
	if (idx < c->span_base)
		return 0;
	e = &c->k->table[c->first + idx - c->span_base];
	crc = kern_crc32c(0, s->dst, c->k->hdr.expert_bytes);
	if (crc == e->crc && ldr_ktw_tail_zero(&c->k->hdr, s->dst))
		return 0;
	if (!c->bad) {
		c->bad_entry = (uint64_t)(e - c->k->table);
		c->bad_crc = crc;
	}
	c->bad++;
	return c->stop_on_bad ? -EIO : 0;
}

static int open_direct(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);

	return fd >= 0 ? fd : open(path, O_RDONLY | O_CLOEXEC);
}

/* The bias section of a 2.3 file: a bad one counts in @c->bad. */
static int verify_bias(const struct ldr_ktw *k, struct check_ctx *c)
{
	uint64_t len = k->hdr.file_size - k->hdr.bias_off;
	uint8_t *buf = ldr_io_buf_alloc(len);
	int ret;

	if (!buf)
		return ldr_err(-ENOMEM, "%s: out of memory for the bias section",
			       k->path);
	ret = ldr_pread_full(k->fd, buf, len, k->hdr.bias_off);
	if (ret) {
		ldr_err(ret, "%s: reading the bias section: %s", k->path,
			strerror(-ret));
	} else if (ldr_ktw_check_bias(&k->hdr, buf)) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", kt_last_error());
		/* a blob's message, when one is bad, is written after */
		ldr_err(-EIO, "%s: %s", k->path, msg);
		c->bad++;
	}
	free(buf);
	return ret;
}

KT_EXPORT int kt_ktw_verify(const char *path, uint64_t *bad)
{
	const uint64_t batch_bytes = 256ull << 20;
	struct ur_span *spans = NULL;
	struct check_ctx c = { 0 };
	struct ur_read_opts ro = { 0 };
	struct ldr_ktw *k;
	uint64_t per, i, j;
	uint8_t *buf = NULL;
	int fd = -1, ret;

	if (bad)
		*bad = 0;
	ret = ldr_ktw_open(path, 0, &k);
	if (ret)
		return ret;
	per = batch_bytes / k->hdr.blob_stride;
	if (!per)
		per = 1;
	if (per > k->n_entries)
		per = k->n_entries;
	buf = ldr_io_buf_alloc(per * k->hdr.blob_stride);
	spans = calloc(per, sizeof(*spans));
	if (!buf || !spans) {
		ret = ldr_err(-ENOMEM, "%s: out of memory for the read buffers", path);
		goto out;
	}
	fd = open_direct(path);
	if (fd < 0) {
		ret = ldr_err(-errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	c.k = k;
	c.bad_entry = UINT64_MAX;
	ro.region = buf;
	ro.region_len = per * k->hdr.blob_stride;
	ro.fault = LDR_FAULT_HOOK;
	for (i = 0; i < k->n_entries && !ret; i += per) {
		uint64_t n = k->n_entries - i < per ? k->n_entries - i : per;

		for (j = 0; j < n; j++)
			spans[j] = (struct ur_span){ k->table[i + j].offset,
						     k->hdr.blob_stride,
						     buf + j * k->hdr.blob_stride };
		c.first = i;
		ret = ur_read_spans(fd, spans, n, &ro, check_span, &c, NULL);
		if (ret)
			ldr_err(ret, "%s: read failed: %s", path, strerror(-ret));
	}
	if (!ret && (k->hdr.flags & KTW_F_BIAS))
		ret = verify_bias(k, &c);
	if (!ret && c.bad) {
		/* the first bad blob is named, else the bias section was */
		if (c.bad_entry != UINT64_MAX)
			check_report(&c);
		ret = -EIO;
	}
	if (bad)
		*bad = c.bad;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	free(spans);
	ldr_ktw_close(k);
	return ret;
}

/*
 * Bind the staged copy as kt_model_open() would place it on a context of
 * every node of the machine: the header and each node's slices of every
 * blob, whole hugetlbfs pages, before the read faults them in.
 */
static void stage_place(const struct ldr_ktw *k, const struct core_mem *mem)
{
	struct ldr_placement place;
	struct kern_pack_layout lay;
	int ids[KT_MAX_NODES];
	unsigned int n = 1, i;

	if (numa_available() >= 0)
		n = (unsigned int)numa_num_configured_nodes();
	if (n > KT_MAX_NODES)
		n = KT_MAX_NODES;
	for (i = 0; i < n; i++)
		ids[i] = (int)i;
	kern_pack_layout_mix((enum kt_quant)k->hdr.quant,
			     (enum kt_quant)ldr_ktw_down_quant(&k->hdr),
			     k->hdr.hidden, k->hdr.inter, k->hdr.group_size,
			     &lay);
	ldr_placement_init(&place, &lay, n, k->hdr.data_off, k->n_entries,
			   k->hdr.blob_stride);
	/* locality only: a failed bind leaves pages where they fault */
	core_mem_bind_spread(NULL, mem, &place.lay, ids, n);
}

/* Staging temporaries of killed runs hold hugepages: free them first. */
static void remove_stale_stagings(const char *dir, const char *base)
{
	char *prefix;
	unsigned int n;

	if (asprintf(&prefix, ".%s.tmp.", base) < 0)
		return;
	n = ldr_remove_stale_temps(dir, prefix);
	if (n)
		core_logv_global(KT_LOG_INFO, "%s: removed %u temporaries of killed stagings",
				 dir, n);
	free(prefix);
}

static int stage(const char *path, const char *dir, char *out,
		 size_t out_len, kt_progress_fn progress, void *progress_arg)
{
	const char *base = strrchr(path, '/');
	char *dst = NULL, *tmp = NULL;
	struct ur_span *spans = NULL;
	struct ur_read_opts ro = { 0 };
	struct check_ctx c = { 0 };
	struct core_mem mem = { 0 };
	struct ldr_ktw *k;
	struct statfs sfs;
	uint64_t len, i, n_meta = 0;
	int fd = -1, src = -1, ret;

	if (!path || !dir)
		return ldr_err(-EINVAL, "kt_ktw_stage: path and dir are required");
	ret = ldr_ktw_open(path, 0, &k);
	if (ret)
		return ret;
	if (statfs(dir, &sfs)) {
		ret = ldr_err(-errno, "%s: %s", dir, strerror(errno));
		goto out;
	}
	if (sfs.f_type != LDR_HUGETLBFS_MAGIC) {
		ret = ldr_err(-EINVAL, "%s is not on a hugetlbfs mount (see scripts/setup-hugepages.sh)",
			      dir);
		goto out;
	}
	base = base ? base + 1 : path;
	if (asprintf(&dst, "%s/%s", dir, base) < 0 ||
	    asprintf(&tmp, "%s/.%s.tmp.%d", dir, base, (int)getpid()) < 0) {
		ret = -ENOMEM;
		goto out;
	}
	if (!strcmp(dst, path)) {
		ret = ldr_err(-EINVAL, "%s is staged already", path);
		goto out;
	}
	remove_stale_stagings(dir, base);
	len = ldr_align_up(k->hdr.file_size, (uint64_t)sfs.f_bsize);
	fd = LDR_FAULT_CALL("open") ? -1 :
	     open(tmp, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = ldr_err(-errno, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	if (LDR_FAULT_CALL("truncate") || ftruncate(fd, (off_t)len)) {
		ret = ldr_err(-errno, "%s: %s", tmp, strerror(errno));
		goto out_unlink;
	}
	/* hugetlbfs reserves every page here: too few pages fail now,
	 * instead of a SIGBUS on first touch */
	mem.base = LDR_FAULT_CALL("mmap") ? MAP_FAILED :
		   mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem.base == MAP_FAILED) {
		mem.base = NULL;
		ret = ldr_err(-ENOSPC, "%s: cannot reserve %llu MiB of %lu KiB hugepages: %s",
			      dir, (unsigned long long)(len >> 20),
			      (unsigned long)sfs.f_bsize >> 10, strerror(errno));
		goto out_unlink;
	}
	mem.len = mem.map_len = len;
	mem.page = (uint64_t)sfs.f_bsize;
	mem.kind = mem.page >= (1ull << 30) ? CORE_PAGE_1G : CORE_PAGE_2M;
	stage_place(k, &mem);
	spans = calloc(k->n_entries + 2, sizeof(*spans));
	if (!spans) {
		ret = -ENOMEM;
		goto out_unmap;
	}
	/* the header and table, the bias section (2.3), then the blobs */
	spans[n_meta++] = (struct ur_span){ 0, k->hdr.data_off, mem.base };
	if (k->hdr.flags & KTW_F_BIAS)
		spans[n_meta++] = (struct ur_span){
			k->hdr.bias_off, k->hdr.file_size - k->hdr.bias_off,
			mem.base + k->hdr.bias_off };
	for (i = 0; i < k->n_entries; i++)
		spans[i + n_meta] = (struct ur_span){ k->table[i].offset,
						      k->hdr.blob_stride,
						      mem.base + k->table[i].offset };
	src = open_direct(path);
	if (src < 0) {
		ret = ldr_err(-errno, "%s: %s", path, strerror(errno));
		goto out_unmap;
	}
	c.k = k;
	c.span_base = n_meta;
	c.stop_on_bad = true;
	c.progress = progress;
	c.progress_arg = progress_arg;
	c.total = k->hdr.file_size;
	ro.region = mem.base;
	ro.region_len = len;
	ro.fault = LDR_FAULT_HOOK;
	ret = ur_read_spans(src, spans, k->n_entries + n_meta, &ro, check_span,
			    &c, NULL);
	if (ret) {
		if (c.bad)
			check_report(&c);
		else
			ldr_err(ret, "%s: read failed: %s", path, strerror(-ret));
		goto out_unmap;
	}
	if (k->hdr.flags & KTW_F_BIAS) {
		ret = ldr_ktw_check_bias(&k->hdr, mem.base + k->hdr.bias_off);
		if (ret) {
			char msg[512];

			snprintf(msg, sizeof(msg), "%s", kt_last_error());
			ret = ldr_err(-EIO, "%s: %s", path, msg);
			goto out_unmap;
		}
	}
	munmap(mem.base, len);
	mem.base = NULL;
	if (LDR_FAULT_CALL("rename") || rename(tmp, dst)) {
		ret = ldr_err(-errno, "%s: %s", dst, strerror(errno));
		goto out_unlink;
	}
	if (out)
		snprintf(out, out_len, "%s", dst);
	goto out;
out_unmap:
	if (mem.base)
		munmap(mem.base, len);
out_unlink:
	unlink(tmp);
out:
	if (src >= 0)
		close(src);
	if (fd >= 0)
		close(fd);
	free(spans);
	free(dst);
	free(tmp);
	ldr_ktw_close(k);
	return ret;
}

KT_EXPORT int kt_ktw_stage(const char *path, const char *dir, char *out,
			   size_t out_len, kt_progress_fn progress,
			   void *progress_arg)
{
	ldr_err_clear();
	return ldr_err_ensure(stage(path, dir, out, out_len, progress,
				    progress_arg),
			      path ? path : "kt_ktw_stage");
}
