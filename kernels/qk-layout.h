/* SPDX-License-Identifier: MIT */
/*
 * qk-layout.h - where the scales of a K-quant matrix sit in its scale part
 * (Documentation/packed-layout.md): Q4_K and Q5_K d and dmin f32 [K/256][N],
 * then the 6-bit sub-block scales and mins as u8 [K/32][N] each; Q6_K d f32
 * [K/256][N], then the signed scales as i8 [K/16][N].
 */
#ifndef KT_KERNELS_QK_LAYOUT_H
#define KT_KERNELS_QK_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/layout.h"

/* @dmin and @mn are NULL for Q6_K, whose @sc are int8 */
struct kern_qk_mat {
	float *d, *dmin;
	uint8_t *sc, *mn;
};

/* the sub-block of one scale: 16 for Q6_K, else 32 */
static inline unsigned int kern_qk_sub(enum kt_quant q)
{
	return q == KT_QUANT_Q6_K ? KERN_Q6_K_SUB : KERN_Q4_K_SUB;
}

/* bytes of the scale part of an [N][K] matrix (a multiple of 64) */
static inline size_t kern_qk_scale_bytes(enum kt_quant q, unsigned int N,
					 unsigned int K)
{
	if (q == KT_QUANT_Q6_K)
		return (size_t)(K / 256) * N * 4 + (size_t)(K / 16) * N;
	return (size_t)(K / 256) * N * 8 + (size_t)(K / 32) * N * 2;
}

static inline void kern_qk_mat_at(enum kt_quant q, const void *scales,
				  unsigned int N, unsigned int K,
				  struct kern_qk_mat *m)
{
	uint8_t *p = (uint8_t *)scales;
	size_t ns = (size_t)(K / 256) * N;

	m->d = (float *)p;
	if (q == KT_QUANT_Q6_K) {
		m->dmin = NULL;
		m->sc = (uint8_t *)(m->d + ns);
		m->mn = NULL;
		return;
	}
	m->dmin = m->d + ns;
	m->sc = (uint8_t *)(m->dmin + ns);
	m->mn = m->sc + (size_t)(K / 32) * N;
}

#endif /* KT_KERNELS_QK_LAYOUT_H */
