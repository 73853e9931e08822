/* SPDX-License-Identifier: MIT */
/*
 * limits-vec.h - the read and peak loops of kt_ctx_measure_*() written once
 * over the width layer (vec.h): included by limits-avx512.c, limits-avx2.c
 * and limits-avxvnni.c, which name the multiply-add they measure.
 */
#ifndef KT_KERNELS_LIMITS_VEC_H
#define KT_KERNELS_LIMITS_VEC_H

#include "kernels/simd.h"
#include "kernels/vec.h"

/* Bytes of one vector. */
#define VBYTES		(VF_LANES * 4)

/*
 * Four streams (the four quarters of the range), two loads each per step:
 * enough concurrent misses for the prefetchers of one core.
 */
AI uint64_t read_loop(const void *p, size_t bytes)
{
	const uint8_t *b = p;
	size_t q = bytes / 4, off;
	vi a0 = vi_zero(), a1 = a0, a2 = a0, a3 = a0;

	for (off = 0; off + 2 * VBYTES <= q; off += 2 * VBYTES) {
		a0 = vi_xor(a0, vi_load_a(b + off));
		a1 = vi_xor(a1, vi_load_a(b + q + off));
		a2 = vi_xor(a2, vi_load_a(b + 2 * q + off));
		a3 = vi_xor(a3, vi_load_a(b + 3 * q + off));
		a0 = vi_xor(a0, vi_load_a(b + off + VBYTES));
		a1 = vi_xor(a1, vi_load_a(b + q + off + VBYTES));
		a2 = vi_xor(a2, vi_load_a(b + 2 * q + off + VBYTES));
		a3 = vi_xor(a3, vi_load_a(b + 3 * q + off + VBYTES));
	}
	return vi_fold64(vi_xor(vi_xor(a0, a1), vi_xor(a2, a3)));
}

/*
 * Twelve independent chains cover the latency (4-5 cycles) times the
 * issue rate (1-2 per cycle) of the dot-product units.
 */
#define PEAK_ACCS 12

/*
 * The peak loop @name: @iters rounds of PEAK_ACCS chains acc = @mac(acc,
 * x, y) on @type registers starting at @init(k), summed by @add and folded
 * to a scalar by @fold; each @mac does @per multiply-adds.
 */
#define PEAK_LOOP(name, type, init, mac, add, fold, per, x, y)		\
uint64_t name(uint64_t iters, uint64_t *sink)				\
{									\
	type acc[PEAK_ACCS];						\
	uint64_t i;							\
	int k;								\
									\
	for (k = 0; k < PEAK_ACCS; k++)					\
		acc[k] = init(k);					\
	for (i = 0; i < iters; i++)					\
		_Pragma("GCC unroll 16")				\
		for (k = 0; k < PEAK_ACCS; k++)				\
			acc[k] = mac(acc[k], x, y);			\
	for (k = 1; k < PEAK_ACCS; k++)					\
		acc[0] = add(acc[0], acc[k]);				\
	*sink += (uint64_t)fold(acc[0]);				\
	return iters * PEAK_ACCS * (per);				\
}

/* f32 FMA, the BF16 kernels' multiply-add where the ISA has no bf16 dot */
#define fma_init(k)		vf_zero()
#define fma_mac(a, x, y)	vf_fmadd(x, y, a)
#define int_init(k)		vi_set1_32(k)

#endif /* KT_KERNELS_LIMITS_VEC_H */
