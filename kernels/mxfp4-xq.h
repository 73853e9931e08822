/* SPDX-License-Identifier: MIT */
/*
 * mxfp4-xq.h - where the MXFP4 int16 bodies (moe-mxfp4-avx512.c,
 * moe-mxfp4-avx2.c) keep a call's activations made int16 per group of 32
 * (formats.md, "MXFP4"): the layout in scratch, and the power-of-two
 * scales their quantizers make. Plain C, shared by both widths.
 */
#ifndef KT_KERNELS_MXFP4_XQ_H
#define KT_KERNELS_MXFP4_XQ_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/mxfp4.h"

/* q[i][k] for token i, each group's scale at s[i][k / 32] */
struct mx_xq {
	int16_t *q;
	float *s;
	unsigned int K;		/* columns per token row */
};

static inline size_t mx_xq_bytes(size_t K, unsigned int m)
{
	return (size_t)m * K * 2 + (size_t)m * (K / KERN_MXFP4_GROUP) * 4 +
	       128;
}

static inline struct mx_xq mx_xq_at(void *p, unsigned int K, unsigned int m)
{
	uintptr_t u = ((uintptr_t)p + 63) & ~(uintptr_t)63;
	struct mx_xq x = { (int16_t *)u, NULL, K };

	x.s = (float *)(u + (((size_t)m * K * 2 + 63) & ~(size_t)63));
	return x;
}

/* The f32 2^(@e - 127) for a biased exponent @e in 1..254. */
static inline float pow2_biased(int e)
{
	uint32_t b = (uint32_t)e << 23;
	float f;

	memcpy(&f, &b, 4);
	return f;
}

#endif /* KT_KERNELS_MXFP4_XQ_H */
