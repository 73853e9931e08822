// SPDX-License-Identifier: MIT
/*
 * ffn.cu - the expert FFN on the GPU, in kt's device layout (gpu/layout.h):
 * weight-streaming GEMV kernels for decode, bf16 tensor-core (mma.sync)
 * tiles for prefill, the per-token reduction, and two limit probes.
 */
#include <stdint.h>
#ifndef KT_CUDA_EMU	/* selftests/gpu/cuda-emu.h runs this file on the host */
#include <cuda_bf16.h>
#endif

#include "gpu/ffn-abi.h"
#include "gpu/layout.h"

#define WARPS		8	/* GEMV: warps per block, one output row each */
#define MSLOTS		4	/* GEMV: slots sharing one pass over a row */

__device__ __forceinline__ float silu(float g)
{
	return g / (1.0f + __expf(-g));
}

__device__ __forceinline__ float bf16f(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/*
 * Weights of one quantization: V elements per lane per step (16 bytes),
 * raw values in w[], the factor of this vector in *s (INT4 groups), the
 * factor of the whole row from row_scale() (INT8).
 */
template <int Q> struct wq;

template <> struct wq<GPU_Q_INT8> {
	static constexpr int V = 16;
	static __device__ __forceinline__ const uint8_t *row(uint64_t base,
		int r, int K) { return (const uint8_t *)base + (size_t)r * K; }
	static __device__ __forceinline__ void load(const uint8_t *row,
		uint64_t sc, int r, int K, int G, int k, float *w, float *s)
	{
		uint4 v = __ldg((const uint4 *)(row + k));
		const int8_t *b = (const int8_t *)&v;

#pragma unroll
		for (int i = 0; i < 16; i++)
			w[i] = (float)b[i];
		*s = 1.0f;
	}
	static __device__ __forceinline__ float row_scale(uint64_t sc, int r)
	{ return __ldg((const float *)sc + r); }
};

template <> struct wq<GPU_Q_INT4> {
	static constexpr int V = 32;
	static __device__ __forceinline__ const uint8_t *row(uint64_t base,
		int r, int K) { return (const uint8_t *)base + (size_t)r * K / 2; }
	static __device__ __forceinline__ void load(const uint8_t *row,
		uint64_t sc, int r, int K, int G, int k, float *w, float *s)
	{
		uint4 v = __ldg((const uint4 *)(row + k / 2));
		const uint8_t *b = (const uint8_t *)&v;

#pragma unroll
		for (int i = 0; i < 16; i++) {
			w[2 * i] = (float)((int)(b[i] & 15) - 8);
			w[2 * i + 1] = (float)((int)(b[i] >> 4) - 8);
		}
		*s = __ldg((const float *)sc + (size_t)r * (K / G) + k / G);
	}
	static __device__ __forceinline__ float row_scale(uint64_t sc, int r)
	{ return 1.0f; }
};

template <> struct wq<GPU_Q_BF16> {
	static constexpr int V = 8;
	static __device__ __forceinline__ const uint8_t *row(uint64_t base,
		int r, int K) { return (const uint8_t *)base + (size_t)r * K * 2; }
	static __device__ __forceinline__ void load(const uint8_t *row,
		uint64_t sc, int r, int K, int G, int k, float *w, float *s)
	{
		uint4 v = __ldg((const uint4 *)(row + (size_t)k * 2));
		const uint16_t *h = (const uint16_t *)&v;

#pragma unroll
		for (int i = 0; i < 8; i++)
			w[i] = bf16f(h[i]);
		*s = 1.0f;
	}
	static __device__ __forceinline__ float row_scale(uint64_t sc, int r)
	{ return 1.0f; }
};

/* n activations (n a multiple of 8) of row @p from @k, f32 or bf16. */
__device__ __forceinline__ void load_act(const void *p, bool bf16, size_t k,
					 int n, float *out)
{
	if (bf16) {
		for (int i = 0; i < n; i += 8) {
			uint4 v = __ldg((const uint4 *)((const uint16_t *)p +
							k + i));
			const uint16_t *h = (const uint16_t *)&v;

#pragma unroll
			for (int j = 0; j < 8; j++)
				out[i + j] = bf16f(h[j]);
		}
	} else {
		for (int i = 0; i < n; i += 4) {
			float4 v = __ldg((const float4 *)((const float *)p +
							  k + i));

			out[i] = v.x;
			out[i + 1] = v.y;
			out[i + 2] = v.z;
			out[i + 3] = v.w;
		}
	}
}

/*
 * Decode gate+up: a warp streams one row of gate and of up (K = H) once
 * for up to MSLOTS slots. grid (I / WARPS, n_groups).
 */
template <int Q>
__device__ void gu_gemv(const struct gpu_ffn_args &a)
{
	typedef wq<Q> W;
	const struct gpu_group *g = (const struct gpu_group *)a.groups +
				    blockIdx.y;
	int lane = threadIdx.x & 31;
	int r = blockIdx.x * WARPS + (threadIdx.x >> 5);
	int K = a.H;
	const uint8_t *gr, *ur;

	if (r >= (int)a.I)
		return;
	gr = W::row(g->w[0], r, K);
	ur = W::row(g->w[1], r, K);
	for (uint32_t s0 = 0; s0 < g->m; s0 += MSLOTS) {
		int ns = g->m - s0 < MSLOTS ? g->m - s0 : MSLOTS;
		float ag[MSLOTS] = { 0 }, au[MSLOTS] = { 0 };
		const char *xr[MSLOTS];

		for (int i = 0; i < ns; i++) {
			int tok = ((const int *)a.slot_tok)[g->slot0 + s0 + i];

			xr[i] = (const char *)a.x + (size_t)tok * K *
				(a.x_bf16 ? 2 : 4);
		}
		for (int k = lane * W::V; k < K; k += 32 * W::V) {
			float wg[W::V], wu[W::V], sg, su, xv[W::V];

			W::load(gr, g->s[0], r, K, a.group, k, wg, &sg);
			W::load(ur, g->s[1], r, K, a.group, k, wu, &su);
			for (int i = 0; i < ns; i++) {
				float dg = 0, du = 0;

				load_act(xr[i], a.x_bf16, k, W::V, xv);
#pragma unroll
				for (int j = 0; j < W::V; j++) {
					dg += wg[j] * xv[j];
					du += wu[j] * xv[j];
				}
				ag[i] += dg * sg;
				au[i] += du * su;
			}
		}
		for (int i = 0; i < ns; i++) {
			float gs = warp_sum(ag[i]) * W::row_scale(g->s[0], r);
			float us = warp_sum(au[i]) * W::row_scale(g->s[1], r);

			if (!lane)
				((float *)a.a)[(size_t)(g->slot0 + s0 + i) * a.I + r] =
					silu(gs) * us;
		}
	}
}

/* Decode down: a warp streams one row of down (K = I). grid (H / WARPS, n_groups). */
template <int Q>
__device__ void down_gemv(const struct gpu_ffn_args &a)
{
	typedef wq<Q> W;
	const struct gpu_group *g = (const struct gpu_group *)a.groups +
				    blockIdx.y;
	int lane = threadIdx.x & 31;
	int r = blockIdx.x * WARPS + (threadIdx.x >> 5);
	int K = a.I;
	const uint8_t *dr;

	if (r >= (int)a.H)
		return;
	dr = W::row(g->w[2], r, K);
	for (uint32_t s0 = 0; s0 < g->m; s0 += MSLOTS) {
		int ns = g->m - s0 < MSLOTS ? g->m - s0 : MSLOTS;
		float acc[MSLOTS] = { 0 };

		for (int k = lane * W::V; k < K; k += 32 * W::V) {
			float wd[W::V], sd, av[W::V];

			W::load(dr, g->s[2], r, K, a.group, k, wd, &sd);
			for (int i = 0; i < ns; i++) {
				float d = 0;

				load_act((const float *)a.a +
					 (size_t)(g->slot0 + s0 + i) * K, false,
					 k, W::V, av);
#pragma unroll
				for (int j = 0; j < W::V; j++)
					d += wd[j] * av[j];
				acc[i] += d * sd;
			}
		}
		for (int i = 0; i < ns; i++) {
			float v = warp_sum(acc[i]) * W::row_scale(g->s[2], r);
			uint32_t slot = g->slot0 + s0 + i;

			if (!lane)
				((float *)a.ypart)[(size_t)slot * a.H + r] =
					v * ((const float *)a.slot_w)[slot];
		}
	}
}

/* ---- prefill: bf16 mma.sync m16n8k16 tiles --------------------------------- */

#define BM	64
#define BN	64
#define BK	32
#define SK	(BK + 8)	/* shared row pitch: spreads the banks */

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *(uint32_t *)&v;
}

__device__ __forceinline__ void mma16816(float *c, const uint32_t *a,
					 uint32_t b0, uint32_t b1)
{
#ifdef KT_CUDA_EMU
	emu_mma16816(c, a, b0, b1);
#else
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
		       "r"(b0), "r"(b1));
#endif
}

/* 16 weights of row @n from @k into shared, as bf16 (INT8 exact). */
template <int Q>
__device__ __forceinline__ void tile_w(uint16_t *dst, uint64_t base,
				       uint64_t sc, int n, int K, int G, int k)
{
	uint32_t *d = (uint32_t *)dst;

	if (Q == GPU_Q_BF16) {
		const uint4 *p = (const uint4 *)((const uint16_t *)base +
						 (size_t)n * K + k);
		uint4 v0 = __ldg(p), v1 = __ldg(p + 1);

		d[0] = v0.x; d[1] = v0.y; d[2] = v0.z; d[3] = v0.w;
		d[4] = v1.x; d[5] = v1.y; d[6] = v1.z; d[7] = v1.w;
	} else if (Q == GPU_Q_INT8) {
		uint4 v = __ldg((const uint4 *)((const int8_t *)base +
						(size_t)n * K + k));
		const int8_t *b = (const int8_t *)&v;

#pragma unroll
		for (int i = 0; i < 8; i++)
			d[i] = pack_bf16(b[2 * i], b[2 * i + 1]);
	} else {
		uint2 v = __ldg((const uint2 *)((const uint8_t *)base +
						((size_t)n * K + k) / 2));
		const uint8_t *b = (const uint8_t *)&v;
		float s = __ldg((const float *)sc + (size_t)n * (K / G) + k / G);

#pragma unroll
		for (int i = 0; i < 8; i++)
			d[i] = pack_bf16(((int)(b[i] & 15) - 8) * s,
					 ((int)(b[i] >> 4) - 8) * s);
	}
}

/*
 * One BM x BN tile of out[slot][n] = sum_k act[slot][k] * W[n][k] for one
 * group, gate and up at once (DOWN false) or down. 128 threads: 2 x 2
 * warps of 32 x 32. grid (N / BN, ceil(max m / BM), n_groups).
 */
template <int Q, bool DOWN>
__device__ void ffn_mma(const struct gpu_ffn_args &a)
{
	__shared__ __align__(16) uint16_t As[BM][SK];
	__shared__ __align__(16) uint16_t Bs[2][BN][SK];
	const struct gpu_group *g = (const struct gpu_group *)a.groups +
				    blockIdx.z;
	int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
	int K = DOWN ? a.I : a.H, N = DOWN ? a.H : a.I;
	int t = threadIdx.x, warp = t >> 5, lane = t & 31;
	int wm = warp >> 1, wn = warp & 1, gq = lane >> 2, tq = lane & 3;
	int lr = t >> 1, lh = (t & 1) * 16;	/* the row and half this thread loads */
	const int nb = DOWN ? 1 : 2;
	float acc[2][2][4][4] = { };	/* [matrix][mi][ni][c] */
	const void *arow = 0;
	bool abf16 = DOWN ? false : a.x_bf16;

	if (m0 >= (int)g->m)
		return;
	if (m0 + lr < (int)g->m) {
		uint32_t slot = g->slot0 + m0 + lr;

		if (DOWN)
			arow = (const float *)a.a + (size_t)slot * a.I;
		else
			arow = (const char *)a.x + (size_t)
				((const int *)a.slot_tok)[slot] * a.H *
				(abf16 ? 2 : 4);
	}
	for (int k0 = 0; k0 < K; k0 += BK) {
		float av[16];
		uint32_t *ad = (uint32_t *)&As[lr][lh];

		if (arow) {
			load_act(arow, abf16, k0 + lh, 16, av);
#pragma unroll
			for (int i = 0; i < 8; i++)
				ad[i] = pack_bf16(av[2 * i], av[2 * i + 1]);
		} else {
#pragma unroll
			for (int i = 0; i < 8; i++)
				ad[i] = 0;
		}
		for (int b = 0; b < nb; b++) {
			int mat = DOWN ? 2 : b;

			tile_w<Q>(&Bs[b][lr][lh], g->w[mat], g->s[mat],
				  n0 + lr, K, a.group, k0 + lh);
		}
		__syncthreads();
#pragma unroll
		for (int ks = 0; ks < BK; ks += 16) {
			uint32_t af[2][4];

#pragma unroll
			for (int mi = 0; mi < 2; mi++) {
				int r = wm * 32 + mi * 16 + gq, c = ks + tq * 2;

				af[mi][0] = *(const uint32_t *)&As[r][c];
				af[mi][1] = *(const uint32_t *)&As[r + 8][c];
				af[mi][2] = *(const uint32_t *)&As[r][c + 8];
				af[mi][3] = *(const uint32_t *)&As[r + 8][c + 8];
			}
			for (int b = 0; b < nb; b++) {
#pragma unroll
				for (int ni = 0; ni < 4; ni++) {
					int n = wn * 32 + ni * 8 + gq;
					int c = ks + tq * 2;
					uint32_t b0 = *(const uint32_t *)&Bs[b][n][c];
					uint32_t b1 = *(const uint32_t *)&Bs[b][n][c + 8];

					mma16816(acc[b][0][ni], af[0], b0, b1);
					mma16816(acc[b][1][ni], af[1], b0, b1);
				}
			}
		}
		__syncthreads();
	}
#pragma unroll
	for (int mi = 0; mi < 2; mi++) {
#pragma unroll
		for (int ni = 0; ni < 4; ni++) {
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int row = m0 + wm * 32 + mi * 16 + gq + (e >> 1) * 8;
				int n = n0 + wn * 32 + ni * 8 + tq * 2 + (e & 1);
				uint32_t slot = g->slot0 + row;

				if (row >= (int)g->m || n >= N)
					continue;
				if (DOWN) {
					float v = acc[0][mi][ni][e];

					if (Q == GPU_Q_INT8)
						v *= __ldg((const float *)g->s[2] + n);
					((float *)a.ypart)[(size_t)slot * a.H + n] =
						v * ((const float *)a.slot_w)[slot];
				} else {
					float gv = acc[0][mi][ni][e];
					float uv = acc[1][mi][ni][e];

					if (Q == GPU_Q_INT8) {
						gv *= __ldg((const float *)g->s[0] + n);
						uv *= __ldg((const float *)g->s[1] + n);
					}
					((float *)a.a)[(size_t)slot * a.I + n] =
						silu(gv) * uv;
				}
			}
		}
	}
}

#define ENTRY(name, body)						\
	extern "C" __global__ void name(const struct gpu_ffn_args a)	\
	{ body; }

ENTRY(kt_gu_gemv_int8, gu_gemv<GPU_Q_INT8>(a))
ENTRY(kt_gu_gemv_int4, gu_gemv<GPU_Q_INT4>(a))
ENTRY(kt_gu_gemv_bf16, gu_gemv<GPU_Q_BF16>(a))
ENTRY(kt_down_gemv_int8, down_gemv<GPU_Q_INT8>(a))
ENTRY(kt_down_gemv_int4, down_gemv<GPU_Q_INT4>(a))
ENTRY(kt_down_gemv_bf16, down_gemv<GPU_Q_BF16>(a))

#define ENTRY_MMA(name, body)						\
	extern "C" __global__ void __launch_bounds__(128)		\
	name(const struct gpu_ffn_args a) { body; }

ENTRY_MMA(kt_gu_mma_int8, (ffn_mma<GPU_Q_INT8, false>(a)))
ENTRY_MMA(kt_gu_mma_int4, (ffn_mma<GPU_Q_INT4, false>(a)))
ENTRY_MMA(kt_gu_mma_bf16, (ffn_mma<GPU_Q_BF16, false>(a)))
ENTRY_MMA(kt_down_mma_int8, (ffn_mma<GPU_Q_INT8, true>(a)))
ENTRY_MMA(kt_down_mma_int4, (ffn_mma<GPU_Q_INT4, true>(a)))
ENTRY_MMA(kt_down_mma_bf16, (ffn_mma<GPU_Q_BF16, true>(a)))

/*
 * y[t][h] = sum of the token's slots' ypart rows, in slot order (so the
 * result does not depend on scheduling). grid (ceil(H / 256), tokens).
 */
extern "C" __global__ void kt_reduce(const struct gpu_ffn_args a)
{
	uint32_t t = blockIdx.y, h = blockIdx.x * 256 + threadIdx.x;
	float s = 0;

	if (h >= a.H)
		return;
	for (uint32_t j = 0; j < a.top_k; j++) {
		int slot = ((const int *)a.tok_slot)[(size_t)t * a.top_k + j];

		if (slot >= 0)
			s += ((const float *)a.ypart)[(size_t)slot * a.H + h];
	}
	((float *)a.y)[(size_t)t * a.H + h] = s;
}

/* The sum of a mixed op on the device (struct gpu_combine_args). */
extern "C" __global__ void kt_combine(const struct gpu_combine_args c)
{
	uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
	uint32_t n = c.count ? *(const uint32_t *)c.count * c.H : c.n;
	float v;

	if (i >= n || i >= c.n)
		return;
	v = (c.ya ? ((const float *)c.ya)[i] : 0.0f) +
	    (c.yb ? ((const float *)c.yb)[i] : 0.0f);
	if (c.y_bf16) {
		__nv_bfloat16 *y = (__nv_bfloat16 *)c.y;

		if (c.acc)
			v += __bfloat162float(y[i]);
		y[i] = __float2bfloat16_rn(v);
	} else {
		float *y = (float *)c.y;

		y[i] = c.acc ? y[i] + v : v;
	}
}

/*
 * Dense bf16 tensor rate: every warp issues @iters rounds of 8 independent
 * mma from registers; out[] keeps the compiler from dropping them.
 */
extern "C" __global__ void kt_mma_peak(float *out, int iters)
{
	float c[8][4] = { };
	uint32_t a[4], b0 = threadIdx.x, b1 = threadIdx.x * 3u;

	for (int i = 0; i < 4; i++)
		a[i] = threadIdx.x * 0x00010001u + i;
	for (int it = 0; it < iters; it++) {
#pragma unroll
		for (int j = 0; j < 8; j++)
			mma16816(c[j], a, b0, b1);
	}
	float s = 0;

	for (int j = 0; j < 8; j++)
		s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
	out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

/* HBM read rate: a grid-stride sum of @n uint4 of @p. */
extern "C" __global__ void kt_read_bw(const uint4 *p, size_t n, uint32_t *out)
{
	uint32_t s = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint4 v = __ldg(p + i);

		s ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
