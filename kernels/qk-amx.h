/* SPDX-License-Identifier: MIT */
/*
 * qk-amx.h - the AMX tile body of the GGUF K-quants (Q4_K, Q5_K, Q6_K) for
 * experts with many tokens.
 *
 * A row block's values are widened once per call with their sub-block
 * scales folded in: w = sc * q (Q6_K: sc * (q - 32)), exact in 16 bits
 * (at most 63 * 31, or 128 * 32), and split into two B tiles of bytes,
 * lo (unsigned: TDPBSUD) and hi (signed: TDPBSSD), w = lo + 256 hi. So
 * C_lo + 256 C_hi is the int32 sum over a whole super-block (down: over a
 * chunk of 128), and the vector units fold C into f32 once per span, not
 * once per sub-block of 32 (16):
 *
 *	f += xa * (d * isum - dmin * sum_j m_j * xsum_j)
 *
 * the oracle's per-block step (qk-scalar.c), with the min term an int16
 * dot of the rows' mins and the token's sub-block sums (Q6_K has none: its
 * 32 is in w). Tiles: C0/C1 lo/hi of the first token block, C2/C3 of the
 * second; A 4-5; B 6 (lo) and 7 (hi); one matrix (or down column block)
 * per pass. Uses moe-amx.h's scratch and helpers; included by moe-amx.c
 * and by the AMX emulation test (the includer defines AMX_NAME).
 */
#ifndef KT_KERNELS_QK_AMX_H
#define KT_KERNELS_QK_AMX_H

#include "kernels/moe-amx.h"
#include "kernels/qk.h"

/* B tiles of one 64-column step: lo, then hi */
#define QKA_STEP_BYTES	(2 * AMX_TILE)
/* K-steps of 64 of one super-block */
#define QKA_SB_STEPS	(KERN_Q4_K_SUPER / KERN_TILE_K_INT8)

/*
 * Scratch: the widened B tiles of two matrices over K (K * 64 bytes), the
 * tokens' activation scale per span ([m][K / 128] at most) and their
 * sub-block sums (int16, [m][K / 32]), then moe-amx.h's (A tiles, C
 * buffers, f).
 */
struct qka_scratch {
	struct amx_scratch t;
	uint8_t *b;
	float *xa;
	int16_t *xh;
};

static inline size_t qka_bbytes(const struct kern_geom *g)
{
	return 2 * (amx_kmax(g) / KERN_TILE_K_INT8) * QKA_STEP_BYTES;
}

static inline size_t qka_xbytes(const struct kern_geom *g, unsigned int m)
{
	return amx_align((size_t)amx_mpad(m) * (amx_kmax(g) /
					       KERN_DOWN_CHUNK) * 4);
}

static inline size_t qka_hbytes(const struct kern_geom *g, unsigned int m)
{
	return amx_align((size_t)amx_mpad(m) * (amx_kmax(g) /
					       KERN_Q4_K_SUB) * 2);
}

static inline size_t qka_scratch_bytes(const struct kern_geom *g,
				       unsigned int max_m)
{
	return qka_bbytes(g) + qka_xbytes(g, max_m) + qka_hbytes(g, max_m) +
	       amx_scratch_bytes(g, max_m) + 64;
}

static inline void qka_scratch_init(struct qka_scratch *s, void *base,
				    const struct kern_geom *g, unsigned int m)
{
	uint8_t *p = (uint8_t *)(((uintptr_t)base + 63) & ~(uintptr_t)63);

	s->b = p;
	p += qka_bbytes(g);
	s->xa = (float *)p;
	p += qka_xbytes(g, m);
	s->xh = (int16_t *)p;
	p += qka_hbytes(g, m);
	amx_scratch_init(&s->t, p, g, m);
}

/*
 * The factors of sub-block @j of a record for vpmaddubsw: @e holds sc in
 * the even bytes of each row's dword, @o in the odd ones; @c32 32 sc in
 * both words (Q6_K's offset).
 */
struct qka_sc {
	__m512i e, o, c32;
};

static inline void qka_sc_load(enum kt_quant q, const struct kern_qk_rec *r,
			       unsigned int j, struct qka_sc *f)
{
	__m128i b = _mm_loadu_si128((const __m128i *)(r->sc +
					(size_t)j * KERN_QK_REC_ROWS));
	__m512i s = q == KT_QUANT_Q6_K ? _mm512_cvtepi8_epi32(b) :
		    _mm512_cvtepu8_epi32(b);
	__m512i s8 = _mm512_and_si512(s, _mm512_set1_epi32(0xff));
	__m512i t = _mm512_slli_epi32(s, 5);

	f->e = _mm512_or_si512(s8, _mm512_slli_epi32(s8, 16));
	f->o = _mm512_slli_epi32(f->e, 8);
	f->c32 = _mm512_or_si512(_mm512_and_si512(t, _mm512_set1_epi32(0xffff)),
				 _mm512_slli_epi32(t, 16));
}

/* One line of values @v (0..63, bytes) times the sub-block's scales, as
 * its lo and hi lines. */
static inline void qka_split(enum kt_quant q, __m512i v,
			     const struct qka_sc *f, uint8_t *lo, uint8_t *hi)
{
	const __m512i low = _mm512_set1_epi16(0x00ff);
	__m512i we = _mm512_maddubs_epi16(v, f->e);
	__m512i wo = _mm512_maddubs_epi16(v, f->o);

	if (q == KT_QUANT_Q6_K) {
		we = _mm512_sub_epi16(we, f->c32);
		wo = _mm512_sub_epi16(wo, f->c32);
	}
	/* low ? a : b, bit by bit */
	_mm512_storeu_si512((void *)lo, _mm512_ternarylogic_epi32(low, we,
				_mm512_slli_epi16(wo, 8), 0xca));
	_mm512_storeu_si512((void *)hi, _mm512_ternarylogic_epi32(low,
				_mm512_srli_epi16(we, 8), wo, 0xca));
}

/*
 * The nibble tile @t of @q (16 rows, columns @k .. @k + 127 of an [N][K]
 * matrix whose scales are @scales, rows from 16 nb) to the B tiles of its
 * two 64-column steps at @d: the values (nibble and high bits, layout.h)
 * times their sub-block's scale, lo and hi lines.
 */
static inline void qka_widen(enum kt_quant q, const uint8_t *t,
			     const void *scales, unsigned int K,
			     unsigned int nb, unsigned int k, uint8_t *d)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	unsigned int hb = kern_qk_hi_bits(q), per = hb ? 4 / hb : 1;
	unsigned int sg = kern_qk_sub(q), j0 = k % KERN_Q4_K_SUPER / sg;
	const __m512i mh = _mm512_set1_epi8((char)((1 << hb) - 1));
	struct qka_sc f[KERN_TILE_K_INT4 / KERN_Q6_K_SUB];
	struct kern_qk_rec r;
	unsigned int l, j;

	kern_qk_rec_at(q, scales, K, nb * KERN_TILE_ROWS, k, &r);
	for (j = 0; j < KERN_TILE_K_INT4 / sg; j++)
		qka_sc_load(q, &r, j0 + j, &f[j]);
	for (l = 0; l < KERN_TILE_LINES; l++) {
		__m512i v = _mm512_loadu_si512((const void *)(t +
							      l * AMX_LINE));
		__m512i lo = _mm512_and_si512(v, m4);
		__m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
		/* sub-blocks of columns 4 l and 64 + 4 l */
		unsigned int jl = 4 * l / sg;
		unsigned int jh = (KERN_INT4_HI_K + 4 * l) / sg;

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
		qka_split(q, lo, &f[jl], d + l * AMX_LINE,
			  d + AMX_TILE + l * AMX_LINE);
		qka_split(q, hi, &f[jh], d + QKA_STEP_BYTES + l * AMX_LINE,
			  d + QKA_STEP_BYTES + AMX_TILE + l * AMX_LINE);
	}
}

/* One 64-column step of a pass: A at @a0 (the second token block @next
 * bytes on), rows @ld apart; B lo and hi at @b. */
static inline void qka_step(const uint8_t *a0, size_t ld, size_t next,
			    const uint8_t *b, int two)
{
	_tile_loadd(4, a0, ld);
	_tile_loadd(6, b, AMX_LINE);
	_tile_loadd(7, b + AMX_TILE, AMX_LINE);
	_tile_dpbsud(0, 4, 6);
	_tile_dpbssd(1, 4, 7);
	if (!two)
		return;
	_tile_loadd(5, a0 + next, ld);
	_tile_dpbsud(2, 5, 6);
	_tile_dpbssd(3, 5, 7);
}

/*
 * What a stored pass needs to be folded: the record of its span, the
 * span's first sub-block in it (@j0) and count (@nj), and where the
 * tokens' factors are (xa[i * xst], sums from xh[i * hst]).
 */
struct qka_fold {
	struct kern_qk_rec r;
	unsigned int j0, nj, xst, hst;
	const float *xa;
	const int16_t *xh;
	float *f;		/* this pass's 16 columns of token 0 */
};

/* f[i] += xa_i * (d * (C_lo + 256 C_hi) - dmin * mins . sums_i) for the
 * @cnt tokens of the pass stored at @c (f rows 32 floats apart). */
static inline void qka_fold(enum kt_quant q, const struct qka_fold *p,
			    const int32_t *c, unsigned int cnt)
{
	__m512 d = _mm512_loadu_ps(p->r.d), dmin = _mm512_setzero_ps();
	__m512i mp[KERN_Q4_K_SUPER / KERN_Q4_K_SUB / 2];
	unsigned int np = q == KT_QUANT_Q6_K ? 0 : p->nj / 2, i, k;

	if (np)
		dmin = _mm512_loadu_ps(p->r.dmin);
	/* the mins of sub-blocks j0 + 2k and j0 + 2k + 1, an int16 pair */
	for (k = 0; k < np; k++)
		mp[k] = _mm512_or_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128(
				(const __m128i *)(p->r.mn + (size_t)(p->j0 +
					2 * k) * KERN_QK_REC_ROWS))),
			_mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(
				(const __m128i *)(p->r.mn + (size_t)(p->j0 +
					2 * k + 1) * KERN_QK_REC_ROWS))), 16));
	for (i = 0; i < cnt; i++) {
		const int32_t *cr = c + (i / AMX_TB) * 2 * AMX_CW +
				    (i % AMX_TB) * 16;
		__m512i s = _mm512_add_epi32(
			_mm512_loadu_si512((const void *)cr),
			_mm512_slli_epi32(_mm512_loadu_si512((const void *)
						(cr + AMX_CW)), 8));
		__m512 v = _mm512_mul_ps(d, _mm512_cvtepi32_ps(s));
		float *fp = p->f + i * 32;

		if (np) {
			const int16_t *h = p->xh + (size_t)i * p->hst;
			__m512i ms = _mm512_setzero_si512();
			int32_t pr;

			for (k = 0; k < np; k++) {
				memcpy(&pr, h + 2 * k, sizeof(pr));
				ms = _mm512_add_epi32(ms, _mm512_madd_epi16(
					_mm512_set1_epi32(pr), mp[k]));
			}
			v = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(ms), v);
		}
		_mm512_storeu_ps(fp, _mm512_fmadd_ps(v, _mm512_set1_ps(
				p->xa[i * p->xst]), _mm512_loadu_ps(fp)));
	}
}

/* ---- gate + up -------------------------------------------------------------
 * Per row block of 16: gate's and up's tiles widened, then per pair of
 * token blocks one pass per matrix and super-block, each folded while the
 * next one's TDPs run; f holds gate's 16 sums then up's per token.
 */
static inline __attribute__((always_inline)) void
qka_gate_up(const struct kern_gate_up_args *a, enum kt_quant q)
{
	struct kern_geom geom = { a->K, a->N, 0, KERN_DOWN_CHUNK };
	unsigned int K = a->K, nsb = K / KERN_Q4_K_SUPER;
	unsigned int nt = K / KERN_TILE_K_INT4, nkb = K / KERN_TILE_K_INT8;
	unsigned int nh = K / KERN_Q4_K_SUB, mp = amx_mpad(a->m);
	size_t rb = kern_tile_off_q(q, nt);	/* bytes of a row block */
	size_t bw = (size_t)nkb * QKA_STEP_BYTES;	/* widened matrix */
	unsigned int nb, tb, i, t, sb, mt, n;
	struct qka_scratch s;
	struct qka_fold pend = { .nj = 0 };	/* set by each pass */

	qka_scratch_init(&s, a->scratch, &geom, a->m);
	amx_gu_gather(a, &s.t, K, 0);
	for (i = 0; i < a->m; i++) {
		const uint8_t *r = a->act + a->act_rows[i] * a->act_stride;

		for (sb = 0; sb < nsb; sb++)
			s.xa[(size_t)i * nsb + sb] =
				kern_qk_row_scales(r, K)[sb];
		if (q != KT_QUANT_Q6_K)
			memcpy(s.xh + (size_t)i * nh, kern_qk_row_hsums(r, K,
			       KERN_Q4_K_SUB), (size_t)nh * 2);
	}
	amx_config(AMX_LINE, 16);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++) {
		const uint8_t *tiles[2] = { a->gate->tiles + nb * rb,
					    a->up->tiles + nb * rb };
		const struct kern_mat *mat[2] = { a->gate, a->up };

		for (mt = 0; mt < 2; mt++)
			for (t = 0; t < nt; t++)
				qka_widen(q, tiles[mt] + kern_tile_off_q(q, t),
					  mat[mt]->scales, K, nb,
					  t * KERN_TILE_K_INT4, s.b + mt * bw +
					  (size_t)t * 2 * QKA_STEP_BYTES);
		AMX_BARRIER();
		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = amx_cnt(a->m, tb);

			amx_zero_f(s.t.f, 2 * AMX_TB);
			for (n = 0; n < 2 * nsb; n++) {
				unsigned int k;

				mt = n / nsb;
				sb = n % nsb;
				amx_zero_c4();
				for (k = sb * QKA_SB_STEPS;
				     k < (sb + 1) * QKA_SB_STEPS; k++) {
					if (tb == 0 && k % 2 == 0)
						/* the next row block's tile */
						amx_pf_bytes(tiles[mt] + rb +
							kern_tile_off_q(q, k / 2),
							kern_tile_bytes(q));
					qka_step(amx_atile(&s.t, nkb, tb, k),
						 AMX_LINE,
						 (size_t)nkb * AMX_TILE,
						 s.b + mt * bw + (size_t)k *
						 QKA_STEP_BYTES, cnt > AMX_TB);
				}
				if (n)
					qka_fold(q, &pend,
						 amx_cbuf(&s.t, n - 1), cnt);
				amx_store_c4(amx_cbuf(&s.t, n));
				kern_qk_rec_at(q, mat[mt]->scales, K,
					       nb * KERN_TILE_ROWS,
					       sb * KERN_Q4_K_SUPER, &pend.r);
				pend.j0 = 0;
				pend.nj = KERN_Q4_K_SUPER / KERN_Q4_K_SUB;
				pend.xa = s.xa + (size_t)tb * nsb + sb;
				pend.xst = nsb;
				pend.xh = s.xh + (size_t)tb * nh +
					  sb * pend.nj;
				pend.hst = nh;
				pend.f = s.t.f + mt * 16;
			}
			qka_fold(q, &pend, amx_cbuf(&s.t, n - 1), cnt);
			amx_gu_out(a, s.t.f, nb, tb, cnt);
		}
	}
	_tile_release();
}

/* ---- down ------------------------------------------------------------------
 * Per output block of 16 columns: its tiles of the call's chunks widened,
 * then per pair of token blocks one pass per chunk (the activation has a
 * scale per chunk), folded while the next one's TDPs run, and y += w * f.
 */
static inline __attribute__((always_inline)) void
qka_down(const struct kern_down_args *a, enum kt_quant q)
{
	struct kern_geom geom = { a->N, a->K, 0, a->kc };
	unsigned int c0 = a->k0 / a->kc, nc = a->k1 / a->kc - c0;
	unsigned int sg = kern_qk_sub(q), ns = a->kc / sg;
	unsigned int ks = a->kc / KERN_TILE_K_INT8;	/* steps per chunk */
	unsigned int nkb = nc * ks, mp = amx_mpad(a->m);
	size_t crow = kern_qk_row_bytes(a->kc, sg);
	unsigned int nb, tb, c, i, k;
	struct qka_scratch s;
	struct qka_fold pend = { .nj = 0 };	/* set by each pass */

	qka_scratch_init(&s, a->scratch, &geom, a->m);
	amx_down_gather(a, nc, crow, a->kc, 0, &s.t);
	for (i = 0; i < a->m; i++)
		for (c = 0; c < nc; c++) {
			const uint8_t *r = a->act + i * a->act_stride +
					   c * crow;

			s.xa[(size_t)i * nc + c] = kern_qk_row_scales(r,
								      a->kc)[0];
			if (q != KT_QUANT_Q6_K)
				memcpy(s.xh + ((size_t)i * nc + c) * ns,
				       kern_qk_row_hsums(r, a->kc, sg),
				       (size_t)ns * 2);
		}
	amx_config(AMX_LINE, 16);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++) {
		const struct amx_cols cl = { { nb, 0 }, 1 };	/* one block */

		for (c = 0; c < nc; c++)
			qka_widen(q, a->down->tiles + kern_tile_off_q(q,
					kern_tile_kcm_chunk(a->N, a->kc,
						KERN_TILE_K_INT4, nb, c0 + c)),
				  a->down->scales, a->K, nb, (c0 + c) * a->kc,
				  s.b + (size_t)c * ks * QKA_STEP_BYTES);
		AMX_BARRIER();
		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = amx_cnt(a->m, tb);

			amx_zero_f(s.t.f, 2 * AMX_TB);
			for (c = 0; c < nc; c++) {
				unsigned int kc0 = (c0 + c) * a->kc;

				if (tb == 0)
					/* the next block's tile of chunk c */
					amx_pf_bytes(a->down->tiles +
						kern_tile_off_q(q,
						kern_tile_kcm_chunk(a->N,
							a->kc, KERN_TILE_K_INT4,
							nb + 1, c0 + c)),
						kern_tile_bytes(q));
				amx_zero_c4();
				for (k = 0; k < ks; k++) {
					struct amx_arows ar = amx_down_a(a,
						&s.t, nkb, nc, crow, tb, c,
						k * KERN_TILE_K_INT8);

					qka_step(ar.p, ar.ld, ar.next, s.b +
						 (size_t)(c * ks + k) *
						 QKA_STEP_BYTES, cnt > AMX_TB);
				}
				if (c)
					qka_fold(q, &pend,
						 amx_cbuf(&s.t, c - 1), cnt);
				amx_store_c4(amx_cbuf(&s.t, c));
				kern_qk_rec_at(q, a->down->scales, a->K,
					       nb * KERN_TILE_ROWS, kc0,
					       &pend.r);
				pend.j0 = kc0 % KERN_Q4_K_SUPER / sg;
				pend.nj = ns;
				pend.xa = s.xa + (size_t)tb * nc + c;
				pend.xst = nc;
				pend.xh = s.xh + ((size_t)tb * nc + c) * ns;
				pend.hst = nc * ns;
				pend.f = s.t.f;
			}
			qka_fold(q, &pend, amx_cbuf(&s.t, c - 1), cnt);
			amx_down_out(a, &cl, tb, cnt, s.t.f, NULL);
		}
	}
	_tile_release();
}

/* The entries of K-quant @t: the tile kernels and the scratch of the AMX
 * table's slot (the larger of theirs and the AVX-512 kernels'). */
#define QKA_ENTRIES(t, Q)						\
static void AMX_NAME(gate_up_##t)(const struct kern_gate_up_args *a)	\
{									\
	qka_gate_up(a, Q);						\
}									\
static void AMX_NAME(down_##t)(const struct kern_down_args *a)		\
{									\
	qka_down(a, Q);							\
}									\
static size_t AMX_NAME(scratch_##t)(const struct kern_geom *g,		\
				    unsigned int max_m)			\
{									\
	size_t s = qka_scratch_bytes(g, max_m);				\
	size_t v = kern_scratch_bytes_##t##_avx512(g, max_m);		\
									\
	return s > v ? s : v;						\
}

QKA_ENTRIES(q4_k, KT_QUANT_Q4_K)
QKA_ENTRIES(q5_k, KT_QUANT_Q5_K)
QKA_ENTRIES(q6_k, KT_QUANT_Q6_K)

#endif /* KT_KERNELS_QK_AMX_H */
