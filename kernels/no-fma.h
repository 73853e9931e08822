/* SPDX-License-Identifier: MIT */
/*
 * no-fma.h - the last include of a file whose arithmetic must give the same
 * bits on every machine and with every compiler: no a * b + c in the
 * functions after it becomes a fused multiply-add. C lets compilers fuse
 * them by default, which they do wherever FMA may be used (-march flags,
 * targets that have it in the baseline); gcc and clang each need their
 * own pragma to stop it.
 */
#ifndef KT_KERNELS_NO_FMA_H
#define KT_KERNELS_NO_FMA_H

#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#endif /* KT_KERNELS_NO_FMA_H */
