/* SPDX-License-Identifier: MIT */
/*
 * qk-layout.h - where the scales of a K-quant matrix sit in its scale part
 * (Documentation/packed-layout.md): one record per block of 16 output rows
 * and super-block of 256 along K, row block major: gate/up read a row
 * block's scales as one sequential stream beside its tiles, and down
 * (chunk by chunk) whole lines of one record per row block at a fixed
 * stride, where the [K/32][N] arrays of .ktw 2.3 gave 16 bytes of each
 * line. A record, lane r for row 16 nb + r:
 * Q4_K/Q5_K d f32 [16], dmin f32 [16], the 6-bit sub-block scales u8
 * [8][16] and mins u8 [8][16] (384 bytes); Q6_K d f32 [16] and the signed
 * scales i8 [16][16] (320 bytes).
 */
#ifndef KT_KERNELS_QK_LAYOUT_H
#define KT_KERNELS_QK_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/layout.h"

#define KERN_QK_REC_ROWS	KERN_TILE_ROWS	/* rows of one record */

/*
 * Row n's scales of one super-block: d[0] (and dmin[0]) its step and
 * offset; sub-block j's scale sc[j * KERN_QK_REC_ROWS] (mn[...] its min).
 * Rows n + 1 .. of the same record follow each value, so that a vector
 * load at d, dmin, sc or mn reads consecutive rows. @dmin and @mn are NULL
 * for Q6_K, whose @sc are int8.
 */
struct kern_qk_rec {
	float *d, *dmin;
	uint8_t *sc, *mn;
};

/* the sub-block of one scale: 16 for Q6_K, else 32 */
static inline unsigned int kern_qk_sub(enum kt_quant q)
{
	return q == KT_QUANT_Q6_K ? KERN_Q6_K_SUB : KERN_Q4_K_SUB;
}

static inline size_t kern_qk_rec_bytes(enum kt_quant q)
{
	return q == KT_QUANT_Q6_K ? 320 : 384;
}

/* bytes of the scale part of an [N][K] matrix (a multiple of 64) */
static inline size_t kern_qk_scale_bytes(enum kt_quant q, unsigned int N,
					 unsigned int K)
{
	return (size_t)(N / KERN_QK_REC_ROWS) * (K / KERN_Q4_K_SUPER) *
	       kern_qk_rec_bytes(q);
}

/* the scales of row @n and the super-block holding column @k of an
 * [N][@K] matrix whose scale part is @scales */
static inline void kern_qk_rec_at(enum kt_quant q, const void *scales,
				  unsigned int K, unsigned int n,
				  unsigned int k, struct kern_qk_rec *r)
{
	uint8_t *p = (uint8_t *)scales +
		     ((size_t)(n / KERN_QK_REC_ROWS) * (K / KERN_Q4_K_SUPER) +
		      k / KERN_Q4_K_SUPER) * kern_qk_rec_bytes(q);
	unsigned int o = n % KERN_QK_REC_ROWS;

	r->d = (float *)p + o;
	if (q == KT_QUANT_Q6_K) {
		r->dmin = NULL;
		r->sc = p + 4 * KERN_QK_REC_ROWS + o;
		r->mn = NULL;
		return;
	}
	r->dmin = (float *)p + KERN_QK_REC_ROWS + o;
	r->sc = p + 8 * KERN_QK_REC_ROWS + o;
	r->mn = r->sc + 8 * KERN_QK_REC_ROWS;
}

#endif /* KT_KERNELS_QK_LAYOUT_H */
