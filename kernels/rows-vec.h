/* SPDX-License-Identifier: MIT */
/*
 * rows-vec.h - the loops the GGUF bodies over the width layer (q8_0-vec.h,
 * qk-vec.h) share: output rows in steps of one vector, tokens MR at a time
 * and the fewer left after, each count a constant so that every block
 * keeps its accumulators in registers; and down chunk by chunk.
 */
#ifndef KT_KERNELS_ROWS_VEC_H
#define KT_KERNELS_ROWS_VEC_H

#include <string.h>

/* down rows whose partial sums wait in scratch while the chunks pass */
#define KERN_VEC_DOWN_NSUB	1024
/* the scratch KERN_VEC_DOWN needs with @mr tokens at once */
#define KERN_VEC_DOWN_SCRATCH(mr)	(sizeof(float) * (mr) * KERN_VEC_DOWN_NSUB)

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
#define KERN_VEC_TOKENS(m, mr, blk, ...)				\
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

/* @blk(@a, n, i, M) over rows n in [@a->n0, @a->n1) by VF_LANES */
#define KERN_VEC_ROWS(blk, a, mr)					\
	do {								\
		unsigned int n_;					\
									\
		for (n_ = (a)->n0; n_ < (a)->n1; n_ += VF_LANES)	\
			KERN_VEC_TOKENS((a)->m, mr, blk, a, n_);	\
	} while (0)

/* y[y_rows[i + m]] += w[i + m] * part[m] over rows [@ns0, @ns1) */
AI void kern_vec_add_y(const struct kern_down_args *a, unsigned int ns0,
		       unsigned int ns1, const float *part, unsigned int i,
		       const int M)
{
	const unsigned int nsub = ns1 - ns0;
	unsigned int n;
	int m;

#pragma GCC unroll 8
	for (m = 0; m < M; m++) {
		float *y = a->y + a->y_rows[i + m] * a->y_stride;
		vf w = vf_set1(a->w[i + m]);

		for (n = ns0; n < ns1; n += VF_LANES)
			vf_store(y + n, vf_fmadd(w, vf_load(part + m * nsub +
							  n - ns0),
						 vf_load(y + n)));
	}
}

/*
 * Tokens [i, i + M) of down rows [ns0, ns1): their partial sums (f32
 * [M][ns1 - ns0] at @part) take every chunk of [k0, k1) in turn, each
 * chunk's tiles of the rows one sequential stream (the chunk-major down
 * tiles), by @chunk(a, n, c, part + n - ns0, ns1 - ns0, i, M) per vector
 * of rows; then y += w * part. Each row's sum takes the chunks in the
 * order a row at a time would, so the bits are those of that order.
 */
#define KERN_VEC_DOWN_RUN(chunk, a, ns0, ns1, part, i, M)		\
	do {								\
		unsigned int c_, n_, nsub_ = (ns1) - (ns0);		\
									\
		memset(part, 0, sizeof(float) * (M) * nsub_);		\
		for (c_ = (a)->k0 / (a)->kc; c_ < (a)->k1 / (a)->kc; c_++) \
			for (n_ = (ns0); n_ < (ns1); n_ += VF_LANES)	\
				chunk(a, n_, c_, (part) + (n_ - (ns0)),	\
				      nsub_, i, M);			\
		kern_vec_add_y(a, ns0, ns1, part, i, M);		\
	} while (0)

/*
 * Down rows [@a->n0, @a->n1) in runs of KERN_VEC_DOWN_NSUB, tokens by @mr,
 * chunk by chunk (KERN_VEC_DOWN_RUN); @a->scratch holds
 * KERN_VEC_DOWN_SCRATCH(@mr) bytes.
 */
#define KERN_VEC_DOWN(chunk, a, mr)					\
	do {								\
		unsigned int ns0_, ns1_;				\
									\
		for (ns0_ = (a)->n0; ns0_ < (a)->n1; ns0_ = ns1_) {	\
			ns1_ = (a)->n1 - ns0_ < KERN_VEC_DOWN_NSUB ?	\
			       (a)->n1 : ns0_ + KERN_VEC_DOWN_NSUB;	\
			KERN_VEC_TOKENS((a)->m, mr, KERN_VEC_DOWN_RUN,	\
					chunk, a, ns0_, ns1_,		\
					(float *)(a)->scratch);		\
		}							\
	} while (0)

#endif /* KT_KERNELS_ROWS_VEC_H */
