/* SPDX-License-Identifier: MIT */
/*
 * q8_0-amx.h - the AMX tile body of GGUF Q8_0 for experts with many
 * tokens: the packed int8 tiles read as they are, and each block of 32
 * (one weight scale, one activation scale) a K span of its own: TDPBSSD
 * over its 32 columns into the four C tiles, which the vector units then
 * fold into f32 sums while the next span's TDPs run,
 *
 *	f += C * (ws[n] * xa[token])
 *
 * the oracle's sum (q8_0-scalar.c) with the scale product in another
 * order. Uses moe-amx.h's tiles, scratch and passes; included by
 * moe-amx.c and by the AMX emulation test (the includer defines AMX_NAME).
 */
#ifndef KT_KERNELS_Q8_0_AMX_H
#define KT_KERNELS_Q8_0_AMX_H

#include "kernels/moe-amx.h"
#include "kernels/q8_0.h"

#define Q8A_G	KERN_Q8_0_GROUP

/* The scratch: moe-amx.h's, after the tokens' scales ([m][K / 32]). */
struct q8a_scratch {
	struct amx_scratch t;
	float *xa;
};

static inline size_t q8a_xbytes(const struct kern_geom *g, unsigned int m)
{
	return amx_align((size_t)amx_mpad(m) * (amx_kmax(g) / Q8A_G) * 4);
}

static inline size_t q8a_scratch_bytes(const struct kern_geom *g,
				       unsigned int max_m)
{
	return q8a_xbytes(g, max_m) + amx_scratch_bytes(g, max_m) + 64;
}

static inline void q8a_scratch_init(struct q8a_scratch *s, void *base,
				    const struct kern_geom *g, unsigned int m)
{
	uint8_t *p = (uint8_t *)(((uintptr_t)base + 63) & ~(uintptr_t)63);

	s->xa = (float *)p;
	amx_scratch_init(&s->t, p + q8a_xbytes(g, m), g, m);
}

/*
 * f[i][h*16 ..] += C * (ws[h] * xa) for the stored C tiles of one span
 * (amx_store_c4() order), @cnt tokens and @nn column blocks; token i's
 * scale at xa[i * @xst].
 */
static inline void q8a_acc(float *f, const int32_t *c, unsigned int nn,
			   unsigned int cnt, const __m512 *ws,
			   const float *xa, unsigned int xst)
{
	unsigned int b, i, h;

	/* per token block: every address a pointer step (indexing by i / 16
	 * and i % 16 was a third of the loop's instructions) */
	for (b = 0; b * AMX_TB < cnt; b++) {
		const int32_t *cr = c + b * 2 * AMX_CW;
		const float *x = xa + (size_t)b * AMX_TB * xst;
		float *fp = f + b * AMX_TB * 32;
		unsigned int n = cnt - b * AMX_TB < AMX_TB ?
				 cnt - b * AMX_TB : AMX_TB;

		for (i = 0; i < n; i++, cr += 16, x += xst, fp += 32) {
			__m512 xv = _mm512_set1_ps(*x);

			for (h = 0; h < nn; h++)
				_mm512_storeu_ps(fp + h * 16, _mm512_fmadd_ps(
					_mm512_cvtepi32_ps(_mm512_loadu_si512(
						(const void *)(cr +
							       h * AMX_CW))),
					_mm512_mul_ps(ws[h], xv),
					_mm512_loadu_ps(fp + h * 16)));
		}
	}
}

/* Row block @nb's scales of the block at column @k ([K/32][N] f32). */
static inline __m512 q8a_ws(const struct kern_mat *m, unsigned int N,
			    unsigned int nb, unsigned int k)
{
	return _mm512_loadu_ps(m->scales + (size_t)(k / Q8A_G) * N +
			       nb * KERN_TILE_ROWS);
}

/* The B rows of column @k (within the tiles at @t, 64 columns each). */
static inline const uint8_t *q8a_b(const uint8_t *t, unsigned int k)
{
	return t + (size_t)(k / KERN_TILE_K_INT8) * AMX_TILE +
	       k % KERN_TILE_K_INT8 / 4 * AMX_LINE;
}
/* ---- gate + up -------------------------------------------------------------
 * Per row block of 16 and pair of token blocks: the blocks of 32 in K
 * order, gate and up as the two B tiles, the C of one folded into f while
 * the next one's TDPs run; f holds gate's 16 sums then up's per token.
 * The row block's tiles stay in L2 for all token pairs; the first pass
 * prefetches the next row block's tiles and scale lines.
 */
static void AMX_NAME(gate_up_q8_0)(const struct kern_gate_up_args *a)
{
	struct kern_geom geom = { a->K, a->N, 0, KERN_DOWN_CHUNK };
	unsigned int K = a->K, ns = K / Q8A_G, nkb = K / KERN_TILE_K_INT8;
	unsigned int mp = amx_mpad(a->m), nb, tb, j, i;
	size_t rb = (size_t)nkb * AMX_TILE;	/* bytes of a row block */
	struct q8a_scratch s;

	q8a_scratch_init(&s, a->scratch, &geom, a->m);
	amx_gu_gather(a, &s.t, K, 0);
	for (i = 0; i < a->m; i++)
		memcpy(s.xa + (size_t)i * ns, kern_q8_0_row_scales(a->act +
		       a->act_rows[i] * a->act_stride, K), (size_t)ns * 4);
	amx_config(Q8A_G, Q8A_G / 4);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++) {
		const uint8_t *gt = a->gate->tiles + nb * rb;
		const uint8_t *ut = a->up->tiles + nb * rb;

		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = amx_cnt(a->m, tb);
			/* block j's weight scales, set after its TDPs */
			__m512 ws[2] = { _mm512_setzero_ps(),
					 _mm512_setzero_ps() };

			amx_zero_f(s.t.f, 2 * AMX_TB);
			for (j = 0; j < ns; j++) {
				unsigned int k = j * Q8A_G;
				const uint8_t *a0 = amx_atile(&s.t, nkb, tb,
					k / KERN_TILE_K_INT8) +
					k % KERN_TILE_K_INT8;

				if (tb == 0 && k % KERN_TILE_K_INT8 == 0) {
					amx_pf_tile(q8a_b(gt + rb, k));
					amx_pf_tile(q8a_b(ut + rb, k));
				}
				if (tb == 0 && nb + 1 < a->n1 / 16) {
					amx_pf_scale(a->gate, a->N, nb + 1,
						     k / Q8A_G);
					amx_pf_scale(a->up, a->N, nb + 1,
						     k / Q8A_G);
				}
				amx_zero_c4();
				_tile_loadd(4, a0, AMX_LINE);
				_tile_loadd(6, q8a_b(gt, k), AMX_LINE);
				_tile_loadd(7, q8a_b(ut, k), AMX_LINE);
				_tile_dpbssd(0, 4, 6);
				_tile_dpbssd(1, 4, 7);
				if (cnt > AMX_TB) {
					_tile_loadd(5, a0 + (size_t)nkb *
						    AMX_TILE, AMX_LINE);
					_tile_dpbssd(2, 5, 6);
					_tile_dpbssd(3, 5, 7);
				}
				if (j)
					q8a_acc(s.t.f, amx_cbuf(&s.t, j - 1),
						2, cnt, ws, s.xa +
						(size_t)tb * ns + j - 1, ns);
				amx_store_c4(amx_cbuf(&s.t, j));
				ws[0] = q8a_ws(a->gate, a->N, nb, k);
				ws[1] = q8a_ws(a->up, a->N, nb, k);
			}
			q8a_acc(s.t.f, amx_cbuf(&s.t, j - 1), 2, cnt, ws,
				s.xa + (size_t)tb * ns + j - 1, ns);
			amx_gu_out(a, s.t.f, nb, tb, cnt);
		}
	}
	_tile_release();
}

/* ---- down ------------------------------------------------------------------
 * Per pair of output blocks of 16 columns (the two B tiles) and pair of
 * token blocks: the blocks of 32 in K order, chunk by chunk, each folded
 * while the next one's TDPs run; then y += w * f. The first pass
 * prefetches the next pair's tiles.
 */
static void AMX_NAME(down_q8_0)(const struct kern_down_args *a)
{
	struct kern_geom geom = { a->N, a->K, 0, a->kc };
	unsigned int c0 = a->k0 / a->kc, nc = a->k1 / a->kc - c0;
	unsigned int spc = a->kc / Q8A_G, ns = nc * spc;
	unsigned int P = a->kc / KERN_TILE_K_INT8, nkb = nc * P;
	unsigned int mp = amx_mpad(a->m), nb, tb, c, j, h, t, i;
	size_t crow = kern_q8_0_row_bytes(a->kc);
	struct q8a_scratch s;

	q8a_scratch_init(&s, a->scratch, &geom, a->m);
	amx_down_gather(a, nc, crow, a->kc, 0, &s.t);
	for (i = 0; i < a->m; i++)
		for (c = 0; c < nc; c++)
			memcpy(s.xa + (size_t)i * ns + c * spc,
			       kern_q8_0_row_scales(a->act + i * a->act_stride +
						    c * crow, a->kc),
			       (size_t)spc * 4);
	amx_config(Q8A_G, Q8A_G / 4);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb += 2) {
		struct amx_cols cl = amx_cols_pair(a, nb);
		unsigned int nn = cl.nn;

		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = amx_cnt(a->m, tb);
			/* block j's weight scales, set after its TDPs */
			__m512 ws[2] = { _mm512_setzero_ps(),
					 _mm512_setzero_ps() };

			amx_zero_f(s.t.f, 2 * AMX_TB);
			for (j = 0; j < ns; j++) {
				unsigned int kk = j % spc * Q8A_G;
				const uint8_t *bt;
				struct amx_arows ar;

				c = j / spc;
				/* the pair's tiles of chunk c */
				bt = a->down->tiles + kern_tile_off(
					kern_tile_kcm_chunk(a->N, a->kc,
						KERN_TILE_K_INT8, nb, c0 + c));
				if (tb == 0 && kk == 0)
					for (t = 0; t < 2 * P; t++)
						amx_pf_tile(bt + (size_t)
							(2 * P + t) * AMX_TILE);
				ar = amx_down_a(a, &s.t, nkb, nc, crow, tb, c,
						kk);
				amx_down_tiles(&ar, q8a_b(bt, kk), nn > 1 ?
					       q8a_b(bt + P * AMX_TILE, kk) :
					       NULL, 0, 1, cnt > AMX_TB, NULL,
					       NULL, 0, 1);
				if (j)
					q8a_acc(s.t.f, amx_cbuf(&s.t, j - 1),
						nn, cnt, ws, s.xa +
						(size_t)tb * ns + j - 1, ns);
				amx_store_c4(amx_cbuf(&s.t, j));
				for (h = 0; h < nn; h++)
					ws[h] = q8a_ws(a->down, a->N, nb + h,
						       (c0 + c) * a->kc + kk);
			}
			q8a_acc(s.t.f, amx_cbuf(&s.t, j - 1), nn, cnt, ws,
				s.xa + (size_t)tb * ns + j - 1, ns);
			amx_down_out(a, &cl, tb, cnt, s.t.f, NULL);
		}
	}
	_tile_release();
}

static size_t AMX_NAME(scratch_q8_0)(const struct kern_geom *g,
				     unsigned int max_m)
{
	size_t t = q8a_scratch_bytes(g, max_m);
	size_t v = kern_scratch_bytes_q8_0_avx512(g, max_m);

	return t > v ? t : v;
}

#endif /* KT_KERNELS_Q8_0_AMX_H */
