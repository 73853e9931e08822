/* SPDX-License-Identifier: MIT */
/*
 * dispatch-m.h - a token count known at run time turned into the
 * compile-time constant the micro-kernels are unrolled for, shared by the
 * vector bodies (moe-zmm.h, moe-ymm.h, the FP8 and MXFP4 kernels).
 */
#ifndef KT_KERNELS_DISPATCH_M_H
#define KT_KERNELS_DISPATCH_M_H

/* k, or the includer's MR where k exceeds it: no body is built above MR */
#define KERN_M_UPTO(k)	((k) < MR ? (k) : MR)

/*
 * fn(..., M) with M the constant equal to @mr, 1 <= @mr <= MR <= 8 (MR
 * defined by the includer).
 */
#define KERN_DISPATCH_M(fn, mr, ...)					\
	do {								\
		switch (mr) {						\
		case 1: fn(__VA_ARGS__, 1); break;			\
		case 2: fn(__VA_ARGS__, KERN_M_UPTO(2)); break;		\
		case 3: fn(__VA_ARGS__, KERN_M_UPTO(3)); break;		\
		case 4: fn(__VA_ARGS__, KERN_M_UPTO(4)); break;		\
		case 5: fn(__VA_ARGS__, KERN_M_UPTO(5)); break;		\
		case 6: fn(__VA_ARGS__, KERN_M_UPTO(6)); break;		\
		case 7: fn(__VA_ARGS__, KERN_M_UPTO(7)); break;		\
		default: fn(__VA_ARGS__, KERN_M_UPTO(8)); break;	\
		}							\
	} while (0)

#endif /* KT_KERNELS_DISPATCH_M_H */
