/* SPDX-License-Identifier: MIT */
/*
 * l2pf.h - the next weight block pulled into L2 while the current one is
 * reused from cache. With ~32 tokens per expert (prefill, top-k routing) a
 * block of rows gets only a few token passes; the first streams from DRAM
 * at a few tokens per line, faster than one core's share of the bandwidth,
 * so it stalls unless the previous block's later passes fetched it. The
 * bodies that gain from it (moe-zmm.h, q8_0-vec.h) spread those fetches
 * over their passes and steps. Prefetches only move data: results are
 * unchanged.
 */
#ifndef KT_KERNELS_L2PF_H
#define KT_KERNELS_L2PF_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/layout.h"

/* @n lines of each non-NULL stream p[] per step */
struct l2pf {
	const uint8_t *p[2];
	unsigned int n;
};

/* step @t's lines: p[s] + (t * n .. t * n + n) * 64 of each stream */
static inline __attribute__((always_inline)) void
l2pf_step(const struct l2pf pf, unsigned int t)
{
	unsigned int i, s;

	for (s = 0; s < 2; s++)
		if (pf.p[s])
			for (i = 0; i < pf.n; i++)
				_mm_prefetch((const char *)pf.p[s] +
					     ((size_t)t * pf.n + i) *
					     KERN_TILE_ROW_BYTES, _MM_HINT_T1);
}

/*
 * The share of pass @pass (of @passes over the current block) of the next
 * block's @lines lines at @g / @u (NULL: none), spread over @nt steps.
 * Pass 0 streams the current block and prefetches nothing more.
 */
static inline __attribute__((always_inline)) struct l2pf
l2pf_share(const uint8_t *g, const uint8_t *u, unsigned int lines,
	   unsigned int nt, unsigned int pass, unsigned int passes)
{
	struct l2pf pf = { { NULL, NULL }, 0 };
	unsigned int share;

	if (pass == 0 || passes < 2 || !nt)
		return pf;
	share = (lines + passes - 2) / (passes - 1);
	pf.n = (share + nt - 1) / nt;
	pf.p[0] = g ? g + (size_t)(pass - 1) * share * KERN_TILE_ROW_BYTES :
		      NULL;
	pf.p[1] = u ? u + (size_t)(pass - 1) * share * KERN_TILE_ROW_BYTES :
		      NULL;
	return pf;
}

#endif /* KT_KERNELS_L2PF_H */
