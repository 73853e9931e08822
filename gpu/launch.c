// SPDX-License-Identifier: MIT
/*
 * launch.c - enqueue the expert FFN kernels of one op (gpu/ffn.cu) on a
 * stream: gate+up, down, then the per-token reduction.
 */
#include <errno.h>

#include "gpu/gpu.h"

#define GEMV_WARPS	2	/* ffn.cu MV_SPLIT: per 16 rows */
#define MMA_TILE	64	/* ffn.cu BM, BN */

static int fn_index(enum kt_quant q)
{
	switch ((int)q) {
	case KT_QUANT_INT8: return 0;
	case KT_QUANT_INT4: return 1;
	case KT_QUANT_BF16: return 2;
	default: return -1;
	}
}

int gpu_ffn_launch(struct gpu_dev *d, enum kt_quant q,
		   const struct gpu_ffn_args *a, uint32_t max_m, uint32_t tokens,
		   bool mma, CUstream s)
{
	void *params[] = { (void *)a };
	int qi = fn_index(q), ret;
	CUfunction gu, down;

	ret = gpu_dev_compute_ok(d);
	if (ret)
		return ret;
	if (qi < 0)
		return -EOPNOTSUPP;
	if (!a->n_groups || !tokens)
		return 0;
	if (mma) {
		unsigned int mt = (max_m + MMA_TILE - 1) / MMA_TILE;

		gu = d->fn[GPU_FN_GU_MMA_INT8 + qi];
		down = d->fn[GPU_FN_DOWN_MMA_INT8 + qi];
		ret = gpu_check(d, d->cu.launch_kernel(gu, a->I / MMA_TILE, mt,
				a->n_groups, 128, 1, 1, 0, s, params, NULL),
				"launch gate+up (mma)");
		if (!ret)
			ret = gpu_check(d, d->cu.launch_kernel(down,
					a->H / MMA_TILE, mt, a->n_groups, 128,
					1, 1, 0, s, params, NULL),
					"launch down (mma)");
	} else {
		gu = d->fn[GPU_FN_GU_GEMV_INT8 + qi];
		down = d->fn[GPU_FN_DOWN_GEMV_INT8 + qi];
		ret = gpu_check(d, d->cu.launch_kernel(gu,
				a->I / 16,
				a->n_groups, 1, 32 * GEMV_WARPS, 1, 1, 0, s,
				params, NULL), "launch gate+up");
		if (!ret)
			ret = gpu_check(d, d->cu.launch_kernel(down,
					a->H / 16, a->n_groups, 1,
					32 * GEMV_WARPS, 1, 1, 0, s, params,
					NULL), "launch down");
	}
	if (!ret)
		ret = gpu_check(d, d->cu.launch_kernel(d->fn[GPU_FN_REDUCE],
				(a->H + 255) / 256, tokens, 1, 256, 1, 1, 0, s,
				params, NULL), "launch reduce");
	return ret;
}

int gpu_combine_launch(struct gpu_dev *d, const struct gpu_combine_args *c,
		       CUstream s)
{
	void *params[] = { (void *)c };
	int ret = gpu_dev_compute_ok(d);

	if (ret || !c->n)
		return ret;
	return gpu_check(d, d->cu.launch_kernel(d->fn[GPU_FN_COMBINE],
			 (c->n + 255) / 256, 1, 1, 256, 1, 1, 0, s, params,
			 NULL), "launch combine");
}
