/* SPDX-License-Identifier: MIT */
/*
 * qk-vec.h - the K-quant kernels (Q4_K, Q5_K, Q6_K) written once over the
 * width layer (vec.h), the oracle's sums (qk-scalar.c) in another order:
 * the low nibbles of a weight line and its high bits (Q5_K 1, Q6_K 2, from
 * the tile's high-bit lines) make the unsigned operand of an u8 x s8 dot
 * per 4 (vpdpbusd; vpmaddubsw + vpmaddwd on AVX2: 2 * 63 * 127 < 32768);
 * each sub-block's int32 dot goes to f32 and takes d * its scale there;
 * the mins (Q6_K: 32 * its scale) times the sums of the activations go in
 * int32 over a run's sub-blocks, and once to f32 times dmin (Q6_K: 32 d);
 * per activation block one FMA by the activation scale (the oracle scales
 * in int32 per block: the two differ by f32 rounding, about 1e-7). A
 * vector covers VF_LANES output rows: a whole line (16 rows of 4 bytes)
 * on 512 bits, half of one on 256. Down of a few tokens goes chunk by
 * chunk over a run of rows, so that its chunk-major tiles stream; of
 * more, each row vector takes all chunks with its sums in registers
 * (rows-vec.h), the scales of a later row block prefetched.
 * Every weight stream is prefetched PF bytes ahead into L2, not L1: on a
 * 32 KiB L1 (Zen 4) the lines fetched into L1 4 KiB ahead of six down
 * chunks' streams were evicted before use (one core, T = 1: Q4_K down
 * 63 -> 44 us per expert, Q6_K down 108 -> 51, Q6_K gate+up 200 -> 115;
 * Q4_K gate+up unchanged). No L2 prefetch of the next block from later
 * token passes, as Q8_0's: their blocks are a third of its bytes, and it
 * measured no gain.
 *
 * Included by kernels/q{4,5,6}_k-<isa>.c after defining VEC_BITS, VEC_ISA
 * (and VEC_VNNI where not the width's default: vec.h), QK_T (q4_k, q5_k,
 * q6_k) and QK_Q (its enum). Every u8 * s8 pair of its dots is within
 * int16 (values of at most 63), as vpmaddubsw needs.
 */
#include "kernels/qk.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "kernels/act-vec.h"
#include "kernels/rows-vec.h"

#define QK_HB		kern_qk_hi_bits(QK_Q)	/* bits above the nibble */
#define QK_SG		kern_qk_sub(QK_Q)	/* sub-block of a scale */
#define QK_NS		(32 / QK_SG)	/* sub-blocks of 8 lines' values */
#define QK_TB		kern_tile_bytes(QK_Q)
#define QK_LINE		KERN_TILE_ROW_BYTES
/*
 * Tokens at once: decode's down, chunk by chunk with two runs of sums at
 * once (MR), and prefill's blocks (MR_PF), which take 6 on 512 bits: K =
 * 2048, I = 768, T = 512 on one core, Q4_K gate+up 6.4 -> 5.4 ms, down
 * 3.8 -> 3.4, Q5_K and Q6_K 8-15% less too.
 */
#define MR		(VEC_BITS == 512 ? 4 : 2)
#define MR_PF		(VEC_BITS == 512 ? 6 : 2)
/*
 * Prefill shares every activation broadcast between two runs (gate and up,
 * or two row vectors of down): Q4_K on 512 bits only; Q5_K and Q6_K (their
 * high-bit lines) and 256 bits (16 registers) measured no gain.
 */
#define QK_SHARED	(QK_HB == 0 && VEC_BITS == 512)
#define PF		(4 * 1024)
/* the per-ISA name of @name for this quantization: name_q6_k_avx2 */
#define QNAME(name)	VCAT(VCAT(name, QK_T), VEC_ISA)

size_t QNAME(kern_act_row_bytes)(unsigned int K, unsigned int group)
{
	return kern_qk_row_bytes(K, QK_SG);
}

/* kern_qk_prepare() on vectors: the same bytes (act-vec.h) */
void QNAME(kern_act_prepare)(const void *src, size_t src_stride,
			     enum kt_dtype dtype, unsigned int rows,
			     unsigned int K, unsigned int group, uint8_t *dst,
			     size_t dst_stride)
{
	const unsigned int B = kern_qk_act_block(K);
	unsigned int r, b;

	for (r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + r * src_stride;
		uint8_t *d = dst + r * dst_stride;
		float *sc = (float *)(d + K);
		int32_t *sum = (int32_t *)kern_qk_row_sums(d, K);
		int16_t *hsum = (int16_t *)kern_qk_row_hsums(d, K, QK_SG);

		for (b = 0; b < K / B; b++)
			sc[b] = act_quant_block(s, dtype, b * B, B,
						(int8_t *)d + b * B) / 127.0f;
		for (b = 0; b < K / QK_SG; b++) {
			sum[b] = act_sum_q((const int8_t *)d + b * QK_SG,
					   QK_SG);
			hsum[b] = (int16_t)sum[b];
		}
	}
}

size_t QNAME(kern_scratch_bytes)(const struct kern_geom *g,
				 unsigned int max_m)
{
	return KERN_VEC_DOWN_SCRATCH(MR);
}

AI vi bcast4(const uint8_t *p)
{
	return vi_set1_32(ld32(p));
}

/* bits [@pos, @pos + QK_HB) of every byte of @h at bits 4.. (no others);
 * a switch so that every shift count is an immediate at any -O */
AI vi hi_at(vi h, unsigned int pos)
{
	const vi m = vi_set1_8((char)(((1 << QK_HB) - 1) << 4));

	switch (pos) {
	case 0:
		return vi_and(vi_slli16(h, 4), m);
	case 1:
		return vi_and(vi_slli16(h, 3), m);
	case 2:
		return vi_and(vi_slli16(h, 2), m);
	case 3:
		return vi_and(vi_slli16(h, 1), m);
	case 4:
		return vi_and(h, m);
	case 5:
		return vi_and(vi_srli16(h, 1), m);
	case 6:
		return vi_and(vi_srli16(h, 2), m);
	default:
		return vi_and(vi_srli16(h, 3), m);
	}
}

/* VF_LANES scales of a sub-block: Q6_K's are signed */
AI vi load_sc(const uint8_t *p)
{
	return QK_Q == KT_QUANT_Q6_K ? vi_load_i8(p) : vi_load_u8(p);
}

/*
 * Q4_K's high nibbles on 512 bits: masked in place (16 q, up to 240, fine
 * for the u8 operand of vpdpbusd, not for vpmaddubsw's int16 pairs) with
 * their scales divided by 16, exactly, instead of shifted down.
 */
#define QK_HI16		(QK_HB == 0 && VEC_BITS == 512 && VEC_VNNI)

/* nibble lines sharing one high-bit line */
#define QK_PER		(QK_HB ? 4 / QK_HB : 1)

/*
 * Without VNNI each line's vpmaddubsw pair sums (at most 2 * 127 times
 * the largest value, (16 << QK_HB) - 1: 15, 31, 63) add up in int16
 * over QK_FOLD lines before one vpmaddwd by ones takes them to int32
 * (Q4_K 8, Q5_K 4, Q6_K 2): the same integers as vpdpbusd, with a third
 * fewer operations per line and token for Q4_K.
 */
#define QK_FOLD		(VEC_VNNI ? 1 :				\
			 32767 / (2 * 127 * ((16 << QK_HB) - 1)))

/*
 * run_sub()'s lines unrolled two at a time, not all: Q4_K on 256 bits,
 * whose 8 lines at once wanted registers for all their lines and sums,
 * 16 too few; the spills cost a quarter of its gate+up (simd.md, "The
 * GGUF blocks on AVX2"). Q5_K and Q6_K (4 lines per sub-block) lost by
 * it.
 */
#define QK_SUB_PAIRS	(QK_HB == 0 && VEC_BITS == 256)

/*
 * Line @j (of @n) of a sub-block's dots: @acc (int32) += @w . @x, through
 * @s (int16, QK_FOLD lines at a time) without VNNI.
 */
AI void sub_dot(vi *acc, vi *s, vi w, vi x, unsigned int j, unsigned int n)
{
	if (VEC_VNNI) {
		*acc = vi_dot_u8s8(*acc, w, x);
		return;
	}
	*s = vi_dot_u8s8_16(*s, w, x);
	if ((j + 1) % QK_FOLD == 0 || j + 1 == n) {
		*acc = vi_fold16(*acc, *s);
		*s = vi_zero();
	}
}

/*
 * Line @L of the tile at @tp (this vector's rows at @ro): its low (@hi 0)
 * or high nibbles with their high bits, as the unsigned operand; @lh is L
 * % QK_PER, given apart so that it stays a constant where L does not. The
 * low pass prefetches line L (and its high-bit line) of the tile at @pp,
 * the one its stream needs PF bytes later, into L2.
 */
AI vi qline(const uint8_t *tp, const uint8_t *pp, unsigned int L,
	    unsigned int lh, int hi, unsigned int ro)
{
	const uint8_t *lp = tp + L * QK_LINE + ro;
	vi w = vi_load(lp), q;

	if (!hi)
		_mm_prefetch((const char *)pp + L * QK_LINE, _MM_HINT_T1);
	if (QK_HI16)
		return vi_and(w, vi_set1_8(hi ? (char)0xf0 : 0x0f));
	q = vi_and(hi ? vi_srli16(w, 4) : w, vi_set1_8(0x0f));
	if (QK_HB) {
		/* the tile's high-bit lines follow its nibble lines */
		const uint8_t *hp = tp + KERN_TILE_BYTES + L / QK_PER * QK_LINE +
				    ro;

		if (!hi && lh == 0)
			_mm_prefetch((const char *)pp + KERN_TILE_BYTES +
				     L / QK_PER * QK_LINE, _MM_HINT_T1);
		q = vi_or(q, hi_at(vi_load(hp), 2 * QK_HB * lh +
					       (hi ? QK_HB : 0)));
	}
	return q;
}

/*
 * sum[m] += the dots @dot[m] of the sub-block at column @kt of the tiles
 * (@kw the block's first column in the weight matrix) times @d * its scale:
 * one FMA per token, which takes a dot's pipe (Zen 4); the mins are
 * run_mins()'s, once per run.
 */
AI void sub_scale(const vi *dot, const struct kern_qk_rec *r, unsigned int kw,
		  unsigned int kt, vf d, const int M, vf *sum)
{
	const size_t sb = (size_t)((kw % KERN_Q4_K_SUPER + kt) / QK_SG) *
			  KERN_QK_REC_ROWS;
	vf sc = vf_mul(vf_cvt_f32(load_sc(r->sc + sb)), d);
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		sum[m] = vf_fmadd(vf_cvt_f32(dot[m]), sc, sum[m]);
}

/*
 * One activation block of tiles (consecutive in memory from @t, all in the
 * super-block whose scales @r gives for row @n) of rows [n, n +
 * VF_LANES): column @kw (in the weight matrix) of its first value, @xo its
 * offset in the activation rows x[m] (of K @kx), block @xb; its sums go to
 * acc[m]. Per sub-block the int32 dots go to f32 once and take d * scale
 * there: two vector operations per sub-block and token beside the dots,
 * where integer scaling took seven; the mins go per run (run_mins()).
 */
struct qk_run {
	const uint8_t *t;
	const uint8_t *pf;	/* what the stream needs PF bytes after t */
	const struct kern_qk_rec *r;
	unsigned int n, kw, kx, xo, xb;
	const uint8_t *const *x;
	vf *acc;
	/* set by run_start(): this vector's rows within a line (a half
	 * line on 256 bits), the super-block's d (and / 16) and min factor */
	unsigned int ro;
	vf d, dh16, dm;
	vf sum[MR_PF];
};

/*
 * sum[m] = -dm * the sum over the run's @nt tiles' sub-blocks of its min
 * (Q6_K: its scale) times the sum of its activations: exact in int32, two
 * sub-blocks per int16 dot (vpdpwssd; vpmaddwd on AVX2), where an FMA per
 * sub-block took as many of the dots' pipes.
 */
AI void run_mins(struct qk_run *b, unsigned int nt, const int M)
{
	const uint8_t *mn = (QK_Q == KT_QUANT_Q6_K ? b->r->sc : b->r->mn) +
			    (size_t)(b->kw % KERN_Q4_K_SUPER / QK_SG) *
			    KERN_QK_REC_ROWS;
	const unsigned int np = nt * KERN_TILE_K_INT4 / QK_SG / 2;
	/* the run's first pair of int16 sums in each x[m] */
	const size_t ho = kern_qk_hsums_off(b->kx, QK_SG) + b->xo / QK_SG * 2;
	vi id[MR_PF];
	unsigned int p;
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		id[m] = vi_zero();
	_Static_assert(KERN_QK_REC_ROWS == 16, "vi_load_pairs8()");
#pragma GCC unroll 4
	for (p = 0; p < np; p++) {
		const uint8_t *pp = mn + 2 * p * KERN_QK_REC_ROWS;
		vi mv = vi_load_pairs8(pp, QK_Q == KT_QUANT_Q6_K);

#pragma GCC unroll 8
		for (m = 0; m < M; m++)
			id[m] = vi_dot_i16(id[m], mv,
					   bcast4(b->x[m] + ho + 4 * p));
	}
#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		b->sum[m] = vf_fnmadd(b->dm, vf_cvt_f32(id[m]), vf_zero());
}

/* a run of @nt tiles: its sums start at its mins (run_mins()) */
AI void run_start(struct qk_run *b, unsigned int nt, const int M)
{
	b->ro = b->n % KERN_TILE_ROWS * KERN_TILE_LANE_BYTES;
	b->d = vf_load(b->r->d);
	b->dh16 = QK_HI16 ? vf_mul(b->d, vf_set1(1.0f / 16)) : b->d;
	/* Q6_K: sum sc * (q - 32) * x = sum sc * q * x - 32 sc * sum x */
	b->dm = QK_Q == KT_QUANT_Q6_K ? vf_mul(b->d, vf_set1(32.0f)) :
					vf_load(b->r->dmin);
	run_mins(b, nt, M);
}

/* Line @L0 + @j of run_sub()'s tile @tp (@pp: its prefetch), both dots. */
AI void sub_line(const struct qk_run *b, const uint8_t *tp, const uint8_t *pp,
		 unsigned int L0, unsigned int j, unsigned int kl,
		 unsigned int kh, vi *dl, vi *dh, vi *sl, vi *sh, const int M)
{
	const unsigned int lps = 8 / QK_NS;
	/* L0 is a multiple of QK_PER */
	vi wl = qline(tp, pp, L0 + j, j % QK_PER, 0, b->ro);
	vi wh = qline(tp, pp, L0 + j, j % QK_PER, 1, b->ro);
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++) {
		const uint8_t *xp = b->x[m] + b->xo + 4 * j;

		sub_dot(&dl[m], &sl[m], wl, bcast4(xp + kl), j, lps);
		sub_dot(&dh[m], &sh[m], wh, bcast4(xp + kh), j, lps);
	}
}

/*
 * Lines [L0, L0 + lps) of tile @tt: their low nibbles are one sub-block
 * (k 4 L0.. of the tile), their high nibbles another (64 later); both dots
 * at once, 2M independent sums.
 */
AI void run_sub(struct qk_run *b, unsigned int tt, unsigned int L0,
		const int M)
{
	const unsigned int lps = 8 / QK_NS;	/* lines of one sub-block */
	const uint8_t *tp = b->t + tt * QK_TB, *pp = b->pf + tt * QK_TB;
	const unsigned int kl = tt * KERN_TILE_K_INT4 + 4 * L0;
	const unsigned int kh = kl + KERN_INT4_HI_K;
	vi dl[MR_PF], dh[MR_PF], sl[MR_PF], sh[MR_PF];
	unsigned int j;
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		dl[m] = dh[m] = sl[m] = sh[m] = vi_zero();
	if (QK_SUB_PAIRS) {
#pragma GCC unroll 2
		for (j = 0; j < lps; j++)
			sub_line(b, tp, pp, L0, j, kl, kh, dl, dh, sl, sh, M);
	} else {
#pragma GCC unroll 8
		for (j = 0; j < lps; j++)
			sub_line(b, tp, pp, L0, j, kl, kh, dl, dh, sl, sh, M);
	}
	sub_scale(dl, b->r, b->kw, kl, b->d, M, b->sum);
	sub_scale(dh, b->r, b->kw, kh, b->dh16, M, b->sum);
}

AI void run_end(struct qk_run *b, const int M)
{
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		b->acc[m] = vf_fmadd(vf_set1(kern_qk_row_scales(b->x[m],
							       b->kx)[b->xb]),
				     b->sum[m], b->acc[m]);
}

/*
 * Prefill (compute bound): the @hi half of lines [L0, L0 + lps) of tile
 * @tt in runs @a and @b over the same activations (gate and up, or two
 * row vectors of down), one sub-block of each: every activation broadcast
 * feeds two dots. One half at a time keeps 2M dots in registers beside
 * both runs' sums; the lines come again from L1 for the other half. Each
 * run's sub-blocks take their scales in run_sub()'s order: the same bits.
 */
AI void run_half2(struct qk_run *a, struct qk_run *b, unsigned int tt,
		  unsigned int L0, int hi, const int M)
{
	const unsigned int lps = 8 / QK_NS;
	const uint8_t *ta = a->t + tt * QK_TB, *tb = b->t + tt * QK_TB;
	const uint8_t *pa = a->pf + tt * QK_TB, *pb = b->pf + tt * QK_TB;
	const unsigned int k = tt * KERN_TILE_K_INT4 + 4 * L0 +
			       (hi ? KERN_INT4_HI_K : 0);
	vi da[MR_PF], db[MR_PF], sa[MR_PF], sb[MR_PF];
	unsigned int j;
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		da[m] = db[m] = sa[m] = sb[m] = vi_zero();
#pragma GCC unroll 8
	for (j = 0; j < lps; j++) {
		vi wa = qline(ta, pa, L0 + j, j % QK_PER, hi, a->ro);
		vi wb = qline(tb, pb, L0 + j, j % QK_PER, hi, b->ro);

#pragma GCC unroll 8
		for (m = 0; m < M; m++) {
			vi xv = bcast4(a->x[m] + a->xo + 4 * j + k);

			sub_dot(&da[m], &sa[m], wa, xv, j, lps);
			sub_dot(&db[m], &sb[m], wb, xv, j, lps);
		}
	}
	sub_scale(da, a->r, a->kw, k, hi ? a->dh16 : a->d, M, a->sum);
	sub_scale(db, b->r, b->kw, k, hi ? b->dh16 : b->d, M, b->sum);
}

/*
 * @nt tiles of run @a, or with @b (non-NULL) of two runs at once: with
 * @shared (prefill) a half of both in turn, sharing the activation loads
 * (run_half2), else a sub-block of each in turn: decode's down reads two
 * chunks, two DRAM streams (rows-vec.h, KERN_VEC_DOWN_RUN2).
 */
AI void block_runs(unsigned int nt, struct qk_run *a, struct qk_run *b,
		   const int shared, const int M)
{
	unsigned int tt, L0;

	run_start(a, nt, M);
	if (b)
		run_start(b, nt, M);
	for (tt = 0; tt < nt; tt++)
		for (L0 = 0; L0 < KERN_TILE_LINES; L0 += 8 / QK_NS) {
			if (b && shared) {
				run_half2(a, b, tt, L0, 0, M);
				run_half2(a, b, tt, L0, 1, M);
				continue;
			}
			run_sub(a, tt, L0, M);
			if (b)
				run_sub(b, tt, L0, M);
		}
	run_end(a, M);
	if (b)
		run_end(b, M);
}

#ifndef QK_GU_TWO_MAX
#define QK_GU_TWO_MAX 2
#endif

/* super-block @b of @mat's rows [n, n + VF_LANES): its run (scales in @r) */
AI struct qk_run super_run(const struct kern_mat *mat, unsigned int K,
			   unsigned int n, unsigned int b,
			   struct kern_qk_rec *r, const uint8_t *const *x,
			   vf *acc)
{
	struct qk_run run = {
		.t = mat->tiles + kern_tile_off_q(QK_Q, kern_tile_rbm(K,
			KERN_TILE_K_INT4, n / KERN_TILE_ROWS, b * 2)),
		.r = r, .n = n, .kw = b * KERN_Q4_K_SUPER, .kx = K,
		.xo = b * KERN_Q4_K_SUPER, .xb = b, .x = x, .acc = acc,
	};

	run.pf = run.t + PF;
	kern_qk_rec_at(QK_Q, mat->scales, K, n, b * KERN_Q4_K_SUPER, r);
	return run;
}

/*
 * gate and up rows [n, n + VF_LANES) for M tokens, K = H in blocks of 256.
 * A few tokens (memory bound) take a super-block of each at once, two DRAM
 * streams; more (compute bound) with QK_SHARED a super-block of each
 * sharing the activation loads, else all of gate, then all of up, measured
 * faster than the two streams for them (T = 64: 790 against 900 us per
 * expert).
 */
AI void gate_up_block(const struct kern_gate_up_args *a, unsigned int n,
		      unsigned int i, const int M)
{
	const unsigned int nsb = a->K / KERN_Q4_K_SUPER;
	const uint8_t *x[MR_PF];
	vf fg[MR_PF], fu[MR_PF];
	unsigned int b;
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++) {
		x[m] = a->act + a->act_rows[i + m] * a->act_stride;
		fg[m] = fu[m] = vf_zero();
	}
	for (b = 0; b < nsb; b++) {
		struct kern_qk_rec rg, ru;
		struct qk_run g = super_run(a->gate, a->K, n, b, &rg, x, fg);
		struct qk_run u = super_run(a->up, a->K, n, b, &ru, x, fu);

		block_runs(2, &g, M <= QK_GU_TWO_MAX || QK_SHARED ? &u : NULL,
			   M > QK_GU_TWO_MAX, M);
	}
	for (b = 0; !QK_SHARED && M > QK_GU_TWO_MAX && b < nsb; b++) {
		struct kern_qk_rec ru;
		struct qk_run u = super_run(a->up, a->K, n, b, &ru, x, fu);

		block_runs(2, &u, NULL, 0, M);
	}
#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		vf_store(a->out + (i + m) * a->out_stride + (n - a->n0),
			 vf_glu(a->glu, n, fg[m], fu[m]));
}

void QNAME(kern_gate_up)(const struct kern_gate_up_args *a)
{
	KERN_VEC_ROWS(gate_up_block, a, MR_PF);
}

/*
 * KC, a->kc of every down call (kern_pack_layout() sets it for every
 * quantization) as a constant: the chunk's addresses and activation rows
 * without divisions by a run-time KC (one core, Q4_K T = 32 down 346 ->
 * 320 us per expert).
 */
#define QK_KC		KERN_DOWN_CHUNK

/*
 * down: chunk @c (one activation block, KC / 128 tiles of one super-block)
 * of rows [n, n + VF_LANES), tokens [i, i + M), added to f[m]
 */
_Static_assert(KERN_DOWN_CHUNK <= KERN_Q4_K_SUPER &&
	       KERN_Q4_K_SUPER % KERN_DOWN_CHUNK == 0,
	       "a chunk's run takes the tiles of one super-block");

/*
 * Down reads a chunk's scale records at a stride of K / 256 records, 16
 * rows a step, too few steps per task for the hardware to follow: each run
 * loads the lines of the run two row blocks on (32 rows, best of 16 to 128
 * at T = 1: Q4_K down 58-64 -> 46-50 us per expert on one core).
 */
#define QK_REC_PF_ROWS	32

/* the lines of chunk @c's scales of row @n of @scales into L1 */
AI void prefetch_rec(const struct kern_down_args *a, const void *scales,
		     unsigned int n, unsigned int c)
{
	const unsigned int ks = c * QK_KC % KERN_Q4_K_SUPER / QK_SG;
	struct kern_qk_rec r;

	kern_qk_rec_at(QK_Q, scales, a->K, n, c * QK_KC, &r);
	_mm_prefetch((const char *)r.d, _MM_HINT_T0);
	_mm_prefetch((const char *)(r.sc + ks * KERN_QK_REC_ROWS),
		     _MM_HINT_T0);
	if (QK_Q == KT_QUANT_Q6_K) {
		/* a chunk's 8 sub-blocks of 16: two lines */
		_mm_prefetch((const char *)(r.sc + ks * KERN_QK_REC_ROWS + 64),
			     _MM_HINT_T0);
	} else {
		_mm_prefetch((const char *)r.dmin, _MM_HINT_T0);
		_mm_prefetch((const char *)(r.mn + ks * KERN_QK_REC_ROWS),
			     _MM_HINT_T0);
	}
}

/*
 * The tile PF bytes after @t in chunk @c's stream: the call's rows of a
 * chunk are one run of tiles, and past its end the stream goes on in the
 * next call's (@a->next_down, the same rows), so that an expert's first
 * tiles of each chunk arrive while the one before it ends, instead of
 * lines of rows no call of this task reads. Without a next call, @t.
 * (kern_down_pf() computes the same; through it this body's down measured
 * 5-15% slower at T = 32, so it keeps its own.)
 */
AI const uint8_t *down_pf(const struct kern_down_args *a, const uint8_t *t,
			  unsigned int c)
{
	const uint8_t *t0 = a->down->tiles + kern_tile_off_q(QK_Q,
		kern_tile_kcm_chunk(a->N, QK_KC, KERN_TILE_K_INT4,
				    a->n0 / KERN_TILE_ROWS, c));
	const size_t len = (size_t)(a->n1 - a->n0) / KERN_TILE_ROWS *
			   (QK_KC / KERN_TILE_K_INT4) * QK_TB;
	const size_t o = (size_t)(t - t0) + PF;

	if (o < len)
		return t + PF;
	if (!a->next_down || o - len >= len)
		return t;
	return a->next_down->tiles + (t0 - a->down->tiles) + (o - len);
}

/*
 * The scales of the run two row blocks after row @n (QK_REC_PF_ROWS) of
 * chunk @c: past the call's rows, the next call's first ones.
 */
AI void prefetch_next_rec(const struct kern_down_args *a, unsigned int n,
			  unsigned int c)
{
	const unsigned int np = n + QK_REC_PF_ROWS;

	if (np < a->n1)
		prefetch_rec(a, a->down->scales, np, c);
	else if (a->next_down && np - a->n1 < a->n1 - a->n0)
		prefetch_rec(a, a->next_down->scales, a->n0 + (np - a->n1), c);
}

/* chunk @c of rows @n: its run (tokens' rows in @x, scales in @r) */
AI struct qk_run chunk_run(const struct kern_down_args *a, unsigned int n,
			   unsigned int c, struct kern_qk_rec *r,
			   const uint8_t **x, vf *f, unsigned int i,
			   const int M)
{
	const unsigned int kc = QK_KC;
	struct qk_run run = {
		.t = a->down->tiles + kern_tile_off_q(QK_Q,
			kern_tile_kcm_chunk(a->N, kc, KERN_TILE_K_INT4,
					    n / KERN_TILE_ROWS, c)),
		.r = r, .n = n, .kw = c * kc, .kx = kc, .xo = 0, .xb = 0,
		.x = x, .acc = f,
	};
	int m;

	run.pf = down_pf(a, run.t, c);
	kern_qk_rec_at(QK_Q, a->down->scales, a->K, n, c * kc, r);
	prefetch_next_rec(a, n, c);
#pragma GCC unroll 8
	for (m = 0; m < M; m++)
		x[m] = a->act + (i + m) * a->act_stride +
		       (c - a->k0 / kc) * kern_qk_row_bytes(kc, QK_SG);
	return run;
}

AI void down_chunk(const struct kern_down_args *a, unsigned int n,
		   unsigned int c, vf *f, unsigned int i, const int M)
{
	struct kern_qk_rec r;
	const uint8_t *x[MR_PF];
	struct qk_run run = chunk_run(a, n, c, &r, x, f, i, M);

	block_runs(QK_KC / KERN_TILE_K_INT4, &run, NULL, 0, M);
}

/* two streams (KERN_VEC_DOWN_RUN2): chunk @c of rows @n into f and chunk
 * c + 1 of rows @n2 into f2, a sub-block of each in turn */
AI void down_chunk2(const struct kern_down_args *a, unsigned int n,
		    unsigned int c, vf *f, unsigned int n2, vf *f2,
		    unsigned int i, const int M)
{
	struct kern_qk_rec r, r2;
	const uint8_t *x[MR_PF], *x2[MR_PF];
	struct qk_run run = chunk_run(a, n, c, &r, x, f, i, M);
	struct qk_run run2 = chunk_run(a, n2, c + 1, &r2, x2, f2, i, M);

	block_runs(QK_KC / KERN_TILE_K_INT4, &run, &run2, 0, M);
}

/*
 * prefill (KERN_VEC_DOWN_ROW2): chunk @c of rows @n into f and of rows
 * n + VF_LANES into f2, both runs at once sharing the activation loads
 * (QK_SHARED), else one after the other. On 512 bits without QK_SHARED
 * (Q5_K, Q6_K), KERN_VEC_DOWN_ROW2 takes one row vector's chunks after
 * the other's instead: the two vectors' sums beside one run's took more
 * than 32 registers, and the spills moved with every change of the code
 * around them (one core, T = 30, Q6_K down 400 -> 440 or 610 us per
 * expert from a change of the token loop alone). On 256 bits the pairs
 * measured 2-14% faster than one row after the other.
 */
#define down_chunk_pairs	(QK_SHARED || VEC_BITS == 256)
AI void down_chunk_pair(const struct kern_down_args *a, unsigned int n,
			unsigned int c, vf *f, vf *f2, unsigned int i,
			const int M)
{
	struct kern_qk_rec r, r2;
	const uint8_t *x[MR_PF], *x2[MR_PF];
	struct qk_run run, run2;

	if (!QK_SHARED) {
		down_chunk(a, n, c, f, i, M);
		down_chunk(a, n + VF_LANES, c, f2, i, M);
		return;
	}
	run = chunk_run(a, n, c, &r, x, f, i, M);
	run2 = chunk_run(a, n + VF_LANES, c, &r2, x2, f2, i, M);
	block_runs(QK_KC / KERN_TILE_K_INT4, &run, &run2, 1, M);
}

void QNAME(kern_down)(const struct kern_down_args *a)
{
	KERN_VEC_DOWN2(down_chunk, a, MR, MR_PF);
}
