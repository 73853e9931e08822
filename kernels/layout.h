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
/* Tile rows (64-byte lines) of one tile: one K step of 4 bytes each. */
#define KERN_TILE_LINES		(KERN_TILE_BYTES / KERN_TILE_ROW_BYTES)
/* Bytes of one output row within a tile row (the VNNI group). */
#define KERN_TILE_LANE_BYTES	4

/* K covered by one tile, per quantization. */
#define KERN_TILE_K_INT8	64	/* 16 x 64 int8 */
#define KERN_TILE_K_BF16	32	/* 16 x 32 bf16 */
#define KERN_TILE_K_INT4	128	/* 16 x 128 nibbles: k and k + 64 share a byte */
/*
 * FP8: 16 x 64 E4M3 bytes, each 32-byte half line the bytes of one BF16
 * tile line (16 rows x a k pair), so that zero-extending it to 16 bits
 * lines the values up as vdpbf16ps and the AMX bf16 B tiles want them;
 * the first 512 bytes widen to the BF16 tile of k 0..31, the rest k 32..63.
 */
#define KERN_TILE_K_FP8		64
/* FP8: the edge of the square blocks of one f32 scale (N and K). */
#define KERN_FP8_BLOCK		128
/* FP8 group of one scale per output row (KT_GROUP_CHANNEL). */
#define KERN_FP8_CHANNEL	0xffffffffu
/* Q8_0 (GGUF): one scale per this many weights along K */
#define KERN_Q8_0_GROUP		32
/* Q4_K (GGUF): super-block along K, and its sub-blocks (scale and min) */
#define KERN_Q4_K_SUPER		256
#define KERN_Q4_K_SUB		32
/* INT4: the high nibble of the byte of k holds k + KERN_INT4_HI_K. */
#define KERN_INT4_HI_K		(KERN_TILE_K_INT4 / 2)

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
	case KT_QUANT_Q8_0:	/* the INT8 tiles; scales per group of 32 */
		return KERN_TILE_K_INT8;
	case KT_QUANT_BF16:
		return KERN_TILE_K_BF16;
	case KT_QUANT_INT4:
	case KT_QUANT_Q4_K:	/* the INT4 tiles, nibbles 0..15 as stored */
		return KERN_TILE_K_INT4;
	case KT_QUANT_FP8:
		return KERN_TILE_K_FP8;
	default:
		return 0;
	}
}

/* Byte offset of tile @t of a matrix's tiles. */
static inline size_t kern_tile_off(size_t t)
{
	return t * KERN_TILE_BYTES;
}

/*
 * Index of the tile of output block @nb and K block @kb (@kt the K of a
 * tile): gate and up are row-block-major over K, down is k-chunk-major
 * over N with @kc its chunk.
 */
static inline size_t kern_tile_rbm(unsigned int K, unsigned int kt,
				   unsigned int nb, unsigned int kb)
{
	return (size_t)nb * (K / kt) + kb;
}

static inline size_t kern_tile_kcm(unsigned int N, unsigned int kc,
				   unsigned int kt, unsigned int nb,
				   unsigned int kb)
{
	unsigned int p = kc / kt;

	return (size_t)(kb / p) * (N / KERN_TILE_ROWS) * p + (size_t)nb * p +
	       kb % p;
}

/* Byte of output row @r, K column @c (< kern_tile_k(@q)) inside a tile. */
static inline unsigned int kern_tile_byte(enum kt_quant q, unsigned int r,
					  unsigned int c)
{
	if (q == KT_QUANT_BF16)
		return (c / 2) * KERN_TILE_ROW_BYTES + r * KERN_TILE_LANE_BYTES +
		       (c % 2) * 2;
	if (q == KT_QUANT_FP8)
		return (c / 2) * (KERN_TILE_ROW_BYTES / 2) + r * 2 + c % 2;
	if (q == KT_QUANT_INT4 || q == KT_QUANT_Q4_K)
		c %= KERN_INT4_HI_K;
	return (c / 4) * KERN_TILE_ROW_BYTES + r * KERN_TILE_LANE_BYTES + c % 4;
}

#endif /* KT_KERNELS_LAYOUT_H */
