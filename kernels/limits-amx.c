// SPDX-License-Identifier: MIT
/*
 * limits-amx.c - peak loops of kt_ctx_measure_peak() on the AMX tiles:
 * four accumulator tiles fed by two A and two B tiles, as the kernels run.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/amx.h"
#include "kernels/layout.h"
#include "kernels/simd.h"

static void peak_cfg(void)
{
	struct kern_amx_cfg c;
	int t;

	kern_amx_cfg_init(&c);
	for (t = 0; t < 8; t++)
		kern_amx_cfg_tile(&c, t, 16, 64);
	/* ldtilecfg names only 8 bytes of @c as its operand */
	__asm__ volatile("" ::: "memory");
	_tile_loadconfig(&c);
	_tile_zero(0);
	_tile_zero(1);
	_tile_zero(2);
	_tile_zero(3);
	_tile_zero(4);
	_tile_zero(5);
	_tile_zero(6);
	_tile_zero(7);
}

/*
 * One round: 4 tiles of 16 x 16 x K multiply-adds with @dp. A macro: the
 * tile intrinsics take their tile numbers as immediates. The sink folds the
 * bits of one result (no float-to-integer conversion).
 */
#define PEAK_AMX(name, dp, type, K)					\
uint64_t name(uint64_t iters, uint64_t *sink)				\
{									\
	type out[16 * 16];						\
	uint32_t bits;							\
	uint64_t i;							\
									\
	peak_cfg();							\
	for (i = 0; i < iters; i++) {					\
		dp(0, 4, 6);						\
		dp(1, 4, 7);						\
		dp(2, 5, 6);						\
		dp(3, 5, 7);						\
	}								\
	_tile_stored(0, out, 64);					\
	_tile_release();						\
	memcpy(&bits, &out[0], sizeof(bits));				\
	*sink ^= bits;							\
	return iters * 4 * 16 * 16 * (K);				\
}

PEAK_AMX(kern_peak_int8_amx, _tile_dpbssd, int32_t, KERN_TILE_K_INT8)
PEAK_AMX(kern_peak_bf16_amx, _tile_dpbf16ps, float, KERN_TILE_K_BF16)
