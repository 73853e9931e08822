// SPDX-License-Identifier: MIT
/*
 * moe-avx512.c - the AVX-512 variant: vpdpbusd for INT8/INT4, vdpbf16ps for
 * BF16, over the packed tiles (Documentation/packed-layout.md). The AMX
 * variant runs these for experts with few tokens.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/simd.h"
#include "kernels/vexp-avx512.h"

#define AI __attribute__((always_inline)) static inline

/* Tokens held in registers at once: 8 (INT8: 2 x 8 accumulators). */
#define MR		8
/* Prefetch distance along a stream of tiles, in bytes. */
#ifndef PF_DIST
#define PF_DIST		(4 * 1024)
#endif
/* Output rows whose partial sums one down pass keeps in scratch. */
#define DOWN_NSUB	1024

AI int32_t ld32(const void *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

AI __m512i bcast32(const void *p)
{
	return _mm512_set1_epi32(ld32(p));
}

/*
 * Lines of the next weight block to pull into L2 while the current one is
 * reused from cache: @n lines of each non-NULL stream per tile, starting at
 * p[i] + t * n * 64 for tile t. With ~32 tokens per expert (prefill, top-k
 * routing) a block gets only a few token passes; the first pass streams
 * from DRAM at 8 tokens per line, faster than one core's share of the
 * bandwidth, so it stalls unless the previous block's later passes fetched
 * it. Prefetches only move data: results are unchanged.
 */
struct l2pf {
	const uint8_t *p[2];
	unsigned int n;
};

AI void l2pf_tile(const struct l2pf pf, unsigned int t)
{
	unsigned int i, s;

	for (s = 0; s < 2; s++)
		if (pf.p[s])
			for (i = 0; i < pf.n; i++)
				_mm_prefetch((const char *)pf.p[s] +
					     ((size_t)t * pf.n + i) * 64,
					     _MM_HINT_T1);
}

/*
 * The share of pass @pass (of @passes over the current block) of the next
 * block's @lines lines at @g / @u (NULL: none), spread over @nt tiles.
 * Pass 0 streams the current block and prefetches nothing more.
 */
AI struct l2pf l2pf_share(const uint8_t *g, const uint8_t *u,
			  unsigned int lines, unsigned int nt,
			  unsigned int pass, unsigned int passes)
{
	struct l2pf pf = { { NULL, NULL }, 0 };
	unsigned int share;

	if (pass == 0 || passes < 2 || !nt)
		return pf;
	share = (lines + passes - 2) / (passes - 1);
	pf.n = (share + nt - 1) / nt;
	pf.p[0] = g ? g + (size_t)(pass - 1) * share * 64 : NULL;
	pf.p[1] = u ? u + (size_t)(pass - 1) * share * 64 : NULL;
	return pf;
}

/* ---- activation rows ------------------------------------------------------
 * INT8/INT4: K int8 values q = rint(x * 127 / amax), the f32 scale
 * amax / 127, then int32 sums of q: over the row (INT8) or each group
 * (INT4). The kernels feed weights as the unsigned operand (w + 128, or the
 * nibble q + 8) and take 128 or 8 times the sum back.
 * BF16: K bf16 values (round to nearest even).
 */
static size_t act_row_bytes_q(unsigned int K, unsigned int group)
{
	size_t b = (size_t)K + 4 + 4 * (size_t)(group ? K / group : 1);

	return (b + 63) & ~(size_t)63;
}

size_t kern_act_row_bytes_int8_avx512(unsigned int K, unsigned int group)
{
	return act_row_bytes_q(K, 0);
}

size_t kern_act_row_bytes_int4_avx512(unsigned int K, unsigned int group)
{
	return act_row_bytes_q(K, group);
}

size_t kern_act_row_bytes_bf16_avx512(unsigned int K, unsigned int group)
{
	return ((size_t)K * 2 + 63) & ~(size_t)63;
}

AI __m512 load_src16(const uint8_t *s, enum kt_dtype dtype, unsigned int k)
{
	if (dtype == KT_DTYPE_BF16)
		return _mm512_castsi512_ps(_mm512_slli_epi32(
			_mm512_cvtepu16_epi32(_mm256_loadu_si256(
				(const void *)(s + 2 * (size_t)k))), 16));
	return _mm512_loadu_ps(s + 4 * (size_t)k);
}

static void act_prepare_q(const void *src, size_t src_stride,
			  enum kt_dtype dtype, unsigned int rows,
			  unsigned int K, unsigned int group, uint8_t *dst,
			  size_t dst_stride)
{
	unsigned int r, k;

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint8_t *d = dst + r * dst_stride;
		__m512 vmax = _mm512_setzero_ps(), vinv;
		float amax, inv, scale;

		for (k = 0; k < K; k += 16)
			vmax = _mm512_max_ps(vmax,
				_mm512_abs_ps(load_src16(s, dtype, k)));
		amax = _mm512_reduce_max_ps(vmax);
		inv = amax > 0.0f ? 127.0f / amax : 0.0f;
		scale = amax / 127.0f;
		vinv = _mm512_set1_ps(inv);
		for (k = 0; k < K; k += 16) {
			/* cvtps rounds to nearest even, as rintf() does */
			__m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(
					load_src16(s, dtype, k), vinv));

			_mm_storeu_si128((void *)(d + k),
					 _mm512_cvtsepi32_epi8(q));
		}
		memcpy(d + K, &scale, sizeof(scale));
		{
			/* sums of q per group (INT4) or over the row (INT8) */
			unsigned int G = group ? group : K, g;
			int32_t *gs = (int32_t *)(d + K + 4);

			for (g = 0; g < K / G; g++) {
				__m512i acc = _mm512_setzero_si512();

				for (k = 0; k < G; k += 16)
					acc = _mm512_add_epi32(acc,
						_mm512_cvtepi8_epi32(
						_mm_loadu_si128((const void *)
						(d + g * G + k))));
				gs[g] = _mm512_reduce_add_epi32(acc);
			}
		}
	}
}

void kern_act_prepare_int8_avx512(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	act_prepare_q(src, src_stride, dtype, rows, K, 0, dst, dst_stride);
}

void kern_act_prepare_int4_avx512(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	act_prepare_q(src, src_stride, dtype, rows, K, group, dst,
		      dst_stride);
}

void kern_act_prepare_bf16_avx512(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	unsigned int r, k;

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint8_t *d = dst + r * dst_stride;

		if (dtype == KT_DTYPE_BF16) {
			memcpy(d, s, (size_t)K * 2);
			continue;
		}
		for (k = 0; k < K; k += 32) {
			/* vcvtne2ps2bf16 rounds to nearest even; NaN inputs
			 * are not expected in activations */
			__m512bh h = _mm512_cvtne2ps_pbh(
				_mm512_loadu_ps(s + 4 * (size_t)(k + 16)),
				_mm512_loadu_ps(s + 4 * (size_t)k));

			_mm512_storeu_si512(d + 2 * (size_t)k, (__m512i)h);
		}
	}
}

AI float act_scale(const uint8_t *row, unsigned int K)
{
	float s;

	memcpy(&s, row + K, sizeof(s));
	return s;
}

/* ---- micro-kernels ----------------------------------------------------------
 * One block of 16 output rows, M tokens (a compile-time constant after
 * inlining), a run of nt consecutive tiles. Every weight line (64 bytes) is
 * loaded once and used by all M tokens; two accumulator chains (even and
 * odd lines) hide the dot-product latency when M is small.
 */

/*
 * INT8, one matrix or (@two) two at once: gate and up of the same rows.
 * vpdpbusd multiplies unsigned by signed bytes: each weight line is flipped
 * once to u8 (w + 128, an XOR shared by all tokens) and the s8 activations
 * come straight from memory as the broadcast operand; 128 * sum(x) of the
 * run, kept in the activation row (@xsum), is taken back at the end.
 */
AI void mk_i8(const uint8_t *gw, const uint8_t *uw, const int two,
	      unsigned int nt, const uint8_t *const *x,
	      const int32_t *const *xsum, const int M, __m512i *og,
	      __m512i *ou, const struct l2pf pf)
{
	const int CH = M <= 3 ? 2 : 1;
	const __m512i flip = _mm512_set1_epi8((char)0x80);
	__m512i ag[2][MR], au[2][MR];
	unsigned int t;
	int m, c, j;

#pragma GCC unroll 16
	for (c = 0; c < CH; c++)
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			ag[c][m] = au[c][m] = _mm512_setzero_si512();
	for (t = 0; t < nt; t++) {
		const uint8_t *tg = gw + (size_t)t * 1024;
		const uint8_t *tu = two ? uw + (size_t)t * 1024 : NULL;

		l2pf_tile(pf, t);
#pragma GCC unroll 16
		for (j = 0; j < 16; j++) {
			const int s = CH == 2 ? (j & 1) : 0;
			__m512i wg = _mm512_xor_si512(flip,
					_mm512_loadu_si512(tg + j * 64));
			__m512i wu = wg;

			_mm_prefetch((const char *)tg + PF_DIST + j * 64,
				     _MM_HINT_T0);
			if (two) {
				wu = _mm512_xor_si512(flip,
					_mm512_loadu_si512(tu + j * 64));
				_mm_prefetch((const char *)tu + PF_DIST +
					     j * 64, _MM_HINT_T0);
			}
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m512i xb = bcast32(x[m] + t * 64 + j * 4);

				ag[s][m] = _mm512_dpbusd_epi32(ag[s][m], wg,
							       xb);
				if (two)
					au[s][m] = _mm512_dpbusd_epi32(
						au[s][m], wu, xb);
			}
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		__m512i corr = _mm512_set1_epi32(128 * xsum[m][0]);

		if (CH == 2) {
			ag[0][m] = _mm512_add_epi32(ag[0][m], ag[1][m]);
			au[0][m] = _mm512_add_epi32(au[0][m], au[1][m]);
		}
		og[m] = _mm512_sub_epi32(ag[0][m], corr);
		if (two)
			ou[m] = _mm512_sub_epi32(au[0][m], corr);
	}
}

/*
 * INT4, one matrix: nibbles (q + 8) are the unsigned operand, activations
 * the signed one; a group's dot is sum((q + 8) x) - 8 * sum(x). Group g of
 * the run has its 16 scales at ws + g * ws_stride. Returns the f32 sum
 * over the run of dot * scale, per token.
 */
AI void mk_i4(const uint8_t *w, unsigned int nt, const uint8_t *const *x,
	      const int32_t *const *gs, const float *ws, size_t ws_stride,
	      unsigned int G, const int M, __m512 *out, const struct l2pf pf)
{
	const __m512i lo4 = _mm512_set1_epi8(0x0f);
	__m512i al[MR], ah[MR];
	__m512 f[MR];
	unsigned int t;
	int m, j;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		al[m] = ah[m] = _mm512_setzero_si512();
		f[m] = _mm512_setzero_ps();
	}
	for (t = 0; t < nt; t++) {
		const uint8_t *tw = w + (size_t)t * 1024;

		l2pf_tile(pf, t);
#pragma GCC unroll 16
		for (j = 0; j < 16; j++) {
			__m512i wv = _mm512_loadu_si512(tw + j * 64);
			__m512i wl = _mm512_and_si512(wv, lo4);
			__m512i wh = _mm512_and_si512(
				_mm512_srli_epi16(wv, 4), lo4);

			_mm_prefetch((const char *)tw + PF_DIST + j * 64,
				     _MM_HINT_T0);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				const uint8_t *xp = x[m] + t * 128 + j * 4;

				al[m] = _mm512_dpbusd_epi32(al[m], wl,
							    bcast32(xp));
				ah[m] = _mm512_dpbusd_epi32(ah[m], wh,
							    bcast32(xp + 64));
			}
			/* flush whole groups: low nibbles hold k 0..63 of
			 * the tile, high nibbles k 64..127 */
			if ((G == 32 && (j == 7 || j == 15)) ||
			    (G == 64 && j == 15)) {
				unsigned int gl = t * (128 / G) +
						  (G == 32 && j == 15);
				unsigned int gh = gl + 64 / G;
				__m512 sl = _mm512_loadu_ps(ws + gl *
							    ws_stride);
				__m512 sh = _mm512_loadu_ps(ws + gh *
							    ws_stride);

#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					__m512i cl = _mm512_set1_epi32(
						8 * gs[m][gl]);
					__m512i chh = _mm512_set1_epi32(
						8 * gs[m][gh]);

					f[m] = _mm512_fmadd_ps(
						_mm512_cvtepi32_ps(
						_mm512_sub_epi32(al[m], cl)),
						sl, f[m]);
					f[m] = _mm512_fmadd_ps(
						_mm512_cvtepi32_ps(
						_mm512_sub_epi32(ah[m], chh)),
						sh, f[m]);
					al[m] = ah[m] =
						_mm512_setzero_si512();
				}
			} else if (G == 128 && j == 15) {
				__m512 s = _mm512_loadu_ps(ws + t *
							   ws_stride);

#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					__m512i d = _mm512_add_epi32(al[m],
								     ah[m]);

					d = _mm512_sub_epi32(d,
						_mm512_set1_epi32(
						8 * gs[m][t]));
					f[m] = _mm512_fmadd_ps(
						_mm512_cvtepi32_ps(d), s,
						f[m]);
					al[m] = ah[m] =
						_mm512_setzero_si512();
				}
			}
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++)
		out[m] = f[m];
}

/* BF16, one matrix or (@two) two, accumulating into og/ou. */
AI void mk_bf16(const uint8_t *gw, const uint8_t *uw, const int two,
		unsigned int nt, const uint8_t *const *x, const int M,
		__m512 *og, __m512 *ou, const struct l2pf pf)
{
	/* two chains only while they fit: 2 x 2 x M accumulators */
	const int CH = M <= 3 ? 2 : 1;
	__m512 ag[2][MR], au[2][MR];
	unsigned int t;
	int m, j;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		ag[0][m] = og[m];
		ag[1][m] = _mm512_setzero_ps();
		if (two) {
			au[0][m] = ou[m];
			au[1][m] = _mm512_setzero_ps();
		}
	}
	for (t = 0; t < nt; t++) {
		const uint8_t *tg = gw + (size_t)t * 1024;
		const uint8_t *tu = two ? uw + (size_t)t * 1024 : NULL;

		l2pf_tile(pf, t);
#pragma GCC unroll 16
		for (j = 0; j < 16; j++) {
			const int s = CH == 2 ? (j & 1) : 0;
			__m512bh wg = (__m512bh)_mm512_loadu_si512(tg + j * 64);
			__m512bh wu;

			_mm_prefetch((const char *)tg + PF_DIST + j * 64,
				     _MM_HINT_T0);
			if (two) {
				wu = (__m512bh)_mm512_loadu_si512(tu + j * 64);
				_mm_prefetch((const char *)tu + PF_DIST +
					     j * 64, _MM_HINT_T0);
			}
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m512bh xb = (__m512bh)bcast32(x[m] +
						t * 64 + j * 4);

				ag[s][m] = _mm512_dpbf16_ps(ag[s][m], xb, wg);
				if (two)
					au[s][m] = _mm512_dpbf16_ps(au[s][m],
								    xb, wu);
			}
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		og[m] = CH == 2 ? _mm512_add_ps(ag[0][m], ag[1][m]) : ag[0][m];
		if (two)
			ou[m] = CH == 2 ? _mm512_add_ps(au[0][m], au[1][m]) :
				au[0][m];
	}
}

void kern_exp_f32_avx512(float *out, const float *x, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i += 16)
		_mm512_storeu_ps(out + i, kern_exp_avx512(_mm512_loadu_ps(x + i)));
}

void kern_silu_mul_f32_avx512(float *out, const float *g, const float *u,
			      unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i += 16)
		_mm512_storeu_ps(out + i, kern_silu_mul_avx512(
			_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
}

/* ---- gate + up ------------------------------------------------------------ */

AI void gu_block(const struct kern_gate_up_args *a, enum kt_quant q,
		 unsigned int nb, unsigned int i0, unsigned int passes,
		 const int M)
{
	/* tiles of one row block per matrix; the next block follows it */
	const unsigned int nt = a->K / (q == KT_QUANT_INT8 ? 64 :
					q == KT_QUANT_INT4 ? 128 : 32);
	const size_t bb = (size_t)nt * 1024;
	const bool more = nb + 1 < a->n1 / 16;
	const uint8_t *ng = more ? a->gate->tiles + (nb + 1) * bb : NULL;
	const uint8_t *nu = more ? a->up->tiles + (nb + 1) * bb : NULL;
	struct l2pf pfgu = l2pf_share(ng, nu, nt * 16, nt, i0 / MR, passes);
	struct l2pf pfg = l2pf_share(ng, NULL, nt * 16, nt, i0 / MR, passes);
	struct l2pf pfu = l2pf_share(nu, NULL, nt * 16, nt, i0 / MR, passes);
	const uint8_t *x[MR];
	const int32_t *gs[MR];
	float xs[MR];
	unsigned int K = a->K;
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i0 + m] * a->act_stride;
		xs[m] = act_scale(x[m], K);
		gs[m] = (const int32_t *)(x[m] + K + 4);
	}
	{
		__m512 g[MR], u[MR];

		if (q == KT_QUANT_INT8) {
			size_t off = (size_t)nb * (K / 64) * 1024;
			__m512 wsg = _mm512_loadu_ps(a->gate->scales + nb * 16);
			__m512 wsu = _mm512_loadu_ps(a->up->scales + nb * 16);
			__m512i ig[MR], iu[MR];

			mk_i8(a->gate->tiles + off, a->up->tiles + off, 1,
			      K / 64, x, gs, M, ig, iu, pfgu);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m512 s = _mm512_set1_ps(xs[m]);

				g[m] = _mm512_mul_ps(_mm512_cvtepi32_ps(ig[m]),
						     _mm512_mul_ps(s, wsg));
				u[m] = _mm512_mul_ps(_mm512_cvtepi32_ps(iu[m]),
						     _mm512_mul_ps(s, wsu));
			}
		} else if (q == KT_QUANT_INT4) {
			size_t off = (size_t)nb * (K / 128) * 1024;

			mk_i4(a->gate->tiles + off, K / 128, x, gs,
			      a->gate->scales + nb * 16, a->N, a->group, M, g,
			      pfg);
			mk_i4(a->up->tiles + off, K / 128, x, gs,
			      a->up->scales + nb * 16, a->N, a->group, M, u,
			      pfu);
#pragma GCC unroll 16
			for (m = 0; m < M; m++) {
				__m512 s = _mm512_set1_ps(xs[m]);

				g[m] = _mm512_mul_ps(g[m], s);
				u[m] = _mm512_mul_ps(u[m], s);
			}
		} else {
			size_t off = (size_t)nb * (K / 32) * 1024;

#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				g[m] = u[m] = _mm512_setzero_ps();
			mk_bf16(a->gate->tiles + off, a->up->tiles + off, 1,
				K / 32, x, M, g, u, pfgu);
		}
#pragma GCC unroll 16
		for (m = 0; m < M; m++)
			_mm512_storeu_ps(a->out + (i0 + m) * a->out_stride +
					 nb * 16 - a->n0,
					 kern_silu_mul_avx512(g[m], u[m]));
	}
}

#define DISPATCH_M(fn, mr, ...)						\
	do {								\
		switch (mr) {						\
		case 1: fn(__VA_ARGS__, 1); break;			\
		case 2: fn(__VA_ARGS__, 2); break;			\
		case 3: fn(__VA_ARGS__, 3); break;			\
		case 4: fn(__VA_ARGS__, 4); break;			\
		case 5: fn(__VA_ARGS__, 5); break;			\
		case 6: fn(__VA_ARGS__, 6); break;			\
		case 7: fn(__VA_ARGS__, 7); break;			\
		default: fn(__VA_ARGS__, 8); break;			\
		}							\
	} while (0)

/*
 * Row blocks outer, token blocks inner: a block's gate and up tiles
 * (2 x 16 x K bytes) stay in L2 while every token block passes over them.
 */
static void gate_up(const struct kern_gate_up_args *a, enum kt_quant q)
{
	unsigned int nb, i0, mr, passes = (a->m + MR - 1) / MR;

	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++)
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			DISPATCH_M(gu_block, mr, a, q, nb, i0, passes);
		}
}

void kern_gate_up_int8_avx512(const struct kern_gate_up_args *a)
{
	gate_up(a, KT_QUANT_INT8);
}

void kern_gate_up_int4_avx512(const struct kern_gate_up_args *a)
{
	gate_up(a, KT_QUANT_INT4);
}

void kern_gate_up_bf16_avx512(const struct kern_gate_up_args *a)
{
	gate_up(a, KT_QUANT_BF16);
}

/* ---- down -----------------------------------------------------------------
 * K chunks outer, output blocks inner: for one chunk the blocks' tiles are
 * contiguous, so the weights stream in order; partial sums per token and
 * output row wait in scratch (f32 [MR][DOWN_NSUB]).
 */

AI void down_block(const struct kern_down_args *a, enum kt_quant q,
		   unsigned int i0, unsigned int ns0, unsigned int ns1,
		   float *part, unsigned int passes, const int M)
{
	const unsigned int kt = q == KT_QUANT_INT8 ? 64 :
				q == KT_QUANT_INT4 ? 128 : 32;
	const unsigned int P = a->kc / kt, NB = a->N / 16;
	const size_t crow = q == KT_QUANT_BF16 ? (size_t)a->kc * 2 :
			    act_row_bytes_q(a->kc, q == KT_QUANT_INT4 ?
					    a->group : 0);
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nsub = ns1 - ns0;
	unsigned int c, nb;
	int m;

	memset(part, 0, sizeof(float) * MR * nsub);
	for (c = c0; c < c1; c++) {
		const uint8_t *x[MR];
		const int32_t *gs[MR];
		__m512 xs[MR];

#pragma GCC unroll 16
		for (m = 0; m < M; m++) {
			x[m] = a->act + (i0 + m) * a->act_stride +
			       (c - c0) * crow;
			if (q != KT_QUANT_BF16)
				xs[m] = _mm512_set1_ps(act_scale(x[m], a->kc));
			gs[m] = (const int32_t *)(x[m] + a->kc + 4);
		}
		for (nb = ns0 / 16; nb < ns1 / 16; nb++) {
			const uint8_t *tw = a->down->tiles +
				((size_t)c * NB * P + (size_t)nb * P) * 1024;
			const uint8_t *nw = a->next_down ?
				a->next_down->tiles + (tw - a->down->tiles) :
				NULL;
			float *pp = part + (nb * 16 - ns0);
			/* later passes fetch the next call's same tiles */
			struct l2pf pf = l2pf_share(nw, NULL, P * 16, P,
						    i0 / MR, passes);
			__m512 r[MR], r2[MR];

			/*
			 * INT8 / BF16: two output blocks at once (their tiles
			 * are adjacent), as gate and up in gate_up: each
			 * activation broadcast feeds two dot products instead
			 * of one. Every block's sums are formed exactly as in
			 * the one-block path, so results are unchanged. Only
			 * with more than one pass (compute-bound); few tokens
			 * keep the one-block stream that decode was tuned on.
			 */
			if (q != KT_QUANT_INT4 && passes > 1 &&
			    nb + 1 < ns1 / 16) {
				pf = l2pf_share(nw, NULL, 2 * P * 16, P,
						i0 / MR, passes);
				if (q == KT_QUANT_INT8) {
					__m512i d[MR], d2[MR];

					mk_i8(tw, tw + (size_t)P * 1024, 1, P,
					      x, gs, M, d, d2, pf);
#pragma GCC unroll 16
					for (m = 0; m < M; m++) {
						r[m] = _mm512_fmadd_ps(
							_mm512_cvtepi32_ps(d[m]),
							xs[m], _mm512_loadu_ps(
							pp + m * nsub));
						r2[m] = _mm512_fmadd_ps(
							_mm512_cvtepi32_ps(d2[m]),
							xs[m], _mm512_loadu_ps(
							pp + 16 + m * nsub));
					}
				} else {
#pragma GCC unroll 16
					for (m = 0; m < M; m++) {
						r[m] = _mm512_loadu_ps(pp +
								m * nsub);
						r2[m] = _mm512_loadu_ps(pp + 16 +
								m * nsub);
					}
					mk_bf16(tw, tw + (size_t)P * 1024, 1,
						P, x, M, r, r2, pf);
				}
#pragma GCC unroll 16
				for (m = 0; m < M; m++) {
					_mm512_storeu_ps(pp + m * nsub, r[m]);
					_mm512_storeu_ps(pp + 16 + m * nsub,
							 r2[m]);
				}
				nb++;
				continue;
			}
			if (q == KT_QUANT_INT8) {
				__m512i d[MR];

				mk_i8(tw, NULL, 0, P, x, gs, M, d, NULL, pf);
#pragma GCC unroll 16
				for (m = 0; m < M; m++)
					r[m] = _mm512_fmadd_ps(
						_mm512_cvtepi32_ps(d[m]),
						xs[m], _mm512_loadu_ps(pp +
						m * nsub));
			} else if (q == KT_QUANT_INT4) {
				mk_i4(tw, P, x, gs, a->down->scales + nb * 16 +
				      (size_t)(c * a->kc / a->group) * a->N,
				      a->N, a->group, M, r, pf);
#pragma GCC unroll 16
				for (m = 0; m < M; m++)
					r[m] = _mm512_fmadd_ps(r[m], xs[m],
						_mm512_loadu_ps(pp +
						m * nsub));
			} else {
#pragma GCC unroll 16
				for (m = 0; m < M; m++)
					r[m] = _mm512_loadu_ps(pp + m * nsub);
				mk_bf16(tw, NULL, 0, P, x, M, r, NULL, pf);
			}
#pragma GCC unroll 16
			for (m = 0; m < M; m++)
				_mm512_storeu_ps(pp + m * nsub, r[m]);
		}
	}
#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		float *y = a->y + a->y_rows[i0 + m] * a->y_stride;
		__m512 w = _mm512_set1_ps(a->w[i0 + m]);
		unsigned int n;

		for (n = ns0; n < ns1; n += 16) {
			__m512 s = _mm512_loadu_ps(part + m * nsub + n - ns0);

			if (q == KT_QUANT_INT8)
				s = _mm512_mul_ps(s, _mm512_loadu_ps(
						  a->down->scales + n));
			_mm512_storeu_ps(y + n, _mm512_fmadd_ps(w, s,
					 _mm512_loadu_ps(y + n)));
		}
	}
}

static void down(const struct kern_down_args *a, enum kt_quant q)
{
	float *part = a->scratch;
	unsigned int i0, mr, ns0, ns1, passes = (a->m + MR - 1) / MR;

	for (ns0 = a->n0; ns0 < a->n1; ns0 = ns1) {
		ns1 = a->n1 - ns0 < DOWN_NSUB ? a->n1 : ns0 + DOWN_NSUB;
		for (i0 = 0; i0 < a->m; i0 += mr) {
			mr = a->m - i0 < MR ? a->m - i0 : MR;
			DISPATCH_M(down_block, mr, a, q, i0, ns0, ns1, part,
				   passes);
		}
	}
}

void kern_down_int8_avx512(const struct kern_down_args *a)
{
	down(a, KT_QUANT_INT8);
}

void kern_down_int4_avx512(const struct kern_down_args *a)
{
	down(a, KT_QUANT_INT4);
}

void kern_down_bf16_avx512(const struct kern_down_args *a)
{
	down(a, KT_QUANT_BF16);
}

size_t kern_scratch_bytes_avx512(const struct kern_geom *g,
				 unsigned int max_m)
{
	return sizeof(float) * MR * DOWN_NSUB;
}

const struct kern_ops kern_ops_avx512 = {
	.isa = KT_ISA_AVX512,
	.name = "avx512",
	.q = {
		[KT_QUANT_INT8] = {
			.act_row_bytes = kern_act_row_bytes_int8_avx512,
			.act_prepare = kern_act_prepare_int8_avx512,
			.scratch_bytes = kern_scratch_bytes_avx512,
			.gate_up = kern_gate_up_int8_avx512,
			.down = kern_down_int8_avx512,
		},
		[KT_QUANT_INT4] = {
			.act_row_bytes = kern_act_row_bytes_int4_avx512,
			.act_prepare = kern_act_prepare_int4_avx512,
			.scratch_bytes = kern_scratch_bytes_avx512,
			.gate_up = kern_gate_up_int4_avx512,
			.down = kern_down_int4_avx512,
		},
		[KT_QUANT_BF16] = {
			.act_row_bytes = kern_act_row_bytes_bf16_avx512,
			.act_prepare = kern_act_prepare_bf16_avx512,
			.scratch_bytes = kern_scratch_bytes_avx512,
			.gate_up = kern_gate_up_bf16_avx512,
			.down = kern_down_bf16_avx512,
		},
	},
};
