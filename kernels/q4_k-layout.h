/* SPDX-License-Identifier: MIT */
/*
 * q4_k-layout.h - where the scales of a Q4_K matrix sit in its scale part
 * (Documentation/packed-layout.md): d and dmin f32 [K/256][N], then the
 * 6-bit sub-block scales and mins as u8 [K/32][N] each.
 */
#ifndef KT_KERNELS_Q4_K_LAYOUT_H
#define KT_KERNELS_Q4_K_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

struct kern_q4k_mat {
	float *d, *dmin;
	uint8_t *sc, *mn;
};

/* bytes of the scale part of an [N][K] matrix (a multiple of 64) */
static inline size_t kern_q4k_scale_bytes(unsigned int N, unsigned int K)
{
	return (size_t)(K / 256) * N * 8 + (size_t)(K / 32) * N * 2;
}

static inline void kern_q4k_mat_at(const void *scales, unsigned int N,
				   unsigned int K, struct kern_q4k_mat *m)
{
	uint8_t *p = (uint8_t *)scales;

	m->d = (float *)p;
	m->dmin = m->d + (size_t)(K / 256) * N;
	m->sc = (uint8_t *)(m->dmin + (size_t)(K / 256) * N);
	m->mn = m->sc + (size_t)(K / 32) * N;
}

#endif /* KT_KERNELS_Q4_K_LAYOUT_H */
