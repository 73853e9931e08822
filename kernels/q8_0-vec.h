/* SPDX-License-Identifier: MIT */
/*
 * q8_0-vec.h - the Q8_0 kernels written once over the width layer (vec.h):
 * per group of 32 and VF_LANES rows (a whole 64-byte line on 512 bits, half
 * of one on 256), the int32 dot of the group's 8 lines with the broadcast
 * activations, then one FMA by weight scale * activation scale, as the
 * oracle (q8_0-scalar.c). The s8 x s8 dot: on AVX-512 VNNI vpdpbusd of the
 * line flipped to u8 (w + 128; the 128 * sum(x) of the group taken back);
 * on AVX2 vpmaddubsw of |w| with x signed by w (2 * 128 * 127 < 32768).
 * Two groups are summed at once (gate and up of the same rows, or down's
 * consecutive groups), so that the dots' latency is hidden at any token
 * count. Down of a few tokens goes chunk by chunk over a run of rows, so
 * that its chunk-major tiles stream; of more, each row vector takes all
 * chunks with its sums in registers (rows-vec.h). Token passes after the
 * first pull the next block into L2 (l2pf.h): its scales, one line per
 * group at a stride of N floats, no hardware prefetcher follows.
 *
 * Included by kernels/q8_0-<isa>.c after defining VEC_BITS and
 * VEC_ISA (and VEC_VNNI where not the width's default: vec.h).
 */
#include "kernels/q8_0.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/act-vec.h"
#include "kernels/rows-vec.h"
#include "kernels/l2pf.h"

/* tokens sharing a line: gate/up (both matrices' sums live) and down */
#define MR_GU	(VEC_BITS == 512 ? 6 : 2)
#define MR	(VEC_BITS == 512 ? 6 : 2)
#define MR_MAX	(MR_GU > MR ? MR_GU : MR)
#define LINE	KERN_TILE_ROW_BYTES
#define GLINES	(Q8G / KERN_TILE_LANE_BYTES)	/* lines of one group: 8 */
/* prefetch distance, bytes, into L2 (as moe-zmm.h: one core, T = 6, gate+up
 * 392 -> 177 us per expert, down 167 -> 105) */
#define PF	(4 * 1024)

#if VEC_VNNI
#define Q8_BIAS	1	/* wline() adds 128 to each w */
AI vi wline(const uint8_t *p)
{
	return vi_xor(vi_load(p), vi_set1_8((char)0x80));
}

AI vi dot_s8(vi acc, vi w, vi x)
{
	return vi_dot_u8s8(acc, w, x);
}
#else
/*
 * Without VNNI the u8 * s8 pairs sum in int16 (vpmaddubsw): |w| * (x with
 * w's sign), pairs within 2 * 128 * 127, where w + 128 would saturate.
 */
#define Q8_BIAS	0
AI vi wline(const uint8_t *p)
{
	return vi_load(p);
}

#if VEC_BITS == 512
AI vi dot_s8(vi acc, vi w, vi x)
{
	return vi_dot_u8s8(acc, _mm512_abs_epi8(w),
			   _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w),
						_mm512_setzero_si512(), x));
}
#else
AI vi dot_s8(vi acc, vi w, vi x)
{
	return vi_dot_u8s8(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}
#endif
#endif

size_t VNAME(kern_act_row_bytes_q8_0)(unsigned int K, unsigned int group)
{
	return kern_q8_0_row_bytes(K);
}

/* kern_q8_0_prepare() on vectors: the same bytes (act-vec.h) */
void VNAME(kern_act_prepare_q8_0)(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	unsigned int r, g;

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint8_t *d = dst + r * dst_stride;
		float *sc = (float *)kern_q8_0_row_scales(d, K);
		int32_t *corr = (int32_t *)kern_q8_0_row_corr(d, K);

		for (g = 0; g < K / Q8G; g++) {
			int8_t *q = (int8_t *)d + g * Q8G;
			float amax = act_quant_block(s, dtype, g * Q8G, Q8G, q);

			sc[g] = kern_f16_to_f32(kern_f32_to_f16(amax / 127.0f));
			corr[g] = 128 * act_sum_q(q, Q8G);
		}
	}
}

size_t VNAME(kern_scratch_bytes_q8_0)(const struct kern_geom *g,
				      unsigned int max_m)
{
	return KERN_VEC_DOWN_SCRATCH(MR);
}

AI vi bcast4(const uint8_t *p)
{
	return vi_set1_32(ld32(p));
}

/* acc[m] += (the int32 dots @d[m] of group @xg, less what wline() added)
 * times @ws * (the activation scale of group @xg of row x[m]) */
AI void group_scale(const vi *d, vf ws, const uint8_t *const *x,
		    unsigned int xg, unsigned int K, const int M, vf *acc)
{
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++) {
		vi corr = Q8_BIAS ?
			vi_set1_32(kern_q8_0_row_corr(x[m], K)[xg]) : vi_zero();
		vf s = vf_mul(ws, vf_set1(kern_q8_0_row_scales(x[m], K)[xg]));

		acc[m] = vf_fmadd(vf_cvt_f32(vi_sub32(d[m], corr)), s, acc[m]);
	}
}

/*
 * One group of 32 (8 lines from @w), or with @two two at once (also @w2),
 * so that 2M sums are in flight: gate and up of the same rows, or down's
 * next group, or the same group of down's next chunk. acc[m] += the dot
 * with x[m] + @xo times @ws * the activation scale of group @xg of rows of
 * K @K; then acc2[m] the same for @w2, x2[m] + @xo2, @ws2, @xg2.
 */
AI void group_dot(const uint8_t *w, const uint8_t *w2, const int two,
		  vf ws, vf ws2, const uint8_t *const *x,
		  const uint8_t *const *x2, unsigned int xo, unsigned int xo2,
		  unsigned int xg, unsigned int xg2, unsigned int K,
		  const int M, vf *acc, vf *acc2)
{
	vi d[MR_MAX], d2[MR_MAX];
	int m, j;

#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		d[m] = d2[m] = vi_zero();
#pragma GCC unroll 8
	for (j = 0; j < GLINES; j++) {
		vi wl = wline(w + j * LINE), wl2 = wl;

		_mm_prefetch((const char *)w + PF + j * LINE, _MM_HINT_T1);
		if (two) {
			wl2 = wline(w2 + j * LINE);
			_mm_prefetch((const char *)w2 + PF + j * LINE,
				     _MM_HINT_T1);
		}
#pragma GCC unroll 8
		for (m = 0; m < M; m++) {
			d[m] = dot_s8(d[m], wl, bcast4(x[m] + xo + j * 4));
			if (two)
				d2[m] = dot_s8(d2[m], wl2,
					       bcast4(x2[m] + xo2 + j * 4));
		}
	}
	group_scale(d, ws, x, xg, K, M, acc);
	if (two)
		group_scale(d2, ws2, x2, xg2, K, M, acc2);
}

AI void gate_up_block(const struct kern_gate_up_args *a, unsigned int n,
		      unsigned int i, const int M)
{
	const unsigned int K = a->K, N = a->N;
	/* this vector's rows within a line (a half line on 256 bits) */
	const size_t t0 = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_INT8,
						      n / KERN_TILE_ROWS, 0)) +
			  n % KERN_TILE_ROWS * KERN_TILE_LANE_BYTES;
	const uint8_t *tg = a->gate->tiles + t0, *tu = a->up->tiles + t0;
	/* the next row block's tiles and scales, fetched by later passes
	 * (l2pf.h); on 256 bits only by a block's second vector */
	const unsigned int nn = n + VF_LANES, G = K / Q8G;
	const bool more = nn < a->n1 && nn % KERN_TILE_ROWS == 0;
	const size_t tn = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_INT8,
						      nn / KERN_TILE_ROWS, 0));
	const unsigned int pass = kern_vec_block(i, a->m, MR_GU);
	const struct l2pf pf = l2pf_share(more ? a->gate->tiles + tn : NULL,
					  more ? a->up->tiles + tn : NULL,
					  K * KERN_TILE_ROWS / LINE, G, pass,
					  kern_vec_blocks(a->m, MR_GU));
	const bool pf_scales = more && pass == 1;
	const uint8_t *x[MR_GU];
	vf fg[MR_GU], fu[MR_GU];
	unsigned int g;
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i + m] * a->act_stride;
		fg[m] = fu[m] = vf_zero();
	}
	/* group g is lines (g % 2) * 8 .. + 8 of tile g / 2: g * 512 bytes */
	for (g = 0; g < G; g++) {
		l2pf_step(pf, g);
		if (pf_scales) {
			_mm_prefetch((const char *)(a->gate->scales +
				     (size_t)g * N + nn), _MM_HINT_T1);
			_mm_prefetch((const char *)(a->up->scales +
				     (size_t)g * N + nn), _MM_HINT_T1);
		}
		group_dot(tg + (size_t)g * GLINES * LINE,
			  tu + (size_t)g * GLINES * LINE, 1,
			  vf_load(a->gate->scales + (size_t)g * N + n),
			  vf_load(a->up->scales + (size_t)g * N + n),
			  x, x, g * Q8G, g * Q8G, g, g, K, M, fg, fu);
	}
#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		vf_store(a->out + (i + m) * a->out_stride + (n - a->n0),
			 vf_glu(a->glu, n, fg[m], fu[m]));
}

/*
 * Decode (up to 2 tokens): rows @n and @n2 of gate and up at once, a group
 * of each pair in turn, four DRAM streams where gate_up_block() reads two
 * (one core's reads are capped per stream); each row's groups in order,
 * the same bits. 512 bits only: AVX2 is compute bound here and measured
 * 10% slower.
 */
AI void gate_up_block4(const struct kern_gate_up_args *a, unsigned int n,
		       unsigned int n2, const int M)
{
	const unsigned int K = a->K, N = a->N, G = K / Q8G;
	const unsigned int nr[2] = { n, n2 };
	const uint8_t *tg[2], *tu[2], *x[MR_GU];
	vf fg[2][MR_GU], fu[2][MR_GU];
	unsigned int g;
	int m, h;

#pragma GCC unroll 2
	for (h = 0; h < 2; h++) {
		size_t t0 = kern_tile_off(kern_tile_rbm(K, KERN_TILE_K_INT8,
				nr[h] / KERN_TILE_ROWS, 0)) +
			    nr[h] % KERN_TILE_ROWS * KERN_TILE_LANE_BYTES;

		tg[h] = a->gate->tiles + t0;
		tu[h] = a->up->tiles + t0;
	}
#pragma GCC unroll 8
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[m] * a->act_stride;
		fg[0][m] = fu[0][m] = fg[1][m] = fu[1][m] = vf_zero();
	}
	for (g = 0; g < G; g++)
#pragma GCC unroll 2
		for (h = 0; h < 2; h++)
			group_dot(tg[h] + (size_t)g * GLINES * LINE,
				  tu[h] + (size_t)g * GLINES * LINE, 1,
				  vf_load(a->gate->scales + (size_t)g * N +
					  nr[h]),
				  vf_load(a->up->scales + (size_t)g * N +
					  nr[h]),
				  x, x, g * Q8G, g * Q8G, g, g, K, M, fg[h],
				  fu[h]);
#pragma GCC unroll 2
	for (h = 0; h < 2; h++)
#pragma GCC unroll 8
		for (m = 0; m < M; m++)
			vf_store(a->out + m * a->out_stride + (nr[h] - a->n0),
				 vf_glu(a->glu, nr[h], fg[h][m], fu[h][m]));
}

void VNAME(kern_gate_up_q8_0)(const struct kern_gate_up_args *a)
{
	/* row vectors of the call; decode pairs v with v + nv / 2 */
	const unsigned int nv = (a->n1 - a->n0) / VF_LANES;
	unsigned int v;

	if (VEC_BITS != 512 || a->m > 2 || nv < 2) {
		KERN_VEC_ROWS(gate_up_block, a, MR_GU);
		return;
	}
	for (v = 0; v < nv / 2; v++) {
		unsigned int n = a->n0 + v * VF_LANES;
		unsigned int n2 = n + nv / 2 * VF_LANES;

		if (a->m == 1)
			gate_up_block4(a, n, n2, 1);
		else
			gate_up_block4(a, n, n2, 2);
	}
	if (nv % 2)
		KERN_VEC_TOKENS(a->m, MR_GU, gate_up_block, a,
				a->n1 - VF_LANES);
}

_Static_assert(KERN_DOWN_CHUNK % (2 * Q8G) == 0,
	       "down_chunk() takes a chunk's groups two at a time");

/* chunk @c of the rows at @n: the tokens' rows x, weight scales, tiles */
struct chunk_at {
	const uint8_t *x[MR];
	const float *ws;
	const uint8_t *t;
};

AI void chunk_at(const struct kern_down_args *a, unsigned int n,
		 unsigned int c, unsigned int i, const int M,
		 struct chunk_at *d)
{
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		d->x[m] = a->act + (i + m) * a->act_stride +
			  (c - a->k0 / a->kc) * kern_q8_0_row_bytes(a->kc);
	d->ws = a->down->scales + (size_t)(c * a->kc / Q8G) * a->N + n;
	d->t = a->down->tiles + kern_tile_off(kern_tile_kcm_chunk(a->N, a->kc,
			KERN_TILE_K_INT8, n / KERN_TILE_ROWS, c)) +
	       n % KERN_TILE_ROWS * KERN_TILE_LANE_BYTES;
}

/*
 * down: chunk @c of rows [n, n + VF_LANES), tokens [i, i + M), added to
 * f[m]. A chunk's tiles of a row block are consecutive (chunk-major, two
 * groups each), so its groups are GLINES lines apart.
 */
AI void down_chunk(const struct kern_down_args *a, unsigned int n,
		   unsigned int c, vf *f, unsigned int i, const int M)
{
	const unsigned int kc = a->kc;
	struct chunk_at p;
	/* the next call's tiles and scales of this chunk, fetched by later
	 * passes (l2pf.h); on 256 bits only by a line's first vector */
	const struct kern_mat *nd = n % KERN_TILE_ROWS ? NULL : a->next_down;
	const unsigned int pass = kern_vec_block(i, a->m, MR);
	struct l2pf pf;
	size_t so;
	unsigned int gg;

	chunk_at(a, n, c, i, M, &p);
	so = p.ws - a->down->scales;
	pf = l2pf_share(nd ? nd->tiles + (p.t - a->down->tiles) : NULL, NULL,
			kc * KERN_TILE_ROWS / LINE, kc / (2 * Q8G), pass,
			kern_vec_blocks(a->m, MR));
	/* two groups at once, added in order: the bits of one at a time */
	for (gg = 0; gg < kc / Q8G; gg += 2) {
		l2pf_step(pf, gg / 2);
		if (nd && pass == 1) {
			_mm_prefetch((const char *)(nd->scales + so +
				     (size_t)gg * a->N), _MM_HINT_T1);
			_mm_prefetch((const char *)(nd->scales + so +
				     (size_t)(gg + 1) * a->N), _MM_HINT_T1);
		}
		group_dot(p.t + (size_t)gg * GLINES * LINE,
			  p.t + (size_t)(gg + 1) * GLINES * LINE, 1,
			  vf_load(p.ws + (size_t)gg * a->N),
			  vf_load(p.ws + (size_t)(gg + 1) * a->N), p.x, p.x,
			  gg * Q8G, (gg + 1) * Q8G, gg, gg + 1, kc, M, f, f);
	}
}

/*
 * Decode's down_chunk() of two streams (KERN_VEC_DOWN_RUN2): chunk @c of
 * rows @n into f and chunk c + 1 of rows @n2 into f2, group g of both at
 * once, each row's groups in order.
 */
AI void down_chunk2(const struct kern_down_args *a, unsigned int n,
		    unsigned int c, vf *f, unsigned int n2, vf *f2,
		    unsigned int i, const int M)
{
	struct chunk_at p, q;
	unsigned int g;

	chunk_at(a, n, c, i, M, &p);
	chunk_at(a, n2, c + 1, i, M, &q);
	for (g = 0; g < a->kc / Q8G; g++)
		group_dot(p.t + (size_t)g * GLINES * LINE,
			  q.t + (size_t)g * GLINES * LINE, 1,
			  vf_load(p.ws + (size_t)g * a->N),
			  vf_load(q.ws + (size_t)g * a->N), p.x, q.x,
			  g * Q8G, g * Q8G, g, g, a->kc, M, f, f2);
}

/*
 * Prefill's down_chunk() of two row vectors (KERN_VEC_DOWN_ROW2): rows @n
 * into f and n + VF_LANES into f2, group g of both at once on the same
 * activations, each row's groups in order. The next call's tiles and
 * scales of both, as down_chunk() fetches them.
 */
/* KERN_VEC_DOWN_ROW2 takes two row vectors through down_chunk_pair() */
#define down_chunk_pairs	1
AI void down_chunk_pair(const struct kern_down_args *a, unsigned int n,
			unsigned int c, vf *f, vf *f2, unsigned int i,
			const int M)
{
	const unsigned int kc = a->kc, n2 = n + VF_LANES;
	const struct kern_mat *nd = n % KERN_TILE_ROWS ? NULL : a->next_down;
	const unsigned int pass = kern_vec_block(i, a->m, MR);
	/* the lines of both row vectors' tiles: one row block on 256 bits */
	const unsigned int lines = kc * KERN_TILE_ROWS / LINE *
				   (2 * VF_LANES / KERN_TILE_ROWS);
	struct chunk_at p, q;
	struct l2pf pf;
	size_t so;
	unsigned int g;

	chunk_at(a, n, c, i, M, &p);
	chunk_at(a, n2, c, i, M, &q);
	so = p.ws - a->down->scales;
	pf = l2pf_share(nd ? nd->tiles + (p.t - a->down->tiles) : NULL, NULL,
			lines, kc / Q8G, pass, kern_vec_blocks(a->m, MR));
	for (g = 0; g < kc / Q8G; g++) {
		l2pf_step(pf, g);
		if (nd && pass == 1)
			_mm_prefetch((const char *)(nd->scales + so +
				     (size_t)g * a->N), _MM_HINT_T1);
		if (nd && pass == 1 && VF_LANES == KERN_TILE_ROWS)
			_mm_prefetch((const char *)(nd->scales + so +
				     (size_t)g * a->N + VF_LANES),
				     _MM_HINT_T1);
		group_dot(p.t + (size_t)g * GLINES * LINE,
			  q.t + (size_t)g * GLINES * LINE, 1,
			  vf_load(p.ws + (size_t)g * a->N),
			  vf_load(q.ws + (size_t)g * a->N), p.x, p.x,
			  g * Q8G, g * Q8G, g, g, kc, M, f, f2);
	}
}

void VNAME(kern_down_q8_0)(const struct kern_down_args *a)
{
	KERN_VEC_DOWN2(down_chunk, a, MR, MR);
}
