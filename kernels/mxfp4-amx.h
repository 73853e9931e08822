/* SPDX-License-Identifier: MIT */
/*
 * mxfp4-amx.h - the AMX tile body of MXFP4 for experts with many tokens:
 * per call, a row block's tiles (gate and up, or a down column block's
 * chunks) are widened once to BF16 B tiles in scratch with each group's
 * E8M0 scale folded in (w * 2^(e - 127) is a bf16 whenever it is a normal
 * number), then every pair of 16-token A tiles runs TDPBF16PS over all of
 * K into its C tiles. Included by moe-mxfp4-amx.c and, on emulated tiles,
 * by the selftests; MXA_NAME(x) names the functions.
 */
#ifndef KT_KERNELS_MXFP4_AMX_H
#define KT_KERNELS_MXFP4_AMX_H

#include <immintrin.h>
#include <string.h>

#include "kernels/amx.h"
#include "kernels/mxfp4.h"
#include "kernels/mxfp4-zmm.h"
#include "kernels/vexp-avx512.h"

#define MXA_TB		16			/* tokens per A tile */
#define MXA_TILE	KERN_TILE_BYTES
#define MXA_LINE	KERN_TILE_ROW_BYTES
#define MXA_CW		(MXA_TILE / 4)		/* floats of a C tile */
/* ldtilecfg and tileloadd read memory the compiler does not see */
#define MXA_BARRIER()	__asm__ volatile("" ::: "memory")

struct mxa_scratch {
	uint8_t *a;	/* A tiles [mpad / 16][nkb][16][64] */
	uint8_t *bg;	/* widened B tiles of gate (down): [nkb][1 KiB] */
	uint8_t *bu;	/* and of up */
	float *c;	/* four stored C tiles */
};

static inline size_t mxa_al64(size_t v)
{
	return (v + 63) & ~(size_t)63;
}

static inline unsigned int mxa_mpad(unsigned int m)
{
	return (m + 2 * MXA_TB - 1) / (2 * MXA_TB) * (2 * MXA_TB);
}

/* A tiles of max_m tokens, two matrices' B tiles of K, four C tiles. */
static inline size_t MXA_NAME(scratch_bytes)(const struct kern_geom *g,
					     unsigned int max_m)
{
	size_t k = g->hidden > g->inter ? g->hidden : g->inter;
	size_t t = mxa_al64(mxa_mpad(max_m) * k * 2) +
		   2 * mxa_al64(k / KERN_TILE_K_BF16 * MXA_TILE) +
		   mxa_al64(4 * MXA_TILE) + 64;
	size_t v = kern_scratch_bytes_mxfp4_avx512(g, max_m);

	return t > v ? t : v;
}

static inline void mxa_init(struct mxa_scratch *s, void *base, unsigned int K,
			    unsigned int m)
{
	uint8_t *p = (uint8_t *)(((uintptr_t)base + 63) & ~(uintptr_t)63);

	s->a = p;
	p += mxa_al64((size_t)mxa_mpad(m) * K * 2);
	s->bg = p;
	p += mxa_al64((size_t)K / KERN_TILE_K_BF16 * MXA_TILE);
	s->bu = p;
	p += mxa_al64((size_t)K / KERN_TILE_K_BF16 * MXA_TILE);
	s->c = (float *)p;
}

/* Eight tiles of 16 rows x 64 bytes: C 0-3, A 4-5, B 6-7. */
static inline void mxa_config(void)
{
	struct kern_amx_cfg c;
	int t;

	kern_amx_cfg_init(&c);
	for (t = 0; t < 8; t++)
		kern_amx_cfg_tile(&c, t, 16, MXA_LINE);
	MXA_BARRIER();
	_tile_loadconfig(&c);
}

/* Token rows (@nkb x 32 bf16 each) into the A tiles, rows to mpad zeroed. */
static inline void mxa_put_rows(const struct mxa_scratch *s, unsigned int nkb,
				unsigned int m, const uint8_t *act,
				size_t stride, const uint32_t *rows)
{
	unsigned int i, kb;

	for (i = 0; i < mxa_mpad(m); i++) {
		uint8_t *d = s->a + (size_t)(i / MXA_TB) * nkb * MXA_TILE +
			     (i % MXA_TB) * MXA_LINE;
		const uint8_t *src = i < m ? act + (rows ? rows[i] : i) *
					     stride : NULL;

		for (kb = 0; kb < nkb; kb++)
			_mm512_storeu_si512((void *)(d + (size_t)kb * MXA_TILE),
				src ? _mm512_loadu_si512((const void *)(src +
						(size_t)kb * MXA_LINE)) :
				      _mm512_setzero_si512());
	}
}

static inline const uint8_t *mxa_atile(const struct mxa_scratch *s,
				       unsigned int nkb, unsigned int tb,
				       unsigned int kb)
{
	return s->a + ((size_t)(tb / MXA_TB) * nkb + kb) * MXA_TILE;
}

/*
 * bf16 pairs @w (row r in lane r) times the rows' scales @sc, exactly:
 * each product of a value of two significant bits and a power of two is
 * an f32 (normal, subnormal or inf) whose upper half is its bf16.
 */
static inline __attribute__((always_inline)) __m512i
mxa_scale_pair(__m512i w, __m512 sc)
{
	const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
	__m512 ev = _mm512_mul_ps(_mm512_castsi512_ps(
				  _mm512_slli_epi32(w, 16)), sc);
	__m512 od = _mm512_mul_ps(_mm512_castsi512_ps(
				  _mm512_and_si512(w, hi)), sc);

	/* (od & hi) | (ev >> 16) */
	return _mm512_ternarylogic_epi32(_mm512_castps_si512(od),
		_mm512_srli_epi32(_mm512_castps_si512(ev), 16), hi, 0xe4);
}

/* Bytes of one group of 16 rows (32 k) in the packed tiles. */
#define MXA_GROUP_BYTES	(KERN_MXFP4_GROUP_LINES * KERN_MXFP4_LINE)
/*
 * Groups that mxa_widen() prefetches ahead: its loads stalled line by line
 * without (gate+up from DRAM, one thread: at 4 tokens 396 us per expert
 * without, 343 with; at 32, 750 -> 599; 16 groups ahead the same).
 */
#define MXA_PF_GROUPS	4

/*
 * The @ng groups of 16 rows at @t (tiles of 4 groups, consecutive), their
 * scales at @e8 (one group's to the next @sstride bytes), to @ng BF16 B
 * tiles at @d.
 */
static inline void mxa_widen(const uint8_t *t, const uint8_t *e8,
			     size_t sstride, unsigned int ng, uint8_t *d)
{
	const __m512i tbl = mx_bf16_table();
	unsigned int g, l;

	for (g = 0; g < ng; g++) {
		const uint8_t *p = t + (size_t)g * MXA_GROUP_BYTES;
		__m512 sc = mx_scale16(e8 + g * sstride);

		kern_amx_pf_l1(p + MXA_PF_GROUPS * MXA_GROUP_BYTES,
			       MXA_GROUP_BYTES);

		for (l = 0; l < KERN_MXFP4_GROUP_LINES; l++) {
			__m512i lo, hi;

			mx_bf16(p + l * KERN_MXFP4_LINE, tbl, &lo, &hi);
			_mm512_storeu_si512((void *)(d + (size_t)g * MXA_TILE +
					     (2 * l) * MXA_LINE),
					    mxa_scale_pair(lo, sc));
			_mm512_storeu_si512((void *)(d + (size_t)g * MXA_TILE +
					     (2 * l + 1) * MXA_LINE),
					    mxa_scale_pair(hi, sc));
		}
	}
}

static inline void MXA_NAME(gate_up)(const struct kern_gate_up_args *a)
{
	const unsigned int K = a->K, nkb = K / KERN_TILE_K_BF16;
	const unsigned int mp = mxa_mpad(a->m);
	unsigned int nb, tb, i, kb, h;
	struct mxa_scratch s;

	mxa_init(&s, a->scratch, K, a->m);
	mxa_put_rows(&s, nkb, a->m, a->act, a->act_stride, a->act_rows);
	mxa_config();
	for (nb = a->n0 / MXA_TB; nb < a->n1 / MXA_TB; nb++) {
		size_t off = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_MXFP4,
							 nb, 0));

		/* the row block's tiles are consecutive along K */
		mxa_widen(a->gate->tiles + off, (const uint8_t *)a->gate->scales +
			  nb * MXA_TB, a->N, nkb, s.bg);
		mxa_widen(a->up->tiles + off, (const uint8_t *)a->up->scales +
			  nb * MXA_TB, a->N, nkb, s.bu);
		MXA_BARRIER();
		for (tb = 0; tb < mp; tb += 2 * MXA_TB) {
			unsigned int cnt = a->m - tb < 2 * MXA_TB ?
					   a->m - tb : 2 * MXA_TB;

			_tile_zero(0);
			_tile_zero(1);
			_tile_zero(2);
			_tile_zero(3);
			for (kb = 0; kb < nkb; kb++) {
				_tile_loadd(4, mxa_atile(&s, nkb, tb, kb),
					    MXA_LINE);
				_tile_loadd(6, s.bg + (size_t)kb * MXA_TILE,
					    MXA_LINE);
				_tile_loadd(7, s.bu + (size_t)kb * MXA_TILE,
					    MXA_LINE);
				_tile_dpbf16ps(0, 4, 6);
				_tile_dpbf16ps(1, 4, 7);
				if (cnt <= MXA_TB)
					continue;
				_tile_loadd(5, mxa_atile(&s, nkb, tb + MXA_TB,
							 kb), MXA_LINE);
				_tile_dpbf16ps(2, 5, 6);
				_tile_dpbf16ps(3, 5, 7);
			}
			_tile_stored(0, s.c, MXA_LINE);
			_tile_stored(1, s.c + MXA_CW, MXA_LINE);
			_tile_stored(2, s.c + 2 * MXA_CW, MXA_LINE);
			_tile_stored(3, s.c + 3 * MXA_CW, MXA_LINE);
			MXA_BARRIER();
			for (i = 0; i < cnt; i++) {
				h = i / MXA_TB;
				_mm512_storeu_ps(a->out + (tb + i) *
						 a->out_stride + nb * MXA_TB -
						 a->n0,
					kern_glu_avx512(a->glu, nb * MXA_TB,
					_mm512_loadu_ps(s.c + 2 * h * MXA_CW +
						(i % MXA_TB) * MXA_TB),
					_mm512_loadu_ps(s.c + (2 * h + 1) *
						MXA_CW + (i % MXA_TB) *
						MXA_TB)));
			}
		}
	}
	_tile_release();
}

/*
 * Down: per block of 16 output columns, the chunks of [k0, k1) widened
 * once (one tile per chunk, consecutive in the chunk-major order only
 * per chunk) and used by every token pair; then y += w * sum per token.
 */
static inline void MXA_NAME(down)(const struct kern_down_args *a)
{
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nkb = (a->k1 - a->k0) / KERN_TILE_K_BF16;
	const unsigned int gpc = a->kc / KERN_MXFP4_GROUP;
	const unsigned int mp = mxa_mpad(a->m);
	const uint8_t *e8 = (const uint8_t *)a->down->scales;
	unsigned int nb, c, tb, i, kb;
	struct mxa_scratch s;

	mxa_init(&s, a->scratch, a->k1 - a->k0, a->m);
	/* a token's chunk rows (kc bf16 each, 256 bytes) are back to back */
	mxa_put_rows(&s, nkb, a->m, a->act, a->act_stride, NULL);
	mxa_config();
	for (nb = a->n0 / MXA_TB; nb < a->n1 / MXA_TB; nb++) {
		for (c = c0; c < c1; c++)
			mxa_widen(a->down->tiles + kern_tile_off(kern_tile_kcm(
					a->N, a->kc, KERN_TILE_K_MXFP4, nb, c)),
				  e8 + kern_mxfp4_scale_idx(a->N, nb * MXA_TB,
							    c * gpc),
				  a->N, gpc, s.bg + (size_t)(c - c0) * gpc *
				  MXA_TILE);
		MXA_BARRIER();
		for (tb = 0; tb < mp; tb += 2 * MXA_TB) {
			unsigned int cnt = a->m - tb < 2 * MXA_TB ?
					   a->m - tb : 2 * MXA_TB;

			_tile_zero(0);
			_tile_zero(2);
			for (kb = 0; kb < nkb; kb++) {
				_tile_loadd(4, mxa_atile(&s, nkb, tb, kb),
					    MXA_LINE);
				_tile_loadd(6, s.bg + (size_t)kb * MXA_TILE,
					    MXA_LINE);
				_tile_dpbf16ps(0, 4, 6);
				if (cnt <= MXA_TB)
					continue;
				_tile_loadd(5, mxa_atile(&s, nkb, tb + MXA_TB,
							 kb), MXA_LINE);
				_tile_dpbf16ps(2, 5, 6);
			}
			_tile_stored(0, s.c, MXA_LINE);
			_tile_stored(2, s.c + 2 * MXA_CW, MXA_LINE);
			MXA_BARRIER();
			for (i = 0; i < cnt; i++) {
				float *y = a->y + a->y_rows[tb + i] *
					   a->y_stride + nb * MXA_TB;
				const float *cv = s.c + (i / MXA_TB) * 2 *
						  MXA_CW + (i % MXA_TB) * MXA_TB;

				_mm512_storeu_ps(y, _mm512_fmadd_ps(
					_mm512_set1_ps(a->w[tb + i]),
					_mm512_loadu_ps(cv),
					_mm512_loadu_ps(y)));
			}
		}
	}
	_tile_release();
}

#endif /* KT_KERNELS_MXFP4_AMX_H */
