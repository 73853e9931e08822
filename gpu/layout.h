/* SPDX-License-Identifier: MIT */
/*
 * layout.h - kt's device layout of one expert (Documentation/gpu.md):
 * plain row-major matrices the GPU kernels stream, and their scales.
 * Shared by the host (upload) and the CUDA kernels.
 */
#ifndef KT_GPU_LAYOUT_H
#define KT_GPU_LAYOUT_H

#include <stdint.h>

/* Parts of an expert, in blob order. */
enum gpu_part {
	GPU_GATE_Q, GPU_UP_Q, GPU_DOWN_Q,
	GPU_GATE_S, GPU_UP_S, GPU_DOWN_S,
	GPU_PARTS
};

/* Every part starts on this boundary (16-byte vector loads, coalescing). */
#define GPU_PART_ALIGN	256u

/* enum kt_quant values, repeated for the CUDA side that lacks kt.h */
#define GPU_Q_INT8	1
#define GPU_Q_INT4	2
#define GPU_Q_BF16	3

/*
 * struct gpu_layout - where the parts of one expert's device blob are.
 * INT8: q int8 [N][K], scale f32 [N] (per output row).
 * INT4: q [N][K/2], byte j of a row holds k = 2j (low nibble) and 2j + 1
 *	 (high), nibble = q + 8; scale f32 [N][K/G] (row-major: a row's
 *	 groups are contiguous).
 * BF16: [N][K] bf16; no scales.
 * gate and up are [I][H], down is [H][I], as torch stores them.
 */
struct gpu_layout {
	uint32_t quant;
	uint32_t hidden;
	uint32_t inter;
	uint32_t group;
	uint64_t off[GPU_PARTS];
	uint64_t bytes[GPU_PARTS];
	uint64_t total;
};

static inline uint64_t gpu_align_up(uint64_t v)
{
	return (v + GPU_PART_ALIGN - 1) / GPU_PART_ALIGN * GPU_PART_ALIGN;
}

/* Fill @l; -1 for an unknown quantization or a bad group, else 0. */
static inline int gpu_layout_init(struct gpu_layout *l, uint32_t quant,
				  uint32_t hidden, uint32_t inter,
				  uint32_t group)
{
	uint64_t nk = (uint64_t)hidden * inter, off = 0;
	int i;

	l->quant = quant;
	l->hidden = hidden;
	l->inter = inter;
	l->group = quant == GPU_Q_INT4 ? group : 0;
	if (!hidden || !inter || hidden % 128 || inter % 128)
		return -1;
	switch (quant) {
	case GPU_Q_INT8:
		l->bytes[GPU_GATE_Q] = nk;
		l->bytes[GPU_GATE_S] = (uint64_t)inter * 4;
		l->bytes[GPU_DOWN_S] = (uint64_t)hidden * 4;
		break;
	case GPU_Q_INT4:
		if (group != 32 && group != 64 && group != 128)
			return -1;
		l->bytes[GPU_GATE_Q] = nk / 2;
		l->bytes[GPU_GATE_S] = (uint64_t)inter * (hidden / group) * 4;
		l->bytes[GPU_DOWN_S] = (uint64_t)hidden * (inter / group) * 4;
		break;
	case GPU_Q_BF16:
		l->bytes[GPU_GATE_Q] = nk * 2;
		l->bytes[GPU_GATE_S] = 0;
		l->bytes[GPU_DOWN_S] = 0;
		break;
	default:
		return -1;
	}
	l->bytes[GPU_UP_Q] = l->bytes[GPU_GATE_Q];
	l->bytes[GPU_DOWN_Q] = l->bytes[GPU_GATE_Q];
	l->bytes[GPU_UP_S] = l->bytes[GPU_GATE_S];
	for (i = 0; i < GPU_PARTS; i++) {
		l->off[i] = off;
		off = gpu_align_up(off + l->bytes[i]);
	}
	l->total = off;
	return 0;
}

#endif /* KT_GPU_LAYOUT_H */
