// SPDX-License-Identifier: MIT
/*
 * limits-amx.c - peak loops of kt_ctx_measure_peak() on the AMX tiles:
 * four accumulator tiles fed by two A and two B tiles, as the kernels run.
 */
#include <immintrin.h>

#include "kernels/amx.h"
#include "kernels/simd.h"

static void peak_cfg(void)
{
	struct kern_amx_cfg c;
	int t;

	kern_amx_cfg_init(&c);
	for (t = 0; t < 8; t++)
		kern_amx_cfg_tile(&c, t, 16, 64);
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

/* One round: 4 tiles of 16 x 16 x 64 multiply-adds. */
uint64_t kern_peak_int8_amx(uint64_t iters, uint64_t *sink)
{
	int32_t out[16 * 16];
	uint64_t i;

	peak_cfg();
	for (i = 0; i < iters; i++) {
		_tile_dpbssd(0, 4, 6);
		_tile_dpbssd(1, 4, 7);
		_tile_dpbssd(2, 5, 6);
		_tile_dpbssd(3, 5, 7);
	}
	_tile_stored(0, out, 64);
	_tile_release();
	*sink += (uint64_t)out[0];
	return iters * 4 * 16 * 16 * 64;
}

/* One round: 4 tiles of 16 x 16 x 32 multiply-adds. */
uint64_t kern_peak_bf16_amx(uint64_t iters, uint64_t *sink)
{
	float out[16 * 16];
	uint64_t i;

	peak_cfg();
	for (i = 0; i < iters; i++) {
		_tile_dpbf16ps(0, 4, 6);
		_tile_dpbf16ps(1, 4, 7);
		_tile_dpbf16ps(2, 5, 6);
		_tile_dpbf16ps(3, 5, 7);
	}
	_tile_stored(0, out, 64);
	_tile_release();
	*sink += (uint64_t)out[0];
	return iters * 4 * 16 * 16 * 32;
}
