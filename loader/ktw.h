/* SPDX-License-Identifier: MIT */
/*
 * ktw.h - reading, validating and laying out .ktw files (loader internal).
 */
#ifndef KT_LOADER_KTW_H
#define KT_LOADER_KTW_H

#include <stdbool.h>
#include <stdint.h>

#include <kt/kt.h>

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

/* Where the blobs must end: the bias section, else the end of the file. */
static inline uint64_t ldr_ktw_data_end(const struct ktw_header *h)
{
	return h->flags & KTW_F_BIAS ? h->bias_off : h->file_size;
}

/* Bytes of the bias section @h's geometry has: f32 [L][E][2 inter + hidden]. */
uint64_t ldr_ktw_bias_bytes(const struct ktw_header *h);

/*
 * Copy the header of a validated header @page into @dst: the fields past
 * its header_size (a 2.0..2.2 file's 2.3 fields) read as zero.
 */
void ldr_ktw_header_copy(struct ktw_header *dst, const void *page);

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
 * The bias section @sec (bias_size bytes rounded up to 4 KiB, from
 * bias_off) of a validated header with KTW_F_BIAS: its CRC32C and zero
 * padding (-EIO), zero biases in the padded rows (-EINVAL).
 */
int ldr_ktw_check_bias(const struct ktw_header *h, const void *sec);

/*
 * Read and check @k's bias section into *@out (free() it; 4 KiB aligned);
 * *@out NULL and 0 for a file without one. -errno with a message.
 */
int ldr_ktw_read_bias(const struct ldr_ktw *k, float **out);

/*
 * Writer side: fill a header for @g, @n_layers layers of @n_experts and
 * place the regions; table entries get their offsets (and layer/expert).
 */
int ldr_ktw_layout(struct ktw_header *h, const struct ldr_geom *g,
		   uint32_t n_layers, uint32_t n_experts,
		   struct ktw_entry *table);
/*
 * What a source computes beyond silu(g) * u on its packed sizes: a writer
 * fills this from its source (GGUF: ldr_gguf_src; a Hugging Face folder
 * whose source reports these) and hands it to ldr_ktw_set_epi().
 * @act, @act_alpha, @act_limit: the model's, as struct kt_model has them.
 * @hidden_io, @inter_io: the model's own H and I (0: the packed ones).
 * @bias: the writer writes a bias section (ldr_ktw_bias_bytes() bytes at
 *	h->bias_off, its CRC32C in h->bias_crc before ldr_ktw_seal()).
 */
struct ldr_ktw_epi {
	enum kt_act act;
	float act_alpha, act_limit;
	uint32_t hidden_io, inter_io;
	bool bias;
};

/*
 * After ldr_ktw_layout(): set the 2.3 flags and fields of @x in @h and
 * place the bias section after the blobs (file_size grows). Plain @x
 * leaves a header every 2.x reader reads. -EINVAL with a message.
 */
int ldr_ktw_set_epi(struct ktw_header *h, const struct ldr_ktw_epi *x);

/*
 * Fills @dst (2 inter + hidden floats, zeroed) with the biases of expert
 * @expert of the file's MoE layer index @layer: gate, up, down, each
 * zero padded to the packed size.
 */
typedef void (*ldr_ktw_bias_fn)(void *arg, uint32_t layer, uint32_t expert,
				float *dst);

/*
 * Write the bias section of @h (after ldr_ktw_set_epi() with @x->bias) to
 * @fd at h->bias_off, expert by expert from @get, and set h->bias_crc.
 * The padding to file_size is left as the file has it (zero: ftruncate).
 * 0, -ENOMEM, or the write's -errno (no message).
 */
int ldr_ktw_write_bias(int fd, struct ktw_header *h, ldr_ktw_bias_fn get,
		       void *arg);

/* Seal: meta_crc over @layer_ids and @table, then header_crc. */
void ldr_ktw_seal(struct ktw_header *h, const int32_t *layer_ids,
		  const struct ktw_entry *table);

static inline uint64_t ldr_align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

#endif /* KT_LOADER_KTW_H */
