/* SPDX-License-Identifier: MIT */
/*
 * rows-vec.h - the loop the GGUF bodies over the width layer (q8_0-vec.h,
 * qk-vec.h) share: output rows in steps of one vector, tokens MR at a time
 * and the fewer left after, each count a constant so that every block
 * keeps its accumulators in registers.
 */
#ifndef KT_KERNELS_ROWS_VEC_H
#define KT_KERNELS_ROWS_VEC_H

/*
 * Run @blk(@a, n, i, M) over rows n in [@a->n0, @a->n1) by VF_LANES and
 * tokens i in [0, @a->m) by @mr (<= 4); a remainder of 3 or 2 exists only
 * where @mr exceeds it, so no M passed is above @mr.
 */
#define KERN_VEC_ROWS(blk, a, mr)					\
	do {								\
		unsigned int n_, i_;					\
									\
		for (n_ = (a)->n0; n_ < (a)->n1; n_ += VF_LANES) {	\
			for (i_ = 0; i_ + (mr) <= (a)->m; i_ += (mr))	\
				blk(a, n_, i_, mr);			\
			switch ((a)->m - i_) {				\
			case 3:						\
				blk(a, n_, i_, (mr) > 3 ? 3 : 1);	\
				break;					\
			case 2:						\
				blk(a, n_, i_, (mr) > 2 ? 2 : 1);	\
				break;					\
			case 1:						\
				blk(a, n_, i_, 1);			\
				break;					\
			}						\
		}							\
	} while (0)

#endif /* KT_KERNELS_ROWS_VEC_H */
