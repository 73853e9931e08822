// SPDX-License-Identifier: MIT
/*
 * moe-fp8-amx.c - FP8 (E4M3) experts with many tokens on AMX: the FP8
 * tiles of one scale block (16 rows x 128 columns of gate and up, or of a
 * down chunk) are widened once per call to BF16 B tiles in an L1-sized
 * scratch, exactly, and every pair of 16-token A tiles runs TDPBF16PS over
 * them; each block's C tiles are scaled and summed in f32 with AVX-512.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/amx.h"
#include "kernels/fp8.h"
#include "kernels/fp8-zmm.h"
#include "kernels/simd.h"
#include "kernels/vexp-avx512.h"

#define TB		16			/* tokens per A tile */
#define TILE		KERN_TILE_BYTES
#define LINE		KERN_TILE_ROW_BYTES
#define CW		(TILE / 4)		/* floats of a C tile */
/* BF16 tiles (K 32) of one 128-column scale block */
#define BK		(KERN_FP8_BLOCK / KERN_TILE_K_BF16)
/* FP8 tiles (K 64) of one scale block */
#define BT8		(KERN_FP8_BLOCK / KERN_TILE_K_FP8)
/* ldtilecfg and tileloadd read memory the compiler does not see */
#define BARRIER()	__asm__ volatile("" ::: "memory")

struct fp8_amx {
	uint8_t *a;	/* A tiles [mpad / 16][nkb][16][64] */
	uint8_t *bg;	/* one scale block's widened B tiles of gate (down) */
	uint8_t *bu;	/* and of up */
	float *c;	/* four stored C tiles */
	float *fg;	/* f32 sums [mpad][16] */
	float *fu;
};

static size_t al64(size_t v)
{
	return (v + 63) & ~(size_t)63;
}

static unsigned int mpad(unsigned int m)
{
	return (m + 2 * TB - 1) / (2 * TB) * (2 * TB);
}

static size_t kmax_of(const struct kern_geom *g)
{
	return g->hidden > g->inter ? g->hidden : g->inter;
}

static size_t fp8_amx_bytes(const struct kern_geom *g, unsigned int max_m)
{
	size_t mp = mpad(max_m), k = kmax_of(g);

	return al64(mp * k * 2) + 2 * al64(BK * TILE) + al64(4 * TILE) +
	       2 * al64(mp * TB * 4) + 64;
}

size_t kern_scratch_bytes_fp8_amx(const struct kern_geom *g,
				  unsigned int max_m)
{
	size_t t = fp8_amx_bytes(g, max_m);
	size_t v = kern_scratch_bytes_fp8_avx512(g, max_m);

	return t > v ? t : v;
}

static void fp8_amx_init(struct fp8_amx *s, void *base, unsigned int K,
			 unsigned int m)
{
	uint8_t *p = (uint8_t *)(((uintptr_t)base + 63) & ~(uintptr_t)63);
	size_t mp = mpad(m);

	s->a = p;
	p += al64(mp * K * 2);
	s->bg = p;
	p += al64(BK * TILE);
	s->bu = p;
	p += al64(BK * TILE);
	s->c = (float *)p;
	p += al64(4 * TILE);
	s->fg = (float *)p;
	p += al64(mp * TB * 4);
	s->fu = (float *)p;
}

/* Eight tiles of 16 rows x 64 bytes: C 0-3, A 4-5, B 6-7. */
static void fp8_amx_config(void)
{
	struct kern_amx_cfg c;
	int t;

	kern_amx_cfg_init(&c);
	for (t = 0; t < 8; t++)
		kern_amx_cfg_tile(&c, t, 16, LINE);
	BARRIER();
	_tile_loadconfig(&c);
}

/*
 * Token i's bf16 row of @nkb x 32 values at @src into the A tiles; the
 * rows [m, mpad) are zeroed by the caller's fp8_amx_pad().
 */
static void put_row(const struct fp8_amx *s, unsigned int nkb, unsigned int i,
		    const uint8_t *src)
{
	uint8_t *d = s->a + (size_t)(i / TB) * nkb * TILE + (i % TB) * LINE;
	unsigned int kb;

	for (kb = 0; kb < nkb; kb++)
		_mm512_storeu_si512((void *)(d + (size_t)kb * TILE),
				    _mm512_loadu_si512((const void *)(src +
						       (size_t)kb * LINE)));
}

static void fp8_amx_pad(const struct fp8_amx *s, unsigned int nkb,
			unsigned int m)
{
	unsigned int i, kb;

	for (i = m; i < mpad(m); i++)
		for (kb = 0; kb < nkb; kb++)
			_mm512_storeu_si512((void *)(s->a +
				((size_t)(i / TB) * nkb + kb) * TILE +
				(i % TB) * LINE), _mm512_setzero_si512());
}

static const uint8_t *atile(const struct fp8_amx *s, unsigned int nkb,
			    unsigned int tb, unsigned int kb)
{
	return s->a + ((size_t)(tb / TB) * nkb + kb) * TILE;
}

/*
 * Tiles of one scale block (FP8, 1 KiB each) are prefetched one block
 * ahead of widen(), whose vector loads stalled line by line (from DRAM,
 * one thread, us per expert: gate+up 562 -> 378 at 32 tokens; down 270 ->
 * 241 at 32, 177 -> 157 at 4; two blocks ahead: 445 for gate+up).
 */
#define PF_BYTES	(BT8 * TILE)

/* The FP8 tiles of down's scale block for column block @nb, chunk @c. */
static const uint8_t *down_tiles(const struct kern_down_args *a,
				 unsigned int nb, unsigned int c)
{
	return a->down->tiles + kern_tile_off(kern_tile_kcm(a->N, a->kc,
		KERN_TILE_K_FP8, nb, c * BT8));
}

/* @n adjacent FP8 tiles at @t to 2 @n BF16 tiles at @d. */
static void widen(const uint8_t *t, unsigned int n, uint8_t *d)
{
	const struct fp8_tbl tbl = fp8_tables();
	unsigned int h;

	for (h = 0; h < n * KERN_TILE_BYTES / 32; h += 2) {
		__m512i h0, h1;

		fp8_bf16_line(t + (size_t)h * 32, &tbl, &h0, &h1);
		_mm512_storeu_si512((void *)(d + (size_t)h * LINE), h0);
		_mm512_storeu_si512((void *)(d + (size_t)(h + 1) * LINE), h1);
	}
}

/* f[i][0:16] += c[i][0:16] * s for the rows i < @rows of one C tile. */
static void acc_c(float *f, const float *c, __m512 s, unsigned int rows)
{
	unsigned int i;

	for (i = 0; i < rows; i++)
		_mm512_storeu_ps(f + i * TB, _mm512_fmadd_ps(
			_mm512_loadu_ps(c + i * TB), s,
			_mm512_loadu_ps(f + i * TB)));
}

static void zero_f(float *f, unsigned int rows)
{
	unsigned int i;

	for (i = 0; i < rows; i++)
		_mm512_storeu_ps(f + i * TB, _mm512_setzero_ps());
}

void kern_gate_up_fp8_amx(const struct kern_gate_up_args *a)
{
	const unsigned int K = a->K, nkb = K / KERN_TILE_K_BF16;
	const unsigned int nsb = K / KERN_FP8_BLOCK, mp = mpad(a->m);
	unsigned int nb, b, tb, i, j;
	struct fp8_amx s;

	fp8_amx_init(&s, a->scratch, K, a->m);
	for (i = 0; i < a->m; i++)
		put_row(&s, nkb, i, a->act + a->act_rows[i] * a->act_stride);
	fp8_amx_pad(&s, nkb, a->m);
	fp8_amx_config();
	for (nb = a->n0 / TB; nb < a->n1 / TB; nb++) {
		size_t off = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_FP8,
							 nb, 0));
		const bool chan = a->group == KERN_FP8_CHANNEL;
		const float *sg = a->gate->scales +
			kern_fp8_scale_idx(a->group, K, nb * TB, 0);
		const float *su = a->up->scales + (sg - a->gate->scales);

		zero_f(s.fg, mp);
		zero_f(s.fu, mp);
		for (b = 0; b < nsb; b++) {
			size_t bo = kern_tile_off((size_t)b * BT8);

			/* C columns are output rows: per-row scales load */
			__m512 vg = chan ? _mm512_loadu_ps(sg) :
					   _mm512_set1_ps(sg[b]);
			__m512 vu = chan ? _mm512_loadu_ps(su) :
					   _mm512_set1_ps(su[b]);

			/* the block's 2 FP8 tiles per matrix: 4 B tiles each,
			 * in L1 for every token pair; the next block's (or
			 * row block's) follow them */
			kern_amx_pf_l1(a->gate->tiles + off + bo + PF_BYTES,
				       PF_BYTES);
			kern_amx_pf_l1(a->up->tiles + off + bo + PF_BYTES,
				       PF_BYTES);
			widen(a->gate->tiles + off + bo, BT8, s.bg);
			widen(a->up->tiles + off + bo, BT8, s.bu);
			BARRIER();

			for (tb = 0; tb < mp; tb += 2 * TB) {
				unsigned int cnt = a->m - tb < 2 * TB ?
						   a->m - tb : 2 * TB;

				_tile_zero(0);
				_tile_zero(1);
				_tile_zero(2);
				_tile_zero(3);
				for (j = 0; j < BK; j++) {
					unsigned int kb = b * BK + j;

					_tile_loadd(4, atile(&s, nkb, tb, kb),
						    LINE);
					_tile_loadd(6, s.bg + (size_t)j * TILE,
						    LINE);
					_tile_loadd(7, s.bu + (size_t)j * TILE,
						    LINE);
					_tile_dpbf16ps(0, 4, 6);
					_tile_dpbf16ps(1, 4, 7);
					if (cnt <= TB)
						continue;
					_tile_loadd(5, atile(&s, nkb, tb + TB,
							     kb), LINE);
					_tile_dpbf16ps(2, 5, 6);
					_tile_dpbf16ps(3, 5, 7);
				}
				_tile_stored(0, s.c, LINE);
				_tile_stored(1, s.c + CW, LINE);
				_tile_stored(2, s.c + 2 * CW, LINE);
				_tile_stored(3, s.c + 3 * CW, LINE);
				BARRIER();
				acc_c(s.fg + tb * TB, s.c, vg,
				      cnt < TB ? cnt : TB);
				acc_c(s.fu + tb * TB, s.c + CW, vu,
				      cnt < TB ? cnt : TB);
				if (cnt > TB) {
					acc_c(s.fg + (tb + TB) * TB,
					      s.c + 2 * CW, vg, cnt - TB);
					acc_c(s.fu + (tb + TB) * TB,
					      s.c + 3 * CW, vu, cnt - TB);
				}
			}
		}
		for (i = 0; i < a->m; i++)
			_mm512_storeu_ps(a->out + i * a->out_stride +
					 nb * TB - a->n0,
					 kern_glu_avx512(a->glu, nb * TB,
					 _mm512_loadu_ps(s.fg + i * TB),
					 _mm512_loadu_ps(s.fu + i * TB)));
	}
	_tile_release();
}

/*
 * Down: per block of 16 output columns, the chunks of [k0, k1) in order,
 * each widened once (two FP8 tiles, adjacent in the chunk-major order) and
 * used by every token pair; then y += w * sum per token.
 */
void kern_down_fp8_amx(const struct kern_down_args *a)
{
	const unsigned int c0 = a->k0 / a->kc, c1 = a->k1 / a->kc;
	const unsigned int nkb = (a->k1 - a->k0) / KERN_TILE_K_BF16;
	const unsigned int mp = mpad(a->m);
	unsigned int nb, c, tb, i, j;
	struct fp8_amx s;

	fp8_amx_init(&s, a->scratch, a->k1 - a->k0, a->m);
	/* a token's chunk rows (kc bf16 each, 256 bytes) are back to back */
	for (i = 0; i < a->m; i++)
		put_row(&s, nkb, i, a->act + i * a->act_stride);
	fp8_amx_pad(&s, nkb, a->m);
	fp8_amx_config();
	for (nb = a->n0 / TB; nb < a->n1 / TB; nb++) {
		zero_f(s.fg, mp);
		for (c = c0; c < c1; c++) {
			const uint8_t *t = down_tiles(a, nb, c);
			const float *sp = a->down->scales + kern_fp8_scale_idx(
				a->group, a->K, nb * TB, c * a->kc);
			__m512 vs = a->group == KERN_FP8_CHANNEL ?
				_mm512_loadu_ps(sp) : _mm512_set1_ps(*sp);

			/* the next chunk's, or the next block's first */
			kern_amx_pf_l1(c + 1 < c1 ? down_tiles(a, nb, c + 1) :
				       down_tiles(a, nb + 1, c0), PF_BYTES);
			widen(t, BT8, s.bg);
			BARRIER();
			for (tb = 0; tb < mp; tb += 2 * TB) {
				unsigned int cnt = a->m - tb < 2 * TB ?
						   a->m - tb : 2 * TB;

				_tile_zero(0);
				_tile_zero(2);
				for (j = 0; j < BK; j++) {
					unsigned int kb = (c - c0) * BK + j;

					_tile_loadd(4, atile(&s, nkb, tb, kb),
						    LINE);
					_tile_loadd(6, s.bg + (size_t)j * TILE,
						    LINE);
					_tile_dpbf16ps(0, 4, 6);
					if (cnt <= TB)
						continue;
					_tile_loadd(5, atile(&s, nkb, tb + TB,
							     kb), LINE);
					_tile_dpbf16ps(2, 5, 6);
				}
				_tile_stored(0, s.c, LINE);
				_tile_stored(2, s.c + 2 * CW, LINE);
				BARRIER();
				acc_c(s.fg + tb * TB, s.c, vs,
				      cnt < TB ? cnt : TB);
				if (cnt > TB)
					acc_c(s.fg + (tb + TB) * TB,
					      s.c + 2 * CW, vs, cnt - TB);
			}
		}
		for (i = 0; i < a->m; i++) {
			float *y = a->y + a->y_rows[i] * a->y_stride + nb * TB;

			_mm512_storeu_ps(y, _mm512_fmadd_ps(
				_mm512_set1_ps(a->w[i]),
				_mm512_loadu_ps(s.fg + i * TB),
				_mm512_loadu_ps(y)));
		}
	}
	_tile_release();
}
