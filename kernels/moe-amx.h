/* SPDX-License-Identifier: MIT */
/*
 * moe-amx.h - the many-token kernels of the AMX variant: TDPBSSD for INT8
 * and INT4 (nibbles widened to s8 tiles with AVX-512), TDPBF16PS for BF16,
 * reading the packed tiles as B tiles directly (packed-layout.md).
 *
 * Written against the _tile_*() intrinsics plus AVX-512, so that moe-amx.c
 * builds it with the real instructions and selftests/simd/amx_emu.c with a
 * software emulation of the tiles. The includer defines AMX_NAME(x) for
 * the (static) names and includes <immintrin.h> first.
 *
 * Tiles: 0-3 accumulators C[token block][matrix or n block], 4-5 the A
 * tiles of two blocks of 16 tokens, 6-7 two B tiles. Each B tile is used
 * by both token blocks and each A tile by both B tiles. C tiles are
 * finished in AVX-512 registers (dequantize, scale, SiLU * up, y += w *).
 */
#ifndef KT_KERNELS_MOE_AMX_H
#define KT_KERNELS_MOE_AMX_H

#include <stdint.h>
#include <string.h>

#include "kernels/amx.h"
#include "kernels/kern.h"
#include "kernels/layout.h"
#include "kernels/simd.h"
#include "kernels/vexp-avx512.h"

#define AMX_TB		16			/* tokens per A tile */
#define AMX_TILE	KERN_TILE_BYTES		/* one A, B or C tile */
#define AMX_LINE	KERN_TILE_ROW_BYTES	/* one tile row */
#define AMX_CW		(AMX_TILE / 4)		/* 32-bit words of a C tile */
/* Most bytes per K step and matrix that gate+up's later passes prefetch
 * of the next row block: more (2 to 4 passes) made BF16 T = 512 slower. */
#define AMX_GU_NEXT_MAX	(4 * AMX_LINE)

/*
 * tileloadd reads memory the compiler does not see as an operand (and
 * ldtilecfg names only 8 bytes of the config): make earlier stores land.
 */
#define AMX_BARRIER()	__asm__ volatile("" ::: "memory")

/* C[c] += A[a] . B[b] in BF16 (@bf16) or INT8; a macro: the tile
 * intrinsics take their tile numbers as immediates. */
#define AMX_DP(bf16, c, a, b)						\
	do {								\
		if (bf16)						\
			_tile_dpbf16ps(c, a, b);			\
		else							\
			_tile_dpbssd(c, a, b);				\
	} while (0)

/*
 * Per-call scratch. Activations are gathered once per call into A-tile
 * order: block (tb, kb) of 16 tokens x 64 bytes is one contiguous tile at
 * a + (tb * nkb + kb) * AMX_TILE, so every A load is one sequential KiB.
 */
struct amx_scratch {
	uint8_t *a;		/* A tiles, [mpad / 16][nkb][16][64] */
	float *xs;		/* per token (and chunk) activation scales */
	int32_t *c;		/* two sets of four stored C tiles */
	float *f;		/* f32 sums [32 tokens][32 columns] */
	float *f2;		/* INT4 down: one chunk's sums, same shape */
	int8_t *b4;		/* INT4 tiles widened, two s8 tiles each */
};

static inline size_t amx_align(size_t v)
{
	return (v + 63) & ~(size_t)63;
}

static inline unsigned int amx_mpad(unsigned int m)
{
	return (m + 2 * AMX_TB - 1) / (2 * AMX_TB) * (2 * AMX_TB);
}

/* The longer K of gate/up and down: what per-K scratch is sized by. */
static inline size_t amx_kmax(const struct kern_geom *g)
{
	return g->hidden > g->inter ? g->hidden : g->inter;
}

/* Bytes of the scratch below for @max_m tokens. */
static inline size_t amx_scratch_bytes(const struct kern_geom *g,
				       unsigned int max_m)
{
	size_t mp = amx_mpad(max_m);
	size_t kmax = amx_kmax(g);
	size_t nc = g->inter / 128 + 1;	/* chunks of any KC */

	return amx_align(mp * kmax * 2) + amx_align(mp * nc * 4) +
	       amx_align(8 * AMX_TILE) + 2 * amx_align(4 * AMX_TILE) +
	       amx_align(kmax / KERN_TILE_K_INT4 * 4 * AMX_TILE) + 64;
}

static inline void amx_scratch_init(struct amx_scratch *s, void *base,
				    const struct kern_geom *g, unsigned int m)
{
	uint8_t *p = (uint8_t *)(((uintptr_t)base + 63) & ~(uintptr_t)63);
	size_t mp = amx_mpad(m);
	size_t kmax = amx_kmax(g);
	size_t nc = g->inter / 128 + 1;

	s->a = p;
	p += amx_align(mp * kmax * 2);
	s->xs = (float *)p;
	p += amx_align(mp * nc * 4);
	s->c = (int32_t *)p;
	p += amx_align(8 * AMX_TILE);
	s->f = (float *)p;
	p += amx_align(4 * AMX_TILE);
	s->f2 = (float *)p;
	p += amx_align(4 * AMX_TILE);
	s->b4 = (int8_t *)p;
}

/* All eight tiles 16 rows; A of @acols bytes, B of @brows rows. */
static inline void amx_config(unsigned int acols, unsigned int brows)
{
	struct kern_amx_cfg c;
	int t;

	kern_amx_cfg_init(&c);
	for (t = 0; t < 4; t++)
		kern_amx_cfg_tile(&c, t, 16, AMX_LINE);
	kern_amx_cfg_tile(&c, 4, 16, acols);
	kern_amx_cfg_tile(&c, 5, 16, acols);
	kern_amx_cfg_tile(&c, 6, brows, AMX_LINE);
	kern_amx_cfg_tile(&c, 7, brows, AMX_LINE);
	AMX_BARRIER();
	_tile_loadconfig(&c);
}

/* The INT8/INT4 prepared row: K int8, then the f32 scale. */
static inline float amx_act_scale(const uint8_t *row, unsigned int K)
{
	float s;

	memcpy(&s, row + K, sizeof(s));
	return s;
}

/* Tokens of the token-block pair at @tb that are real (1 .. 32). */
static inline unsigned int amx_cnt(unsigned int m, unsigned int tb)
{
	return m - tb < 2 * AMX_TB ? m - tb : 2 * AMX_TB;
}

/* The A tile of token block @tb (a multiple of 16) and column block kb. */
static inline const uint8_t *amx_atile(const struct amx_scratch *s,
				       unsigned int nkb, unsigned int tb,
				       unsigned int kb)
{
	return s->a + ((size_t)(tb / AMX_TB) * nkb + kb) * AMX_TILE;
}

/* Row @i of the A tiles gets the 64-byte pieces of @src, @nkb of them. */
static inline void amx_put_row(struct amx_scratch *s, unsigned int nkb,
			       unsigned int i, const uint8_t *src)
{
	uint8_t *d = s->a + (size_t)(i / AMX_TB) * nkb * AMX_TILE +
		     (i % AMX_TB) * AMX_LINE;
	unsigned int kb;

	for (kb = 0; kb < nkb; kb++)
		_mm512_storeu_si512((void *)(d + (size_t)kb * AMX_TILE),
				    _mm512_loadu_si512((const void *)
						       (src + kb * AMX_LINE)));
}

/* Zero the A rows of tokens [m, mpad) so every tile load is defined. */
static inline void amx_pad_rows(struct amx_scratch *s, unsigned int nkb,
				unsigned int m)
{
	unsigned int i, kb;

	for (i = m; i < amx_mpad(m); i++)
		for (kb = 0; kb < nkb; kb++)
			_mm512_storeu_si512((void *)(s->a +
				((size_t)(i / AMX_TB) * nkb + kb) * AMX_TILE +
				(i % AMX_TB) * AMX_LINE),
				_mm512_setzero_si512());
	AMX_BARRIER();
}

/* Prefetch the @n bytes at @p into L2 (addresses past the matrix are
 * harmless: prefetches do not fault). */
static inline void amx_pf_bytes(const uint8_t *p, size_t n)
{
	size_t l;

	for (l = 0; l < n; l += AMX_LINE)
		_mm_prefetch((const char *)p + l, _MM_HINT_T1);
}

/* Prefetch the 1 KiB tile at @p into L2. */
static inline void amx_pf_tile(const uint8_t *p)
{
	amx_pf_bytes(p, AMX_TILE);
}

/*
 * Prefetch into L2 row block @nb's scales of K group @g, of a matrix with
 * [groups][N] f32 scales: one line per group, N * 4 bytes apart, a stride
 * the hardware prefetcher does not follow, so that left alone each line
 * is a DRAM miss in the middle of a fold (Q8_0 gate+up at m = 32 from
 * DRAM, one thread: 664 -> 484 us per expert).
 */
static inline void amx_pf_scale(const struct kern_mat *m, unsigned int N,
				unsigned int nb, unsigned int g)
{
	_mm_prefetch((const char *)(m->scales + (size_t)g * N +
				    nb * KERN_TILE_ROWS), _MM_HINT_T1);
}

/* Zero the four C tiles. */
static inline void amx_zero_c4(void)
{
	_tile_zero(0);
	_tile_zero(1);
	_tile_zero(2);
	_tile_zero(3);
}

/*
 * Widen the INT4 tile @t to two s8 B tiles: k 0..63 (low nibbles) at @d
 * and k 64..127 (high) at @d + AMX_TILE, each nibble minus 8.
 */
static inline void amx_widen_i4(const uint8_t *t, int8_t *d)
{
	const __m512i mask = _mm512_set1_epi8(0x0f);
	const __m512i eight = _mm512_set1_epi8(8);
	unsigned int l;

	for (l = 0; l < AMX_TILE; l += AMX_LINE) {
		__m512i v = _mm512_loadu_si512((const void *)(t + l));
		__m512i lo = _mm512_and_si512(v, mask);
		__m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);

		_mm512_storeu_si512((void *)(d + l),
				    _mm512_sub_epi8(lo, eight));
		_mm512_storeu_si512((void *)(d + AMX_TILE + l),
				    _mm512_sub_epi8(hi, eight));
	}
}

/* The widened B rows of K offset @k (in a row block widened from @b). */
static inline const int8_t *amx_b4(const int8_t *b, unsigned int k)
{
	unsigned int kk = k % KERN_TILE_K_INT4;

	return b + (size_t)(k / KERN_TILE_K_INT4) * 2 * AMX_TILE +
	       (kk >= KERN_TILE_K_INT8) * AMX_TILE +
	       (kk % KERN_TILE_K_INT8) / 4 * AMX_LINE;
}

/* f[i][0:16] += (float)c[i][0:16] * scale[0:16] for the rows i < @rows of
 * one C tile (stored at @c) and 16 columns of f, @fs floats apart. */
static inline void amx_acc_vec(float *f, unsigned int fs, const int32_t *c,
			       __m512 scale, unsigned int rows)
{
	unsigned int i;

	for (i = 0; i < rows; i++) {
		__m512 v = _mm512_cvtepi32_ps(_mm512_loadu_si512(
					(const void *)(c + i * 16)));

		_mm512_storeu_ps(f + i * fs, _mm512_fmadd_ps(v, scale,
					_mm512_loadu_ps(f + i * fs)));
	}
}

/* Zero @rows rows of 32 floats. */
static inline void amx_zero_f(float *f, unsigned int rows)
{
	unsigned int i;

	for (i = 0; i < rows * 2; i++)
		_mm512_storeu_ps(f + i * 16, _mm512_setzero_ps());
}

/* ---- gate + up -------------------------------------------------------------
 * Per block of 16 rows: gate and up tiles in turn as B (tiles 6 and 7),
 * two token blocks as A (4 and 5): C0 = A4.Bg, C1 = A4.Bu, C2 = A5.Bg,
 * C3 = A5.Bu. The K loop is the whole row; the row block's tiles (2 x 16 x
 * K bytes) stay in L2 while all token blocks pass over them; the first
 * pass, which reads them from DRAM, prefetches each tile right before it
 * loads it (kern_amx_pf_l1()).
 */

/* Gather the m rows (K bytes each) into A tiles; @xs: their scales. */
static inline void amx_gu_gather(const struct kern_gate_up_args *a,
				 struct amx_scratch *s, size_t bytes, int xs)
{
	unsigned int i, nkb = (unsigned int)(bytes / AMX_LINE);

	for (i = 0; i < a->m; i++) {
		const uint8_t *r = a->act + a->act_rows[i] * a->act_stride;

		amx_put_row(s, nkb, i, r);
		if (xs)
			s->xs[i] = amx_act_scale(r, a->K);
	}
	amx_pad_rows(s, nkb, a->m);
}

/* The four C tiles of one pass, stored as [C0 C1 C2 C3]. */
static inline void amx_store_c4(int32_t *c)
{
	_tile_stored(0, c, AMX_LINE);
	_tile_stored(1, c + AMX_CW, AMX_LINE);
	_tile_stored(2, c + 2 * AMX_CW, AMX_LINE);
	_tile_stored(3, c + 3 * AMX_CW, AMX_LINE);
	AMX_BARRIER();
}

/* Row i (of 32) of the C pair {gate, up} stored by amx_store_c4(). */
static inline const int32_t *amx_crow(const int32_t *c, unsigned int i)
{
	return c + (i / AMX_TB) * 2 * AMX_CW + (i % AMX_TB) * 16;
}

static inline float *amx_out(const struct kern_gate_up_args *a,
			     unsigned int nb, unsigned int i)
{
	return a->out + i * a->out_stride + nb * 16 - a->n0;
}

/* out = GLU(gate, up) of row block @nb for tokens [tb, tb + cnt), from f's
 * rows of 32: gate's 16 sums, then up's. */
static inline void amx_gu_out(const struct kern_gate_up_args *a,
			      const float *f, unsigned int nb,
			      unsigned int tb, unsigned int cnt)
{
	unsigned int i;

	for (i = 0; i < cnt; i++)
		_mm512_storeu_ps(amx_out(a, nb, tb + i),
				 kern_glu_avx512(a->glu, nb * KERN_TILE_ROWS,
						 _mm512_loadu_ps(f + i * 32),
						 _mm512_loadu_ps(f + i * 32 +
								 16)));
}

/*
 * The passes run one step of a software pipeline apart: the C tiles of
 * pass n are stored to one of two buffers (amx_cbuf()) and finished by the
 * vector units, row by row between the tile instructions of pass n + 1.
 */
static inline int32_t *amx_cbuf(const struct amx_scratch *s, unsigned int n)
{
	return s->c + (n & 1) * 4 * AMX_CW;
}

/* A stored gate+up pass waiting to be finished: @cnt rows from @tb. */
struct amx_gu_pend {
	const int32_t *c;
	unsigned int nb, tb, cnt;
};

/* Finish row @i of the pending pass @p: out = GLU(gate, up). */
static inline void amx_gu_fin_row(const struct kern_gate_up_args *a,
				  const struct amx_scratch *s,
				  const struct amx_gu_pend *p, unsigned int i,
				  int bf16)
{
	const int32_t *c = amx_crow(p->c, i);
	__m512 g, u;

	if (bf16) {
		g = _mm512_loadu_ps((const float *)c);
		u = _mm512_loadu_ps((const float *)(c + AMX_CW));
	} else {
		__m512 xs = _mm512_set1_ps(s->xs[p->tb + i]);

		/* (float)acc * (xs * ws): the oracle's order */
		g = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(
				(const void *)c)),
			_mm512_mul_ps(xs, _mm512_loadu_ps(a->gate->scales +
							  p->nb * 16)));
		u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(
				(const void *)(c + AMX_CW))),
			_mm512_mul_ps(xs, _mm512_loadu_ps(a->up->scales +
							  p->nb * 16)));
	}
	_mm512_storeu_ps(amx_out(a, p->nb, p->tb + i),
			 kern_glu_avx512(a->glu, p->nb * KERN_TILE_ROWS, g, u));
}

/*
 * One pass of INT8 (@bf16 0) or BF16 gate+up over @nkb K steps: A tiles
 * from @a0 (and @a1 if @two), B from @gt and @ut. Per step it also
 * finishes one row of the pending pass @p, and prefetches @per bytes of
 * the next row block's gate (@ng) and up (@nu) tiles into L2. @pf: the
 * first pass, whose B tiles come from DRAM; it finishes @p after its loop
 * (output stores within it would take fill buffers from the weights).
 */
static inline void amx_gu_tiles(const struct kern_gate_up_args *a,
				const struct amx_scratch *s,
				const struct amx_gu_pend *p,
				const uint8_t *a0, const uint8_t *a1,
				const uint8_t *gt, const uint8_t *ut,
				unsigned int nkb, int two, int pf, int bf16,
				const uint8_t *ng, const uint8_t *nu,
				size_t per)
{
	unsigned int kb, i;

	amx_zero_c4();
	for (kb = 0; kb < nkb; kb++) {
		size_t o = (size_t)kb * AMX_TILE;

		/* the tiles about to be loaded (INT8 gate+up from DRAM, one
		 * thread, m 1 to 8: 225 us per expert without, 205-210
		 * with; 1 to 16 tiles ahead instead, or as well: 225-238) */
		if (pf) {
			kern_amx_pf_l1(gt + o, AMX_TILE);
			kern_amx_pf_l1(ut + o, AMX_TILE);
		}
		if (per) {
			amx_pf_bytes(ng + kb * per, per);
			amx_pf_bytes(nu + kb * per, per);
		}
		_tile_loadd(4, a0 + o, AMX_LINE);
		_tile_loadd(6, gt + o, AMX_LINE);
		_tile_loadd(7, ut + o, AMX_LINE);
		AMX_DP(bf16, 0, 4, 6);
		AMX_DP(bf16, 1, 4, 7);
		if (two) {
			_tile_loadd(5, a1 + o, AMX_LINE);
			AMX_DP(bf16, 2, 5, 6);
			AMX_DP(bf16, 3, 5, 7);
		}
		if (!pf && kb < p->cnt)
			amx_gu_fin_row(a, s, p, kb, bf16);
	}
	for (i = pf ? 0 : nkb; i < p->cnt; i++)
		amx_gu_fin_row(a, s, p, i, bf16);
}

/*
 * INT8 (@bf16 0) and BF16 gate+up: passes over (row block, token pair).
 * A row block's tiles (2 x 16 x K bytes) stay in L2 while its passes run;
 * the passes after the first prefetch the next row block's tiles, spread
 * evenly over their K steps.
 */
static inline void amx_gate_up_8_16(const struct kern_gate_up_args *a,
				    int bf16)
{
	struct kern_geom geom = { a->K, a->N, 0, 128 };
	unsigned int kt = bf16 ? KERN_TILE_K_BF16 : KERN_TILE_K_INT8;
	unsigned int nkb = a->K / kt, mp = amx_mpad(a->m);
	unsigned int np = mp / (2 * AMX_TB), nb, tb, n = 0;
	size_t rbb = (size_t)nkb * AMX_TILE;	/* bytes of a row block */
	/* next row block bytes per K step of the passes after the first;
	 * none when that is more than AMX_GU_NEXT_MAX */
	size_t per = np > 1 ? (rbb / ((np - 1) * nkb) + AMX_LINE - 1) /
			      AMX_LINE * AMX_LINE : 0;
	struct amx_gu_pend pend = { NULL, 0, 0, 0 };
	struct amx_scratch s;

	if (per > AMX_GU_NEXT_MAX)
		per = 0;
	amx_scratch_init(&s, a->scratch, &geom, a->m);
	amx_gu_gather(a, &s, (size_t)nkb * AMX_LINE, !bf16);
	amx_config(AMX_LINE, 16);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++) {
		size_t off = (size_t)nb * rbb;

		for (tb = 0; tb < mp; tb += 2 * AMX_TB, n++) {
			/* offset in the next row block of this pass's part */
			size_t nx = tb ? (tb / (2 * AMX_TB) - 1) * nkb * per :
				    rbb;
			int pn = nb + 1 < a->n1 / 16 && nx < rbb;

			amx_gu_tiles(a, &s, &pend, amx_atile(&s, nkb, tb, 0),
				     amx_atile(&s, nkb, tb + AMX_TB, 0),
				     a->gate->tiles + off, a->up->tiles + off,
				     nkb, amx_cnt(a->m, tb) > AMX_TB, tb == 0,
				     bf16, a->gate->tiles + off + rbb + nx * pn,
				     a->up->tiles + off + rbb + nx * pn,
				     pn ? per : 0);
			amx_store_c4(amx_cbuf(&s, n));
			pend.c = amx_cbuf(&s, n);
			pend.nb = nb;
			pend.tb = tb;
			pend.cnt = amx_cnt(a->m, tb);
		}
	}
	for (tb = 0; tb < pend.cnt; tb++)
		amx_gu_fin_row(a, &s, &pend, tb, bf16);
	_tile_release();
}

static void AMX_NAME(gate_up_q8)(const struct kern_gate_up_args *a)
{
	amx_gate_up_8_16(a, 0);
}

static void AMX_NAME(gate_up_bf16)(const struct kern_gate_up_args *a)
{
	amx_gate_up_8_16(a, 1);
}

/* f += C * group scales for the stored C of one INT4 gate+up group. */
static inline void amx_gu_acc_q4(const struct kern_gate_up_args *a,
				 float *fg, float *fu, const int32_t *cb,
				 unsigned int nb, unsigned int g,
				 unsigned int cnt)
{
	__m512 sg = _mm512_loadu_ps(a->gate->scales + (size_t)g * a->N +
				    nb * 16);
	__m512 su = _mm512_loadu_ps(a->up->scales + (size_t)g * a->N +
				    nb * 16);
	unsigned int c0 = cnt < AMX_TB ? cnt : AMX_TB;

	amx_acc_vec(fg, 16, cb, sg, c0);
	amx_acc_vec(fu, 16, cb + AMX_CW, su, c0);
	if (cnt <= AMX_TB)
		return;
	amx_acc_vec(fg + AMX_TB * 16, 16, cb + 2 * AMX_CW, sg, cnt - AMX_TB);
	amx_acc_vec(fu + AMX_TB * 16, 16, cb + 3 * AMX_CW, su, cnt - AMX_TB);
}

/* Tokens up to which INT4 gate+up and down widen through an L1 ring
 * (gate_up_q4 below). */
#define AMX_Q4_RING_M	(6 * AMX_TB)

/*
 * Where INT4 tile @t of a gate+up row block is widened: a slot of four s8
 * tiles (gate's two, then up's) per tile of the row block, or with @ring
 * one of two slots in turn.
 */
static inline int8_t *amx_gu_slot(int8_t *b4, unsigned int t, int ring)
{
	return b4 + (size_t)(ring ? t & 1 : t) * 4 * AMX_TILE;
}

/* Widen INT4 tile @t of the row block of gate at @gt and of up at @ut
 * into its slot. */
static inline void amx_widen_gu(const uint8_t *gt, const uint8_t *ut,
				unsigned int t, int8_t *b4, int ring)
{
	int8_t *d = amx_gu_slot(b4, t, ring);

	amx_widen_i4(gt + (size_t)t * AMX_TILE, d);
	amx_widen_i4(ut + (size_t)t * AMX_TILE, d + 2 * AMX_TILE);
	AMX_BARRIER();
}

/* At the first K step of INT4 tile @t of a pass: the first pass prefetches
 * the next row block's tile @t, the ring widens tile @t + 1. */
static inline void amx_gu_q4_tile(const uint8_t *gt, const uint8_t *ut,
				  unsigned int t, unsigned int nt, int first,
				  int8_t *b4, int ring)
{
	if (first) {
		amx_pf_tile(gt + (size_t)(nt + t) * AMX_TILE);
		amx_pf_tile(ut + (size_t)(nt + t) * AMX_TILE);
	}
	if (ring && t + 1 < nt)
		amx_widen_gu(gt, ut, t + 1, b4, ring);
}

/*
 * INT4: each group is a K span of its own (32 bytes of A and 8 B rows for
 * G = 32, 64 and 16 otherwise) whose four int32 C tiles are scaled into
 * f32 (per column group scales) while the next group's TDPs run; the
 * token scale is applied at the end. The nibbles are widened to s8 with
 * AVX-512. Up to AMX_Q4_RING_M tokens, every pass widens one INT4 tile
 * (128 of K) of gate and of up at a time, a tile ahead of its TDPs, into
 * a two-slot ring of 8 KiB that stays in L1; from more, the row block is
 * widened once (2 x 16 x K bytes, in L2) for all its passes. The row
 * block's 64 KiB of s8 go through to L2: at one pass that was 95 of 222
 * us per expert (m = 32, in cache); re-widening per pass pays up to
 * three passes (build/scripts/amx-cross -q int4 -o gate_up -s 770, us per
 * expert, row block / ring: m = 16 254-257 / 176-182, 32 287-296 /
 * 221-227, 48 372 / 331-343, 64 406-429 / 376, 96 545-554 / 527-542, 128
 * 658-667 / 688-697).
 */
static void AMX_NAME(gate_up_q4)(const struct kern_gate_up_args *a)
{
	struct kern_geom geom = { a->K, a->N, 0, 128 };
	unsigned int K = a->K, G = a->group;
	unsigned int ks = G < KERN_TILE_K_INT8 ? G : KERN_TILE_K_INT8;
	unsigned int nkb = K / KERN_TILE_K_INT8, nt = K / KERN_TILE_K_INT4;
	unsigned int mp = amx_mpad(a->m), nb, tb, g, i, t, k;
	int ring = mp <= AMX_Q4_RING_M;
	struct amx_scratch s;
	float *fg, *fu;

	amx_scratch_init(&s, a->scratch, &geom, a->m);
	amx_gu_gather(a, &s, K, 1);
	/* f: gate sums [32][16] then up sums [32][16] */
	fg = s.f;
	fu = s.f + 2 * AMX_TB * 16;
	amx_config(ks, ks / 4);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++) {
		const uint8_t *gt = a->gate->tiles + (size_t)nb * nt * AMX_TILE;
		const uint8_t *ut = a->up->tiles + (size_t)nb * nt * AMX_TILE;

		for (t = 0; !ring && t < nt; t++)
			amx_widen_gu(gt, ut, t, s.b4, 0);
		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = amx_cnt(a->m, tb);
			int two = cnt > AMX_TB;

			amx_zero_f(s.f, 2 * AMX_TB);
			if (ring)
				amx_widen_gu(gt, ut, 0, s.b4, ring);
			for (g = 0; g < K / G; g++) {
				amx_zero_c4();
				for (k = g * G; k < (g + 1) * G; k += ks) {
					const uint8_t *a0 = amx_atile(&s, nkb,
						tb, k / KERN_TILE_K_INT8) +
						k % KERN_TILE_K_INT8;
					unsigned int kt = k / KERN_TILE_K_INT4;
					const int8_t *wg = amx_b4(amx_gu_slot(
						s.b4, kt, ring),
						k % KERN_TILE_K_INT4);

					if (k % KERN_TILE_K_INT4 == 0)
						amx_gu_q4_tile(gt, ut, kt, nt,
							       tb == 0, s.b4,
							       ring);
					_tile_loadd(4, a0, AMX_LINE);
					_tile_loadd(6, wg, AMX_LINE);
					_tile_loadd(7, wg + 2 * AMX_TILE,
						    AMX_LINE);
					_tile_dpbssd(0, 4, 6);
					_tile_dpbssd(1, 4, 7);
					if (!two)
						continue;
					_tile_loadd(5, a0 + (size_t)nkb *
						    AMX_TILE, AMX_LINE);
					_tile_dpbssd(2, 5, 6);
					_tile_dpbssd(3, 5, 7);
				}
				if (g)
					amx_gu_acc_q4(a, fg, fu,
						      amx_cbuf(&s, g - 1), nb,
						      g - 1, cnt);
				amx_store_c4(amx_cbuf(&s, g));
			}
			amx_gu_acc_q4(a, fg, fu, amx_cbuf(&s, g - 1), nb,
				      g - 1, cnt);
			for (i = 0; i < cnt; i++) {
				__m512 xs = _mm512_set1_ps(s.xs[tb + i]);
				__m512 gv = _mm512_mul_ps(_mm512_loadu_ps(fg +
							  i * 16), xs);
				__m512 uv = _mm512_mul_ps(_mm512_loadu_ps(fu +
							  i * 16), xs);

				_mm512_storeu_ps(amx_out(a, nb, tb + i),
						 kern_glu_avx512(a->glu,
							nb * KERN_TILE_ROWS, gv, uv));
			}
		}
	}
	_tile_release();
}

/* ---- down ----------------------------------------------------------------
 * Per pair of output blocks of 16 columns (C0 = A4.B6, C1 = A4.B7 for the
 * first token block, C2, C3 for the second; INT8 and BF16 pair blocks
 * half the call apart, amx_cols_at()) and pair of token blocks: the
 * K chunks in order; INT8/INT4 flush C per chunk with the chunk's
 * activation scale into f32 sums, BF16 keeps accumulating in C. Then
 * y += w * (sum * row scale). The pair's tiles of all chunks (2 x K x 16
 * bytes for INT8) stay in L1 while the token blocks pass over them.
 * During the first pass the tiles it visits next are prefetched (INT8,
 * BF16: amx_down_next(); INT4: the next pair's of each chunk). INT4 and
 * the GGUF blocks keep neighbouring pairs: their down is bound by the
 * widening and the folds, not the stream, and INT4 measured slower apart.
 */

/*
 * A whole pair of token blocks is loaded straight from the prepared rows
 * (they are act_stride apart, a uniform tile stride); only a last,
 * partial pair is gathered into the scratch (block pair 0), zero-padded,
 * so that no load reads past the caller's rows. @crow: bytes of one chunk
 * row, the first @kb its payload; @scales: read the chunks' activation
 * scales of every token into xs[i * nc + c].
 */
static void amx_down_gather(const struct kern_down_args *a, unsigned int nc,
			    size_t crow, size_t kb, int scales,
			    struct amx_scratch *s)
{
	unsigned int i, c, j, nkb = (unsigned int)(nc * kb / AMX_LINE);
	unsigned int pc = (unsigned int)(kb / AMX_LINE);
	unsigned int full = a->m / (2 * AMX_TB) * (2 * AMX_TB);

	for (i = 0; scales && i < a->m; i++)
		for (c = 0; c < nc; c++)
			s->xs[i * nc + c] = amx_act_scale(a->act +
				i * a->act_stride + c * crow, a->kc);
	if (full == a->m)
		return;
	for (i = full; i < a->m; i++) {
		uint8_t *d = s->a + (size_t)((i - full) / AMX_TB) * nkb *
			     AMX_TILE + ((i - full) % AMX_TB) * AMX_LINE;

		for (c = 0; c < nc; c++) {
			const uint8_t *r = a->act + i * a->act_stride +
					   c * crow;

			for (j = 0; j < pc; j++)
				_mm512_storeu_si512((void *)(d + (size_t)
					(c * pc + j) * AMX_TILE),
					_mm512_loadu_si512((const void *)
						(r + j * AMX_LINE)));
		}
	}
	amx_pad_rows(s, nkb, a->m - full);
}

/*
 * The A rows of a down pass: @p the first token block's tile at the
 * current K step, @ld the row stride, @step bytes to the next K step
 * (64 bytes of K), @next bytes to the second token block.
 */
struct amx_arows {
	const uint8_t *p;
	size_t ld, step, next;
};

/* A of token pair @tb at payload byte @kb of chunk @c (see above). */
static inline struct amx_arows amx_down_a(const struct kern_down_args *a,
					  const struct amx_scratch *s,
					  unsigned int nkb, unsigned int nc,
					  size_t crow, unsigned int tb,
					  unsigned int c, unsigned int kb)
{
	struct amx_arows r;
	unsigned int pc = nkb / nc;

	if (tb + 2 * AMX_TB <= a->m) {
		r.p = a->act + tb * a->act_stride + c * crow + kb;
		r.ld = a->act_stride;
		r.step = AMX_LINE;
		r.next = AMX_TB * a->act_stride;
	} else {
		r.p = s->a + (size_t)(c * pc + kb / AMX_LINE) * AMX_TILE +
		      kb % AMX_LINE;
		r.ld = AMX_LINE;
		r.step = AMX_TILE;
		r.next = (size_t)nkb * AMX_TILE;
	}
	return r;
}

/* The column blocks of a down pass: @b[0] and, where @nn is 2, @b[1]. */
struct amx_cols {
	unsigned int b[2];
	unsigned int nn;
};

/* Neighbours @nb and nb + 1 (the second where the call has it). */
static inline struct amx_cols amx_cols_pair(const struct kern_down_args *a,
					    unsigned int nb)
{
	struct amx_cols c = { { nb, nb + 1 }, nb + 1 < a->n1 / 16 ? 2 : 1 };

	return c;
}

/*
 * INT8 and BF16 down calls of up to AMX_DOWN_APART_M tokens take their
 * column blocks apart: pass j the call's blocks j and j + d (of n, d =
 * ceil(n / 2); with n odd, block d - 1 alone), so that the first pass
 * over the weights reads two streams of each chunk at once where
 * neighbours are one (INT8 down from DRAM, one thread, 1024-column calls:
 * 1.1-1.28x at 9 to 64 tokens; Documentation/simd.md). Longer calls make
 * more passes over weights in cache, and there neighbours, whose y lines
 * are adjacent, measured faster in the layer (BF16 T = 4096 200-205 ms
 * against 215-222 apart).
 */
#define AMX_DOWN_APART_M	64

/* The distance of a pass's two blocks: 1 (neighbours) or d above. */
static inline unsigned int amx_cols_d(const struct kern_down_args *a)
{
	return a->m <= AMX_DOWN_APART_M ? ((a->n1 - a->n0) / 16 + 1) / 2 : 1;
}

/* How many passes over column blocks a down call makes. */
static inline unsigned int amx_cols_passes(const struct kern_down_args *a)
{
	return ((a->n1 - a->n0) / 16 + 1) / 2;
}

/* The column blocks of pass @j of a down call. */
static inline struct amx_cols amx_cols_at(const struct kern_down_args *a,
					  unsigned int j)
{
	unsigned int d = amx_cols_d(a);
	unsigned int b0 = a->n0 / 16 + (d == 1 ? 2 * j : j);
	struct amx_cols c = { { b0, b0 + d }, b0 + d < a->n1 / 16 ? 2 : 1 };

	return c;
}

/* y[y_rows[tb + i]][b*16 ..] += w * (f[i] * rs[b*16 ..]) for the blocks b
 * of @cl (@rs NULL: no column scale), f rows 32 floats apart. */
static void amx_down_out(const struct kern_down_args *a,
			 const struct amx_cols *cl, unsigned int tb,
			 unsigned int cnt, const float *f, const float *rs)
{
	const struct amx_cols c = *cl;	/* registers, not loads */
	unsigned int i, h;

	for (i = 0; i < cnt; i++) {
		float *y = a->y + a->y_rows[tb + i] * a->y_stride;
		__m512 w = _mm512_set1_ps(a->w[tb + i]);

		for (h = 0; h < c.nn; h++) {
			float *yp = y + c.b[h] * 16;
			__m512 v = _mm512_loadu_ps(f + i * 32 + h * 16);

			if (rs)
				v = _mm512_mul_ps(v, _mm512_loadu_ps(rs +
						  c.b[h] * 16));
			_mm512_storeu_ps(yp, _mm512_fmadd_ps(w, v,
					 _mm512_loadu_ps(yp)));
		}
	}
}

/*
 * One chunk (or group) of a down pass: @nk K steps of A at @ar, B of the
 * first column block at @b0 and of the second at @b1 (NULL: only one),
 * @bs bytes per step; @pf0, @pf1: tiles to prefetch (NULL: none), one of
 * each per step.
 */
static inline void amx_down_tiles(const struct amx_arows *ar,
				  const uint8_t *b0, const uint8_t *b1,
				  size_t bs, unsigned int nk, int two,
				  const uint8_t *pf0, const uint8_t *pf1,
				  int bf16, int zero)
{
	unsigned int k;

	if (zero)
		amx_zero_c4();
	for (k = 0; k < nk; k++) {
		const uint8_t *ap = ar->p + k * ar->step;

		if (pf0)
			amx_pf_tile(pf0 + (size_t)k * AMX_TILE);
		if (pf1)
			amx_pf_tile(pf1 + (size_t)k * AMX_TILE);
		_tile_loadd(4, ap, ar->ld);
		_tile_loadd(6, b0 + k * bs, AMX_LINE);
		AMX_DP(bf16, 0, 4, 6);
		if (b1) {
			_tile_loadd(7, b1 + k * bs, AMX_LINE);
			AMX_DP(bf16, 1, 4, 7);
		}
		if (!two)
			continue;
		_tile_loadd(5, ap + ar->next, ar->ld);
		AMX_DP(bf16, 2, 5, 6);
		if (b1)
			AMX_DP(bf16, 3, 5, 7);
	}
}

/*
 * f[i][h*16 ..] += (float)C[i][..] * sc(i) for the stored C tiles of a
 * down pass: @nn column blocks, @cnt tokens; the scale vector of row i is
 * xs[i * xstride] broadcast (@xs non-NULL) or @vs[h] (per column).
 */
static inline void amx_down_acc(float *f, const int32_t *c, unsigned int nn,
				unsigned int cnt, const float *xs,
				unsigned int xstride, const float *const *vs)
{
	unsigned int i, h;

	for (i = 0; i < cnt; i++) {
		const int32_t *cr = c + (i / AMX_TB) * 2 * AMX_CW +
				    (i % AMX_TB) * 16;

		for (h = 0; h < nn; h++) {
			__m512 v = _mm512_cvtepi32_ps(_mm512_loadu_si512(
					(const void *)(cr + h * AMX_CW)));
			__m512 sc = xs ? _mm512_set1_ps(xs[i * xstride]) :
					 _mm512_loadu_ps(vs[h]);
			float *fp = f + i * 32 + h * 16;

			_mm512_storeu_ps(fp, _mm512_fmadd_ps(v, sc,
					 _mm512_loadu_ps(fp)));
		}
	}
}

/* The tiles of column block @nb in chunk @c of the down matrix, @kt of
 * K per tile (the k-chunk-major layout, kernels/layout.h). */
static inline const uint8_t *amx_down_bt(const struct kern_down_args *a,
					 unsigned int kt, unsigned int nb,
					 unsigned int c)
{
	return a->down->tiles + kern_tile_off(kern_tile_kcm_chunk(a->N, a->kc,
								  kt, nb, c));
}

/*
 * The tiles of block @h of the pass's blocks @cl that the first pass
 * visits after chunk @c (of the call's @nc, @c0 the first): the same
 * block's in the next chunk (256 KiB on for H 2048), or after the last
 * chunk those of block @h of the next pass's @ncl in the first (NULL
 * without such a block). Prefetching those rather than the next pair's
 * of the same chunk: BF16 down from DRAM, one thread, 284 -> 241 us per
 * expert at m = 32, 354 -> 313 at 64; INT8 300 -> 270 at 64.
 */
static inline const uint8_t *amx_down_next(const struct kern_down_args *a,
					   const struct amx_cols *cl,
					   const struct amx_cols *ncl,
					   unsigned int h, unsigned int kt,
					   unsigned int c0, unsigned int c,
					   unsigned int nc)
{
	if (c + 1 < nc)
		return h < cl->nn ? amx_down_bt(a, kt, cl->b[h], c0 + c + 1) :
				    NULL;
	return h < ncl->nn ? amx_down_bt(a, kt, ncl->b[h], c0) : NULL;
}

/* The blocks of the pass after pass @j (none after the last). */
static inline struct amx_cols amx_cols_next(const struct kern_down_args *a,
					    unsigned int j)
{
	struct amx_cols none = { { 0, 0 }, 0 };

	return j + 1 < amx_cols_passes(a) ? amx_cols_at(a, j + 1) : none;
}

static void AMX_NAME(down_q8)(const struct kern_down_args *a)
{
	struct kern_geom geom = { a->N, a->K, 0, a->kc };
	unsigned int c0 = a->k0 / a->kc, nc = a->k1 / a->kc - c0;
	const unsigned int kt = KERN_TILE_K_INT8, P = a->kc / kt;
	unsigned int nkb = nc * P, mp = amx_mpad(a->m);
	size_t crow = kern_act_row_bytes_int8_avx512(a->kc, 0);
	unsigned int j, tb, c;
	struct amx_scratch s;

	amx_scratch_init(&s, a->scratch, &geom, a->m);
	amx_down_gather(a, nc, crow, a->kc, 1, &s);
	amx_config(AMX_LINE, 16);
	for (j = 0; j < amx_cols_passes(a); j++) {
		const struct amx_cols cl = amx_cols_at(a, j);
		const struct amx_cols ncl = amx_cols_next(a, j);
		const unsigned int nn = cl.nn;	/* a register, not a load */

		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = amx_cnt(a->m, tb);

			amx_zero_f(s.f, 2 * AMX_TB);
			for (c = 0; c < nc; c++) {
				struct amx_arows ar = amx_down_a(a, &s, nkb,
					nc, crow, tb, c, 0);

				amx_down_tiles(&ar,
					amx_down_bt(a, kt, cl.b[0], c0 + c),
					nn > 1 ? amx_down_bt(a, kt, cl.b[1],
							     c0 + c) : NULL,
					AMX_TILE, P, cnt > AMX_TB,
					tb ? NULL : amx_down_next(a, &cl, &ncl,
						0, kt, c0, c, nc),
					tb ? NULL : amx_down_next(a, &cl, &ncl,
						1, kt, c0, c, nc), 0, 1);
				/* chunk c - 1 while chunk c's TDPs run */
				if (c)
					amx_down_acc(s.f, amx_cbuf(&s, c - 1),
						     nn, cnt,
						     s.xs + tb * nc + c - 1,
						     nc, NULL);
				amx_store_c4(amx_cbuf(&s, c));
			}
			amx_down_acc(s.f, amx_cbuf(&s, nc - 1), nn, cnt,
				     s.xs + tb * nc + nc - 1, nc, NULL);
			amx_down_out(a, &cl, tb, cnt, s.f, a->down->scales);
		}
	}
	_tile_release();
}

/*
 * INT4 down, group @q (of the pass's nc * kc / G, chunk-major) finished:
 * its C (at @cb) times the group scales into f2; the chunk's last group
 * also moves f2 times the chunk's activation scale into f.
 */
static inline void amx_down_fin_q4(const struct kern_down_args *a,
				   struct amx_scratch *s, const int32_t *cb,
				   unsigned int q, unsigned int nb,
				   unsigned int nn, unsigned int tb,
				   unsigned int cnt, unsigned int nc)
{
	unsigned int G = a->group, ng = a->kc / G, c = q / ng, g = q % ng;
	unsigned int c0 = a->k0 / a->kc, i, h;
	const float *sc[2];

	for (h = 0; h < nn; h++)
		sc[h] = a->down->scales + (size_t)((c0 + c) * ng + g) * a->N +
			(nb + h) * 16;
	amx_down_acc(s->f2, cb, nn, cnt, NULL, 0, sc);
	if (g + 1 < ng)
		return;
	for (i = 0; i < cnt; i++) {
		__m512 xs = _mm512_set1_ps(s->xs[(tb + i) * nc + c]);

		for (h = 0; h < nn; h++) {
			float *fp = s->f + i * 32 + h * 16;
			float *f2 = s->f2 + i * 32 + h * 16;

			_mm512_storeu_ps(fp, _mm512_fmadd_ps(
				_mm512_loadu_ps(f2), xs, _mm512_loadu_ps(fp)));
			_mm512_storeu_ps(f2, _mm512_setzero_ps());
		}
	}
}

/*
 * Where chunk @c (of the call's) of an INT4 down column pair is widened:
 * a slot per chunk, or with @ring one of two in turn (as gate+up,
 * AMX_Q4_RING_M); in a slot each column block's P tiles, two s8 tiles
 * each (@hs bytes a block).
 */
static inline int8_t *amx_down_slot(int8_t *b4, unsigned int c, size_t hs,
				    int ring)
{
	return b4 + (size_t)(ring ? c & 1 : c) * 2 * hs;
}

/* Widen chunk @c of the call (@c0 its first) of down's column blocks @nb
 * and nb + 1 (@nn of them) into its slot. */
static inline void amx_down_widen_q4(const struct kern_down_args *a,
				     unsigned int nb, unsigned int nn,
				     unsigned int c0, unsigned int c,
				     unsigned int P, int8_t *b4, int ring)
{
	size_t hs = (size_t)P * 2 * AMX_TILE;
	int8_t *d = amx_down_slot(b4, c, hs, ring);
	unsigned int h, t, NB = a->N / 16;

	for (h = 0; h < nn; h++)
		for (t = 0; t < P; t++)
			amx_widen_i4(a->down->tiles + ((size_t)(c0 + c) * NB *
				     P + (size_t)(nb + h) * P + t) * AMX_TILE,
				     d + h * hs + (size_t)t * 2 * AMX_TILE);
	AMX_BARRIER();
}

static void AMX_NAME(down_q4)(const struct kern_down_args *a)
{
	struct kern_geom geom = { a->N, a->K, 0, a->kc };
	unsigned int c0 = a->k0 / a->kc, nc = a->k1 / a->kc - c0;
	unsigned int G = a->group, ng = a->kc / G;
	unsigned int ks = G < KERN_TILE_K_INT8 ? G : KERN_TILE_K_INT8;
	unsigned int P = a->kc / KERN_TILE_K_INT4, NB = a->N / 16;
	unsigned int nkb = nc * a->kc / KERN_TILE_K_INT8, mp = amx_mpad(a->m);
	size_t crow = kern_act_row_bytes_int4_avx512(a->kc, G);
	size_t hs = (size_t)P * 2 * AMX_TILE;	/* a widened block's chunk */
	unsigned int nb, tb, c, q, t, i;
	int ring = mp <= AMX_Q4_RING_M;
	struct amx_scratch s;

	amx_scratch_init(&s, a->scratch, &geom, a->m);
	amx_down_gather(a, nc, crow, a->kc, 1, &s);
	amx_config(ks, ks / 4);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb += 2) {
		struct amx_cols cl = amx_cols_pair(a, nb);
		unsigned int nn = cl.nn;

		for (c = 0; !ring && c < nc; c++)
			amx_down_widen_q4(a, nb, nn, c0, c, P, s.b4, 0);
		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = amx_cnt(a->m, tb);

			amx_zero_f(s.f, 2 * AMX_TB);
			amx_zero_f(s.f2, 2 * AMX_TB);
			if (ring)
				amx_down_widen_q4(a, nb, nn, c0, 0, P, s.b4,
						  ring);
			for (q = 0; q < nc * ng; q++) {
				/* K offset of group q in the pass's chunks,
				 * and within its chunk */
				unsigned int k = q * G, kk = k % a->kc;
				const int8_t *b0;

				c = k / a->kc;
				if (ring && kk == 0 && c + 1 < nc)
					amx_down_widen_q4(a, nb, nn, c0, c + 1,
							  P, s.b4, ring);
				b0 = amx_down_slot(s.b4, c, hs, ring);
				if (tb == 0 && kk == 0)
					/* the next pair's tiles of chunk c */
					for (t = 0; t < 2 * P; t++)
						amx_pf_tile(a->down->tiles +
							((size_t)(c0 + c) * NB *
							 P + (size_t)(nb + 2) *
							 P + t) * AMX_TILE);
				amx_zero_c4();
				for (i = 0; i < G / ks; i++) {
					struct amx_arows ar = amx_down_a(a,
						&s, nkb, nc, crow, tb, c,
						kk + i * ks);

					amx_down_tiles(&ar, (const uint8_t *)
						amx_b4(b0, kk + i * ks),
						nn > 1 ? (const uint8_t *)
						amx_b4(b0 + hs, kk + i * ks) :
						NULL, 0, 1, cnt > AMX_TB,
						NULL, NULL, 0, 0);
				}
				if (q)
					amx_down_fin_q4(a, &s,
							amx_cbuf(&s, q - 1),
							q - 1, nb, nn, tb, cnt,
							nc);
				amx_store_c4(amx_cbuf(&s, q));
			}
			amx_down_fin_q4(a, &s, amx_cbuf(&s, q - 1), q - 1, nb,
					nn, tb, cnt, nc);
			amx_down_out(a, &cl, tb, cnt, s.f, NULL);
		}
	}
	_tile_release();
}

/* C of a BF16 down pass (f32, at @cb) as rows of 32, then into y. */
static inline void amx_down_fin_bf16(const struct kern_down_args *a,
				     struct amx_scratch *s,
				     const int32_t *cb,
				     const struct amx_cols *cl,
				     unsigned int tb, unsigned int cnt)
{
	const unsigned int nn = cl->nn;	/* a register, not a load */
	unsigned int i, h;

	for (i = 0; i < cnt; i++)
		for (h = 0; h < nn; h++)
			_mm512_storeu_ps(s->f + i * 32 + h * 16,
				_mm512_loadu_ps((const float *)cb +
					(i / AMX_TB) * 2 * AMX_CW +
					h * AMX_CW + (i % AMX_TB) * 16));
	amx_down_out(a, cl, tb, cnt, s->f, NULL);
}

static void AMX_NAME(down_bf16)(const struct kern_down_args *a)
{
	struct kern_geom geom = { a->N, a->K, 0, a->kc };
	unsigned int c0 = a->k0 / a->kc, nc = a->k1 / a->kc - c0;
	const unsigned int kt = KERN_TILE_K_BF16, P = a->kc / kt;
	unsigned int nkb = nc * P, mp = amx_mpad(a->m);
	unsigned int j, tb, c, n = 0, ptb = 0;
	struct amx_cols pcl = { { 0, 0 }, 0 };
	struct amx_scratch s;

	amx_scratch_init(&s, a->scratch, &geom, a->m);
	amx_down_gather(a, nc, (size_t)a->kc * 2, (size_t)a->kc * 2, 0, &s);
	amx_config(AMX_LINE, 16);
	for (j = 0; j < amx_cols_passes(a); j++) {
		const struct amx_cols cl = amx_cols_at(a, j);
		const struct amx_cols ncl = amx_cols_next(a, j);
		const unsigned int nn = cl.nn;	/* a register, not a load */

		for (tb = 0; tb < mp; tb += 2 * AMX_TB, n++) {
			for (c = 0; c < nc; c++) {
				struct amx_arows ar = amx_down_a(a, &s, nkb,
					nc, (size_t)a->kc * 2, tb, c, 0);

				amx_down_tiles(&ar,
					amx_down_bt(a, kt, cl.b[0], c0 + c),
					nn > 1 ? amx_down_bt(a, kt, cl.b[1],
							     c0 + c) : NULL,
					AMX_TILE, P, amx_cnt(a->m, tb) > AMX_TB,
					tb ? NULL : amx_down_next(a, &cl, &ncl,
						0, kt, c0, c, nc),
					tb ? NULL : amx_down_next(a, &cl, &ncl,
						1, kt, c0, c, nc), 1, c == 0);
			}
			/* the previous pass while this one's TDPs run */
			if (n)
				amx_down_fin_bf16(a, &s, amx_cbuf(&s, n - 1),
						  &pcl, ptb,
						  amx_cnt(a->m, ptb));
			amx_store_c4(amx_cbuf(&s, n));
			pcl = cl;
			ptb = tb;
		}
	}
	amx_down_fin_bf16(a, &s, amx_cbuf(&s, n - 1), &pcl, ptb,
			  amx_cnt(a->m, ptb));
	_tile_release();
}

/*
 * The AMX table's slot of a quantization @t whose tile kernels
 * AMX_NAME(gate_up_@t), AMX_NAME(down_@t) and scratch AMX_NAME(scratch_@t)
 * take calls from @min_m tokens and its AVX-512 kernels the rest.
 */
#define AMX_SLOT(t, min_m)						\
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

/* The slots of the GGUF block types (q8_0-amx.h, qk-amx.h), each taking
 * calls from its own token count. */
#define AMX_GGUF_SLOTS(m8_0, m4_k, m5_k, m6_k)				\
	[KT_QUANT_Q8_0] = AMX_SLOT(q8_0, m8_0),				\
	[KT_QUANT_Q4_K] = AMX_SLOT(q4_k, m4_k),				\
	[KT_QUANT_Q5_K] = AMX_SLOT(q5_k, m5_k),				\
	[KT_QUANT_Q6_K] = AMX_SLOT(q6_k, m6_k)

#endif /* KT_KERNELS_MOE_AMX_H */
