/* SPDX-License-Identifier: MIT */
/*
 * ktw.h - reading, validating and laying out .ktw files (loader internal).
 */
#ifndef KT_LOADER_KTW_H
#define KT_LOADER_KTW_H

#include <stdbool.h>
#include <stdint.h>

#include "loader/ktw-format.h"

/* Geometry of a packed expert as the kernels lay it out. */
struct ldr_geom {
	int quant;		/* enum kt_quant of gate and up */
	int down_quant;		/* of down: == quant unless mixed */
	uint32_t hidden;
	uint32_t inter;
	uint32_t group_size;	/* INT4 group; 32 for Q8_0, Q4_K; else 0 */
	uint32_t down_chunk;
	uint64_t expert_bytes;
	uint64_t part_off[KTW_PARTS];
};

/* Fill @g from quant/hidden/inter/group_size (kernels/pack.h layout). */
int ldr_geom_init(struct ldr_geom *g, int quant, uint32_t hidden,
		  uint32_t inter, uint32_t group_size);
/* The same with down of @down_quant (kern_pack_layout_mix()). */
int ldr_geom_init_mix(struct ldr_geom *g, int quant, int down_quant,
		      uint32_t hidden, uint32_t inter, uint32_t group_size);

/* The quantization of down of a validated header. */
static inline int ldr_ktw_down_quant(const struct ktw_header *h)
{
	return h->flags & KTW_F_DOWN_QUANT ? (int)h->down_quant :
					     (int)h->quant;
}

/* An open, validated .ktw: header, layer ids and entry table in memory. */
struct ldr_ktw {
	int fd;
	char *path;
	uint64_t st_size;
	bool hugetlbfs;
	struct ktw_header hdr;
	struct ldr_geom geom;
	int32_t *layer_ids;
	struct ktw_entry *table;
	uint64_t n_entries;
};

/*
 * Open @path (O_RDONLY | @extra_flags) and validate everything but the blob
 * checksums. -errno and kt_last_error() on failure.
 */
int ldr_ktw_open(const char *path, int extra_flags, struct ldr_ktw **out);
void ldr_ktw_close(struct ldr_ktw *k);

/*
 * Pure checks, also used by the tests on crafted headers and tables. @h of
 * ldr_ktw_check_header() points at the whole 4 KiB header page.
 */
int ldr_ktw_check_header(const struct ktw_header *h, uint64_t file_len,
			 struct ldr_geom *geom);
int ldr_ktw_check_meta(const struct ktw_header *h, const int32_t *layer_ids,
		       const struct ktw_entry *table);

/*
 * The padding no checksum covers must be zero: @meta holds the bytes from
 * layers_off to data_off (after ldr_ktw_check_meta()); each blob's tail
 * from expert_bytes to blob_stride (checked wherever its CRC is).
 */
int ldr_ktw_check_pad(const struct ktw_header *h, const uint8_t *meta);
bool ldr_ktw_tail_zero(const struct ktw_header *h, const void *blob);

/*
 * Writer side: fill a header for @g, @n_layers layers of @n_experts and
 * place the regions; table entries get their offsets (and layer/expert).
 */
int ldr_ktw_layout(struct ktw_header *h, const struct ldr_geom *g,
		   uint32_t n_layers, uint32_t n_experts,
		   struct ktw_entry *table);
/* Seal: meta_crc over @layer_ids and @table, then header_crc. */
void ldr_ktw_seal(struct ktw_header *h, const int32_t *layer_ids,
		  const struct ktw_entry *table);

static inline uint64_t ldr_align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

#endif /* KT_LOADER_KTW_H */
