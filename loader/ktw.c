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
#include "kernels/layout.h"

static const char *const part_name[KTW_PARTS] = {
	"gate tiles", "up tiles", "down tiles",
	"gate scales", "up scales", "down scales",
};

static bool all_zero(const uint8_t *p, uint64_t n)
{
	/* p[0] == 0 and every byte equals the next: all zero */
	return !n || (!p[0] && !memcmp(p, p + 1, n - 1));
}

static bool dim_ok(uint32_t v)
{
	return v >= 128 && v <= KTW_MAX_DIM && v % 128 == 0;
}

void ldr_ktw_header_copy(struct ktw_header *dst, const void *page)
{
	const struct ktw_header *h = page;
	size_t n = h->header_size;

	if (n < KTW_HEADER_2_2_BYTES)
		n = KTW_HEADER_2_2_BYTES;
	if (n > sizeof(*dst))
		n = sizeof(*dst);
	memset(dst, 0, sizeof(*dst));
	memcpy(dst, page, n);
}

/* KTW_F_ACT: an activation this kt computes, with finite constants. */
static int check_act(const struct ktw_header *h)
{
	if (!(h->flags & KTW_F_ACT)) {
		if (h->act || h->act_alpha != 0.0f || h->act_limit != 0.0f)
			return ldr_err(-EINVAL, "activation %u (alpha %g, limit %g) without the activation flag",
				       h->act, (double)h->act_alpha,
				       (double)h->act_limit);
		return 0;
	}
	if (h->act != KT_ACT_SWIGLU_OAI)
		return ldr_err(-EINVAL, "unknown activation %u with the activation flag (this kt knows %u, swiglu_oai; a newer kt wrote this file?)",
			       h->act, KT_ACT_SWIGLU_OAI);
	/* negated, so that NaN fails too */
	if (!(h->act_alpha > 0.0f && h->act_alpha <= 1e6f) ||
	    !(h->act_limit > 0.0f && h->act_limit <= 1e30f))
		return ldr_err(-EINVAL, "activation constants alpha %g, limit %g out of range (finite, > 0)",
			       (double)h->act_alpha, (double)h->act_limit);
	return 0;
}

/*
 * The unit the packed sizes are padded to (as loader/create.c and the GGUF
 * reader pad): the K-quants' super-block, else the down chunk.
 */
static uint32_t pad_unit(const struct ktw_header *h)
{
	return kern_quant_is_k((enum kt_quant)h->quant) ||
	       kern_quant_is_k((enum kt_quant)ldr_ktw_down_quant(h)) ?
		KERN_Q4_K_SUPER : KERN_DOWN_CHUNK;
}

static int check_io(const char *what, uint32_t io, uint32_t packed,
		    uint32_t unit)
{
	if (!io || io % 32 || io > packed || packed - io >= unit)
		return ldr_err(-EINVAL, "the model's %s %u does not pad to the packed %u (a multiple of 32, at most the packed size and less than %u below it)",
			       what, io, packed, unit);
	return 0;
}

/* KTW_F_PADDED: the own sizes round up to the packed ones; one is less. */
static int check_padded(const struct ktw_header *h)
{
	uint32_t unit = pad_unit(h);
	int ret;

	if (!(h->flags & KTW_F_PADDED)) {
		if (h->hidden_io || h->inter_io)
			return ldr_err(-EINVAL, "model sizes hidden %u, inter %u without the padded flag",
				       h->hidden_io, h->inter_io);
		return 0;
	}
	ret = check_io("hidden", h->hidden_io, h->hidden, unit);
	if (!ret)
		ret = check_io("inter", h->inter_io, h->inter, unit);
	if (ret)
		return ret;
	if (h->hidden_io == h->hidden && h->inter_io == h->inter)
		return ldr_err(-EINVAL, "padded flag, but hidden %u and inter %u are the model's own",
			       h->hidden, h->inter);
	return 0;
}

uint64_t ldr_ktw_bias_bytes(const struct ktw_header *h)
{
	/* <= 2^22 entries x 3 * 2^20 floats: no overflow */
	return (uint64_t)h->n_layers * h->n_experts *
	       (2ull * h->inter + h->hidden) * sizeof(float);
}

/*
 * KTW_F_BIAS: the section is the file's last region, after the blobs,
 * 4 KiB aligned and padded with zeros to file_size (checked with its CRC).
 * Called after the other regions are checked against file_size.
 */
static int check_bias_region(const struct ktw_header *h, uint64_t n_entries)
{
	uint64_t want;

	if (!(h->flags & KTW_F_BIAS)) {
		if (h->bias_off || h->bias_size || h->bias_crc)
			return ldr_err(-EINVAL, "bias section at %llu (%llu bytes) without the bias flag",
				       (unsigned long long)h->bias_off,
				       (unsigned long long)h->bias_size);
		return 0;
	}
	want = ldr_ktw_bias_bytes(h);
	if (h->bias_size != want)
		return ldr_err(-EINVAL, "bias section of %llu bytes; %llu experts of 2 x %u + %u floats need %llu",
			       (unsigned long long)h->bias_size,
			       (unsigned long long)n_entries, h->inter,
			       h->hidden, (unsigned long long)want);
	/* want <= 2^46 and file_size < 2^63: the sum cannot overflow */
	if (h->bias_off % KTW_ALIGN || h->bias_off < h->data_off ||
	    h->bias_off > h->file_size ||
	    h->file_size - h->bias_off != ldr_align_up(want, KTW_ALIGN))
		return ldr_err(-EINVAL, "bias section offset %llu out of range (4 KiB aligned after the blobs, ending the file of %llu bytes)",
			       (unsigned long long)h->bias_off,
			       (unsigned long long)h->file_size);
	return 0;
}

int ldr_ktw_check_bias(const struct ktw_header *h, const void *sec)
{
	const float *b = sec;
	uint64_t stride = 2ull * h->inter + h->hidden, n, i;
	uint32_t crc, hi, ii;

	crc = kern_crc32c(0, sec, h->bias_size);
	if (crc != h->bias_crc)
		return ldr_err(-EIO, "bias section: checksum %08x, expected %08x",
			       crc, h->bias_crc);
	if (!all_zero((const uint8_t *)sec + h->bias_size,
		      ldr_align_up(h->bias_size, KTW_ALIGN) - h->bias_size))
		return ldr_err(-EIO, "bias section: nonzero padding after it");
	if (!(h->flags & KTW_F_PADDED))
		return 0;
	/* the padded rows have zero weights and zero biases */
	hi = h->hidden_io;
	ii = h->inter_io;
	n = (uint64_t)h->n_layers * h->n_experts;
	for (i = 0; i < n; i++, b += stride) {
		if (!all_zero((const uint8_t *)(b + ii), (h->inter - ii) * 4ull) ||
		    !all_zero((const uint8_t *)(b + h->inter + ii),
			      (h->inter - ii) * 4ull) ||
		    !all_zero((const uint8_t *)(b + 2ull * h->inter + hi),
			      (h->hidden - hi) * 4ull))
			return ldr_err(-EINVAL, "bias section: layer index %llu, expert %llu has nonzero biases in the padding",
				       (unsigned long long)(i / h->n_experts),
				       (unsigned long long)(i % h->n_experts));
	}
	return 0;
}

/* Whether gate/up or down of @h is Q4_K, Q5_K or Q6_K. */
static bool ktw_has_k_quant(const struct ktw_header *h)
{
	return kern_quant_is_k((enum kt_quant)h->quant) ||
	       ((h->flags & KTW_F_DOWN_QUANT) &&
		kern_quant_is_k((enum kt_quant)h->down_quant));
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
	/* a 2.0..2.2 header is 192 bytes, a 2.3 one longer */
	if (h->header_size < KTW_HEADER_2_2_BYTES ||
	    h->header_size > KTW_HEADER_BYTES)
		return ldr_err(-EINVAL, "header size %u out of range [%u, %u]",
			       h->header_size, KTW_HEADER_2_2_BYTES,
			       KTW_HEADER_BYTES);
	/* the CRC covers header_size bytes, a newer minor's fields too: @h
	 * points at the whole 4 KiB header page */
	tmp = *h;
	tmp.header_crc = 0;
	crc = kern_crc32c(0, &tmp, KTW_HEADER_2_2_BYTES);
	crc = kern_crc32c(crc, (const uint8_t *)h + KTW_HEADER_2_2_BYTES,
			h->header_size - KTW_HEADER_2_2_BYTES);
	if (crc != h->header_crc)
		return ldr_err(-EINVAL, "header checksum mismatch (%08x, expected %08x)",
			       crc, h->header_crc);
	/* the fields past a shorter header are not the file's: zero */
	ldr_ktw_header_copy(&tmp, h);
	h = &tmp;
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
	if ((h->flags & KTW_F_2_3) && (h->version_minor < 3 ||
				       h->header_size < sizeof(*h)))
		return ldr_err(-EINVAL, "header flags %#x in a %u.%u header of %u bytes (2.3 added them, with a header of %zu)",
			       h->flags & KTW_F_2_3, h->version_major,
			       h->version_minor, h->header_size, sizeof(*h));
	if ((h->flags & KTW_F_QK_REC) && h->version_minor < 4)
		return ldr_err(-EINVAL, "K-quant record flag in a %u.%u header (2.4 added it)",
			       h->version_major, h->version_minor);
	if ((h->flags & KTW_F_QK_REC) && !ktw_has_k_quant(h))
		return ldr_err(-EINVAL, "K-quant record flag in a file of %s without a Q4_K, Q5_K or Q6_K matrix",
			       kt_quant_name((enum kt_quant)h->quant));
	if (!(h->flags & KTW_F_QK_REC) && ktw_has_k_quant(h))
		return ldr_err(-EINVAL,
			       "%s scales without the record flag of .ktw 2.4 (version %u.%u: written before 2.4, in the layout kt no longer reads): re-run kt convert on the source model",
			       kt_quant_name(kern_quant_is_k((enum kt_quant)h->quant) ?
					     (enum kt_quant)h->quant :
					     (enum kt_quant)h->down_quant),
			       h->version_major, h->version_minor);
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
	ret = check_act(h);
	if (!ret)
		ret = check_padded(h);
	if (ret)
		return ret;
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
	ret = check_bias_region(h, n_entries);
	if (ret)
		return ret;
	end = ldr_ktw_data_end(h);
	if (h->blob_stride > end - h->data_off ||
	    n_entries > (end - h->data_off) / h->blob_stride)
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
		    e->offset > ldr_ktw_data_end(h) - h->blob_stride)
			return ldr_err(-EINVAL, "table entry %llu (layer %u, expert %u): offset %llu out of range or overlapping",
				       (unsigned long long)i, e->layer, e->expert,
				       (unsigned long long)e->offset);
		next = e->offset + h->blob_stride;
	}
	return 0;
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
	if (kern_quant_is_k(g->quant) || kern_quant_is_k(g->down_quant))
		h->flags |= KTW_F_QK_REC;
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

int ldr_ktw_set_epi(struct ktw_header *h, const struct ldr_ktw_epi *x)
{
	uint32_t hi = x->hidden_io ? x->hidden_io : h->hidden;
	uint32_t ii = x->inter_io ? x->inter_io : h->inter;
	int ret;

	h->flags &= ~KTW_F_2_3;
	h->act = 0;
	h->act_alpha = h->act_limit = 0.0f;
	h->hidden_io = h->inter_io = 0;
	if (h->flags & KTW_F_BIAS)
		h->file_size = h->bias_off;
	h->bias_off = h->bias_size = 0;
	h->bias_crc = 0;
	if (x->act != KT_ACT_SILU) {
		h->flags |= KTW_F_ACT;
		h->act = (uint32_t)x->act;
		h->act_alpha = x->act_alpha;
		h->act_limit = x->act_limit;
	} else if (x->act_alpha != 0.0f || x->act_limit != 0.0f) {
		return ldr_err(-EINVAL, "activation constants given for silu");
	}
	if (hi != h->hidden || ii != h->inter) {
		h->flags |= KTW_F_PADDED;
		h->hidden_io = hi;
		h->inter_io = ii;
	}
	ret = check_act(h);
	if (!ret)
		ret = check_padded(h);
	if (ret)
		return ret;
	if (x->bias) {
		h->flags |= KTW_F_BIAS;
		h->bias_off = h->file_size;
		h->bias_size = ldr_ktw_bias_bytes(h);
		h->file_size += ldr_align_up(h->bias_size, KTW_ALIGN);
	}
	return 0;
}

int ldr_ktw_write_bias(int fd, struct ktw_header *h, ldr_ktw_bias_fn get,
		       void *arg)
{
	size_t len = (2 * (size_t)h->inter + h->hidden) * sizeof(float);
	uint64_t n = (uint64_t)h->n_layers * h->n_experts, i;
	float *b = malloc(len);
	int ret = 0;

	if (!b)
		return -ENOMEM;
	h->bias_crc = 0;
	/* one expert at a time: a few KiB whatever the model */
	for (i = 0; i < n && !ret; i++) {
		memset(b, 0, len);
		get(arg, (uint32_t)(i / h->n_experts),
		    (uint32_t)(i % h->n_experts), b);
		h->bias_crc = kern_crc32c(h->bias_crc, b, len);
		ret = ldr_pwrite_full(fd, b, len, h->bias_off + i * len);
	}
	free(b);
	return ret;
}

int ldr_ktw_read_bias(const struct ldr_ktw *k, float **out)
{
	uint64_t len = ldr_align_up(k->hdr.bias_size, KTW_ALIGN);
	uint8_t *buf;
	int ret;

	*out = NULL;
	if (!(k->hdr.flags & KTW_F_BIAS))
		return 0;
	/* an io buffer: the 4 KiB alignment a file opened O_DIRECT needs */
	buf = ldr_io_buf_alloc(len);
	if (!buf)
		return ldr_err(-ENOMEM, "%s: no memory for the %.1f MiB bias section",
			       k->path, len / 1048576.0);
	ret = ldr_pread_full(k->fd, buf, len, k->hdr.bias_off);
	if (ret) {
		ldr_err(ret, "%s: reading the bias section: %s", k->path,
			strerror(-ret));
		goto err;
	}
	ret = ldr_ktw_check_bias(&k->hdr, buf);
	if (ret) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", kt_last_error());
		ldr_err(ret, "%s: %s", k->path, msg);
		goto err;
	}
	*out = (float *)buf;
	return 0;
err:
	free(buf);
	return ret;
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
	ret = ldr_ktw_check_header((const struct ktw_header *)buf, k->st_size,
				   &k->geom);
	ldr_ktw_header_copy(&k->hdr, buf);
	if (ret)
		goto err_msg;
	/* the unused tail of a 2.0..2.3 header is zero; else it is damage */
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
