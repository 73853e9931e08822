/* SPDX-License-Identifier: MIT */
/*
 * moe-amx.h - the many-token kernels of the AMX variant: TDPBSSD for INT8
 * and INT4 (nibbles widened to s8 tiles), TDPBF16PS for BF16, reading the
 * packed tiles as B tiles directly (Documentation/packed-layout.md).
 *
 * Written against the _tile_*() intrinsics only (plus plain C and
 * kern_silu_mul_f32_avx512()), so that moe-amx.c builds it with the real
 * instructions and selftests/simd/amx_emu.c with a software emulation of
 * the tiles. The includer defines AMX_NAME(x) for the (static) names.
 *
 * Tiles: 0-3 accumulators C[token block][matrix or n block], 4-5 the A
 * tiles of two blocks of 16 tokens, 6-7 two B tiles. Each B tile is used
 * by both token blocks and each A tile by both B tiles.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/amx.h"
#include "kernels/kern.h"
#include "kernels/simd.h"

#define AMX_TB		16	/* tokens per A tile */

/*
 * tileloadd reads memory the compiler does not see as an operand (and
 * ldtilecfg names only 8 bytes of the config): make earlier stores land.
 */
#define AMX_BARRIER()	__asm__ volatile("" ::: "memory")

struct amx_scratch {
	uint8_t *a;		/* gathered activations, [mpad][K] */
	float *xs;		/* per token (and chunk) activation scales */
	int32_t *c;		/* four stored C tiles */
	float *f;		/* f32 accumulators [4][16][16] */
	float *g, *u;		/* gate / up results [mpad][16] */
	int8_t *b4;		/* INT4 tiles widened: [2][K/128][2][1024] */
};

static inline size_t amx_align(size_t v)
{
	return (v + 63) & ~(size_t)63;
}

static inline unsigned int amx_mpad(unsigned int m)
{
	return (m + 2 * AMX_TB - 1) / (2 * AMX_TB) * (2 * AMX_TB);
}

/* Bytes of the scratch below for @max_m tokens. */
static inline size_t amx_scratch_bytes(const struct kern_geom *g,
				       unsigned int max_m)
{
	size_t mp = amx_mpad(max_m);
	size_t kmax = g->hidden > g->inter ? g->hidden : g->inter;
	size_t nc = g->inter / 128 + 1;	/* chunks of any KC */

	return amx_align(mp * kmax * 2) + amx_align(mp * nc * 4) +
	       amx_align(4 * 1024) + amx_align(4 * 1024) +
	       2 * amx_align(mp * 16 * 4) + amx_align(kmax / 128 * 4096 * 2) +
	       64;
}

static inline void amx_scratch_init(struct amx_scratch *s, void *base,
				    const struct kern_geom *g, unsigned int m)
{
	uint8_t *p = (uint8_t *)(((uintptr_t)base + 63) & ~(uintptr_t)63);
	size_t mp = amx_mpad(m);
	size_t kmax = g->hidden > g->inter ? g->hidden : g->inter;
	size_t nc = g->inter / 128 + 1;

	s->a = p;
	p += amx_align(mp * kmax * 2);
	s->xs = (float *)p;
	p += amx_align(mp * nc * 4);
	s->c = (int32_t *)p;
	p += amx_align(4 * 1024);
	s->f = (float *)p;
	p += amx_align(4 * 1024);
	s->g = (float *)p;
	p += amx_align(mp * 16 * 4);
	s->u = (float *)p;
	p += amx_align(mp * 16 * 4);
	s->b4 = (int8_t *)p;
}

/* All eight tiles 16 rows; A of @acols bytes, B of @brows rows. */
static inline void amx_config(unsigned int acols, unsigned int brows)
{
	struct kern_amx_cfg c;
	int t;

	kern_amx_cfg_init(&c);
	for (t = 0; t < 4; t++)
		kern_amx_cfg_tile(&c, t, 16, 64);
	kern_amx_cfg_tile(&c, 4, 16, acols);
	kern_amx_cfg_tile(&c, 5, 16, acols);
	kern_amx_cfg_tile(&c, 6, brows, 64);
	kern_amx_cfg_tile(&c, 7, brows, 64);
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

/*
 * Copy the m activation rows (@bytes each, from row pointers) into one
 * dense [mpad][bytes] block with zero rows after the last token, so that
 * every A tile load is full and in bounds.
 */
static inline void amx_gather(uint8_t *dst, size_t bytes, unsigned int m,
			      const uint8_t *const *rows)
{
	unsigned int i, mp = amx_mpad(m);

	for (i = 0; i < m; i++)
		memcpy(dst + i * bytes, rows[i], bytes);
	memset(dst + (size_t)m * bytes, 0, (size_t)(mp - m) * bytes);
	AMX_BARRIER();
}

/* Widen an INT4 tile to two s8 B tiles: k 0..63 (low) and 64..127. */
static inline void amx_widen_i4(const uint8_t *t, int8_t *lo, int8_t *hi)
{
	int i;

	for (i = 0; i < 1024; i++) {
		lo[i] = (int8_t)((t[i] & 0x0f) - 8);
		hi[i] = (int8_t)((t[i] >> 4) - 8);
	}
	AMX_BARRIER();
}

/*
 * C tile @ct (int32, stored at @c) times @scale[n] added to @f[16][16]:
 * the f32 flush of an INT4 group or a down chunk.
 */
static inline void amx_acc_scaled(float *f, const int32_t *c,
				  const float *scale)
{
	int i, n;

	for (i = 0; i < 16; i++)
		for (n = 0; n < 16; n++)
			f[i * 16 + n] += (float)c[i * 16 + n] * scale[n];
}

/* ---- gate + up -------------------------------------------------------------
 * Per block of 16 rows: gate and up tiles in turn as B (tiles 6 and 7),
 * two token blocks as A (4 and 5): C0 = A4.Bg, C1 = A4.Bu, C2 = A5.Bg,
 * C3 = A5.Bu. The K loop is the whole row; the row block's tiles (2 x 16 x
 * K bytes) stay in L2 while all token blocks pass over them.
 */

/* Write silu(g) * u of tokens [t0, t0 + n) and rows nb*16.. to out. */
static inline void amx_gu_store(const struct kern_gate_up_args *a,
				unsigned int nb, unsigned int t0,
				unsigned int n, const float *g, const float *u)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		kern_silu_mul_f32_avx512(a->out + (t0 + i) * a->out_stride +
					 nb * 16 - a->n0, g + i * 16,
					 u + i * 16, 16);
}

static void AMX_NAME(gate_up_q8)(const struct kern_gate_up_args *a)
{
	struct kern_geom geom = { a->K, a->N, 0, 128 };
	const uint8_t *rows[KERN_MAX_M];
	unsigned int K = a->K, mp = amx_mpad(a->m), nb, tb, kb, i, n;
	struct amx_scratch s;

	amx_scratch_init(&s, a->scratch, &geom, a->m);
	for (i = 0; i < a->m; i++) {
		rows[i] = a->act + a->act_rows[i] * a->act_stride;
		s.xs[i] = amx_act_scale(rows[i], K);
	}
	amx_gather(s.a, K, a->m, rows);
	amx_config(64, 16);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++) {
		const uint8_t *gt = a->gate->tiles + (size_t)nb * (K / 64) * 1024;
		const uint8_t *ut = a->up->tiles + (size_t)nb * (K / 64) * 1024;
		const float *wsg = a->gate->scales + nb * 16;
		const float *wsu = a->up->scales + nb * 16;

		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			const uint8_t *a0 = s.a + (size_t)tb * K;
			unsigned int cnt = a->m - tb < 2 * AMX_TB ?
					   a->m - tb : 2 * AMX_TB;

			_tile_zero(0);
			_tile_zero(1);
			_tile_zero(2);
			_tile_zero(3);
			for (kb = 0; kb < K / 64; kb++) {
				_tile_loadd(4, a0 + kb * 64, K);
				_tile_loadd(5, a0 + (size_t)AMX_TB * K +
					    kb * 64, K);
				_tile_loadd(6, gt + (size_t)kb * 1024, 64);
				_tile_loadd(7, ut + (size_t)kb * 1024, 64);
				_tile_dpbssd(0, 4, 6);
				_tile_dpbssd(1, 4, 7);
				_tile_dpbssd(2, 5, 6);
				_tile_dpbssd(3, 5, 7);
			}
			_tile_stored(0, s.c, 64);
			_tile_stored(1, s.c + 256, 64);
			_tile_stored(2, s.c + 512, 64);
			_tile_stored(3, s.c + 768, 64);
			for (i = 0; i < cnt; i++) {
				const int32_t *cg = s.c + (i / AMX_TB) * 512 +
						    (i % AMX_TB) * 16;
				float xs = s.xs[tb + i];

				/* (float)acc * (xs * ws): the oracle's order */
				for (n = 0; n < 16; n++) {
					s.g[i * 16 + n] = (float)cg[n] *
						(xs * wsg[n]);
					s.u[i * 16 + n] = (float)cg[256 + n] *
						(xs * wsu[n]);
				}
			}
			amx_gu_store(a, nb, tb, cnt, s.g, s.u);
		}
	}
	_tile_release();
}

static void AMX_NAME(gate_up_bf16)(const struct kern_gate_up_args *a)
{
	struct kern_geom geom = { a->K, a->N, 0, 128 };
	const uint8_t *rows[KERN_MAX_M];
	unsigned int K = a->K, mp = amx_mpad(a->m), nb, tb, kb, i;
	size_t ld = (size_t)K * 2;
	struct amx_scratch s;

	amx_scratch_init(&s, a->scratch, &geom, a->m);
	for (i = 0; i < a->m; i++)
		rows[i] = a->act + a->act_rows[i] * a->act_stride;
	amx_gather(s.a, ld, a->m, rows);
	amx_config(64, 16);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++) {
		const uint8_t *gt = a->gate->tiles + (size_t)nb * (K / 32) * 1024;
		const uint8_t *ut = a->up->tiles + (size_t)nb * (K / 32) * 1024;

		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			const uint8_t *a0 = s.a + (size_t)tb * ld;
			unsigned int cnt = a->m - tb < 2 * AMX_TB ?
					   a->m - tb : 2 * AMX_TB;
			float *c = (float *)s.c;

			_tile_zero(0);
			_tile_zero(1);
			_tile_zero(2);
			_tile_zero(3);
			for (kb = 0; kb < K / 32; kb++) {
				_tile_loadd(4, a0 + kb * 64, ld);
				_tile_loadd(5, a0 + AMX_TB * ld + kb * 64, ld);
				_tile_loadd(6, gt + (size_t)kb * 1024, 64);
				_tile_loadd(7, ut + (size_t)kb * 1024, 64);
				_tile_dpbf16ps(0, 4, 6);
				_tile_dpbf16ps(1, 4, 7);
				_tile_dpbf16ps(2, 5, 6);
				_tile_dpbf16ps(3, 5, 7);
			}
			_tile_stored(0, c, 64);
			_tile_stored(1, c + 256, 64);
			_tile_stored(2, c + 512, 64);
			_tile_stored(3, c + 768, 64);
			for (i = 0; i < cnt; i++) {
				const float *cg = c + (i / AMX_TB) * 512 +
						  (i % AMX_TB) * 16;

				memcpy(s.g + i * 16, cg, 64);
				memcpy(s.u + i * 16, cg + 256, 64);
			}
			amx_gu_store(a, nb, tb, cnt, s.g, s.u);
		}
	}
	_tile_release();
}

/*
 * INT4: the row block's tiles are widened to s8 once per block, then each
 * group is a K span of its own (32 bytes of A and 8 B rows for G = 32, 64
 * and 16 otherwise) whose int32 C is scaled into f32 before the next.
 * Uses C0 = A4.B6 and C2 = A5.B6 for one matrix at a time.
 */
static void amx_i4_matrix(const struct kern_gate_up_args *a,
			  const struct kern_mat *mat, unsigned int nb,
			  const struct amx_scratch *s, float *res)
{
	unsigned int K = a->K, G = a->group, mp = amx_mpad(a->m);
	unsigned int ks = G < 64 ? G : 64;	/* K span of one dot */
	unsigned int tb, g, i, n, t;
	const uint8_t *tiles = mat->tiles + (size_t)nb * (K / 128) * 1024;
	int8_t *b = s->b4;

	for (t = 0; t < K / 128; t++)
		amx_widen_i4(tiles + (size_t)t * 1024, b + t * 2048,
			     b + t * 2048 + 1024);
	for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
		const uint8_t *a0 = s->a + (size_t)tb * K;
		unsigned int cnt = a->m - tb < 2 * AMX_TB ?
				   a->m - tb : 2 * AMX_TB;
		float *f = s->f;

		memset(f, 0, sizeof(float) * 512);
		for (g = 0; g < K / G; g++) {
			unsigned int k, k1 = (g + 1) * G;

			_tile_zero(0);
			_tile_zero(2);
			for (k = g * G; k < k1; k += ks) {
				/* k within its 128-span: which half, which
				 * line of the widened tile */
				unsigned int kk = k % 128;
				const int8_t *bt = b + (k / 128) * 2048 +
					(kk >= 64) * 1024 + (kk % 64) / 4 * 64;

				_tile_loadd(4, a0 + k, K);
				_tile_loadd(5, a0 + (size_t)AMX_TB * K + k, K);
				_tile_loadd(6, bt, 64);
				_tile_dpbssd(0, 4, 6);
				_tile_dpbssd(2, 5, 6);
			}
			_tile_stored(0, s->c, 64);
			_tile_stored(2, s->c + 256, 64);
			amx_acc_scaled(f, s->c, mat->scales +
				       (size_t)g * a->N + nb * 16);
			amx_acc_scaled(f + 256, s->c + 256, mat->scales +
				       (size_t)g * a->N + nb * 16);
		}
		for (i = 0; i < cnt; i++)
			for (n = 0; n < 16; n++)
				res[(tb + i) * 16 + n] = f[i * 16 + n] *
							 s->xs[tb + i];
	}
}

static void AMX_NAME(gate_up_q4)(const struct kern_gate_up_args *a)
{
	struct kern_geom geom = { a->K, a->N, 0, 128 };
	const uint8_t *rows[KERN_MAX_M];
	unsigned int K = a->K, nb, i;
	struct amx_scratch s;
	float *g, *u;

	amx_scratch_init(&s, a->scratch, &geom, a->m);
	g = s.g;
	u = s.u;
	for (i = 0; i < a->m; i++) {
		rows[i] = a->act + a->act_rows[i] * a->act_stride;
		s.xs[i] = amx_act_scale(rows[i], K);
	}
	amx_gather(s.a, K, a->m, rows);
	amx_config(a->group < 64 ? a->group : 64,
		   a->group < 64 ? a->group / 4 : 16);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++) {
		amx_i4_matrix(a, a->gate, nb, &s, g);
		amx_i4_matrix(a, a->up, nb, &s, u);
		amx_gu_store(a, nb, 0, a->m, g, u);
	}
	_tile_release();
}

/* ---- down --------------------------------------------------------------------
 * Per output block of 16 columns and pair of token blocks: the K chunks in
 * order; INT8/INT4 flush C per chunk with the chunk's activation scale,
 * BF16 keeps accumulating in C. Then y += w * (sum * row scale).
 */

/* Gather the m rows of nc chunk rows (crow bytes, first kb payload). */
static void amx_down_gather(const struct kern_down_args *a, unsigned int nc,
			    size_t crow, size_t kb, int scales,
			    struct amx_scratch *s)
{
	unsigned int i, c, mp = amx_mpad(a->m);
	size_t ld = (size_t)nc * kb;

	for (i = 0; i < a->m; i++)
		for (c = 0; c < nc; c++) {
			const uint8_t *r = a->act + i * a->act_stride +
					   c * crow;

			memcpy(s->a + i * ld + c * kb, r, kb);
			if (scales)
				s->xs[i * nc + c] = amx_act_scale(r, a->kc);
		}
	memset(s->a + (size_t)a->m * ld, 0, (size_t)(mp - a->m) * ld);
	AMX_BARRIER();
}

static void amx_down_out(const struct kern_down_args *a, unsigned int nb,
			 unsigned int tb, unsigned int cnt, const float *f,
			 const float *rscale)
{
	unsigned int i, n;

	for (i = 0; i < cnt; i++) {
		float *y = a->y + a->y_rows[tb + i] * a->y_stride + nb * 16;
		float w = a->w[tb + i];

		for (n = 0; n < 16; n++)
			y[n] += w * (rscale ? f[i * 16 + n] * rscale[n] :
				     f[i * 16 + n]);
	}
}

static void AMX_NAME(down_q8)(const struct kern_down_args *a)
{
	struct kern_geom geom = { a->N, a->K, 0, a->kc };
	unsigned int c0 = a->k0 / a->kc, nc = a->k1 / a->kc - c0;
	unsigned int P = a->kc / 64, NB = a->N / 16, mp = amx_mpad(a->m);
	size_t ld = (size_t)nc * a->kc;
	unsigned int nb, tb, c, kin, i, n;
	struct amx_scratch s;

	amx_scratch_init(&s, a->scratch, &geom, a->m);
	amx_down_gather(a, nc, kern_act_row_bytes_int8_avx512(a->kc, 0),
			a->kc, 1, &s);
	amx_config(64, 16);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++)
		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = a->m - tb < 2 * AMX_TB ?
					   a->m - tb : 2 * AMX_TB;

			memset(s.f, 0, sizeof(float) * 512);
			for (c = 0; c < nc; c++) {
				const uint8_t *bt = a->down->tiles +
					((size_t)(c0 + c) * NB * P +
					 (size_t)nb * P) * 1024;
				const uint8_t *a0 = s.a + (size_t)tb * ld +
						    (size_t)c * a->kc;

				_tile_zero(0);
				_tile_zero(2);
				for (kin = 0; kin < P; kin++) {
					_tile_loadd(4, a0 + kin * 64, ld);
					_tile_loadd(5, a0 + AMX_TB * ld +
						    kin * 64, ld);
					_tile_loadd(6, bt + kin * 1024, 64);
					_tile_dpbssd(0, 4, 6);
					_tile_dpbssd(2, 5, 6);
				}
				_tile_stored(0, s.c, 64);
				_tile_stored(2, s.c + 256, 64);
				for (i = 0; i < 2 * AMX_TB; i++) {
					float xs = tb + i < a->m ?
						s.xs[(tb + i) * nc + c] : 0;

					for (n = 0; n < 16; n++)
						s.f[i * 16 + n] += (float)
							s.c[i * 16 + n] * xs;
				}
			}
			amx_down_out(a, nb, tb, cnt, s.f,
				     a->down->scales + nb * 16);
		}
	_tile_release();
}

static void AMX_NAME(down_q4)(const struct kern_down_args *a)
{
	struct kern_geom geom = { a->N, a->K, 0, a->kc };
	unsigned int c0 = a->k0 / a->kc, nc = a->k1 / a->kc - c0;
	unsigned int G = a->group, ks = G < 64 ? G : 64;
	unsigned int P = a->kc / 128, NB = a->N / 16, mp = amx_mpad(a->m);
	size_t ld = (size_t)nc * a->kc;
	unsigned int nb, tb, c, g, k, i, n, t;
	struct amx_scratch s;
	float *cacc;

	amx_scratch_init(&s, a->scratch, &geom, a->m);
	amx_down_gather(a, nc, kern_act_row_bytes_int4_avx512(a->kc, G),
			a->kc, 1, &s);
	cacc = s.g;	/* [32][16] per-chunk sums */
	amx_config(ks, ks / 4);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++)
		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = a->m - tb < 2 * AMX_TB ?
					   a->m - tb : 2 * AMX_TB;

			memset(s.f, 0, sizeof(float) * 512);
			for (c = 0; c < nc; c++) {
				const uint8_t *bt = a->down->tiles +
					((size_t)(c0 + c) * NB * P +
					 (size_t)nb * P) * 1024;
				const uint8_t *a0 = s.a + (size_t)tb * ld +
						    (size_t)c * a->kc;

				for (t = 0; t < P; t++)
					amx_widen_i4(bt + t * 1024,
						     s.b4 + t * 2048,
						     s.b4 + t * 2048 + 1024);
				memset(cacc, 0, sizeof(float) * 512);
				for (g = 0; g < a->kc / G; g++) {
					const float *sc = a->down->scales +
						(size_t)((c0 + c) * a->kc / G +
							 g) * a->N + nb * 16;

					_tile_zero(0);
					_tile_zero(2);
					for (k = g * G; k < (g + 1) * G;
					     k += ks) {
						unsigned int kk = k % 128;
						const int8_t *b = s.b4 +
							(k / 128) * 2048 +
							(kk >= 64) * 1024 +
							(kk % 64) / 4 * 64;

						_tile_loadd(4, a0 + k, ld);
						_tile_loadd(5, a0 + AMX_TB *
							    ld + k, ld);
						_tile_loadd(6, b, 64);
						_tile_dpbssd(0, 4, 6);
						_tile_dpbssd(2, 5, 6);
					}
					_tile_stored(0, s.c, 64);
					_tile_stored(2, s.c + 256, 64);
					amx_acc_scaled(cacc, s.c, sc);
					amx_acc_scaled(cacc + 256, s.c + 256,
						       sc);
				}
				for (i = 0; i < 2 * AMX_TB; i++) {
					float xs = tb + i < a->m ?
						s.xs[(tb + i) * nc + c] : 0;

					for (n = 0; n < 16; n++)
						s.f[i * 16 + n] +=
							cacc[i * 16 + n] * xs;
				}
			}
			amx_down_out(a, nb, tb, cnt, s.f, NULL);
		}
	_tile_release();
}

static void AMX_NAME(down_bf16)(const struct kern_down_args *a)
{
	struct kern_geom geom = { a->N, a->K, 0, a->kc };
	unsigned int c0 = a->k0 / a->kc, nc = a->k1 / a->kc - c0;
	unsigned int P = a->kc / 32, NB = a->N / 16, mp = amx_mpad(a->m);
	size_t ld = (size_t)nc * a->kc * 2;
	unsigned int nb, tb, c, kin;
	struct amx_scratch s;
	float *f;

	amx_scratch_init(&s, a->scratch, &geom, a->m);
	amx_down_gather(a, nc, (size_t)a->kc * 2, (size_t)a->kc * 2, 0, &s);
	f = (float *)s.c;
	amx_config(64, 16);
	for (nb = a->n0 / 16; nb < a->n1 / 16; nb++)
		for (tb = 0; tb < mp; tb += 2 * AMX_TB) {
			unsigned int cnt = a->m - tb < 2 * AMX_TB ?
					   a->m - tb : 2 * AMX_TB;

			_tile_zero(0);
			_tile_zero(2);
			for (c = 0; c < nc; c++) {
				const uint8_t *bt = a->down->tiles +
					((size_t)(c0 + c) * NB * P +
					 (size_t)nb * P) * 1024;
				const uint8_t *a0 = s.a + (size_t)tb * ld +
						    (size_t)c * a->kc * 2;

				for (kin = 0; kin < P; kin++) {
					_tile_loadd(4, a0 + kin * 64, ld);
					_tile_loadd(5, a0 + AMX_TB * ld +
						    kin * 64, ld);
					_tile_loadd(6, bt + kin * 1024, 64);
					_tile_dpbf16ps(0, 4, 6);
					_tile_dpbf16ps(2, 5, 6);
				}
			}
			_tile_stored(0, f, 64);
			_tile_stored(2, f + 256, 64);
			amx_down_out(a, nb, tb, cnt, f, NULL);
		}
	_tile_release();
}
