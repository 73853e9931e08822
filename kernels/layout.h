/* SPDX-License-Identifier: MIT */
/*
 * layout.h - the constants of the packed layout (Documentation/
 * packed-layout.md) that every kernel body and the packer share: one
 * tile is 16 rows of 64 bytes, each row holding K / 4 groups of 4 bytes
 * (the VNNI interleave of AMX, AVX512-VNNI and AVX-VNNI alike).
 */
#ifndef KT_KERNELS_LAYOUT_H
#define KT_KERNELS_LAYOUT_H

#include <stddef.h>
#include <kt/kt.h>

#define KERN_TILE_BYTES		1024	/* one tile */
#define KERN_TILE_ROWS		16	/* output rows (N) of one tile */
#define KERN_TILE_ROW_BYTES	64	/* bytes of one tile row */

/* K covered by one tile, per quantization. */
#define KERN_TILE_K_INT8	64	/* 16 x 64 int8 */
#define KERN_TILE_K_BF16	32	/* 16 x 32 bf16 */
#define KERN_TILE_K_INT4	128	/* 16 x 128 nibbles: k and k + 64 share a byte */

/*
 * KC, the down chunk: the down matrix is stored chunk-major in KC columns,
 * the intermediate activation is quantized per KC, and the NUMA split of
 * the intermediate dimension is in whole chunks. 128, the K of one INT4
 * tile, is the smallest chunk every quantization can tile, so no node's
 * share exceeds another's by more than 128 rows.
 */
#define KERN_DOWN_CHUNK		128

/* K of one tile of @q (0 for a quantization without tiles). */
static inline unsigned int kern_tile_k(enum kt_quant q)
{
	switch (q) {
	case KT_QUANT_INT8:
		return KERN_TILE_K_INT8;
	case KT_QUANT_BF16:
		return KERN_TILE_K_BF16;
	case KT_QUANT_INT4:
		return KERN_TILE_K_INT4;
	default:
		return 0;
	}
}

/* Byte offset of tile @t of a matrix's tiles. */
static inline size_t kern_tile_off(size_t t)
{
	return t * KERN_TILE_BYTES;
}

#endif /* KT_KERNELS_LAYOUT_H */
