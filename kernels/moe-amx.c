// SPDX-License-Identifier: MIT
/*
 * moe-amx.c - the AMX variant: tile kernels (moe-amx.h; q8_0-amx.h and
 * qk-amx.h for the GGUF blocks) for experts with at least
 * KERN_AMX_MIN_M_<quant> tokens, the AVX-512 kernels below that (each
 * where it measured faster). Both read the activation rows of the AVX-512
 * variant.
 */
#include <immintrin.h>

#define AMX_NAME(x) amx_##x
#include "kernels/moe-amx.h"
#include "kernels/q8_0-amx.h"
#include "kernels/qk-amx.h"
#include "kernels/fp8.h"
#include "kernels/mxfp4.h"

size_t kern_scratch_bytes_amx(const struct kern_geom *g, unsigned int max_m)
{
	size_t t = amx_scratch_bytes(g, max_m);
	size_t v = kern_scratch_bytes_avx512(g, max_m);

	return t > v ? t : v;
}

const struct kern_ops kern_ops_amx = {
	.isa = KT_ISA_AMX,
	.name = "amx",
	.q = {
		[KT_QUANT_INT8] = {
			.act_row_bytes = kern_act_row_bytes_int8_avx512,
			.act_prepare = kern_act_prepare_int8_avx512,
			.scratch_bytes = kern_scratch_bytes_amx,
			.gate_up = kern_gate_up_int8_avx512,
			.down = kern_down_int8_avx512,
			.gate_up_many = amx_gate_up_q8,
			.down_many = amx_down_q8,
			.many_min_m = KERN_AMX_MIN_M_INT8,
		},
		[KT_QUANT_INT4] = {
			.act_row_bytes = kern_act_row_bytes_int4_avx512,
			.act_prepare = kern_act_prepare_int4_avx512,
			.scratch_bytes = kern_scratch_bytes_amx,
			.gate_up = kern_gate_up_int4_avx512,
			.down = kern_down_int4_avx512,
			.gate_up_many = amx_gate_up_q4,
			.down_many = amx_down_q4,
			.many_min_m = KERN_AMX_MIN_M_INT4,
		},
		[KT_QUANT_BF16] = {
			.act_row_bytes = kern_act_row_bytes_bf16_avx512,
			.act_prepare = kern_act_prepare_bf16_avx512,
			.scratch_bytes = kern_scratch_bytes_amx,
			.gate_up = kern_gate_up_bf16_avx512,
			.down = kern_down_bf16_avx512,
			.gate_up_many = amx_gate_up_bf16,
			.down_many = amx_down_bf16,
			.many_min_m = KERN_AMX_MIN_M_BF16,
		},
		[KT_QUANT_FP8] = {
			.act_row_bytes = kern_act_row_bytes_bf16_avx512,
			.act_prepare = kern_act_prepare_bf16_avx512,
			.scratch_bytes = kern_scratch_bytes_fp8_amx,
			.gate_up = kern_gate_up_fp8_avx512,
			.down = kern_down_fp8_avx512,
			.gate_up_many = kern_gate_up_fp8_amx,
			.down_many = kern_down_fp8_amx,
			.many_min_m = KERN_AMX_MIN_M_FP8,
		},
		[KT_QUANT_MXFP4] = {
			.act_row_bytes = kern_act_row_bytes_bf16_avx512,
			.act_prepare = kern_act_prepare_bf16_avx512,
			.scratch_bytes = kern_scratch_bytes_mxfp4_amx,
			.gate_up = kern_gate_up_mxfp4_avx512,
			.down = kern_down_mxfp4_avx512,
			.gate_up_many = kern_gate_up_mxfp4_amx,
			.down_many = kern_down_mxfp4_amx,
			.many_min_m = KERN_AMX_MIN_M_MXFP4,
		},
		AMX_GGUF_SLOTS(KERN_AMX_MIN_M_Q8_0, KERN_AMX_MIN_M_Q4_K,
			       KERN_AMX_MIN_M_Q5_K, KERN_AMX_MIN_M_Q6_K),
	},
};
