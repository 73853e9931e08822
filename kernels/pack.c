// SPDX-License-Identifier: MIT
/*
 * pack.c - quantizing and packing experts into the layout of
 * Documentation/packed-layout.md, and reading them back.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp.h"
#include "kernels/fp8.h"
#include "kernels/mxfp4.h"
#include "kernels/pack.h"
#include "kernels/no-fma.h"

static int layout_one(enum kt_quant q, unsigned int hidden,
		      unsigned int inter, unsigned int group,
		      struct kern_pack_layout *l)
{
	size_t nk = (size_t)hidden * inter;
	size_t tb, sgu, sdn;
	int i;

	memset(l, 0, sizeof(*l));
	l->quant = q;
	l->hidden = hidden;
	l->inter = inter;
	/* every quantization's tiles must divide both */
	if (!hidden || !inter || hidden % KERN_TILE_K_INT4 ||
	    inter % KERN_TILE_K_INT4) {
		l->err = "hidden and inter must be nonzero multiples of 128";
		return -EINVAL;
	}
	switch (q) {
	case KT_QUANT_INT8:
		l->kt = KERN_TILE_K_INT8;
		tb = nk;
		sgu = (size_t)inter * 4;
		sdn = (size_t)hidden * 4;
		break;
	case KT_QUANT_BF16:
		l->kt = KERN_TILE_K_BF16;
		tb = nk * 2;
		sgu = 0;
		sdn = 0;
		break;
	case KT_QUANT_INT4:
		if (!group)
			group = 128;
		if (group != 32 && group != 64 && group != 128) {
			l->err = "INT4 group size must be 32, 64 or 128";
			return -EINVAL;
		}
		l->group = group;
		l->kt = KERN_TILE_K_INT4;
		tb = nk / 2;
		/* gate/up: K = H; down: K = I */
		sgu = (size_t)(hidden / group) * inter * 4;
		sdn = (size_t)(inter / group) * hidden * 4;
		break;
	case KT_QUANT_FP8:
		if (group && group != KERN_FP8_BLOCK &&
		    group != KERN_FP8_CHANNEL) {
			l->err = "FP8 scales must be per 128x128 block or per row";
			return -EINVAL;
		}
		l->group = group ? group : KERN_FP8_BLOCK;
		l->kt = KERN_TILE_K_FP8;
		tb = nk;
		if (l->group == KERN_FP8_CHANNEL) {
			sgu = (size_t)inter * 4;
			sdn = (size_t)hidden * 4;
			break;
		}
		/* [N/128][K/128] f32 per matrix, padded to 64 bytes */
		sgu = ((size_t)(hidden / 128) * (inter / 128) * 4 + 63) &
		      ~(size_t)63;
		sdn = sgu;
		break;
	case KT_QUANT_MXFP4:
		if (group && group != KERN_MXFP4_GROUP) {
			l->err = "MXFP4 group size must be 32";
			return -EINVAL;
		}
		l->group = KERN_MXFP4_GROUP;
		l->kt = KERN_TILE_K_MXFP4;
		tb = nk / 2;
		/* E8M0 bytes [K/32][N]: a multiple of 512 bytes */
		sgu = nk / KERN_MXFP4_GROUP;
		sdn = sgu;
		break;
	case KT_QUANT_Q4_K:
	case KT_QUANT_Q5_K:
	case KT_QUANT_Q6_K:
		if (hidden % KERN_Q4_K_SUPER || inter % KERN_Q4_K_SUPER) {
			l->err = "Q4_K, Q5_K and Q6_K need hidden and inter multiples of 256";
			return -EINVAL;
		}
		l->group = KERN_Q4_K_SUB;
		l->kt = KERN_TILE_K_INT4;
		/* nibble tiles, and 1/8 of a byte per weight and high bit */
		tb = nk / 2 + nk / 8 * kern_qk_hi_bits(q);
		/* per matrix: d (dmin) f32 per (super-block, row); scales
		 * (mins) per (sub-block, row) */
		sgu = kern_qk_scale_bytes(q, inter, hidden);
		sdn = kern_qk_scale_bytes(q, hidden, inter);
		break;
	case KT_QUANT_Q8_0:
		if (group && group != KERN_Q8_0_GROUP) {
			l->err = "Q8_0 group size must be 32";
			return -EINVAL;
		}
		l->group = KERN_Q8_0_GROUP;
		l->kt = KERN_TILE_K_INT8;
		tb = nk;
		sgu = (size_t)(hidden / KERN_Q8_0_GROUP) * inter * 4;
		sdn = (size_t)(inter / KERN_Q8_0_GROUP) * hidden * 4;
		break;
	default:
		l->err = "unknown quantization";
		return -EINVAL;
	}
	l->kc = KERN_DOWN_CHUNK;
	for (i = 0; i < 3; i++)
		l->tiles_bytes[i] = tb;
	l->scales_bytes[KERN_MAT_GATE] = sgu;
	l->scales_bytes[KERN_MAT_UP] = sgu;
	l->scales_bytes[KERN_MAT_DOWN] = sdn;
	l->tiles_off[0] = 0;
	l->tiles_off[1] = tb;
	l->tiles_off[2] = 2 * tb;
	l->scales_off[0] = 3 * tb;
	l->scales_off[1] = 3 * tb + sgu;
	l->scales_off[2] = 3 * tb + 2 * sgu;
	l->total = 3 * tb + 2 * sgu + sdn;
	l->quant_down = q;
	l->kt_down = l->kt;
	l->group_down = l->group;
	return 0;
}

int kern_pack_layout_mix(enum kt_quant q, enum kt_quant qdown,
			 unsigned int hidden, unsigned int inter,
			 unsigned int group, struct kern_pack_layout *l)
{
	struct kern_pack_layout d;
	size_t tb, tbd, sgu, sdn;
	int ret;

	ret = layout_one(q, hidden, inter, group, l);
	if (ret || qdown == q)
		return ret;
	if (!kern_quant_is_gguf(q) || !kern_quant_is_gguf(qdown)) {
		l->err = "only Q8_0, Q4_K, Q5_K and Q6_K may be mixed between gate/up and down";
		return -EINVAL;
	}
	ret = layout_one(qdown, hidden, inter, group, &d);
	if (ret) {
		l->err = d.err;
		return ret;
	}
	/* gate/up parts of @q, the down parts of @qdown, in the same order */
	tb = l->tiles_bytes[KERN_MAT_GATE];
	tbd = d.tiles_bytes[KERN_MAT_DOWN];
	sgu = l->scales_bytes[KERN_MAT_GATE];
	sdn = d.scales_bytes[KERN_MAT_DOWN];
	l->quant_down = qdown;
	l->kt_down = d.kt;
	l->group_down = d.group;
	l->tiles_bytes[KERN_MAT_DOWN] = tbd;
	l->scales_bytes[KERN_MAT_DOWN] = sdn;
	l->scales_off[0] = 2 * tb + tbd;
	l->scales_off[1] = 2 * tb + tbd + sgu;
	l->scales_off[2] = 2 * tb + tbd + 2 * sgu;
	l->total = 2 * tb + tbd + 2 * sgu + sdn;
	return 0;
}

int kern_pack_layout(enum kt_quant q, unsigned int hidden, unsigned int inter,
		     unsigned int group, struct kern_pack_layout *l)
{
	return kern_pack_layout_mix(q, q, hidden, inter, group, l);
}

const struct kern_pack_layout *kern_pack_for(const struct kern_pack_layout *l,
					     enum kern_mat_id id,
					     struct kern_pack_layout *tmp)
{
	if (id != KERN_MAT_DOWN || l->quant_down == l->quant)
		return l;
	*tmp = *l;
	tmp->quant = l->quant_down;
	tmp->kt = l->kt_down;
	tmp->group = l->group_down;
	return tmp;
}

static void mat_dims(const struct kern_pack_layout *l, enum kern_mat_id id,
		     unsigned int *n, unsigned int *k)
{
	if (id == KERN_MAT_DOWN) {
		*n = l->hidden;
		*k = l->inter;
	} else {
		*n = l->inter;
		*k = l->hidden;
	}
}

size_t kern_pack_elem_off(const struct kern_pack_layout *l0,
			  enum kern_mat_id id, unsigned int n, unsigned int k)
{
	struct kern_pack_layout ml_;
	const struct kern_pack_layout *l = kern_pack_for(l0, id, &ml_);
	unsigned int N, K, nb = n / KERN_TILE_ROWS, kb = k / l->kt;
	size_t tile;

	mat_dims(l, id, &N, &K);
	tile = id == KERN_MAT_DOWN ? kern_tile_kcm(N, l->kc, l->kt, nb, kb) :
				     kern_tile_rbm(K, l->kt, nb, kb);
	return kern_tile_off_q(l->quant, tile) + kern_tile_byte(l->quant,
						    n % KERN_TILE_ROWS,
						    k % l->kt);
}

void kern_pack_load_rows(const void *src, enum kt_dtype dtype, size_t stride,
			 unsigned int n0, unsigned int rows, unsigned int K,
			 float *dst)
{
	unsigned int r, k;

	for (r = 0; r < rows; r++) {
		size_t base = (size_t)(n0 + r) * stride;
		float *d = dst + (size_t)r * K;

		switch (dtype) {
		case KT_DTYPE_BF16: {
			const uint16_t *h = (const uint16_t *)src + base;

			for (k = 0; k < K; k++)
				d[k] = kern_bf16_to_f32(h[k]);
			break;
		}
		case KT_DTYPE_F16: {
			const uint16_t *h = (const uint16_t *)src + base;

			for (k = 0; k < K; k++)
				d[k] = kern_f16_to_f32(h[k]);
			break;
		}
		default:
			memcpy(d, (const float *)src + base, (size_t)K * 4);
			break;
		}
	}
}

#ifdef __SSE2__
#include <emmintrin.h>

/* max|v| of 16 values; NaN is ignored as by the plain C loop */
static __m128 amax16(const float *v, __m128 m)
{
	const __m128 abs = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
	int i;

	for (i = 0; i < 16; i += 4)
		m = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(v + i), abs), m);
	return m;
}

/* round(x) of 4 values in [-lim, lim], halves away from zero */
static __m128i round4(__m128 x)
{
	__m128i t = _mm_cvttps_epi32(x);
	__m128 f = _mm_sub_ps(x, _mm_cvtepi32_ps(t));

	t = _mm_sub_epi32(t, _mm_castps_si128(_mm_cmpge_ps(f,
					_mm_set1_ps(0.5f))));
	return _mm_add_epi32(t, _mm_castps_si128(_mm_cmple_ps(f,
					_mm_set1_ps(-0.5f))));
}

/* q = round(min(max(x, lo), hi)) of 4 values; min/max order: a NaN
 * becomes hi, as in the C paths */
static __m128i quant4(__m128 x, __m128 lo, __m128 hi)
{
	return round4(_mm_max_ps(_mm_min_ps(x, hi), lo));
}

/* lanes (0 + 2) + (1 + 3), the order the C paths use */
static float hsum4(__m128 a)
{
	a = _mm_add_ps(a, _mm_movehl_ps(a, a));
	return _mm_cvtss_f32(_mm_add_ss(a, _mm_shuffle_ps(a, a, 1)));
}
#endif

/* max|v| of @len values (a multiple of 16); NaN is ignored */
static float amax_run(const float *v, unsigned int len)
{
	float amax = 0.0f;
	unsigned int i;

#ifdef __SSE2__
	__m128 m = _mm_setzero_ps();

	for (i = 0; i < len; i += 16)
		m = amax16(v + i, m);
	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 1));
	amax = _mm_cvtss_f32(m);
#else
	for (i = 0; i < len; i++) {
		float a = v[i] < 0 ? -v[i] : v[i];

		amax = a > amax ? a : amax;
	}
#endif
	return amax;
}

#ifndef __SSE2__
/* The scalar twin of quant4(). */
static int quant1(float x, float lo, float hi)
{
	int t;

	x = x < hi ? x : hi;
	x = x > lo ? x : lo;
	t = (int)x;		/* toward zero */
	x -= (float)t;		/* exact */
	return t + (x >= 0.5f) - (x <= -0.5f);
}
#endif

/*
 * Symmetric quantization of @len values (a multiple of 16) to
 * [-qmax, qmax]; returns the scale, max|v| / qmax. q = round(v / scale),
 * halves away from zero; SSE2 (x86-64 baseline) when available: packing a
 * large model is dominated by this loop. Both paths give the same bits.
 */
static float quant_run(const float *v, unsigned int len, int qmax,
		       int8_t *q)
{
	float scale, lim = (float)qmax;
	unsigned int i;

	scale = amax_run(v, len) / lim;
	if (!(scale > 0.0f)) {
		memset(q, 0, len);
		return 0.0f;
	}
#ifdef __SSE2__
	const __m128 vs = _mm_set1_ps(scale), hi = _mm_set1_ps(lim);
	const __m128 lo = _mm_set1_ps(-lim);

	for (i = 0; i < len; i += 16) {
		__m128i r[4];
		int j;

		for (j = 0; j < 4; j++)
			r[j] = quant4(_mm_div_ps(_mm_loadu_ps(v + i + 4 * j),
						 vs), lo, hi);
		_mm_storeu_si128((__m128i *)(q + i),
				 _mm_packs_epi16(_mm_packs_epi32(r[0], r[1]),
						 _mm_packs_epi32(r[2], r[3])));
	}
#else
	for (i = 0; i < len; i++)
		q[i] = (int8_t)quant1(v[i] / scale, -lim, lim);
#endif
	return scale;
}

/*
 * The INT4 candidates: scale max|v| / int4_div[c]. 7 clips nothing; the
 * larger divisors clip the group's few largest values to give every other
 * one a finer step, which on bell-shaped weights lowers the error more
 * than the clipping adds.
 */
static const float int4_div[] = {
	7.0f, 7.5f, 8.0f, 8.5f, 9.0f, 9.5f, 10.0f,
};

#define INT4_LO		-8.0f
#define INT4_HI		7.0f

/* sum((v - q * scale)^2), q clamped to [-8, 7], over @len values (a
 * multiple of 16): f32 in 4 lanes of stride 4, summed as hsum4() does */
static float int4_err(const float *v, unsigned int len, float scale)
{
	float inv = 1.0f / scale;
	unsigned int i;
#ifdef __SSE2__
	const __m128 vs = _mm_set1_ps(scale), vi = _mm_set1_ps(inv);
	const __m128 hi = _mm_set1_ps(INT4_HI);
	const __m128 lo = _mm_set1_ps(INT4_LO);
	__m128 acc = _mm_setzero_ps();

	for (i = 0; i < len; i += 4) {
		__m128 x = _mm_loadu_ps(v + i);
		__m128 e = _mm_sub_ps(x, _mm_mul_ps(_mm_cvtepi32_ps(
				quant4(_mm_mul_ps(x, vi), lo, hi)), vs));

		acc = _mm_add_ps(acc, _mm_mul_ps(e, e));
	}
	return hsum4(acc);
#else
	float acc[4] = { 0 };

	for (i = 0; i < len; i++) {
		float e = v[i] - (float)quant1(v[i] * inv, INT4_LO,
					       INT4_HI) * scale;

		acc[i % 4] += e * e;
	}
	return (acc[0] + acc[2]) + (acc[1] + acc[3]);
#endif
}

/*
 * INT4 quantization of one group of @len values (a multiple of 16);
 * returns the scale. The candidate of int4_div[] with the least squared
 * error wins (the first on a tie or NaN); then the scale becomes
 * sum(v q) / sum(q q), the least-squares scale for the chosen q, unless
 * that is not a positive finite number. Deterministic: f32 operations in
 * a fixed order, no contraction (see the pragma above).
 */
static float quant_int4(const float *v, unsigned int len, int8_t *q)
{
	float amax = amax_run(v, len), best, err, scale, inv, s, vq, qq;
	unsigned int c, i;

	scale = amax / int4_div[0];
	if (!(scale > 0.0f)) {
		memset(q, 0, len);
		return 0.0f;
	}
	best = int4_err(v, len, scale);
	for (c = 1; c < sizeof(int4_div) / sizeof(int4_div[0]); c++) {
		s = amax / int4_div[c];
		if (!(s > 0.0f))
			break;
		err = int4_err(v, len, s);
		if (err < best) {
			best = err;
			scale = s;
		}
	}
	inv = 1.0f / scale;
#ifdef __SSE2__
	const __m128 vi = _mm_set1_ps(inv), hi = _mm_set1_ps(INT4_HI);
	const __m128 lo = _mm_set1_ps(INT4_LO);
	__m128 avq = _mm_setzero_ps(), aqq = _mm_setzero_ps();

	for (i = 0; i < len; i += 16) {
		__m128i r[4];
		int j;

		for (j = 0; j < 4; j++) {
			__m128 x = _mm_loadu_ps(v + i + 4 * j), f;

			r[j] = quant4(_mm_mul_ps(x, vi), lo, hi);
			f = _mm_cvtepi32_ps(r[j]);
			avq = _mm_add_ps(avq, _mm_mul_ps(x, f));
			aqq = _mm_add_ps(aqq, _mm_mul_ps(f, f));
		}
		_mm_storeu_si128((__m128i *)(q + i),
				 _mm_packs_epi16(_mm_packs_epi32(r[0], r[1]),
						 _mm_packs_epi32(r[2], r[3])));
	}
	vq = hsum4(avq);
	qq = hsum4(aqq);
#else
	float avq[4] = { 0 }, aqq[4] = { 0 };

	for (i = 0; i < len; i++) {
		int t = quant1(v[i] * inv, INT4_LO, INT4_HI);

		q[i] = (int8_t)t;
		avq[i % 4] += v[i] * (float)t;
		aqq[i % 4] += (float)t * (float)t;
	}
	vq = (avq[0] + avq[2]) + (avq[1] + avq[3]);
	qq = (aqq[0] + aqq[2]) + (aqq[1] + aqq[3]);
#endif
	s = vq / qq;
	if (s > 0.0f && s <= FLT_MAX)
		scale = s;
	return scale;
}

/*
 * Q8_0 of one group of 32 as ggml's reference quantizer defines it:
 * d = max|v| / 127 stored as f16, q = round(v / d) with the f32 d (halves
 * away from zero). Returns the f16 scale as f32.
 */
static float quant_q8_0(const float *v, int8_t *q)
{
	float amax = amax_run(v, KERN_Q8_0_GROUP), d = amax / 127.0f;
	float id = d > 0.0f ? 1.0f / d : 0.0f;
	unsigned int i;

	for (i = 0; i < KERN_Q8_0_GROUP; i++)
		q[i] = (int8_t)roundf(v[i] * id);
	return kern_f16_to_f32(kern_f32_to_f16(d));
}

/*
 * A Q4_K or Q5_K row from f32 (kt_model_create, kt bench: synthetic models
 * only; GGUF files keep their own blocks): per sub-block of 32 the range
 * [min(v, 0), max(v)] in 15 (31) steps, per super-block d and dmin the
 * largest step and offset over 63, both rounded to f16 as a file stores
 * them.
 */
static void quant_q4_k(const struct kern_pack_layout *l0, enum kern_mat_id id,
		       unsigned int n, const float *v, int8_t *q, uint8_t *blob)
{
	struct kern_pack_layout ml_;
	const struct kern_pack_layout *l = kern_pack_for(l0, id, &ml_);
	const int top = l->quant == KT_QUANT_Q5_K ? 31 : 15;
	struct kern_qk_rec m;
	unsigned int N, K, s, j, i;

	mat_dims(l, id, &N, &K);
	for (s = 0; s < K / KERN_Q4_K_SUPER; s++) {
		float step[8], off[8], dmax = 0, mmax = 0, d, dm;

		for (j = 0; j < 8; j++) {
			const float *x = v + s * KERN_Q4_K_SUPER + j * 32;
			float lo = 0, hi = x[0];

			for (i = 0; i < 32; i++) {
				lo = x[i] < lo ? x[i] : lo;
				hi = x[i] > hi ? x[i] : hi;
			}
			step[j] = (hi - lo) / (float)top;
			off[j] = -lo;
			dmax = step[j] > dmax ? step[j] : dmax;
			mmax = off[j] > mmax ? off[j] : mmax;
		}
		d = kern_f16_to_f32(kern_f32_to_f16(dmax / 63.0f));
		dm = kern_f16_to_f32(kern_f32_to_f16(mmax / 63.0f));
		kern_qk_rec_at(l->quant, blob + l->scales_off[id], K, n,
			       s * KERN_Q4_K_SUPER, &m);
		m.d[0] = d;
		m.dmin[0] = dm;
		for (j = 0; j < 8; j++) {
			const float *x = v + s * KERN_Q4_K_SUPER + j * 32;
			int sc = d > 0 ? (int)roundf(step[j] / d) : 0;
			int mn = dm > 0 ? (int)roundf(off[j] / dm) : 0;
			float ds, mo;
			size_t at = (size_t)j * KERN_QK_REC_ROWS;

			sc = sc > 63 ? 63 : sc;
			mn = mn > 63 ? 63 : mn;
			m.sc[at] = (uint8_t)sc;
			m.mn[at] = (uint8_t)mn;
			ds = d * (float)sc;
			mo = dm * (float)mn;
			for (i = 0; i < 32; i++) {
				int t = ds > 0 ? (int)roundf((x[i] + mo) / ds) : 0;

				q[s * KERN_Q4_K_SUPER + j * 32 + i] =
					(int8_t)(t < 0 ? 0 : t > top ? top : t);
			}
		}
	}
}

/*
 * A Q6_K row from f32 (synthetic models only): per sub-block of 16 the
 * step amax/31 (q - 32 in -31..31), per super-block d the largest step
 * over 127 rounded to f16, each sub-block's step a signed multiple of d.
 */
static void quant_q6_k(const struct kern_pack_layout *l0, enum kern_mat_id id,
		       unsigned int n, const float *v, int8_t *q, uint8_t *blob)
{
	struct kern_pack_layout ml_;
	const struct kern_pack_layout *l = kern_pack_for(l0, id, &ml_);
	struct kern_qk_rec m;
	unsigned int N, K, s, j, i;

	mat_dims(l, id, &N, &K);
	for (s = 0; s < K / KERN_Q4_K_SUPER; s++) {
		const float *x = v + s * KERN_Q4_K_SUPER;
		float step[16], smax = 0, d;

		for (j = 0; j < 16; j++) {
			step[j] = amax_run(x + j * 16, 16) / 31.0f;
			smax = step[j] > smax ? step[j] : smax;
		}
		d = kern_f16_to_f32(kern_f32_to_f16(smax / 127.0f));
		kern_qk_rec_at(l->quant, blob + l->scales_off[id], K, n,
			       s * KERN_Q4_K_SUPER, &m);
		m.d[0] = d;
		for (j = 0; j < 16; j++) {
			int sc = d > 0 ? (int)roundf(step[j] / d) : 0;
			float ds;

			sc = sc > 127 ? 127 : sc;
			m.sc[(size_t)j * KERN_QK_REC_ROWS] = (uint8_t)sc;
			ds = d * (float)sc;
			for (i = 0; i < 16; i++) {
				int t = ds > 0 ? (int)roundf(x[j * 16 + i] /
							     ds) : 0;

				t = t < -32 ? -32 : t > 31 ? 31 : t;
				q[s * KERN_Q4_K_SUPER + j * 16 + i] =
					(int8_t)(t + 32);
			}
		}
	}
}

/* Tile @kb of output block @nb of matrix @id. */
static uint8_t *tile_at(const struct kern_pack_layout *l, enum kern_mat_id id,
			uint8_t *tiles, unsigned int N, unsigned int K,
			unsigned int nb, unsigned int kb)
{
	return tiles + kern_tile_off_q(l->quant, id == KERN_MAT_DOWN ?
				kern_tile_kcm(N, l->kc, l->kt, nb, kb) :
				kern_tile_rbm(K, l->kt, nb, kb));
}

/* Write the 16 rows @q ([16][K] int8 or bf16) into their tiles: per tile
 * row @c, the 4 bytes of each output row @r; Q5_K and Q6_K values' bits
 * above the nibble into the tile's high-bit lines. */
static void write_tiles(const struct kern_pack_layout *l, enum kern_mat_id id,
			uint8_t *tiles, unsigned int N, unsigned int K,
			unsigned int nb, const void *q)
{
	const int8_t *q8 = q;
	const uint16_t *h = q;
	unsigned int kb, c, r, i;

	for (kb = 0; kb < K / l->kt; kb++) {
		uint8_t *t = tile_at(l, id, tiles, N, K, nb, kb);
		unsigned int hb = kern_qk_hi_bits(l->quant), sh;

		memset(t + KERN_TILE_BYTES, 0, kern_tile_bytes(l->quant) -
		       KERN_TILE_BYTES);

		for (c = 0; c < KERN_TILE_LINES; c++) {
			for (r = 0; r < KERN_TILE_ROWS; r++) {
				uint8_t *d = t + c * KERN_TILE_ROW_BYTES +
					     r * KERN_TILE_LANE_BYTES;
				size_t row = (size_t)r * K + kb * l->kt;

				switch (l->quant) {
				case KT_QUANT_INT8:
				case KT_QUANT_Q8_0:
					memcpy(d, q8 + row + c * 4, 4);
					break;
				case KT_QUANT_BF16:
					memcpy(d, h + row + c * 2, 4);
					break;
				case KT_QUANT_Q4_K:
				case KT_QUANT_Q5_K:
				case KT_QUANT_Q6_K:
					for (i = 0; i < 4; i++) {
						size_t k = row + c * 4 + i;
						unsigned int cc = c * 4 + i, hh;

						d[i] = (uint8_t)((q8[k] & 0xf) |
							(q8[k + KERN_INT4_HI_K]
							 & 0xf) << 4);
						for (hh = 0; hb && hh < 2; hh++) {
							unsigned int o =
								kern_qk_hi_byte(l->quant,
									r, cc + hh * KERN_INT4_HI_K,
									&sh);

							t[o] |= (uint8_t)(((uint8_t)q8[k +
								hh * KERN_INT4_HI_K] >> 4)
								<< sh);
						}
					}
					break;
				default:
					for (i = 0; i < 4; i++) {
						size_t k = row + c * 4 + i;

						d[i] = (uint8_t)((q8[k] + 8) |
							((q8[k + KERN_INT4_HI_K]
							  + 8) << 4));
					}
					break;
				}
			}
		}
	}
}

int kern_pack_matrix(const struct kern_pack_layout *l0, enum kern_mat_id id,
		     const void *src, enum kt_dtype dtype, size_t src_stride,
		     uint8_t *blob)
{
	struct kern_pack_layout ml_;
	const struct kern_pack_layout *l = kern_pack_for(l0, id, &ml_);
	uint8_t *tiles = blob + l->tiles_off[id];
	float *scales = (float *)(blob + l->scales_off[id]);
	unsigned int N, K, nb, r, g, k;
	float *rows;
	void *q;

	if (dtype != KT_DTYPE_F32 && dtype != KT_DTYPE_BF16 &&
	    dtype != KT_DTYPE_F16)
		return -EINVAL;
	if (l->quant == KT_QUANT_FP8)
		return kern_pack_fp8_matrix(l, id, src, dtype, src_stride, blob);
	if (l->quant == KT_QUANT_MXFP4)
		return kern_pack_mxfp4_matrix(l, id, src, dtype, src_stride,
					      blob);
	mat_dims(l, id, &N, &K);
	rows = malloc((size_t)KERN_TILE_ROWS * K * sizeof(float));
	q = malloc((size_t)KERN_TILE_ROWS * K * 2);
	if (!rows || !q) {
		free(rows);
		free(q);
		return -ENOMEM;
	}
	for (nb = 0; nb < N / KERN_TILE_ROWS; nb++) {
		kern_pack_load_rows(src, dtype, src_stride, nb * KERN_TILE_ROWS,
			  KERN_TILE_ROWS, K, rows);
		for (r = 0; r < KERN_TILE_ROWS; r++) {
			const float *v = rows + (size_t)r * K;
			unsigned int n = nb * KERN_TILE_ROWS + r;

			switch (l->quant) {
			case KT_QUANT_INT8:
				scales[n] = quant_run(v, K, 127,
						      (int8_t *)q + (size_t)r * K);
				break;
			case KT_QUANT_Q4_K:
			case KT_QUANT_Q5_K:
				quant_q4_k(l, id, n, v, (int8_t *)q +
					   (size_t)r * K, blob);
				break;
			case KT_QUANT_Q6_K:
				quant_q6_k(l, id, n, v, (int8_t *)q +
					   (size_t)r * K, blob);
				break;
			case KT_QUANT_Q8_0:
				for (g = 0; g < K / l->group; g++)
					scales[(size_t)g * N + n] = quant_q8_0(
						v + g * l->group,
						(int8_t *)q + (size_t)r * K +
						g * l->group);
				break;
			case KT_QUANT_INT4:
				for (g = 0; g < K / l->group; g++)
					scales[(size_t)g * N + n] = quant_int4(
						v + g * l->group, l->group,
						(int8_t *)q + (size_t)r * K +
						g * l->group);
				break;
			default:
				for (k = 0; k < K; k++)
					((uint16_t *)q)[(size_t)r * K + k] =
						kern_f32_to_bf16(v[k]);
				break;
			}
		}
		write_tiles(l, id, tiles, N, K, nb, q);
	}
	free(rows);
	free(q);
	return 0;
}

void kern_pack_int4_raw(const struct kern_pack_layout *l0, enum kern_mat_id id,
			const int8_t *q, const float *scales, uint8_t *blob)
{
	struct kern_pack_layout ml_;
	const struct kern_pack_layout *l = kern_pack_for(l0, id, &ml_);
	unsigned int N, K, nb;

	mat_dims(l, id, &N, &K);
	for (nb = 0; nb < N / KERN_TILE_ROWS; nb++)
		write_tiles(l, id, blob + l->tiles_off[id], N, K, nb,
			    q + (size_t)nb * KERN_TILE_ROWS * K);
	memcpy(blob + l->scales_off[id], scales, l->scales_bytes[id]);
}

int kern_pack_rows_q(const struct kern_pack_layout *l0, enum kern_mat_id id,
		     unsigned int nb, const int8_t *q, const float *gscale,
		     uint8_t *blob)
{
	struct kern_pack_layout ml_;
	const struct kern_pack_layout *l = kern_pack_for(l0, id, &ml_);
	float *scales = (float *)(blob + l->scales_off[id]);
	unsigned int N, K, r, g;

	if (l->quant != KT_QUANT_INT4 && l->quant != KT_QUANT_Q8_0)
		return -EINVAL;
	mat_dims(l, id, &N, &K);
	for (r = 0; r < KERN_TILE_ROWS; r++)
		for (g = 0; g < K / l->group; g++)
			scales[(size_t)g * N + nb * KERN_TILE_ROWS + r] =
				gscale[(size_t)r * (K / l->group) + g];
	write_tiles(l, id, blob + l->tiles_off[id], N, K, nb, q);
	return 0;
}

int kern_pack_rows_qk(const struct kern_pack_layout *l0, enum kern_mat_id id,
		      unsigned int nb, const int8_t *q, const float *d,
		      const float *dmin, const uint8_t *sc, const uint8_t *mn,
		      uint8_t *blob)
{
	struct kern_pack_layout ml_;
	const struct kern_pack_layout *l = kern_pack_for(l0, id, &ml_);
	struct kern_qk_rec m;
	unsigned int N, K, r, s, j, sg = kern_qk_sub(l->quant);
	unsigned int per = KERN_Q4_K_SUPER / sg;	/* sub-blocks of one */

	if (!kern_quant_is_k(l->quant))
		return -EINVAL;
	mat_dims(l, id, &N, &K);
	for (r = 0; r < KERN_TILE_ROWS; r++) {
		unsigned int n = nb * KERN_TILE_ROWS + r;

		for (s = 0; s < K / KERN_Q4_K_SUPER; s++) {
			const size_t at = (size_t)r * (K / sg) + s * per;

			kern_qk_rec_at(l->quant, blob + l->scales_off[id], K, n,
				       s * KERN_Q4_K_SUPER, &m);
			m.d[0] = d[r * (K / 256) + s];
			if (m.dmin)
				m.dmin[0] = dmin[r * (K / 256) + s];
			for (j = 0; j < per; j++) {
				m.sc[j * KERN_QK_REC_ROWS] = sc[at + j];
				if (m.mn)
					m.mn[j * KERN_QK_REC_ROWS] = mn[at + j];
			}
		}
	}
	write_tiles(l, id, blob + l->tiles_off[id], N, K, nb, q);
	return 0;
}

int kern_pack_expert(const struct kern_pack_layout *l, const void *gate,
		     const void *up, const void *down, enum kt_dtype dtype,
		     uint8_t *blob)
{
	int ret;

	if (!gate || !up || !down)
		return -EINVAL;
	ret = kern_pack_matrix(l, KERN_MAT_GATE, gate, dtype, l->hidden, blob);
	if (!ret)
		ret = kern_pack_matrix(l, KERN_MAT_UP, up, dtype, l->hidden,
				       blob);
	if (!ret)
		ret = kern_pack_matrix(l, KERN_MAT_DOWN, down, dtype,
				       l->inter, blob);
	return ret;
}

void kern_pack_mat(const struct kern_pack_layout *l, enum kern_mat_id id,
		   const uint8_t *blob, struct kern_mat *mat)
{
	mat->tiles = blob + l->tiles_off[id];
	mat->scales = l->scales_bytes[id] ?
		(const float *)(blob + l->scales_off[id]) : NULL;
}

float kern_pack_get(const struct kern_pack_layout *l0, enum kern_mat_id id,
		    const uint8_t *blob, unsigned int n, unsigned int k)
{
	struct kern_pack_layout ml_;
	const struct kern_pack_layout *l = kern_pack_for(l0, id, &ml_);
	const uint8_t *p = blob + l->tiles_off[id] +
		kern_pack_elem_off(l, id, n, k);
	const float *scales = (const float *)(blob + l->scales_off[id]);
	unsigned int N, K;
	uint16_t h;

	mat_dims(l, id, &N, &K);
	switch (l->quant) {
	case KT_QUANT_INT8:
		return (float)(int8_t)*p * scales[n];
	case KT_QUANT_Q8_0:
		return (float)(int8_t)*p * scales[(size_t)(k / l->group) * N + n];
	case KT_QUANT_Q4_K:
	case KT_QUANT_Q5_K:
	case KT_QUANT_Q6_K: {
		struct kern_qk_rec m;
		unsigned int c = k % KERN_TILE_K_INT4, hb = kern_qk_hi_bits(l->quant), sh;
		int v = c < KERN_INT4_HI_K ? (*p & 0xf) : (*p >> 4);
		size_t j = (size_t)(k % KERN_Q4_K_SUPER /
				    kern_qk_sub(l->quant)) * KERN_QK_REC_ROWS;

		if (hb) {
			const uint8_t *t = p - kern_tile_byte(l->quant,
				n % KERN_TILE_ROWS, c);
			/* the byte first: it sets sh */
			unsigned int o = kern_qk_hi_byte(l->quant,
							 n % KERN_TILE_ROWS, c,
							 &sh);

			v |= ((t[o] >> sh) & ((1 << hb) - 1)) << 4;
		}
		kern_qk_rec_at(l->quant, blob + l->scales_off[id], K, n, k, &m);
		if (l->quant == KT_QUANT_Q6_K)
			return m.d[0] * (float)(int8_t)m.sc[j] * (float)(v - 32);
		return m.d[0] * (float)m.sc[j] * (float)v -
		       m.dmin[0] * (float)m.mn[j];
	}
	case KT_QUANT_INT4: {
		int nib = k % KERN_TILE_K_INT4 < KERN_INT4_HI_K ? (*p & 0xf) :
			  (*p >> 4);

		return (float)(nib - 8) * scales[(size_t)(k / l->group) * N + n];
	}
	case KT_QUANT_FP8:
		return kern_fp8_to_f32(*p) * kern_fp8_scale(scales, l->group, K,
							    n, k);
	case KT_QUANT_MXFP4: {
		const uint8_t *e8 = blob + l->scales_off[id];
		uint8_t code = kern_mxfp4_hi(k % KERN_TILE_K_MXFP4) ?
			       *p >> 4 : *p & 0xf;

		return kern_mxfp4_value(code, e8[kern_mxfp4_scale_idx(N, n,
						  k / KERN_MXFP4_GROUP)]);
	}
	default:
		memcpy(&h, p, 2);
		return kern_bf16_to_f32(h);
	}
}

static int add_range(struct kern_range *r, int n, size_t off, size_t len)
{
	if (!len)
		return n;
	r[n].off = off;
	r[n].len = len;
	return n + 1;
}

/*
 * How the scale part of matrix @id follows the nodes' slices of inter (the
 * rows of gate and up, the k of down): in blocks of @rb along it, @ub bytes
 * each, in order. False when each node reads all of it (scales per row of
 * down, or a k-major part of gate/up where a node's rows are strided).
 */
static bool scale_split(const struct kern_pack_layout *l, unsigned int id,
			unsigned int *rb, size_t *ub)
{
	enum kt_quant q = id == KERN_MAT_DOWN ? l->quant_down : l->quant;
	unsigned int group = id == KERN_MAT_DOWN ? l->group_down : l->group;
	unsigned int H = l->hidden;	/* gate/up's K, down's N */

	if (id != KERN_MAT_DOWN) {
		/* [I] per row, [I/16][H/256] records, [I/128][H/128] blocks */
		if (q == KT_QUANT_INT8 ||
		    (q == KT_QUANT_FP8 && group == KERN_FP8_CHANNEL)) {
			*rb = 1;
			*ub = 4;
		} else if (kern_quant_is_k(q)) {
			*rb = KERN_QK_REC_ROWS;
			*ub = (size_t)(H / KERN_Q4_K_SUPER) *
			      kern_qk_rec_bytes(q);
		} else if (q == KT_QUANT_FP8) {
			*rb = KERN_FP8_BLOCK;
			*ub = (size_t)(H / KERN_FP8_BLOCK) * 4;
		} else {
			return false;
		}
		return true;
	}
	/* down's [I/G][H] groups: a node's k are whole groups of rows */
	if (q == KT_QUANT_INT4 || q == KT_QUANT_Q8_0 || q == KT_QUANT_MXFP4) {
		*rb = group;
		*ub = (size_t)H * (q == KT_QUANT_MXFP4 ? 1 : 4);
		return true;
	}
	return false;
}

int kern_pack_node_ranges(const struct kern_pack_layout *l,
			  unsigned int n_nodes, unsigned int node,
			  struct kern_range ranges[KERN_PACK_MAX_RANGES])
{
	unsigned int i0, i1, i, rb;
	size_t row_bytes, chunk_bytes, ub;
	int n = 0;

	kern_node_slice(l->inter, l->kc, n_nodes, node, &i0, &i1);
	/* bytes per row of gate/up (K = H) and per KC chunk of down */
	row_bytes = l->tiles_bytes[KERN_MAT_GATE] / l->inter;
	chunk_bytes = l->tiles_bytes[KERN_MAT_DOWN] / (l->inter / l->kc);
	for (i = KERN_MAT_GATE; i <= KERN_MAT_UP; i++)
		n = add_range(ranges, n, l->tiles_off[i] + i0 * row_bytes,
			      (i1 - i0) * row_bytes);
	n = add_range(ranges, n, l->tiles_off[KERN_MAT_DOWN] +
		      (size_t)(i0 / l->kc) * chunk_bytes,
		      (size_t)((i1 - i0) / l->kc) * chunk_bytes);
	for (i = KERN_MAT_GATE; i <= KERN_MAT_DOWN; i++) {
		size_t a, b;

		if (!l->scales_bytes[i])
			continue;
		/* slices are whole KC chunks: whole scale blocks too */
		if (!scale_split(l, i, &rb, &ub) || l->kc % rb) {
			if (node == 0)
				n = add_range(ranges, n, l->scales_off[i],
					      l->scales_bytes[i]);
			continue;
		}
		a = (size_t)(i0 / rb) * ub;
		/* the last node takes the padding after the last block */
		b = node + 1 == n_nodes ? l->scales_bytes[i] :
			(size_t)(i1 / rb) * ub;
		n = add_range(ranges, n, l->scales_off[i] + a, b - a);
	}
	return n;
}
