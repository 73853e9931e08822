/* SPDX-License-Identifier: MIT */
/*
 * amx.h - the AMX tile configuration (palette 1) as ldtilecfg reads it.
 * Shared by the real AMX files and the software emulation of the tests.
 */
#ifndef KT_KERNELS_AMX_H
#define KT_KERNELS_AMX_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct kern_amx_cfg {
	uint8_t palette;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct kern_amx_cfg) == 64, "ldtilecfg reads 64 bytes");

/* Set tile @t to @rows rows of @colsb bytes. */
static inline void kern_amx_cfg_tile(struct kern_amx_cfg *c, int t,
				     unsigned int rows, unsigned int colsb)
{
	c->rows[t] = (uint8_t)rows;
	c->colsb[t] = (uint16_t)colsb;
}

static inline void kern_amx_cfg_init(struct kern_amx_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->palette = 1;
}

/*
 * Prefetch the @n bytes at @p into L1 (addresses past a matrix are
 * harmless: prefetches do not fault). The tile kernels issue it for
 * weights they are about to read from DRAM: a tile load, or a widening
 * loop of vector loads, sends its line misses out one after another;
 * the prefetches send them together (measured in the callers).
 */
static inline void kern_amx_pf_l1(const void *p, size_t n)
{
	size_t l;

	for (l = 0; l < n; l += 64)
		_mm_prefetch((const char *)p + l, _MM_HINT_T0);
}

#endif /* KT_KERNELS_AMX_H */
