/* SPDX-License-Identifier: MIT */
/*
 * pack.h - the packed expert layout of Documentation/packed-layout.md:
 * offsets of an expert blob, quantizing and packing, per-node byte ranges,
 * and reading elements back. The only code that knows the layout besides
 * the kernels themselves.
 */
#ifndef KT_KERNELS_PACK_H
#define KT_KERNELS_PACK_H

#include <stddef.h>
#include <stdint.h>
#include <kt/kt.h>

#include "kernels/kern.h"
#include "kernels/layout.h"
#include "kernels/qk-layout.h"

#define KERN_PACK_MAX_RANGES	6

enum kern_mat_id {
	KERN_MAT_GATE = 0,
	KERN_MAT_UP = 1,
	KERN_MAT_DOWN = 2,
};

/*
 * struct kern_pack_layout - where the parts of one expert blob are.
 * @quant: quantization of gate and up (and of down unless @quant_down
 *	differs).
 * @kt: K span of a tile (INT8 64, BF16 32, INT4 128) of gate/up.
 * @kc: KC, the down chunk.
 * @group: INT4 group along K, Q8_0 32, else 0 (gate/up).
 * @quant_down, @kt_down, @group_down: the same for down; equal to the
 *	gate/up values unless the layout mixes two GGUF block types
 *	(kern_pack_layout_mix()). kern_pack_for() gives one matrix's view.
 * @tiles_off/@tiles_bytes: per matrix (enum kern_mat_id).
 * @scales_off/@scales_bytes: per matrix; 0 bytes for BF16.
 * @total: bytes of the blob.
 * @err: on -EINVAL, why (a static string).
 */
struct kern_pack_layout {
	enum kt_quant quant;
	unsigned int hidden;
	unsigned int inter;
	unsigned int group;
	unsigned int kt;
	unsigned int kc;
	size_t tiles_off[3];
	size_t tiles_bytes[3];
	size_t scales_off[3];
	size_t scales_bytes[3];
	size_t total;
	const char *err;
	enum kt_quant quant_down;
	unsigned int kt_down;
	unsigned int group_down;
};

/* A byte range of an expert blob. */
struct kern_range {
	size_t off;
	size_t len;
};

/*
 * kern_pack_layout() - compute the layout of one expert.
 * @q: quantization. @hidden, @inter: H and I, multiples of 128.
 * @group: INT4 group 32, 64 or 128 (0: 128); Q8_0 and MXFP4 32 (or 0);
 *	FP8 128 or KERN_FP8_CHANNEL (0: 128); ignored otherwise.
 * Return: 0; -EINVAL with @l->err set.
 */
int kern_pack_layout(enum kt_quant q, unsigned int hidden, unsigned int inter,
		     unsigned int group, struct kern_pack_layout *l);

/*
 * kern_pack_layout_mix() - the layout of an expert whose down matrix has
 *	its own quantization @qdown (a GGUF Q4_K_M file: gate/up Q4_K, down
 *	Q6_K). Both of @q and @qdown must be Q8_0, Q4_K, Q5_K or Q6_K when
 *	they differ; @qdown == @q is kern_pack_layout(). The parts keep their
 *	order (gate, up, down tiles, then scales), each sized by its own type.
 * Return: 0; -EINVAL with @l->err set.
 */
int kern_pack_layout_mix(enum kt_quant q, enum kt_quant qdown,
			 unsigned int hidden, unsigned int inter,
			 unsigned int group, struct kern_pack_layout *l);

/*
 * kern_pack_for() - the layout as matrix @id sees it: @l itself, or for
 *	the down matrix of a mixed layout a copy in @tmp whose @quant, @kt
 *	and @group are down's. Every per-matrix function below applies it.
 */
const struct kern_pack_layout *kern_pack_for(const struct kern_pack_layout *l,
					     enum kern_mat_id id,
					     struct kern_pack_layout *tmp);

/*
 * kern_pack_matrix() - quantize and pack one matrix [N][K].
 * @l: layout. @id: which matrix (gives N, K and the tile order).
 * @src: row-major [N][K] of @dtype (F32, BF16 or F16), rows @src_stride
 *	elements apart.
 * @blob: the expert blob; only this matrix's tiles and scales are written.
 * Return: 0; -EINVAL bad dtype.
 */
int kern_pack_matrix(const struct kern_pack_layout *l, enum kern_mat_id id,
		     const void *src, enum kt_dtype dtype, size_t src_stride,
		     uint8_t *blob);

/*
 * kern_pack_int4_raw() - pack INT4 matrix @id from values already
 *	quantized: @q [N][K] int8 in [-8, 7] and @scales [K/G][N] f32
 *	(w = q * scale), kept as they are.
 */
void kern_pack_int4_raw(const struct kern_pack_layout *l, enum kern_mat_id id,
			const int8_t *q, const float *scales, uint8_t *blob);

/*
 * kern_pack_expert() - quantize and pack gate, up and down into @blob
 *	(@l->total bytes). Sources are dense row-major of @dtype.
 * Return: 0; -EINVAL bad dtype or NULL source.
 */
int kern_pack_expert(const struct kern_pack_layout *l, const void *gate,
		     const void *up, const void *down, enum kt_dtype dtype,
		     uint8_t *blob);

/* Rows [n0, n0 + rows) of a source of @dtype as f32 ([rows][K] at @dst). */
void kern_pack_load_rows(const void *src, enum kt_dtype dtype, size_t stride,
			 unsigned int n0, unsigned int rows, unsigned int K,
			 float *dst);

/*
 * kern_pack_rows_q() - pack output rows [16*@nb, 16*@nb + 16) of matrix
 *	@id from values already quantized (a file's blocks, kept as they are):
 *	@q [16][K] int8 (INT4: -8..7; Q8_0: any int8) and @gscale
 *	[16][K/group] f32 scales, w = q * scale. INT4 and Q8_0 only.
 * Return: 0; -EINVAL another quantization.
 */
int kern_pack_rows_q(const struct kern_pack_layout *l, enum kern_mat_id id,
		     unsigned int nb, const int8_t *q, const float *gscale,
		     uint8_t *blob);

/*
 * kern_pack_rows_qk() - pack rows [16*@nb, 16*@nb + 16) of matrix @id of a
 *	K-quant layout from a file's blocks: @q [16][K] values (Q4_K 0..15,
 *	Q5_K 0..31, Q6_K 0..63), @d [16][K/256] f32. Q4_K, Q5_K: @dmin
 *	[16][K/256] f32, @sc and @mn [16][K/32] 6-bit values, w = d * sc * q -
 *	dmin * mn. Q6_K: @sc [16][K/16] int8 (as bytes), @dmin and @mn unused,
 *	w = d * sc * (q - 32).
 * Return: 0; -EINVAL another quantization.
 */
int kern_pack_rows_qk(const struct kern_pack_layout *l, enum kern_mat_id id,
		      unsigned int nb, const int8_t *q, const float *d,
		      const float *dmin, const uint8_t *sc, const uint8_t *mn,
		      uint8_t *blob);

/*
 * kern_pack_rows_mxfp4() - pack rows [16*@nb, 16*@nb + 16) of MXFP4 matrix
 *	@id from a file's blocks, kept as they are: @codes [16][K] E2M1 codes
 *	0..15 and @e8m0 [16][K/32] scale bytes, w = e2m1(code) * 2^(e - 127)
 *	(kernels/mxfp4.h unpacks both block byte orders to codes).
 * Return: 0; -EINVAL another quantization, a code above 15 or a scale of
 *	255 (NaN); nothing is written then.
 */
int kern_pack_rows_mxfp4(const struct kern_pack_layout *l, enum kern_mat_id id,
			 unsigned int nb, const uint8_t *codes,
			 const uint8_t *e8m0, uint8_t *blob);

/* Point @mat at matrix @id of the blob at @blob. */
void kern_pack_mat(const struct kern_pack_layout *l, enum kern_mat_id id,
		   const uint8_t *blob, struct kern_mat *mat);

/*
 * kern_pack_get() - dequantized element (n, k) of matrix @id of @blob:
 *	q * scale, or the bf16 value, as f32.
 */
float kern_pack_get(const struct kern_pack_layout *l, enum kern_mat_id id,
		    const uint8_t *blob, unsigned int n, unsigned int k);

/* Byte offset of element (n, k) inside a matrix's tiles (nibble: k >= 64). */
size_t kern_pack_elem_off(const struct kern_pack_layout *l,
			  enum kern_mat_id id, unsigned int n, unsigned int k);

/*
 * kern_node_slice() - the intermediate rows [i0, i1) that node @node of
 *	@n_nodes computes: whole KC chunks, [j*C/n, (j+1)*C/n) of C = I/KC.
 *	Empty (i0 == i1) when there are fewer chunks than nodes.
 */
static inline void kern_node_slice(unsigned int inter, unsigned int kc,
				   unsigned int n_nodes, unsigned int node,
				   unsigned int *i0, unsigned int *i1)
{
	unsigned int c = inter / kc;

	*i0 = (unsigned int)((uint64_t)node * c / n_nodes) * kc;
	*i1 = (unsigned int)((uint64_t)(node + 1) * c / n_nodes) * kc;
}

/*
 * kern_pack_node_ranges() - the byte ranges of an expert blob that node
 *	@node of @n_nodes reads: its slices of the gate, up and down tiles and
 *	of every scale part laid out along them (gate/up scales per row, per
 *	record or per 128-row block; down scales per k group). Scale parts
 *	that every node reads, or whose slices are strided (down's per-row and
 *	per-record scales, gate/up's k-major INT4, Q8_0 and MXFP4 scales), are
 *	listed for node 0 only. Empty ranges are omitted.
 * Return: number of ranges written (at most KERN_PACK_MAX_RANGES).
 */
int kern_pack_node_ranges(const struct kern_pack_layout *l,
			  unsigned int n_nodes, unsigned int node,
			  struct kern_range ranges[KERN_PACK_MAX_RANGES]);

#endif /* KT_KERNELS_PACK_H */
