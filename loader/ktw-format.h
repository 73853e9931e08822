/* SPDX-License-Identifier: MIT */
/*
 * ktw-format.h - the on-disk layout of a .ktw file (all little-endian).
 * Documentation/ktw-format.md is the specification; this is its C form.
 */
#ifndef KT_LOADER_KTW_FORMAT_H
#define KT_LOADER_KTW_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define KTW_MAGIC		"KTWMOE\r\n"	/* CR LF catch text-mode copies */
#define KTW_VERSION_MAJOR	2
#define KTW_VERSION_MINOR	4	/* 2.1: quant 4, FP8; 2.2: down_quant;
					 * 2.3: act, padding, biases;
					 * 2.4: K-quant scale records */
#define KTW_ALIGN		4096u	/* every region and blob starts here */
#define KTW_HEADER_BYTES	4096u	/* the header region, padded */
#define KTW_MAX_LAYERS		4096u
#define KTW_MAX_EXPERTS		65536u
#define KTW_MAX_DIM		(1u << 20)
#define KTW_MAX_ENTRIES		(1u << 22)	/* layers x experts: 128 MiB of table */

/*
 * Header flags. KTW_F_DOWN_QUANT (2.2): the down matrix has its own
 * quantization, in down_quant (a GGUF Q4_K_M file: gate/up Q4_K, down
 * Q6_K). A flag, not only the field, so that a 2.0/2.1 reader refuses such
 * a file ("unknown header flags") instead of misreading it.
 */
#define KTW_F_DOWN_QUANT	(1u << 0)
/*
 * 2.3, GPT-OSS: each changes what the experts compute, so each is a flag
 * that a 2.0..2.2 reader refuses, never a field it would skip.
 * KTW_F_ACT: the gated activation is act (enum kt_act, not silu) with
 * act_alpha and act_limit. KTW_F_PADDED: hidden and inter are packed
 * sizes padded with zero weights beyond the model's own hidden_io and
 * inter_io. KTW_F_BIAS: a bias section at bias_off.
 */
#define KTW_F_ACT		(1u << 1)
#define KTW_F_PADDED		(1u << 2)
#define KTW_F_BIAS		(1u << 3)
/*
 * 2.4: the scales of Q4_K, Q5_K and Q6_K matrices are one record per 16
 * rows and super-block (kernels/qk-layout.h). Set in every file with a
 * K-quant matrix: a 2.0..2.3 reader refuses the file, and a file without
 * it holds the earlier [K/256][N] layout, which this kt refuses with a
 * message to re-run kt convert.
 */
#define KTW_F_QK_REC		(1u << 4)
#define KTW_F_ALL		(KTW_F_DOWN_QUANT | KTW_F_ACT | KTW_F_PADDED | \
				 KTW_F_BIAS | KTW_F_QK_REC)
/* the flags of 2.3 (their fields follow the 2.2 header) */
#define KTW_F_2_3		(KTW_F_ACT | KTW_F_PADDED | KTW_F_BIAS)
#define KTW_HEADER_2_2_BYTES	192u

enum ktw_part {
	KTW_PART_GATE_TILES,
	KTW_PART_UP_TILES,
	KTW_PART_DOWN_TILES,
	KTW_PART_GATE_SCALES,
	KTW_PART_UP_SCALES,
	KTW_PART_DOWN_SCALES,
	KTW_PARTS
};

/*
 * The header, at offset 0. Readers accept a newer minor version (fields
 * are only ever appended, within the 4 KiB region) and refuse another major.
 */
struct ktw_header {
	char magic[8];
	uint16_t version_major;
	uint16_t version_minor;
	uint32_t header_size;		/* sizeof(struct ktw_header) written */
	uint32_t flags;			/* KTW_F_* */
	uint32_t quant;			/* enum kt_quant */
	uint32_t hidden;		/* H */
	uint32_t inter;			/* I */
	uint32_t n_experts;		/* E, routed experts per MoE layer */
	uint32_t n_layers;		/* MoE layers in the file */
	uint32_t group_size;		/* INT4 group along K; FP8 128; else 0 */
	uint32_t down_chunk;		/* KC of the packed down matrix */
	uint32_t top_k;			/* from config.json; informational */
	uint32_t down_quant;		/* KTW_F_DOWN_QUANT: down's quant; else 0 */
	uint64_t expert_bytes;		/* bytes of one packed blob */
	uint64_t blob_stride;		/* expert_bytes rounded up to 4 KiB */
	uint64_t part_off[KTW_PARTS];	/* offset of each part in a blob */
	uint64_t layers_off;		/* int32 layer ids [n_layers] */
	uint64_t table_off;		/* struct ktw_entry [n_layers * E] */
	uint64_t data_off;		/* first blob */
	uint64_t file_size;		/* bytes of the file as written */
	char arch[32];			/* config.json model_type, NUL padded */
	uint32_t meta_crc;		/* CRC32C of layer ids then table */
	uint32_t header_crc;		/* CRC32C of this struct, this field 0 */
	/* 2.3; each 0 without its flag (and in an older header) */
	uint32_t act;			/* KTW_F_ACT: enum kt_act */
	float act_alpha;		/* KTW_F_ACT: its constants */
	float act_limit;
	uint32_t hidden_io;		/* KTW_F_PADDED: the model's own H */
	uint32_t inter_io;		/* KTW_F_PADDED: the model's own I */
	uint32_t bias_crc;		/* KTW_F_BIAS: CRC32C of bias_size bytes */
	uint64_t bias_off;		/* KTW_F_BIAS: f32 [n_layers][E][2I + H] */
	uint64_t bias_size;		/* KTW_F_BIAS: bytes of it, unpadded */
};

/* One (layer, expert) blob; the table is ordered by layer, then expert. */
struct ktw_entry {
	uint32_t layer;			/* index among the file's MoE layers */
	uint32_t expert;
	uint64_t offset;		/* from the start of the file */
	uint64_t size;			/* == expert_bytes */
	uint32_t crc;			/* CRC32C of the blob's size bytes */
	uint32_t flags;			/* none defined; must be 0 */
};

_Static_assert(sizeof(struct ktw_header) == 232, "ktw header layout");
_Static_assert(offsetof(struct ktw_header, act) == KTW_HEADER_2_2_BYTES,
	       "2.3 fields follow the 2.2 header");
_Static_assert(sizeof(struct ktw_entry) == 32, "ktw entry layout");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "the .ktw reader maps structs directly: little-endian hosts");

#endif /* KT_LOADER_KTW_FORMAT_H */
