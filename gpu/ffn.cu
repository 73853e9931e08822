// SPDX-License-Identifier: MIT
/*
 * ffn.cu - the expert FFN on the GPU, in kt's device layout (gpu/layout.h):
 * weight-streaming kernels for decode and tiles for prefill, both on the
 * bf16 tensor cores (mma.sync), the per-token reduction, and two limit
 * probes.
 */
#include <stdint.h>
#ifndef KT_CUDA_EMU	/* selftests/gpu/cuda-emu.h runs this file on the host */
#include <cuda_bf16.h>
#endif

#include "gpu/ffn-abi.h"
#include "gpu/layout.h"

#define MV_SPLIT	2	/* decode: warps per block, each a share of K of the same 16 rows */
#define MV_UNROLL	4	/* decode: 16-byte vectors per row a lane has in flight */

__device__ __forceinline__ float silu(float g)
{
	return g / (1.0f + __expf(-g));
}

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

/*
 * Decode on the tensor cores. A warp owns 16 rows of each matrix it
 * streams (the mma's M) and the group's slots, 8 per mma, are its N; a
 * lane of quad tq reads 16 bytes of rows gq and gq + 8 per step, so four
 * lanes cover 64 contiguous bytes of a row. The dot product does not care
 * in which order k is summed: the mma's k positions of a lane are the
 * consecutive k of its vector, and the activations are read at the same
 * k, so no shuffling is needed on either side.
 */
template <int Q> struct mv;

/* bf16: 8 k per vector, the weights are the mma's words as they come */
template <> struct mv<GPU_Q_BF16> {
	static constexpr int KV = 8, W = 4;
	static __device__ __forceinline__ size_t row_bytes(int K)
	{ return (size_t)K * 2; }
	static __device__ __forceinline__ void cvt(uint4 v, float s, uint32_t *w)
	{ w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w; }
	static __device__ __forceinline__ float row_scale(uint64_t sc, int r)
	{ return 1.0f; }
	static __device__ __forceinline__ float vec_scale(uint64_t sc, int r,
		int K, int G, int k) { return 1.0f; }
};

/*
 * int8 -> f32 exactly without the quarter-rate I2F: the biased byte goes
 * under the exponent of 2^23, and 2^23 + 128 comes off again.
 */
__device__ __forceinline__ float i8f(uint32_t biased, int j)
{
	return __uint_as_float(__byte_perm(biased, 0x4b000000u, 0x7540 | j)) -
	       8388736.0f;
}

/* int8: 16 k per vector, exact in bf16; the row scale comes after the sum */
template <> struct mv<GPU_Q_INT8> {
	static constexpr int KV = 16, W = 8;
	static __device__ __forceinline__ size_t row_bytes(int K)
	{ return (size_t)K; }
	static __device__ __forceinline__ void cvt(uint4 v, float s, uint32_t *w)
	{
		uint32_t c[4] = { v.x, v.y, v.z, v.w };

#pragma unroll
		for (int i = 0; i < 4; i++) {
			uint32_t b = c[i] ^ 0x80808080u;

			w[2 * i] = pack_bf16(i8f(b, 0), i8f(b, 1));
			w[2 * i + 1] = pack_bf16(i8f(b, 2), i8f(b, 3));
		}
	}
	static __device__ __forceinline__ float row_scale(uint64_t sc, int r)
	{ return __ldg((const float *)sc + r); }
	static __device__ __forceinline__ float vec_scale(uint64_t sc, int r,
		int K, int G, int k) { return 1.0f; }
};

/*
 * int4: 32 k per vector, all in one group (G >= 32 and aligned), so the
 * group scale is applied to the weights before they round to bf16, as
 * the prefill tiles do. A nibble under the exponent of 2^23 gives 2^23 + q.
 */
template <> struct mv<GPU_Q_INT4> {
	static constexpr int KV = 32, W = 16;
	static __device__ __forceinline__ size_t row_bytes(int K)
	{ return (size_t)K / 2; }
	static __device__ __forceinline__ void cvt(uint4 v, float s, uint32_t *w)
	{
		uint32_t c[4] = { v.x, v.y, v.z, v.w };

#pragma unroll
		for (int i = 0; i < 4; i++) {
#pragma unroll
			for (int j = 0; j < 4; j++) {
				uint32_t b = c[i] >> (8 * j);
				float lo = __uint_as_float(0x4b000000u | (b & 15)) -
					   8388616.0f;
				float hi = __uint_as_float(0x4b000000u |
							   ((b >> 4) & 15)) -
					   8388616.0f;

				w[4 * i + j] = pack_bf16(lo * s, hi * s);
			}
		}
	}
	static __device__ __forceinline__ float row_scale(uint64_t sc, int r)
	{ return 1.0f; }
	static __device__ __forceinline__ float vec_scale(uint64_t sc, int r,
		int K, int G, int k)
	{ return __ldg((const float *)sc + (size_t)r * (K / G) + k / G); }
};

/* @n (a multiple of 8) activations of row @p from @k as bf16 pairs; zeros
 * for a slot past the group's end (@p NULL). */
__device__ __forceinline__ void act_words(const void *p, bool bf16, size_t k,
					  int n, uint32_t *w)
{
	for (int i = 0; i < n; i += 8) {
		uint32_t *o = w + i / 2;

		if (!p) {
			o[0] = o[1] = o[2] = o[3] = 0;
		} else if (bf16) {
			uint4 v = __ldg((const uint4 *)((const uint16_t *)p +
							k + i));

			o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
		} else {
			const float4 *f = (const float4 *)((const float *)p +
							   k + i);
			float4 a = __ldg(f), b = __ldg(f + 1);

			o[0] = pack_bf16(a.x, a.y);
			o[1] = pack_bf16(a.z, a.w);
			o[2] = pack_bf16(b.x, b.y);
			o[3] = pack_bf16(b.z, b.w);
		}
	}
}

/*
 * acc (rows gq, gq + 8 x slots 2tq, 2tq + 1) += one vector of rows lo and
 * hi times the activations @x at the same k: W / 2 mma of k 16.
 */
template <int Q>
__device__ __forceinline__ void mv_mma(float *acc, uint4 lo, uint4 hi,
				       float slo, float shi, const uint32_t *x)
{
	uint32_t wl[mv<Q>::W], wh[mv<Q>::W];

	mv<Q>::cvt(lo, slo, wl);
	mv<Q>::cvt(hi, shi, wh);
#pragma unroll
	for (int i = 0; i < mv<Q>::W; i += 2) {
		uint32_t a[4] = { wl[i], wh[i], wl[i + 1], wh[i + 1] };

		mma16816(acc, a, x[i], x[i + 1]);
	}
}

/*
 * One warp's pass over 16 rows of NM matrices (gate and up, or down) for
 * up to 8 slots from @s0: acc[m] gets rows (gq, gq + 8) x slots (2tq,
 * 2tq + 1) of matrix m. @xrow: this lane's slot's activations (slot s0 +
 * gq), NULL past the group's end.
 */
template <int Q, int NM>
__device__ __forceinline__ void mv_pass(const uint8_t *const *wrow,
					const uint64_t *sc, int r, int K, int G,
					const void *xrow, bool xbf16,
					float (*acc)[4])
{
	typedef mv<Q> M;
	constexpr int U = Q == GPU_Q_INT4 ? MV_UNROLL / 2 : MV_UNROLL;
	int lane = threadIdx.x & 31, tq = lane & 3, w = threadIdx.x >> 5;
	int steps = (int)(M::row_bytes(K) / 64);
	/* this warp's share of the row's 64-byte steps */
	int st1 = steps * (w + 1) / MV_SPLIT;
	size_t hi_off = 8 * M::row_bytes(K);

	for (int st = steps * w / MV_SPLIT; st < st1; st += U) {
		uint4 lo[U][NM], hi[U][NM];

#pragma unroll
		for (int u = 0; u < U; u++) {
			if (st + u >= st1)
				break;
#pragma unroll
			for (int m = 0; m < NM; m++) {
				const uint4 *p = (const uint4 *)wrow[m] +
						 (st + u) * 4 + tq;

				lo[u][m] = __ldcs(p);
				hi[u][m] = __ldcs((const uint4 *)((const uint8_t *)p +
								  hi_off));
			}
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			int k = ((st + u) * 4 + tq) * M::KV;
			uint32_t x[M::W];

			if (st + u >= st1)
				break;
			act_words(xrow, xbf16, k, M::KV, x);
#pragma unroll
			for (int m = 0; m < NM; m++)
				mv_mma<Q>(acc[m], lo[u][m], hi[u][m],
					  M::vec_scale(sc[m], r, K, G, k),
					  M::vec_scale(sc[m], r + 8, K, G, k),
					  x);
		}
	}
}

/*
 * The MV_SPLIT warps' shares of K summed into warp 0's acc, in warp order
 * (through shared memory). True on warp 0, which goes on to the epilogue.
 */
template <int NM>
__device__ __forceinline__ bool mv_reduce(float (*acc)[4])
{
	__shared__ float part[MV_SPLIT - 1][NM][4][32];
	int w = threadIdx.x >> 5, lane = threadIdx.x & 31;

	if (w)
		for (int m = 0; m < NM; m++)
			for (int e = 0; e < 4; e++)
				part[w - 1][m][e][lane] = acc[m][e];
	__syncthreads();
	if (!w)
		for (int j = 0; j < MV_SPLIT - 1; j++)
			for (int m = 0; m < NM; m++)
				for (int e = 0; e < 4; e++)
					acc[m][e] += part[j][m][e][lane];
	/* part is written again by the next pass of slots */
	__syncthreads();
	return !w;
}

/*
 * Decode gate+up: a = silu(gate . x) * (up . x) for each slot of the
 * group; a block of MV_SPLIT warps per 16 rows, each warp a share of K.
 * grid (I / 16, n_groups).
 */
template <int Q>
__device__ void gu_gemv(const struct gpu_ffn_args &a)
{
	typedef mv<Q> M;
	const struct gpu_group *g = (const struct gpu_group *)a.groups +
				    blockIdx.y;
	int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
	int r0 = blockIdx.x * 16;
	int K = a.H;
	const uint8_t *w[2];
	uint64_t sc[2] = { g->s[0], g->s[1] };

	if (r0 >= (int)a.I)
		return;
	w[0] = (const uint8_t *)g->w[0] + (size_t)(r0 + gq) * M::row_bytes(K);
	w[1] = (const uint8_t *)g->w[1] + (size_t)(r0 + gq) * M::row_bytes(K);
	for (uint32_t s0 = 0; s0 < g->m; s0 += 8) {
		float acc[2][4] = { };
		const void *xrow = NULL;

		if (s0 + gq < g->m)
			xrow = (const char *)a.x + (size_t)((const int *)
				a.slot_tok)[g->slot0 + s0 + gq] * K *
				(a.x_bf16 ? 2 : 4);
		mv_pass<Q, 2>(w, sc, r0 + gq, K, a.group, xrow, a.x_bf16, acc);
		if (!mv_reduce<2>(acc))
			continue;
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int r = r0 + gq + (e >> 1) * 8;
			uint32_t s = s0 + 2 * tq + (e & 1);
			float gv = acc[0][e] * M::row_scale(sc[0], r);
			float uv = acc[1][e] * M::row_scale(sc[1], r);

			if (s < g->m)
				((float *)a.a)[(size_t)(g->slot0 + s) * a.I + r] =
					silu(gv) * uv;
		}
	}
}

/* Decode down: ypart = w * (down . a), 16 rows per block. grid (H / 16, n_groups). */
template <int Q>
__device__ void down_gemv(const struct gpu_ffn_args &a)
{
	typedef mv<Q> M;
	const struct gpu_group *g = (const struct gpu_group *)a.groups +
				    blockIdx.y;
	int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
	int r0 = blockIdx.x * 16;
	int K = a.I;
	const uint8_t *w[1];
	uint64_t sc[1] = { g->s[2] };

	if (r0 >= (int)a.H)
		return;
	w[0] = (const uint8_t *)g->w[2] + (size_t)(r0 + gq) * M::row_bytes(K);
	for (uint32_t s0 = 0; s0 < g->m; s0 += 8) {
		float acc[1][4] = { };
		const void *arow = NULL;

		if (s0 + gq < g->m)
			arow = (const float *)a.a + (size_t)(g->slot0 + s0 + gq) * K;
		mv_pass<Q, 1>(w, sc, r0 + gq, K, a.group, arow, false, acc);
		if (!mv_reduce<1>(acc))
			continue;
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int r = r0 + gq + (e >> 1) * 8;
			uint32_t s = s0 + 2 * tq + (e & 1);
			uint32_t slot = g->slot0 + s;

			if (s < g->m)
				((float *)a.ypart)[(size_t)slot * a.H + r] =
					acc[0][e] * M::row_scale(sc[0], r) *
					((const float *)a.slot_w)[slot];
		}
	}
}

/* ---- prefill: bf16 mma.sync m16n8k16 tiles --------------------------------- */

#define BM	64
#define BN	64
#define BK	32
#define SK	(BK + 8)	/* shared row pitch: spreads the banks */

/*
 * The global side of one tile row: 16 weights of row @n from @k as they
 * are stored (and the INT4 group's scale), or 16 activations. Loaded a
 * slice ahead and stored to shared (tile_st) after the slice's mma, so
 * the loads' latency overlaps the tensor work.
 */
struct tile_raw {
	uint4 v[4];
	float s;
};

template <int Q>
__device__ __forceinline__ void tile_ld(struct tile_raw *r, uint64_t base,
					uint64_t sc, int n, int K, int G, int k)
{
	if (Q == GPU_Q_BF16) {
		const uint4 *p = (const uint4 *)((const uint16_t *)base +
						 (size_t)n * K + k);

		r->v[0] = __ldcs(p);
		r->v[1] = __ldcs(p + 1);
	} else if (Q == GPU_Q_INT8) {
		r->v[0] = __ldcs((const uint4 *)((const int8_t *)base +
						 (size_t)n * K + k));
	} else {
		uint2 v = __ldcs((const uint2 *)((const uint8_t *)base +
						 ((size_t)n * K + k) / 2));

		r->v[0].x = v.x;
		r->v[0].y = v.y;
		r->s = __ldg((const float *)sc + (size_t)n * (K / G) + k / G);
	}
}

/* 16 weights of tile_ld() into shared as bf16 (INT8 exact). */
template <int Q>
__device__ __forceinline__ void tile_st(uint16_t *dst, const struct tile_raw *r)
{
	uint32_t *d = (uint32_t *)dst;

	if (Q == GPU_Q_BF16) {
		d[0] = r->v[0].x; d[1] = r->v[0].y;
		d[2] = r->v[0].z; d[3] = r->v[0].w;
		d[4] = r->v[1].x; d[5] = r->v[1].y;
		d[6] = r->v[1].z; d[7] = r->v[1].w;
	} else if (Q == GPU_Q_INT8) {
		const int8_t *b = (const int8_t *)&r->v[0];

#pragma unroll
		for (int i = 0; i < 8; i++)
			d[i] = pack_bf16(b[2 * i], b[2 * i + 1]);
	} else {
		const uint8_t *b = (const uint8_t *)&r->v[0];

#pragma unroll
		for (int i = 0; i < 8; i++)
			d[i] = pack_bf16(((int)(b[i] & 15) - 8) * r->s,
					 ((int)(b[i] >> 4) - 8) * r->s);
	}
}

/* 16 activations of row @p from @k (f32 or bf16), zeros without a row */
__device__ __forceinline__ void act_ld(struct tile_raw *r, const void *p,
				       bool bf16, int k)
{
	if (!p) {
		r->v[0] = r->v[1] = r->v[2] = r->v[3] = make_uint4(0, 0, 0, 0);
	} else if (bf16) {
		const uint4 *q = (const uint4 *)((const uint16_t *)p + k);

		r->v[0] = __ldg(q);
		r->v[1] = __ldg(q + 1);
	} else {
		const uint4 *q = (const uint4 *)((const float *)p + k);

#pragma unroll
		for (int i = 0; i < 4; i++)
			r->v[i] = __ldg(q + i);
	}
}

__device__ __forceinline__ void act_st(uint16_t *dst, const struct tile_raw *r,
				       bool bf16)
{
	uint32_t *d = (uint32_t *)dst;

	if (bf16) {
		d[0] = r->v[0].x; d[1] = r->v[0].y;
		d[2] = r->v[0].z; d[3] = r->v[0].w;
		d[4] = r->v[1].x; d[5] = r->v[1].y;
		d[6] = r->v[1].z; d[7] = r->v[1].w;
	} else {
		const float *f = (const float *)r->v;

#pragma unroll
		for (int i = 0; i < 8; i++)
			d[i] = pack_bf16(f[2 * i], f[2 * i + 1]);
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
	struct tile_raw ra, rb[2];

	act_ld(&ra, arow, abf16, lh);
	for (int b = 0; b < nb; b++) {
		int mat = DOWN ? 2 : b;

		tile_ld<Q>(&rb[b], g->w[mat], g->s[mat], n0 + lr, K, a.group, lh);
	}
	for (int k0 = 0; k0 < K; k0 += BK) {
		act_st(&As[lr][lh], &ra, abf16);
		for (int b = 0; b < nb; b++)
			tile_st<Q>(&Bs[b][lr][lh], &rb[b]);
		__syncthreads();
		if (k0 + BK < K) {
			act_ld(&ra, arow, abf16, k0 + BK + lh);
			for (int b = 0; b < nb; b++) {
				int mat = DOWN ? 2 : b;

				tile_ld<Q>(&rb[b], g->w[mat], g->s[mat],
					   n0 + lr, K, a.group, k0 + BK + lh);
			}
		}
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
