// SPDX-License-Identifier: MIT
/*
 * ktw.c - .ktw header and table: validation before anything is used, and
 * the region layout the converter writes. Format: Documentation/ktw-format.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "ktcore/core.h"
#include "loader/error.h"
#include "loader/fault.h"
#include "loader/io.h"
#include "loader/ktw.h"
#include "kernels/crc32c.h"

static const char *const part_name[KTW_PARTS] = {
	"gate tiles", "up tiles", "down tiles",
	"gate scales", "up scales", "down scales",
};

static bool dim_ok(uint32_t v)
{
	return v >= 128 && v <= KTW_MAX_DIM && v % 128 == 0;
}

int ldr_ktw_check_header(const struct ktw_header *h, uint64_t file_len,
			 struct ldr_geom *geom)
{
	struct ktw_header tmp;
	uint64_t n_entries, end;
	uint32_t crc;
	int i, ret;

	if (memcmp(h->magic, KTW_MAGIC, sizeof(h->magic)))
		return ldr_err(-EINVAL, "bad magic: not a .ktw file");
	if (h->version_major != KTW_VERSION_MAJOR)
		return ldr_err(-EINVAL,
			       "unsupported .ktw version %u.%u (this kt reads %u.x): re-run kt convert",
			       h->version_major, h->version_minor,
			       KTW_VERSION_MAJOR);
	if (h->header_size < sizeof(*h) || h->header_size > KTW_HEADER_BYTES)
		return ldr_err(-EINVAL, "header size %u out of range [%zu, %u]",
			       h->header_size, sizeof(*h), KTW_HEADER_BYTES);
	/* the CRC covers header_size bytes, a newer minor's fields too: @h
	 * points at the whole 4 KiB header page */
	tmp = *h;
	tmp.header_crc = 0;
	crc = kern_crc32c(0, &tmp, sizeof(tmp));
	crc = kern_crc32c(crc, (const uint8_t *)h + sizeof(tmp),
			h->header_size - sizeof(tmp));
	if (crc != h->header_crc)
		return ldr_err(-EINVAL, "header checksum mismatch (%08x, expected %08x)",
			       crc, h->header_crc);
	if (h->flags & ~KTW_F_ALL)
		return ldr_err(-EINVAL, "unknown header flags %#x (a newer kt wrote this file)",
			       h->flags & ~KTW_F_ALL);
	if (!(h->flags & KTW_F_DOWN_QUANT) && h->down_quant)
		return ldr_err(-EINVAL, "down quant %u without the down-quant flag",
			       h->down_quant);
	if ((h->flags & KTW_F_DOWN_QUANT) && h->version_minor < 2)
		return ldr_err(-EINVAL, "down-quant flag in a %u.%u header (2.2 added it)",
			       h->version_major, h->version_minor);
	if ((h->flags & KTW_F_DOWN_QUANT) && h->down_quant == h->quant)
		return ldr_err(-EINVAL, "down quant %u equal to quant with the down-quant flag set",
			       h->down_quant);
	if (!dim_ok(h->hidden) || !dim_ok(h->inter))
		return ldr_err(-EINVAL, "bad geometry: hidden %u, inter %u (multiples of 128 up to %u)",
			       h->hidden, h->inter, KTW_MAX_DIM);
	if (!h->n_experts || h->n_experts > KTW_MAX_EXPERTS)
		return ldr_err(-EINVAL, "bad expert count %u", h->n_experts);
	if (!h->n_layers || h->n_layers > KTW_MAX_LAYERS)
		return ldr_err(-EINVAL, "bad layer count %u", h->n_layers);
	n_entries = (uint64_t)h->n_layers * h->n_experts;
	if (n_entries > KTW_MAX_ENTRIES)
		return ldr_err(-EINVAL, "%llu entries exceed the limit of %u",
			       (unsigned long long)n_entries, KTW_MAX_ENTRIES);
	ret = ldr_geom_init_mix(geom, (int)h->quant, ldr_ktw_down_quant(h),
				h->hidden, h->inter, h->group_size);
	if (ret)
		return ret;
	if (h->down_chunk != geom->down_chunk)
		return ldr_err(-EINVAL, "down chunk %u, the layout has %u",
			       h->down_chunk, geom->down_chunk);
	if (h->expert_bytes != geom->expert_bytes)
		return ldr_err(-EINVAL, "expert size %llu, the layout has %llu",
			       (unsigned long long)h->expert_bytes,
			       (unsigned long long)geom->expert_bytes);
	if (h->blob_stride != ldr_align_up(h->expert_bytes, KTW_ALIGN))
		return ldr_err(-EINVAL, "blob stride %llu is not the size rounded to 4 KiB",
			       (unsigned long long)h->blob_stride);
	for (i = 0; i < KTW_PARTS; i++)
		if (h->part_off[i] != geom->part_off[i])
			return ldr_err(-EINVAL, "%s at %llu, the layout has %llu",
				       part_name[i],
				       (unsigned long long)h->part_off[i],
				       (unsigned long long)geom->part_off[i]);
	if (h->file_size > file_len)
		return ldr_err(-EINVAL, "truncated: the file has %llu bytes, the header says %llu",
			       (unsigned long long)file_len,
			       (unsigned long long)h->file_size);
	if (h->file_size % KTW_ALIGN)
		return ldr_err(-EINVAL, "file size %llu is not a multiple of 4 KiB",
			       (unsigned long long)h->file_size);
	/* every bound below is <= file_size < 2^63: no sum overflows */
	if (h->layers_off < KTW_HEADER_BYTES || h->layers_off % 8 ||
	    h->layers_off > h->file_size)
		return ldr_err(-EINVAL, "layer list offset %llu out of range",
			       (unsigned long long)h->layers_off);
	end = h->layers_off + 4ull * h->n_layers;
	if (h->table_off < end || h->table_off % 8 ||
	    h->table_off > h->file_size)
		return ldr_err(-EINVAL, "table offset %llu out of range",
			       (unsigned long long)h->table_off);
	end = h->table_off + n_entries * sizeof(struct ktw_entry);
	if (h->data_off < end || h->data_off % KTW_ALIGN ||
	    h->data_off > h->file_size)
		return ldr_err(-EINVAL, "data offset %llu out of range",
			       (unsigned long long)h->data_off);
	if (h->blob_stride > h->file_size - h->data_off ||
	    n_entries > (h->file_size - h->data_off) / h->blob_stride)
		return ldr_err(-EINVAL, "%llu blobs of %llu bytes do not fit in the data region",
			       (unsigned long long)n_entries,
			       (unsigned long long)h->blob_stride);
	return 0;
}

int ldr_ktw_check_meta(const struct ktw_header *h, const int32_t *layer_ids,
		       const struct ktw_entry *table)
{
	uint64_t n = (uint64_t)h->n_layers * h->n_experts, i, next = h->data_off;
	uint32_t crc;

	crc = kern_crc32c(0, layer_ids, 4ull * h->n_layers);
	crc = kern_crc32c(crc, table, n * sizeof(*table));
	if (crc != h->meta_crc)
		return ldr_err(-EINVAL, "layer list/table checksum mismatch (%08x, expected %08x)",
			       crc, h->meta_crc);
	for (i = 0; i < h->n_layers; i++) {
		if (layer_ids[i] < 0 || (i && layer_ids[i] <= layer_ids[i - 1]))
			return ldr_err(-EINVAL, "layer list: id %d at %llu is negative or not increasing",
				       layer_ids[i], (unsigned long long)i);
	}
	for (i = 0; i < n; i++) {
		const struct ktw_entry *e = &table[i];

		if (e->layer != i / h->n_experts || e->expert != i % h->n_experts)
			return ldr_err(-EINVAL, "table entry %llu is (%u, %u), expected (%llu, %llu)",
				       (unsigned long long)i, e->layer, e->expert,
				       (unsigned long long)(i / h->n_experts),
				       (unsigned long long)(i % h->n_experts));
		if (e->size != h->expert_bytes || e->flags)
			return ldr_err(-EINVAL, "table entry %llu (layer %u, expert %u): size %llu, flags %#x",
				       (unsigned long long)i, e->layer, e->expert,
				       (unsigned long long)e->size, e->flags);
		/* blobs in table order, no overlap: offset >= the previous end */
		if (e->offset % KTW_ALIGN || e->offset < next ||
		    e->offset > h->file_size - h->blob_stride)
			return ldr_err(-EINVAL, "table entry %llu (layer %u, expert %u): offset %llu out of range or overlapping",
				       (unsigned long long)i, e->layer, e->expert,
				       (unsigned long long)e->offset);
		next = e->offset + h->blob_stride;
	}
	return 0;
}

static bool all_zero(const uint8_t *p, uint64_t n)
{
	/* p[0] == 0 and every byte equals the next: all zero */
	return !n || (!p[0] && !memcmp(p, p + 1, n - 1));
}

int ldr_ktw_check_pad(const struct ktw_header *h, const uint8_t *meta)
{
	uint64_t lay_end = 4ull * h->n_layers;
	uint64_t tab = h->table_off - h->layers_off;
	uint64_t tab_end = tab + (uint64_t)h->n_layers * h->n_experts *
			   sizeof(struct ktw_entry);

	if (!all_zero(meta + lay_end, tab - lay_end))
		return ldr_err(-EINVAL, "nonzero padding between the layer list and the table");
	if (!all_zero(meta + tab_end, h->data_off - h->layers_off - tab_end))
		return ldr_err(-EINVAL, "nonzero padding between the table and the first blob");
	return 0;
}

bool ldr_ktw_tail_zero(const struct ktw_header *h, const void *blob)
{
	return all_zero((const uint8_t *)blob + h->expert_bytes,
			h->blob_stride - h->expert_bytes);
}

int ldr_ktw_layout(struct ktw_header *h, const struct ldr_geom *g,
		   uint32_t n_layers, uint32_t n_experts,
		   struct ktw_entry *table)
{
	uint64_t n = (uint64_t)n_layers * n_experts, i;

	memset(h, 0, sizeof(*h));
	memcpy(h->magic, KTW_MAGIC, sizeof(h->magic));
	h->version_major = KTW_VERSION_MAJOR;
	h->version_minor = KTW_VERSION_MINOR;
	h->header_size = sizeof(*h);
	h->quant = (uint32_t)g->quant;
	if (g->down_quant != g->quant) {
		h->flags = KTW_F_DOWN_QUANT;
		h->down_quant = (uint32_t)g->down_quant;
	}
	h->hidden = g->hidden;
	h->inter = g->inter;
	h->n_experts = n_experts;
	h->n_layers = n_layers;
	h->group_size = g->group_size;
	h->down_chunk = g->down_chunk;
	h->expert_bytes = g->expert_bytes;
	h->blob_stride = ldr_align_up(g->expert_bytes, KTW_ALIGN);
	memcpy(h->part_off, g->part_off, sizeof(h->part_off));
	h->layers_off = KTW_HEADER_BYTES;
	h->table_off = ldr_align_up(h->layers_off + 4ull * n_layers, 64);
	h->data_off = ldr_align_up(h->table_off + n * sizeof(*table), KTW_ALIGN);
	for (i = 0; i < n; i++) {
		table[i] = (struct ktw_entry){
			.layer = (uint32_t)(i / n_experts),
			.expert = (uint32_t)(i % n_experts),
			.offset = h->data_off + i * h->blob_stride,
			.size = g->expert_bytes,
		};
	}
	h->file_size = h->data_off + n * h->blob_stride;
	return 0;
}

void ldr_ktw_seal(struct ktw_header *h, const int32_t *layer_ids,
		  const struct ktw_entry *table)
{
	uint64_t n = (uint64_t)h->n_layers * h->n_experts;
	uint32_t crc;

	crc = kern_crc32c(0, layer_ids, 4ull * h->n_layers);
	h->meta_crc = kern_crc32c(crc, table, n * sizeof(*table));
	h->header_crc = 0;
	h->header_crc = kern_crc32c(0, h, sizeof(*h));
}

int ldr_ktw_open(const char *path, int extra_flags, struct ldr_ktw **out)
{
	static uint8_t zero_tail[KTW_HEADER_BYTES];
	uint8_t *buf = NULL;
	struct ldr_ktw *k;
	struct statfs sfs;
	struct stat st;
	uint64_t meta_len;
	int ret;

	ldr_err_clear();
	k = calloc(1, sizeof(*k));
	if (!k)
		return ldr_err(-ENOMEM, "%s: out of memory", path);
	k->path = strdup(path);
	if (!k->path) {
		ret = -ENOMEM;
		goto err_free;
	}
	k->fd = LDR_FAULT_CALL("open") ? -1 :
		open(path, O_RDONLY | O_CLOEXEC | extra_flags);
	if (k->fd < 0 && (extra_flags & O_DIRECT) && errno == EINVAL)
		k->fd = open(path, O_RDONLY | O_CLOEXEC);	/* no O_DIRECT here */
	if (k->fd < 0) {
		ret = -errno;
		ldr_err(ret, "%s: %s", path, strerror(errno));
		goto err_free;
	}
	if (fstat(k->fd, &st) || !S_ISREG(st.st_mode)) {
		ret = ldr_err(-EINVAL, "%s: not a regular file", path);
		goto err_close;
	}
	k->st_size = (uint64_t)st.st_size;
	if (!fstatfs(k->fd, &sfs) && sfs.f_type == LDR_HUGETLBFS_MAGIC)
		k->hugetlbfs = true;
	if (k->st_size < KTW_HEADER_BYTES) {
		ret = ldr_err(-EINVAL, "%s: truncated: %llu bytes, smaller than the header",
			      path, (unsigned long long)k->st_size);
		goto err_close;
	}
	buf = ldr_io_buf_alloc(KTW_HEADER_BYTES);
	if (!buf) {
		ret = -ENOMEM;
		goto err_close;
	}
	ret = ldr_pread_full(k->fd, buf, KTW_HEADER_BYTES, 0);
	if (ret) {
		ldr_err(ret, "%s: reading the header: %s", path, strerror(-ret));
		goto err_buf;
	}
	memcpy(&k->hdr, buf, sizeof(k->hdr));
	ret = ldr_ktw_check_header((const struct ktw_header *)buf, k->st_size,
				   &k->geom);
	if (ret)
		goto err_msg;
	/* the unused tail of a 2.0/2.1 header is zero; else it is damage */
	if (k->hdr.version_minor <= KTW_VERSION_MINOR &&
	    memcmp(buf + k->hdr.header_size, zero_tail,
		   KTW_HEADER_BYTES - k->hdr.header_size)) {
		ret = ldr_err(-EINVAL, "nonzero bytes after the header");
		goto err_msg;
	}
	/* a staged copy is rounded up to a hugepage; elsewhere, exact size */
	if (!k->hugetlbfs && k->st_size != k->hdr.file_size) {
		ret = ldr_err(-EINVAL, "the file has %llu bytes, the header says %llu",
			      (unsigned long long)k->st_size,
			      (unsigned long long)k->hdr.file_size);
		goto err_msg;
	}
	k->n_entries = (uint64_t)k->hdr.n_layers * k->hdr.n_experts;
	meta_len = k->hdr.data_off - k->hdr.layers_off;
	k->layer_ids = malloc(4ull * k->hdr.n_layers);
	k->table = malloc(k->n_entries * sizeof(*k->table));
	free(buf);
	buf = ldr_io_buf_alloc(meta_len);
	if (!k->layer_ids || !k->table || !buf) {
		ret = -ENOMEM;
		goto err_buf;
	}
	ret = ldr_pread_full(k->fd, buf, meta_len, k->hdr.layers_off);
	if (ret) {
		ldr_err(ret, "%s: reading the table: %s", path, strerror(-ret));
		goto err_buf;
	}
	memcpy(k->layer_ids, buf, 4ull * k->hdr.n_layers);
	memcpy(k->table, buf + (k->hdr.table_off - k->hdr.layers_off),
	       k->n_entries * sizeof(*k->table));
	ret = ldr_ktw_check_meta(&k->hdr, k->layer_ids, k->table);
	if (!ret)
		ret = ldr_ktw_check_pad(&k->hdr, buf);
	free(buf);
	buf = NULL;
	if (ret)
		goto err_msg;
	*out = k;
	return 0;

err_msg:
	{
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", kt_last_error());
		ldr_err(ret, "%s: %s", path, msg);
	}
err_buf:
	free(buf);
err_close:
	close(k->fd);
err_free:
	if (!*kt_last_error())	/* a bare ENOMEM, say */
		ldr_err(ret, "%s: %s", path, strerror(-ret));
	free(k->layer_ids);
	free(k->table);
	free(k->path);
	free(k);
	return ret;
}

void ldr_ktw_close(struct ldr_ktw *k)
{
	if (!k)
		return;
	close(k->fd);
	free(k->layer_ids);
	free(k->table);
	free(k->path);
	free(k);
}
