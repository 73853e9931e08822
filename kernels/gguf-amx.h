/* SPDX-License-Identifier: MIT */
/*
 * gguf-amx.h - the AMX tile body of the GGUF block quantizations for
 * experts with many tokens: Q8_0 (int8 tiles, one scale per 32), Q4_K and
 * Q5_K (values 0..15 or 0..31, a scale and a min per 32) and Q6_K (0..63,
 * a signed scale per 16).
 *
 * Each sub-block of one weight scale is a K span of its own: TDPBSSD over
 * its 32 (Q6_K: 16) columns into the four C tiles, which the vector units
 * then fold into f32 sums while the next span's TDPs run:
 *
 *	f += C * (ws[n] * xa[token]) - wm[n] * xm[token]
 *
 * ws the row's scale of the sub-block (Q8_0: d; K-quants: d * sc), xa the
 * token's activation scale there (per 32 for Q8_0, per 256 or per down
 * chunk for the K-quants), and for the K-quants the min term of w = d sc q
 * - dmin m (Q6_K: q - 32, so wm = 32 ws) with xm = xa * sum(x) over the
 * span: the oracle's sums (qk-scalar.c, q8_0-scalar.c) in another order.
 * K-quant nibbles and high bits are widened once per row block (gate+up)
 * or column block pair (down) to s8 tiles of their unsigned values; Q8_0's
 * tiles are read as they are.
 *
 * Uses moe-amx.h's tiles, scratch and passes (its includer defines
 * AMX_NAME); included by moe-amx.c and by the AMX emulation test.
 */
#ifndef KT_KERNELS_GGUF_AMX_H
#define KT_KERNELS_GGUF_AMX_H

#include "kernels/moe-amx.h"
#include "kernels/q8_0.h"
#include "kernels/qk.h"

/* K of one weight scale (the K span of one pass of TDPs) */
static inline unsigned int gamx_sub(enum kt_quant q)
{
	return q == KT_QUANT_Q8_0 ? KERN_Q8_0_GROUP : kern_qk_sub(q);
}

/* K of the packed tile of @q, and its bytes */
static inline unsigned int gamx_tile_k(enum kt_quant q)
{
	return q == KT_QUANT_Q8_0 ? KERN_TILE_K_INT8 : KERN_TILE_K_INT4;
}

/*
 * The scratch: moe-amx.h's, after the per-token, per-sub-block activation
 * factors xa (scale) and xm (scale * sum, K-quants), [m][K / sub] each.
 */
struct gamx_scratch {
	struct amx_scratch t;
	float *xa, *xm;
};

static inline size_t gamx_xbytes(const struct kern_geom *g, unsigned int m)
{
	size_t kmax = g->hidden > g->inter ? g->hidden : g->inter;

	return amx_align((size_t)amx_mpad(m) * (kmax / KERN_Q6_K_SUB) * 4);
}

static inline size_t gamx_scratch_bytes(const struct kern_geom *g,
					unsigned int max_m)
{
	return 2 * gamx_xbytes(g, max_m) + amx_scratch_bytes(g, max_m) + 64;
}

static inline void gamx_scratch_init(struct gamx_scratch *s, void *base,
				     const struct kern_geom *g, unsigned int m)
{
	uint8_t *p = (uint8_t *)(((uintptr_t)base + 63) & ~(uintptr_t)63);

	s->xa = (float *)p;
	s->xm = (float *)(p + gamx_xbytes(g, m));
	amx_scratch_init(&s->t, p + 2 * gamx_xbytes(g, m), g, m);
}

/*
 * xa and xm of the @ns sub-blocks of one prepared row of @K (a whole row
 * or one down chunk) at @row, to @xa and @xm.
 */
static inline void gamx_row_factors(enum kt_quant q, const uint8_t *row,
				    unsigned int K, float *xa, float *xm)
{
	unsigned int sg = gamx_sub(q), B, j;
	const float *xs;
	const int32_t *sum;

	if (q == KT_QUANT_Q8_0) {
		xs = kern_q8_0_row_scales(row, K);
		for (j = 0; j < K / sg; j++)
			xa[j] = xs[j];
		return;
	}
	xs = kern_qk_row_scales(row, K);
	sum = kern_qk_row_sums(row, K);
	B = kern_qk_act_block(K);
	for (j = 0; j < K / sg; j++) {
		xa[j] = xs[j * sg / B];
		xm[j] = xa[j] * (float)sum[j];
	}
}

/*
 * The weight factors of rows 16 nb .. 16 nb + 15 of the [N][K] matrix @m
 * for the sub-block at column @k: *ws the scale, *wm the min (K-quants).
 */
static inline void gamx_wfactors(enum kt_quant q, const struct kern_mat *m,
				 unsigned int N, unsigned int K,
				 unsigned int nb, unsigned int k, __m512 *ws,
				 __m512 *wm)
{
	struct kern_qk_rec r;
	size_t j;
	__m512 sc;

	if (q == KT_QUANT_Q8_0) {
		*ws = _mm512_loadu_ps(m->scales + (size_t)(k / KERN_Q8_0_GROUP) *
				      N + nb * KERN_TILE_ROWS);
		*wm = _mm512_setzero_ps();
		return;
	}
	kern_qk_rec_at(q, m->scales, K, nb * KERN_TILE_ROWS, k, &r);
	j = (size_t)(k % KERN_Q4_K_SUPER / kern_qk_sub(q)) * KERN_QK_REC_ROWS;
	if (q == KT_QUANT_Q6_K) {
		sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
			_mm_loadu_si128((const __m128i *)(r.sc + j))));
		*ws = _mm512_mul_ps(_mm512_loadu_ps(r.d), sc);
		*wm = _mm512_mul_ps(*ws, _mm512_set1_ps(32.0f));
		return;
	}
	sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
		_mm_loadu_si128((const __m128i *)(r.sc + j))));
	*ws = _mm512_mul_ps(_mm512_loadu_ps(r.d), sc);
	*wm = _mm512_mul_ps(_mm512_loadu_ps(r.dmin), _mm512_cvtepi32_ps(
		_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)
						     (r.mn + j)))));
}

/*
 * f[i][h*16 ..] += C * (ws[h] * xa) - wm[h] * xm for the stored C tiles
 * of one span (amx_store_c4() order), @cnt tokens and @nn column blocks;
 * token i's factors at xa[i * @xst] and xm[i * @xst].
 */
static inline void gamx_acc(enum kt_quant q, float *f, const int32_t *c,
			    unsigned int nn, unsigned int cnt,
			    const __m512 *ws, const __m512 *wm,
			    const float *xa, const float *xm, unsigned int xst)
{
	unsigned int i, h;

	for (i = 0; i < cnt; i++) {
		const int32_t *cr = c + (i / AMX_TB) * 2 * AMX_CW +
				    (i % AMX_TB) * 16;
		__m512 a = _mm512_set1_ps(xa[i * xst]);

		for (h = 0; h < nn; h++) {
			float *fp = f + i * 32 + h * 16;
			__m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(
				_mm512_loadu_si512((const void *)(cr +
							h * AMX_CW))),
				_mm512_mul_ps(ws[h], a), _mm512_loadu_ps(fp));

			if (q != KT_QUANT_Q8_0)
				v = _mm512_fnmadd_ps(wm[h], _mm512_set1_ps(
					xm[i * xst]), v);
			_mm512_storeu_ps(fp, v);
		}
	}
}

/*
 * Widen the K-quant tile @t (a nibble tile, then the high-bit lines of
 * Q5_K/Q6_K: layout.h) to two s8 B tiles of the values: k 0..63 at @d and
 * k 64..127 at @d + AMX_TILE (amx_b4() finds a K offset in them).
 */
static inline void gamx_widen(enum kt_quant q, const uint8_t *t, int8_t *d)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	unsigned int hb = kern_qk_hi_bits(q), per = hb ? 4 / hb : 1, l;
	const __m512i mh = _mm512_set1_epi8((char)((1 << hb) - 1));

	for (l = 0; l < KERN_TILE_LINES; l++) {
		__m512i v = _mm512_loadu_si512((const void *)(t + l * AMX_LINE));
		__m512i lo = _mm512_and_si512(v, m4);
		__m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);

		if (hb) {
			__m512i b = _mm512_loadu_si512((const void *)(t +
				AMX_TILE + l / per * AMX_LINE));
			unsigned int sh = 2 * hb * (l % per);

			lo = _mm512_or_si512(lo, _mm512_slli_epi16(
				_mm512_and_si512(_mm512_srli_epi16(b, sh), mh),
				4));
			hi = _mm512_or_si512(hi, _mm512_slli_epi16(
				_mm512_and_si512(_mm512_srli_epi16(b, sh + hb),
						 mh), 4));
		}
		_mm512_storeu_si512((void *)(d + l * AMX_LINE), lo);
		_mm512_storeu_si512((void *)(d + AMX_TILE + l * AMX_LINE), hi);
	}
}

/* Prefetch the packed tile of @q at @p into L2. */
static inline void gamx_pf(enum kt_quant q, const uint8_t *p)
{
	size_t l;

	for (l = 0; l < kern_tile_bytes(q); l += AMX_LINE)
		_mm_prefetch((const char *)p + l, _MM_HINT_T1);
}

/* The B rows of K offset @k of a row block whose tiles start at @t
 * (Q8_0, as packed) or were widened to @w (K-quants). */
static inline const uint8_t *gamx_b(enum kt_quant q, const uint8_t *t,
				    const int8_t *w, unsigned int k)
{
	if (q == KT_QUANT_Q8_0)
		return t + (size_t)(k / KERN_TILE_K_INT8) * AMX_TILE +
		       k % KERN_TILE_K_INT8 / 4 * AMX_LINE;
	return (const uint8_t *)amx_b4(w, k);
}

/* ---- gate + up -------------------------------------------------------------
 * Per row block of 16: its gate and up tiles widened (K-quants), then per
 * pair of token blocks the sub-blocks in K order, the C of one folded into
 * f while the next one's TDPs run; f is gate's sums then up's per token,
 * as amx_down_out() and the GLU read them.
 */
static inline __attribute__((always_inline)) void
gamx_gate_up(const struct kern_gate_up_args *a, enum kt_quant q)
{
	struct kern_geom geom = { a->K, a->N, 0, KERN_DOWN_CHUNK };
	unsigned int K = a->K, sg = gamx_sub(q), ns = K / sg;
	unsigned int kt = gamx_tile_k(q), nt = K / kt, nkb = K / KERN_TILE_K_INT8;
	unsigned int mp = amx_mpad(a->m), nb, tb, j, i;
	size_t rb = kern_tile_off_q(q, nt);	/* bytes of a row block */
	struct gamx_scratch s;

	gamx_scratch_init(&s, a->scratch, &geom, a->m);
	amx_gu_gather(a, &s.t, K, 0);
	for (i = 0; i < a->m; i++)
		gamx_row_factors(q, a->act + a->act_rows[i] * a->act_stride, K,
				 s.xa + (size_t)i * ns, s.xm + (size_t)i * ns);
	amx_config(sg, sg / 4);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++) {
		const uint8_t *gt = a->gate->tiles + nb * rb;
		const uint8_t *ut = a->up->tiles + nb * rb;
		int8_t *wg = s.t.b4, *wu = s.t.b4 + (size_t)nt * 2 * AMX_TILE;

		for (j = 0; q != KT_QUANT_Q8_0 && j < nt; j++) {
			gamx_widen(q, gt + kern_tile_off_q(q, j),
				   wg + (size_t)j * 2 * AMX_TILE);
			gamx_widen(q, ut + kern_tile_off_q(q, j),
				   wu + (size_t)j * 2 * AMX_TILE);
		}
		AMX_BARRIER();
		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = amx_cnt(a->m, tb);
			int two = cnt > AMX_TB;
			/* sub-block j's factors, set after its TDPs */
			__m512 ws[2] = { _mm512_setzero_ps(),
					 _mm512_setzero_ps() };
			__m512 wm[2] = { ws[0], ws[0] };

			amx_zero_f(s.t.f, 2 * AMX_TB);
			for (j = 0; j < ns; j++) {
				unsigned int k = j * sg;
				const uint8_t *a0 = amx_atile(&s.t, nkb, tb,
					k / KERN_TILE_K_INT8) +
					k % KERN_TILE_K_INT8;

				if (tb == 0 && k % kt == 0) {
					/* the next row block's tile */
					gamx_pf(q, gt + rb +
						kern_tile_off_q(q, k / kt));
					gamx_pf(q, ut + rb +
						kern_tile_off_q(q, k / kt));
				}
				_tile_zero(0);
				_tile_zero(1);
				_tile_zero(2);
				_tile_zero(3);
				_tile_loadd(4, a0, AMX_LINE);
				_tile_loadd(6, gamx_b(q, gt, wg, k), AMX_LINE);
				_tile_loadd(7, gamx_b(q, ut, wu, k), AMX_LINE);
				_tile_dpbssd(0, 4, 6);
				_tile_dpbssd(1, 4, 7);
				if (two) {
					_tile_loadd(5, a0 + (size_t)nkb *
						    AMX_TILE, AMX_LINE);
					_tile_dpbssd(2, 5, 6);
					_tile_dpbssd(3, 5, 7);
				}
				if (j)
					gamx_acc(q, s.t.f, amx_cbuf(&s.t, j - 1),
						 2, cnt, ws, wm,
						 s.xa + (size_t)tb * ns + j - 1,
						 s.xm + (size_t)tb * ns + j - 1,
						 ns);
				amx_store_c4(amx_cbuf(&s.t, j));
				gamx_wfactors(q, a->gate, a->N, K, nb, k,
					      &ws[0], &wm[0]);
				gamx_wfactors(q, a->up, a->N, K, nb, k,
					      &ws[1], &wm[1]);
			}
			gamx_acc(q, s.t.f, amx_cbuf(&s.t, j - 1), 2, cnt, ws,
				 wm, s.xa + (size_t)tb * ns + j - 1,
				 s.xm + (size_t)tb * ns + j - 1, ns);
			for (i = 0; i < cnt; i++)
				_mm512_storeu_ps(amx_out(a, nb, tb + i),
					kern_glu_avx512(a->glu,
						nb * KERN_TILE_ROWS,
						_mm512_loadu_ps(s.t.f + i * 32),
						_mm512_loadu_ps(s.t.f + i * 32 +
								16)));
		}
	}
	_tile_release();
}

/* ---- down ------------------------------------------------------------------
 * Per pair of output blocks of 16 columns and pair of token blocks, as
 * moe-amx.h's INT4 down: the pair's tiles of every chunk of the call
 * widened once (K-quants), then the sub-blocks in K order, chunk by chunk.
 */

/* The B rows of output block @nb at K offset @kk of call chunk @c. */
static inline const uint8_t *gamx_down_b(enum kt_quant q,
					 const struct kern_down_args *a,
					 const int8_t *w, unsigned int nb,
					 unsigned int c, unsigned int kk)
{
	unsigned int c0 = a->k0 / a->kc;

	if (q == KT_QUANT_Q8_0)
		return gamx_b(q, a->down->tiles + kern_tile_off(
				kern_tile_kcm_chunk(a->N, a->kc,
					KERN_TILE_K_INT8, nb, c0 + c)),
			      NULL, kk);
	return gamx_b(q, NULL, w + (size_t)c * (a->kc / KERN_TILE_K_INT4) *
		      2 * AMX_TILE, kk);
}

static inline __attribute__((always_inline)) void
gamx_down(const struct kern_down_args *a, enum kt_quant q)
{
	struct kern_geom geom = { a->N, a->K, 0, a->kc };
	unsigned int c0 = a->k0 / a->kc, nc = a->k1 / a->kc - c0;
	unsigned int sg = gamx_sub(q), spc = a->kc / sg, ns = nc * spc;
	unsigned int kt = gamx_tile_k(q), P = a->kc / kt;
	unsigned int nkb = nc * a->kc / KERN_TILE_K_INT8, mp = amx_mpad(a->m);
	size_t crow = q == KT_QUANT_Q8_0 ? kern_q8_0_row_bytes(a->kc) :
		      kern_qk_row_bytes(a->kc, sg);
	/* widened tiles of one column block: nc * P tiles of two s8 tiles */
	size_t wb = (size_t)nc * P * 2 * AMX_TILE;
	unsigned int nb, tb, c, j, h, t, i;
	struct gamx_scratch s;

	gamx_scratch_init(&s, a->scratch, &geom, a->m);
	amx_down_gather(a, nc, crow, a->kc, 0, &s.t);
	for (i = 0; i < a->m; i++)
		for (c = 0; c < nc; c++)
			gamx_row_factors(q, a->act + i * a->act_stride +
					 c * crow, a->kc,
					 s.xa + (size_t)i * ns + c * spc,
					 s.xm + (size_t)i * ns + c * spc);
	amx_config(sg, sg / 4);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb += 2) {
		unsigned int nn = nb + 1 < a->n1 / 16 ? 2 : 1;

		for (h = 0; q != KT_QUANT_Q8_0 && h < nn; h++)
			for (c = 0; c < nc; c++)
				for (t = 0; t < P; t++)
					gamx_widen(q, a->down->tiles +
						kern_tile_off_q(q,
						kern_tile_kcm_chunk(a->N,
							a->kc, kt, nb + h,
							c0 + c) + t),
						s.t.b4 + h * wb + (size_t)
						(c * P + t) * 2 * AMX_TILE);
		AMX_BARRIER();
		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = amx_cnt(a->m, tb);
			/* sub-block j's factors, set after its TDPs */
			__m512 ws[2] = { _mm512_setzero_ps(),
					 _mm512_setzero_ps() };
			__m512 wm[2] = { ws[0], ws[0] };

			amx_zero_f(s.t.f, 2 * AMX_TB);
			for (j = 0; j < ns; j++) {
				unsigned int kk = j % spc * sg;
				struct amx_arows ar;

				c = j / spc;
				if (tb == 0 && kk == 0)
					/* the next pair's tiles of chunk c */
					for (t = 0; t < 2 * P; t++)
						gamx_pf(q, a->down->tiles +
							kern_tile_off_q(q,
							kern_tile_kcm_chunk(
								a->N, a->kc, kt,
								nb + 2, c0 + c) +
							t));
				ar = amx_down_a(a, &s.t, nkb, nc, crow, tb, c,
						kk);
				amx_down_tiles(&ar, gamx_down_b(q, a, s.t.b4,
						nb, c, kk),
					       nn > 1 ? gamx_down_b(q, a,
						s.t.b4 + wb, nb + 1, c, kk) :
					       NULL, 0, 1, cnt > AMX_TB, NULL,
					       0, 1);
				if (j)
					gamx_acc(q, s.t.f, amx_cbuf(&s.t, j - 1),
						 nn, cnt, ws, wm,
						 s.xa + (size_t)tb * ns + j - 1,
						 s.xm + (size_t)tb * ns + j - 1,
						 ns);
				amx_store_c4(amx_cbuf(&s.t, j));
				for (h = 0; h < nn; h++)
					gamx_wfactors(q, a->down, a->N, a->K,
						      nb + h, (c0 + c) * a->kc +
						      kk, &ws[h], &wm[h]);
			}
			gamx_acc(q, s.t.f, amx_cbuf(&s.t, j - 1), nn, cnt, ws,
				 wm, s.xa + (size_t)tb * ns + j - 1,
				 s.xm + (size_t)tb * ns + j - 1, ns);
			amx_down_out(a, nb, nn, tb, cnt, s.t.f, NULL);
		}
	}
	_tile_release();
}

/* The entries of quantization @t: the tile kernels and the scratch of the
 * AMX table's slot (the larger of theirs and the AVX-512 kernels'). */
#define GAMX_ENTRIES(t, Q)						\
static void AMX_NAME(gate_up_##t)(const struct kern_gate_up_args *a)	\
{									\
	gamx_gate_up(a, Q);						\
}									\
static void AMX_NAME(down_##t)(const struct kern_down_args *a)		\
{									\
	gamx_down(a, Q);						\
}									\
static size_t AMX_NAME(scratch_##t)(const struct kern_geom *g,		\
				    unsigned int max_m)			\
{									\
	size_t s = gamx_scratch_bytes(g, max_m);			\
	size_t v = kern_scratch_bytes_##t##_avx512(g, max_m);		\
									\
	return s > v ? s : v;						\
}

GAMX_ENTRIES(q8_0, KT_QUANT_Q8_0)
GAMX_ENTRIES(q4_k, KT_QUANT_Q4_K)
GAMX_ENTRIES(q5_k, KT_QUANT_Q5_K)
GAMX_ENTRIES(q6_k, KT_QUANT_Q6_K)

/* The ops table slot of @t: AVX-512 below @min_m tokens, tiles from it. */
#define GAMX_SLOT(t, min_m)						\
	{								\
		.act_row_bytes = kern_act_row_bytes_##t##_avx512,	\
		.act_prepare = kern_act_prepare_##t##_avx512,		\
		.scratch_bytes = AMX_NAME(scratch_##t),			\
		.gate_up = kern_gate_up_##t##_avx512,			\
		.down = kern_down_##t##_avx512,				\
		.gate_up_many = AMX_NAME(gate_up_##t),			\
		.down_many = AMX_NAME(down_##t),			\
		.many_min_m = (min_m),					\
	}

/* the four slots, for an ops table's .q */
#define GAMX_SLOTS(min_m)						\
	[KT_QUANT_Q8_0] = GAMX_SLOT(q8_0, min_m),			\
	[KT_QUANT_Q4_K] = GAMX_SLOT(q4_k, min_m),			\
	[KT_QUANT_Q5_K] = GAMX_SLOT(q5_k, min_m),			\
	[KT_QUANT_Q6_K] = GAMX_SLOT(q6_k, min_m)

#endif /* KT_KERNELS_GGUF_AMX_H */
