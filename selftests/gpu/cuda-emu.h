/* SPDX-License-Identifier: MIT */
/*
 * cuda-emu.h - just enough of CUDA C++ for gpu/ffn.cu to compile and run
 * on the host: each CUDA thread of a block is a coroutine of
 * one host thread, switched at barriers only; __syncthreads() waits for
 * the block, warp shuffles and mma.sync m16n8k16 (bf16 -> f32) are
 * exchanges between the 32 lanes of a warp, written from the PTX ISA's
 * fragment layouts, not from the kernels. A launch runs its blocks one
 * after another, so __shared__ is `static`. It checks what the kernels
 * compute, not how fast; the launcher is the test's (ffn-emu.cc).
 */
#ifndef KT_SELFTESTS_CUDA_EMU_H
#define KT_SELFTESTS_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/fp.h"

#define KT_CUDA_EMU 1

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
	unsigned int x, y, z;
};
struct uint2 {
	uint32_t x, y;
};
struct __attribute__((aligned(16))) uint4 {
	uint32_t x, y, z, w;
};
struct __attribute__((aligned(16))) float4 {
	float x, y, z, w;
};

static inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w)
{
	return uint4{ x, y, z, w };
}

/* ---- the running thread ------------------------------------------------- */

struct emu_warp {
	uint32_t a[32][4];
	uint32_t b[32][2];
	float v[32];
};

enum emu_wait_kind { EMU_WAIT_WARP, EMU_WAIT_BLOCK };

/* the running coroutine's indices (one runs at a time) and its warp */
extern dim3 threadIdx, blockIdx, blockDim, gridDim;
extern struct emu_warp *emu_cur_warp;

/* Park the running thread until its warp or its block has all arrived. */
void emu_wait(enum emu_wait_kind k);

static inline void __syncthreads(void)
{
	emu_wait(EMU_WAIT_BLOCK);
}

/* ---- arithmetic ---------------------------------------------------------- */

static inline float __uint_as_float(uint32_t u)
{
	return kern_bits_f32(u);
}

static inline uint32_t __float_as_uint(float f)
{
	return kern_f32_bits(f);
}

/* glibc declares an __expf of its own */
#define __expf(x) expf(x)

/* byte n of the result is byte (s >> 4n) & 7 of {y:x} (PTX prmt, default mode) */
static inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s)
{
	uint64_t v = (uint64_t)y << 32 | x;
	uint32_t r = 0;

	for (int n = 0; n < 4; n++)
		r |= (uint32_t)(v >> (8 * ((s >> (4 * n)) & 7)) & 0xff) << (8 * n);
	return r;
}

template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename T> static inline T __ldcs(const T *p) { return *p; }

struct __nv_bfloat16 {
	uint16_t x;
};
struct __nv_bfloat162 {
	uint16_t x, y;
};

static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi)
{
	return __nv_bfloat162{ kern_f32_to_bf16(lo), kern_f32_to_bf16(hi) };
}

static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
	return __nv_bfloat16{ kern_f32_to_bf16(f) };
}

static inline float __bfloat162float(__nv_bfloat16 h)
{
	return kern_bf16_to_f32(h.x);
}

/* ---- warp exchanges ------------------------------------------------------ */

static inline float __shfl_xor_sync(unsigned int mask, float v, int o)
{
	struct emu_warp *w = emu_cur_warp;
	unsigned int lane = threadIdx.x & 31;
	float r;

	(void)mask;
	w->v[lane] = v;
	emu_wait(EMU_WAIT_WARP);
	r = w->v[lane ^ (unsigned int)o];
	emu_wait(EMU_WAIT_WARP);
	return r;
}

static inline float emu_bf_half(uint32_t word, int half)
{
	return kern_bf16_to_f32((uint16_t)(half ? word >> 16 : word));
}

/*
 * mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, c += A B. Fragments
 * (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4 and
 * t = lane % 4: A regs {A[g][2t..], A[g+8][2t..], A[g][2t+8..],
 * A[g+8][2t+8..]}; B regs {B[2t..][g], B[2t+8..][g]}; C {C[g][2t],
 * C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}; a register's low half holds the
 * lower column (A) or row (B).
 */
static inline void emu_mma16816(float *c, const uint32_t *a, uint32_t b0,
				uint32_t b1)
{
	struct emu_warp *w = emu_cur_warp;
	unsigned int lane = threadIdx.x & 31, g = lane / 4, t = lane % 4;

	memcpy(w->a[lane], a, 16);
	w->b[lane][0] = b0;
	w->b[lane][1] = b1;
	emu_wait(EMU_WAIT_WARP);
	for (int e = 0; e < 4; e++) {
		unsigned int row = g + (e >> 1) * 8, col = 2 * t + (e & 1);
		float s = 0;

		for (unsigned int k = 0; k < 16; k++) {
			unsigned int al = (row % 8) * 4 + (k % 8) / 2;
			unsigned int ar = (row >= 8) + 2 * (k >= 8);
			unsigned int bl = col * 4 + (k % 8) / 2;

			s += emu_bf_half(w->a[al][ar], k & 1) *
			     emu_bf_half(w->b[bl][k >= 8], k & 1);
		}
		c[e] += s;
	}
	emu_wait(EMU_WAIT_WARP);
}

#endif /* KT_SELFTESTS_CUDA_EMU_H */
