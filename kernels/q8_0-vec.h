/* SPDX-License-Identifier: MIT */
/*
 * q8_0-vec.h - the Q8_0 kernels written once over the width layer (vec.h):
 * per group of 32 and VF_LANES rows (a whole 64-byte line on 512 bits, half
 * of one on 256), the int32 dot of the group's 8 lines with the broadcast
 * activations, then one FMA by weight scale * activation scale, as the
 * oracle (q8_0-scalar.c). The s8 x s8 dot: on AVX-512 VNNI vpdpbusd of the
 * line flipped to u8 (w + 128; the 128 * sum(x) of the group taken back);
 * on AVX2 vpmaddubsw of |w| with x signed by w (2 * 128 * 127 < 32768).
 * Down goes chunk by chunk over a run of rows (rows-vec.h), so that its
 * chunk-major tiles stream.
 *
 * Included by kernels/q8_0-{avx2,avx512}.c after defining VEC_BITS and
 * VEC_ISA.
 */
#include "kernels/q8_0.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/rows-vec.h"

#define MR	(VEC_BITS == 512 ? 4 : 2)	/* tokens sharing a line */
#define LINE	KERN_TILE_ROW_BYTES
#define GLINES	(Q8G / KERN_TILE_LANE_BYTES)	/* lines of one group: 8 */
#define PF	(4 * 1024)		/* prefetch distance, bytes */

#if VEC_BITS == 512
#define Q8_BIAS	128			/* what wline() adds to each w */
AI vi wline(const uint8_t *p)
{
	return vi_xor(vi_load(p), vi_set1_8((char)0x80));
}

AI vi dot_s8(vi acc, vi w, vi x)
{
	return vi_dot_u8s8(acc, w, x);
}
#else
#define Q8_BIAS	0
AI vi wline(const uint8_t *p)
{
	return vi_load(p);
}

AI vi dot_s8(vi acc, vi w, vi x)
{
	return vi_dot_u8s8(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}
#endif

size_t VNAME(kern_act_row_bytes_q8_0)(unsigned int K, unsigned int group)
{
	return kern_q8_0_row_bytes(K);
}

void VNAME(kern_act_prepare_q8_0)(const void *src, size_t src_stride,
				  enum kt_dtype dtype, unsigned int rows,
				  unsigned int K, unsigned int group,
				  uint8_t *dst, size_t dst_stride)
{
	kern_q8_0_prepare(src, src_stride, dtype, rows, K, dst, dst_stride);
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

/*
 * acc[m] += (dot of one group's 8 lines at @w, this vector's rows, with
 * x[m] + @xo) times ws * (activation scale of group @xg of row x[m]); @K
 * the row's K.
 */
AI void group_dot(const uint8_t *w, vf ws, const uint8_t *const *x,
		  unsigned int xo, unsigned int xg, unsigned int K,
		  const int M, vf *acc)
{
	vi d[MR];
	int m, j;

#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		d[m] = vi_zero();
#pragma GCC unroll 8
	for (j = 0; j < GLINES; j++) {
		vi wl = wline(w + j * LINE);

		_mm_prefetch((const char *)w + PF + j * LINE, _MM_HINT_T0);
#pragma GCC unroll 8
		for (m = 0; m < M; m++)
			d[m] = dot_s8(d[m], wl, bcast4(x[m] + xo + j * 4));
	}
#pragma GCC unroll 8
	for (m = 0; m < M; m++) {
		vi corr = vi_set1_32(Q8_BIAS * kern_q8_0_row_sums(x[m], K)[xg]);
		vf s = vf_mul(ws, vf_set1(kern_q8_0_row_scales(x[m], K)[xg]));

		acc[m] = vf_fmadd(vf_cvt_f32(vi_sub32(d[m], corr)), s, acc[m]);
	}
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
	const uint8_t *x[MR];
	vf fg[MR], fu[MR];
	unsigned int g;
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i + m] * a->act_stride;
		fg[m] = fu[m] = vf_zero();
	}
	/* group g is lines (g % 2) * 8 .. + 8 of tile g / 2: g * 512 bytes */
	for (g = 0; g < K / Q8G; g++) {
		group_dot(tg + (size_t)g * GLINES * LINE,
			  vf_load(a->gate->scales + (size_t)g * N + n),
			  x, g * Q8G, g, K, M, fg);
		group_dot(tu + (size_t)g * GLINES * LINE,
			  vf_load(a->up->scales + (size_t)g * N + n),
			  x, g * Q8G, g, K, M, fu);
	}
#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		vf_store(a->out + (i + m) * a->out_stride + (n - a->n0),
			 vf_glu(a->glu, n, fg[m], fu[m]));
}

void VNAME(kern_gate_up_q8_0)(const struct kern_gate_up_args *a)
{
	KERN_VEC_ROWS(gate_up_block, a, MR);
}

/* down: chunk @c of rows [n, n + VF_LANES), tokens [i, i + M), added to
 * part[m * nsub] */
AI void down_chunk(const struct kern_down_args *a, unsigned int n,
		   unsigned int c, float *part, unsigned int nsub,
		   unsigned int i, const int M)
{
	const unsigned int kc = a->kc;
	const size_t crow = kern_q8_0_row_bytes(kc);
	const uint8_t *x[MR];
	vf f[MR];
	unsigned int gg;
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++) {
		x[m] = a->act + (i + m) * a->act_stride +
		       (c - a->k0 / kc) * crow;
		f[m] = vf_load(part + m * nsub);
	}
	for (gg = 0; gg < kc / Q8G; gg++) {
		unsigned int k = c * kc + gg * Q8G;
		const uint8_t *t = a->down->tiles + kern_tile_off(
			kern_tile_kcm(a->N, kc, KERN_TILE_K_INT8,
				      n / KERN_TILE_ROWS,
				      k / KERN_TILE_K_INT8)) +
			(k % KERN_TILE_K_INT8) / Q8G * GLINES * LINE +
			n % KERN_TILE_ROWS * KERN_TILE_LANE_BYTES;

		group_dot(t, vf_load(a->down->scales +
				(size_t)(k / Q8G) * a->N + n),
			  x, gg * Q8G, gg, kc, M, f);
	}
#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		vf_store(part + m * nsub, f[m]);
}

void VNAME(kern_down_q8_0)(const struct kern_down_args *a)
{
	KERN_VEC_DOWN(down_chunk, a, MR);
}
