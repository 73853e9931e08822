/* SPDX-License-Identifier: MIT */
/*
 * rows-vec.h - the loops the GGUF bodies over the width layer (q8_0-vec.h,
 * qk-vec.h) share: output rows in steps of one vector, tokens in blocks
 * of at most MR as even as they come, each count a constant so that every
 * block keeps its accumulators in registers; and down, chunk by chunk for a
 * few tokens or two row vectors at a time for more.
 */
#ifndef KT_KERNELS_ROWS_VEC_H
#define KT_KERNELS_ROWS_VEC_H

/* down rows whose partial sums wait in scratch while the chunks pass */
#define KERN_VEC_DOWN_NSUB	1024
/* the scratch KERN_VEC_DOWN needs with @mr tokens at once */
#define KERN_VEC_DOWN_SCRATCH(mr)	(sizeof(float) * (mr) * KERN_VEC_DOWN_NSUB)

/* a token loop of a macro body, unrolled so that its sums stay in registers */
#define KERN_VEC_UNROLL		_Pragma("GCC unroll 8")

/* @r (a constant) more tokens from @i where the block size @mr exceeds
 * it, so that no M passed is above @mr */
#define KERN_VEC_REM_(r, mr, blk, i, ...)				\
	do {								\
		if ((mr) > (r)) {					\
			blk(__VA_ARGS__, i, (mr) > (r) ? (r) : 1);	\
			(i) += (r);					\
		}							\
	} while (0)

/*
 * @blk(..., i, M) for tokens i in [0, @m) by @mr (<= 8), then the fewer
 * left (< @mr) in blocks of 4, 2 and 1, each M a constant.
 */
#define KERN_VEC_TOKENS_BY_MR_(m, mr, blk, ...)				\
	do {								\
		unsigned int i_, r_;					\
									\
		for (i_ = 0; i_ + (mr) <= (m); i_ += (mr))		\
			blk(__VA_ARGS__, i_, mr);			\
		r_ = (m) - i_;						\
		if (r_ & 4)						\
			KERN_VEC_REM_(4, mr, blk, i_, __VA_ARGS__);	\
		if (r_ & 2)						\
			KERN_VEC_REM_(2, mr, blk, i_, __VA_ARGS__);	\
		if (r_ & 1)						\
			blk(__VA_ARGS__, i_, 1);			\
	} while (0)

/* blocks of at most @mr tokens that @m tokens take */
static inline unsigned int kern_vec_blocks(unsigned int m, unsigned int mr)
{
	return (m + mr - 1) / mr;
}

/* the index of KERN_VEC_TOKENS' block that starts at token @i of @m
 * (exact for those starts: the first m % nb blocks take one more; blocks
 * of at most 2 start at multiples of @mr, a constant: no division by m) */
static inline unsigned int kern_vec_block(unsigned int i, unsigned int m,
					  unsigned int mr)
{
	return mr <= 2 ? i / mr : i * kern_vec_blocks(m, mr) / m;
}

/* a block of @k tokens from @i, where the block size @mr allows it (a
 * constant condition: no M above @mr is expanded) */
#define KERN_VEC_CASE_(k, mr, blk, i, ...)				\
	case k:								\
		if ((mr) >= (k))					\
			blk(__VA_ARGS__, i, (mr) >= (k) ? (k) : 1);	\
		break

/*
 * @blk(..., i, M) for tokens i in [0, @m) in as few blocks of at most @mr
 * (<= 8) as hold them, as even as they come (ceil(left / blocks left)):
 * 32 tokens by 6 are 6 6 5 5 5 5, not 6 6 6 6 6 2, whose last block reads
 * the weights for two tokens, and 3 one block, not 2 and 1 (one core, us
 * per expert, Q4_K down T = 32 351 -> 339, T = 3 72 -> 52; Q6_K down T =
 * 3 107 -> 76; Q8_0 gate+up T = 32 614 -> 585). Each M is a
 * constant, so that the block keeps its sums in registers; the blocks
 * follow from @m alone, so the bits do not depend on the caller.
 */
#define KERN_VEC_TOKENS_EVEN_(m, mr, blk, ...)				\
	do {								\
		unsigned int i_ = 0, nb_ = kern_vec_blocks(m, mr), M_;	\
									\
		for (; nb_; nb_--, i_ += M_) {				\
			M_ = ((m) - i_ + nb_ - 1) / nb_;		\
			switch (M_) {					\
			KERN_VEC_CASE_(1, mr, blk, i_, __VA_ARGS__);	\
			KERN_VEC_CASE_(2, mr, blk, i_, __VA_ARGS__);	\
			KERN_VEC_CASE_(3, mr, blk, i_, __VA_ARGS__);	\
			KERN_VEC_CASE_(4, mr, blk, i_, __VA_ARGS__);	\
			KERN_VEC_CASE_(5, mr, blk, i_, __VA_ARGS__);	\
			KERN_VEC_CASE_(6, mr, blk, i_, __VA_ARGS__);	\
			KERN_VEC_CASE_(7, mr, blk, i_, __VA_ARGS__);	\
			KERN_VEC_CASE_(8, mr, blk, i_, __VA_ARGS__);	\
			}						\
		}							\
	} while (0)

/*
 * Blocks of at most 2 (the 256-bit bodies) are the same either way; the
 * switch measured 2-12% slower there (AVX2 Q4_K and Q8_0 down, one core).
 */
#define KERN_VEC_TOKENS(m, mr, blk, ...)				\
	do {								\
		if ((mr) > 2)						\
			KERN_VEC_TOKENS_EVEN_(m, mr, blk, __VA_ARGS__);	\
		else							\
			KERN_VEC_TOKENS_BY_MR_(m, mr, blk, __VA_ARGS__); \
	} while (0)

/* @blk(@a, n, i, M) over rows n in [@a->n0, @a->n1) by VF_LANES */
#define KERN_VEC_ROWS(blk, a, mr)					\
	do {								\
		unsigned int n_;					\
									\
		for (n_ = (a)->n0; n_ < (a)->n1; n_ += VF_LANES)	\
			KERN_VEC_TOKENS((a)->m, mr, blk, a, n_);	\
	} while (0)

/* y[y_rows[i + m]][n, n + VF_LANES) += w[i + m] * f[m] */
AI void kern_vec_add_y(const struct kern_down_args *a, unsigned int n,
		       const vf *f, unsigned int i, const int M)
{
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++) {
		float *y = a->y + a->y_rows[i + m] * a->y_stride + n;

		vf_store(y, vf_fmadd(vf_set1(a->w[i + m]), f[m], vf_load(y)));
	}
}

/* f[m]: token i + m's partial sums of rows [n, n + VF_LANES) before chunk
 * @c (zero at the first chunk, else from @part) */
#define KERN_VEC_DOWN_LOAD_(f, a, c, n, ns0, part, M)			\
	do {								\
		const float *p_ = (part) + ((n) - (ns0));		\
		int m_;							\
									\
		KERN_VEC_UNROLL						\
		for (m_ = 0; m_ < (M); m_++)				\
			(f)[m_] = (c) == (a)->k0 / (a)->kc ? vf_zero() : \
				  vf_load(p_ + m_ * nsub_);		\
	} while (0)

/* ... and after it: back to @part, or after the last chunk y += w * f */
#define KERN_VEC_DOWN_SAVE_(f, a, c, n, ns0, part, i, M)		\
	do {								\
		float *p_ = (part) + ((n) - (ns0));			\
		int m_;							\
									\
		if ((c) + 1 == (a)->k1 / (a)->kc) {			\
			kern_vec_add_y(a, n, f, i, M);			\
			break;						\
		}							\
		KERN_VEC_UNROLL						\
		for (m_ = 0; m_ < (M); m_++)				\
			vf_store(p_ + m_ * nsub_, (f)[m_]);		\
	} while (0)

/* chunk @c of rows [n, n + VF_LANES) by @chunk */
#define KERN_VEC_DOWN_ONE_(chunk, a, c, n, ns0, part, i, M)		\
	do {								\
		vf f1_[M];						\
									\
		KERN_VEC_DOWN_LOAD_(f1_, a, c, n, ns0, part, M);	\
		chunk(a, n, c, f1_, i, M);				\
		KERN_VEC_DOWN_SAVE_(f1_, a, c, n, ns0, part, i, M);	\
	} while (0)

/*
 * Tokens [i, i + M) of down rows [ns0, ns1): their partial sums (f32
 * [M][ns1 - ns0] at @part) take every chunk of [k0, k1) in turn, each
 * chunk's tiles of the rows one sequential stream (the chunk-major down
 * tiles), f[m] the sums of token i + m (zero at the first chunk, then from
 * @part; after the last chunk y += w * f instead of a store). Two chunks
 * at a time, chunk c + 1 one row vector behind chunk c, by
 * @chunk##2(a, n, c, f, n2, f2, i, M) (chunk c of rows n into f, chunk
 * c + 1 of rows n2 into f2, at once), @chunk(a, n, c, f, i, M) at the
 * ends. One core's DRAM reads are capped per sequential stream, and
 * consecutive chunks' tiles are N / 16 row blocks apart: two streams.
 * Every row still takes its chunks in order.
 */
#define KERN_VEC_DOWN_RUN2(chunk, a, ns0, ns1, part, i, M)		\
	do {								\
		const unsigned int c1_ = (a)->k1 / (a)->kc;		\
		unsigned int c_, n_, nsub_ = (ns1) - (ns0);		\
		vf fa_[M], fb_[M];					\
									\
		for (c_ = (a)->k0 / (a)->kc; c_ + 1 < c1_; c_ += 2) {	\
			KERN_VEC_DOWN_ONE_(chunk, a, c_, ns0, ns0, part, \
					   i, M);			\
			for (n_ = (ns0) + VF_LANES; n_ < (ns1);		\
			     n_ += VF_LANES) {				\
				KERN_VEC_DOWN_LOAD_(fa_, a, c_, n_, ns0, \
						    part, M);		\
				KERN_VEC_DOWN_LOAD_(fb_, a, c_ + 1,	\
						    n_ - VF_LANES, ns0,	\
						    part, M);		\
				chunk##2(a, n_, c_, fa_, n_ - VF_LANES,	\
					 fb_, i, M);			\
				KERN_VEC_DOWN_SAVE_(fa_, a, c_, n_, ns0, \
						    part, i, M);	\
				KERN_VEC_DOWN_SAVE_(fb_, a, c_ + 1,	\
						    n_ - VF_LANES, ns0,	\
						    part, i, M);	\
			}						\
			KERN_VEC_DOWN_ONE_(chunk, a, c_ + 1,		\
					   (ns1) - VF_LANES, ns0, part,	\
					   i, M);			\
		}							\
		if (c_ < c1_)						\
			for (n_ = (ns0); n_ < (ns1); n_ += VF_LANES)	\
				KERN_VEC_DOWN_ONE_(chunk, a, c_, n_, ns0, \
						   part, i, M);		\
	} while (0)

/*
 * Tokens [i, i + M) of the down rows [n, n + VF_LANES): the sums stay in
 * registers while every chunk of [k0, k1) passes, then y += w * sums.
 * For calls of more tokens than one block (compute bound, the weights
 * reused from cache by every block) there is no stream to keep, and this
 * saves each chunk's load and store of the partial sums. With @chunk##_pair
 * (a, n, c, f, f2, i, M: rows n into f, n + VF_LANES into f2, at once),
 * KERN_VEC_DOWN_ROW2 takes two row vectors, so that every activation load
 * feeds two dots; where the body's @chunk##_pairs is 0, one row vector's
 * chunks after the other's, so that only one's sums take registers.
 */
#define KERN_VEC_DOWN_ROW(chunk, a, n, i, M)				\
	do {								\
		unsigned int c_;					\
		vf f_[M];						\
		int m_;							\
									\
		KERN_VEC_UNROLL						\
		for (m_ = 0; m_ < (M); m_++)				\
			f_[m_] = vf_zero();				\
		for (c_ = (a)->k0 / (a)->kc; c_ < (a)->k1 / (a)->kc; c_++) \
			chunk(a, n, c_, f_, i, M);			\
		kern_vec_add_y(a, n, f_, i, M);				\
	} while (0)

#define KERN_VEC_DOWN_ROW2(chunk, a, n, i, M)				\
	do {								\
		if (chunk##_pairs) {					\
			KERN_VEC_DOWN_PAIR_(chunk, a, n, i, M);		\
		} else {						\
			KERN_VEC_DOWN_ROW(chunk, a, n, i, M);		\
			KERN_VEC_DOWN_ROW(chunk, a, (n) + VF_LANES, i, M); \
		}							\
	} while (0)

#define KERN_VEC_DOWN_PAIR_(chunk, a, n, i, M)				\
	do {								\
		unsigned int c_;					\
		vf f_[M], f2_[M];					\
		int m_;							\
									\
		KERN_VEC_UNROLL						\
		for (m_ = 0; m_ < (M); m_++)				\
			f_[m_] = f2_[m_] = vf_zero();			\
		for (c_ = (a)->k0 / (a)->kc; c_ < (a)->k1 / (a)->kc; c_++) \
			chunk##_pair(a, n, c_, f_, f2_, i, M);		\
		kern_vec_add_y(a, n, f_, i, M);				\
		kern_vec_add_y(a, (n) + VF_LANES, f2_, i, M);		\
	} while (0)

/*
 * Down rows [@a->n0, @a->n1) in runs of KERN_VEC_DOWN_NSUB (a run's tiles
 * stay in L2 while its token blocks pass): each row's sums take the chunks
 * in order, then y += w * sums, by @chunk(a, n, c, f, i, M) (f[m] the sums
 * of token i + m over rows [n, n + VF_LANES)). Calls of at most @mr tokens
 * (decode, memory bound) go chunk by chunk in blocks of @mr
 * (KERN_VEC_DOWN_RUN2, by @chunk##2; @a->scratch holds
 * KERN_VEC_DOWN_SCRATCH(@mr) bytes), more two row vectors at a time in
 * blocks of @mr_pf (KERN_VEC_DOWN_ROW2, by @chunk##_pair): up to
 * KERN_VEC_DOWN_FEW blocks all over two row vectors before the next two
 * (KERN_VEC_DOWN_PAIRS_), more each block over all row vectors
 * (KERN_VEC_DOWN_ROWS_). All add each row's chunks in the same order, so
 * the bits are the same.
 */
#define KERN_VEC_DOWN2(chunk, a, mr, mr_pf)				\
	do {								\
		unsigned int ns0_, ns1_;				\
									\
		for (ns0_ = (a)->n0; ns0_ < (a)->n1; ns0_ = ns1_) {	\
			ns1_ = (a)->n1 - ns0_ < KERN_VEC_DOWN_NSUB ?	\
			       (a)->n1 : ns0_ + KERN_VEC_DOWN_NSUB;	\
			if ((a)->m > KERN_VEC_DOWN_FEW * (mr_pf))	\
				KERN_VEC_TOKENS((a)->m, mr_pf,		\
						KERN_VEC_DOWN_ROWS_, chunk, \
						a, ns0_, ns1_);		\
			else if ((a)->m > (mr))				\
				KERN_VEC_DOWN_PAIRS_(chunk, a, ns0_, ns1_, \
						     mr_pf);		\
			else						\
				KERN_VEC_TOKENS((a)->m, mr,		\
						KERN_VEC_DOWN_RUN2, chunk, \
						a, ns0_, ns1_,		\
						(float *)(a)->scratch);	\
		}							\
	} while (0)

/* tokens [i, i + M): the row vectors of [@ns0, @ns1), two at a time while
 * two are left */
#define KERN_VEC_DOWN_ROWS_(chunk, a, ns0, ns1, i, M)			\
	do {								\
		unsigned int nv_;					\
									\
		for (nv_ = (ns0); nv_ + VF_LANES < (ns1);		\
		     nv_ += 2 * VF_LANES)				\
			KERN_VEC_DOWN_ROW2(chunk, a, nv_, i, M);	\
		if (nv_ < (ns1))					\
			KERN_VEC_DOWN_ROW(chunk, a, nv_, i, M);		\
	} while (0)

/*
 * Expert calls of a prefill whose tokens spread over many experts (T =
 * 512, top-8 of 128: 32 each) reuse each two row vectors' tiles from L1
 * for all their blocks: one core, Q4_K T = 32, 257 -> 242 us per expert;
 * for T = 256 the block-by-block order measured 4-6% faster.
 */
#define KERN_VEC_DOWN_FEW	8

/* all tokens, the row vectors of [@ns0, @ns1) two at a time */
#define KERN_VEC_DOWN_PAIRS_(chunk, a, ns0, ns1, mr_pf)			\
	do {								\
		unsigned int nv_;					\
									\
		for (nv_ = (ns0); nv_ + VF_LANES < (ns1);		\
		     nv_ += 2 * VF_LANES)				\
			KERN_VEC_TOKENS((a)->m, mr_pf,			\
					KERN_VEC_DOWN_ROW2, chunk, a, nv_); \
		if (nv_ < (ns1))					\
			KERN_VEC_TOKENS((a)->m, mr_pf,			\
					KERN_VEC_DOWN_ROW, chunk, a, nv_); \
	} while (0)

#endif /* KT_KERNELS_ROWS_VEC_H */
