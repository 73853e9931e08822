/* SPDX-License-Identifier: MIT */
/*
 * ffn-abi.h - the arguments the host passes the expert FFN kernels: plain
 * structs of device addresses, identical in C and CUDA C.
 */
#ifndef KT_GPU_FFN_ABI_H
#define KT_GPU_FFN_ABI_H

#include <stdint.h>

/*
 * struct gpu_group - one expert's slots of an op: slots slot0 .. slot0+m-1
 * (token, weight pairs, sorted by expert) run on this expert's weights.
 * @w: device addresses of gate, up, down (struct gpu_layout parts).
 * @s: their scales (0 for BF16).
 */
struct gpu_group {
	uint64_t w[3];
	uint64_t s[3];
	uint32_t slot0;
	uint32_t m;
};

/*
 * struct gpu_ffn_args - device buffers of one op.
 * @groups: struct gpu_group [n_groups].
 * @x: [tokens][H] f32, or bf16 when @x_bf16.
 * @slot_tok: int32 [slots] token of each slot.
 * @slot_w: f32 [slots] router weight of each slot.
 * @tok_slot: int32 [tokens][top_k] slots of each token, -1 for none.
 * @a: f32 [slots][I] scratch: silu(gate) * up.
 * @ypart: f32 [slots][H] scratch: weighted down output of each slot.
 * @y: f32 [tokens][H]: the sum over a token's slots, in slot order.
 */
struct gpu_ffn_args {
	uint64_t groups;
	uint64_t x;
	uint64_t slot_tok;
	uint64_t slot_w;
	uint64_t tok_slot;
	uint64_t a;
	uint64_t ypart;
	uint64_t y;
	uint32_t H;
	uint32_t I;
	uint32_t group;
	uint32_t n_groups;
	uint32_t x_bf16;
	uint32_t top_k;
	uint32_t tokens;
	uint32_t pad;
};

/*
 * struct gpu_combine_args - y = (y if @acc) + ya + yb over @n elements,
 * y f32 or bf16 (@y_bf16); ya, yb f32. With @count (a device u32), only
 * the first *count rows of @H elements.
 */
struct gpu_combine_args {
	uint64_t y;
	uint64_t ya;
	uint64_t yb;
	uint64_t count;
	uint32_t n;
	uint32_t H;
	uint32_t y_bf16;
	uint32_t acc;
};

#endif /* KT_GPU_FFN_ABI_H */
