/* SPDX-License-Identifier: MIT */
/*
 * layout.h - the constants of the packed layout (Documentation/
 * packed-layout.md) that every kernel body and the packer share: one
 * tile is 16 rows of 64 bytes, each row holding K / 4 groups of 4 bytes
 * (the VNNI interleave of AMX, AVX512-VNNI and AVX-VNNI alike).
 */
#ifndef KT_KERNELS_LAYOUT_H
#define KT_KERNELS_LAYOUT_H

#include <stdbool.h>
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
/*
 * MXFP4: 16 x 128 E2M1 codes, four groups of 32 along K (one E8M0 scale
 * per row and group). Each 32-byte line holds 4 k of 16 rows: byte
 * 2n + (k & 1) has k = 4L + (k & 1) in its low nibble and k + 2 in its
 * high one, so that the 32 bytes zero-extended to 16 bits give, through a
 * code-to-bf16 table (vpermw), the two BF16 tile lines of k pairs 2L and
 * 2L + 1; one group (8 lines, 256 bytes) widens to one BF16 tile.
 */
#define KERN_TILE_K_MXFP4	128
/* MXFP4: bytes of one line (4 k of 16 rows) and lines of one group. */
#define KERN_MXFP4_LINE		32
#define KERN_MXFP4_GROUP_LINES	8
/* FP8: the edge of the square blocks of one f32 scale (N and K). */
#define KERN_FP8_BLOCK		128
/* FP8 group of one scale per output row (KT_GROUP_CHANNEL). */
#define KERN_FP8_CHANNEL	0xffffffffu
/* Q8_0 (GGUF): one scale per this many weights along K */
#define KERN_Q8_0_GROUP		32
/* Q4_K (GGUF): super-block along K, and its sub-blocks (scale and min) */
#define KERN_Q4_K_SUPER		256
#define KERN_Q4_K_SUB		32
/* Q6_K (GGUF): the sub-block of one signed scale (super-block as Q4_K) */
#define KERN_Q6_K_SUB		16
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
	case KT_QUANT_Q5_K:	/* the low nibbles so; the high bits after */
	case KT_QUANT_Q6_K:
		return KERN_TILE_K_INT4;
	case KT_QUANT_FP8:
		return KERN_TILE_K_FP8;
	case KT_QUANT_MXFP4:
		return KERN_TILE_K_MXFP4;
	default:
		return 0;
	}
}

/* Byte offset of tile @t of a matrix's tiles. */
static inline size_t kern_tile_off(size_t t)
{
	return t * KERN_TILE_BYTES;
}

/* The GGUF K-quants (super-blocks of 256): Q4_K, Q5_K, Q6_K. */
static inline bool kern_quant_is_k(enum kt_quant q)
{
	return q == KT_QUANT_Q4_K || q == KT_QUANT_Q5_K || q == KT_QUANT_Q6_K;
}

/* The GGUF block types: Q8_0 and the K-quants (one group of 32, one KC). */
static inline bool kern_quant_is_gguf(enum kt_quant q)
{
	return q == KT_QUANT_Q8_0 || kern_quant_is_k(q);
}

/* Bits of a K-quant value above its nibble: 0 Q4_K, 1 Q5_K, 2 Q6_K. */
static inline unsigned int kern_qk_hi_bits(enum kt_quant q)
{
	return q == KT_QUANT_Q6_K ? 2 : q == KT_QUANT_Q5_K ? 1 : 0;
}

/*
 * Bytes of one tile of @q: Q5_K and Q6_K tiles are an INT4 tile of the low
 * nibbles followed by 256 bytes per high bit (the high-bit lines), so
 * that one stream reads both.
 */
static inline size_t kern_tile_bytes(enum kt_quant q)
{
	return KERN_TILE_BYTES + kern_qk_hi_bits(q) * (KERN_TILE_BYTES / 4);
}

/* Byte offset of tile @t of a matrix of @q. */
static inline size_t kern_tile_off_q(enum kt_quant q, size_t t)
{
	return t * kern_tile_bytes(q);
}

/*
 * The high bits of row @r, column @c of a Q5_K/Q6_K tile: a high-bit line
 * holds for every byte of 4 / B nibble lines (B bits each) the bits of its
 * low-nibble value at bit 2B*l and of its high-nibble value at 2B*l + B
 * (l the nibble line within the group), in the byte of the same position.
 * Return: the byte's offset from the tile's start; *@shift the bit.
 */
static inline unsigned int kern_qk_hi_byte(enum kt_quant q, unsigned int r,
					   unsigned int c, unsigned int *shift)
{
	unsigned int b = kern_qk_hi_bits(q), per = 4 / b;
	unsigned int line = c % KERN_INT4_HI_K / 4;

	*shift = 2 * b * (line % per) + (c >= KERN_INT4_HI_K ? b : 0);
	return KERN_TILE_BYTES + line / per * KERN_TILE_ROW_BYTES +
	       r * KERN_TILE_LANE_BYTES + c % 4;
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

/* kern_tile_kcm() of the first tile of K chunk @c: no division, for
 * kernels that take one chunk at a time (@kt a power of two) */
static inline size_t kern_tile_kcm_chunk(unsigned int N, unsigned int kc,
					 unsigned int kt, unsigned int nb,
					 unsigned int c)
{
	return ((size_t)c * (N / KERN_TILE_ROWS) + nb) * (kc / kt);
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
	if (q == KT_QUANT_MXFP4)	/* the nibble: kern_mxfp4_hi() */
		return (c / 4) * KERN_MXFP4_LINE + r * 2 + c % 2;
	if (q == KT_QUANT_INT4 || kern_quant_is_k(q))
		c %= KERN_INT4_HI_K;
	return (c / 4) * KERN_TILE_ROW_BYTES + r * KERN_TILE_LANE_BYTES + c % 4;
}

/* MXFP4: whether column @c of a tile is the high nibble of its byte. */
static inline bool kern_mxfp4_hi(unsigned int c)
{
	return (c / 2) & 1;
}

#endif /* KT_KERNELS_LAYOUT_H */
