// SPDX-License-Identifier: MIT
/*
 * moe-mxfp4-amx.c - MXFP4 experts with many tokens on AMX: the tile body
 * of mxfp4-amx.h on the real tile instructions (B tiles widened once per
 * call with the scales folded in; TDPBF16PS over all of K).
 */
#define MXA_NAME(x) mxa_##x
#include "kernels/mxfp4-amx.h"

void kern_gate_up_mxfp4_amx(const struct kern_gate_up_args *a)
{
	mxa_gate_up(a);
}

void kern_down_mxfp4_amx(const struct kern_down_args *a)
{
	mxa_down(a);
}

size_t kern_scratch_bytes_mxfp4_amx(const struct kern_geom *g,
				    unsigned int max_m)
{
	return mxa_scratch_bytes(g, max_m);
}
