// SPDX-License-Identifier: MIT
/*
 * gpu-pack.c - one expert from the packed host layout (kernels/pack.h) to
 * kt's device layout (gpu/layout.h): the same quantized values and scales,
 * only reordered, so CPU and GPU compute on identical weights.
 */
#include <errno.h>
#include <string.h>

#include "gpu/layout.h"
#include "kernels/layout.h"
#include "kernels/pack.h"
#include "ktcore/moe-gpu.h"

static void pack_one(const struct kern_pack_layout *pl,
		     const struct gpu_layout *gl, enum kern_mat_id id,
		     const struct kern_mat *mat, uint8_t *dst)
{
	unsigned int N = id == KERN_MAT_DOWN ? pl->hidden : pl->inter;
	unsigned int K = id == KERN_MAT_DOWN ? pl->inter : pl->hidden;
	uint8_t *q = dst + gl->off[GPU_GATE_Q + id];
	float *s = (float *)(dst + gl->off[GPU_GATE_S + id]);
	unsigned int n, k;

	for (n = 0; n < N; n++) {
		for (k = 0; k < K; k++) {
			const uint8_t *p = mat->tiles +
				kern_pack_elem_off(pl, id, n, k);

			switch (pl->quant) {
			case KT_QUANT_INT8:
				q[(size_t)n * K + k] = *p;
				break;
			case KT_QUANT_INT4: {
				unsigned int nib = k % KERN_TILE_K_INT4 <
					KERN_INT4_HI_K ? (*p & 15u) : (*p >> 4);
				uint8_t *b = &q[((size_t)n * K + k) / 2];

				*b = k % 2 ? (uint8_t)((*b & 15u) | nib << 4) :
					     (uint8_t)((*b & 0xf0u) | nib);
				break;
			}
			default:
				memcpy(&q[((size_t)n * K + k) * 2], p, 2);
			}
		}
		if (pl->quant == KT_QUANT_INT8) {
			s[n] = mat->scales[n];
		} else if (pl->quant == KT_QUANT_INT4) {
			unsigned int G = pl->group, g;

			for (g = 0; g < K / G; g++)
				s[(size_t)n * (K / G) + g] =
					mat->scales[(size_t)g * N + n];
		}
	}
}

int core_gpu_pack_expert(const struct kt_model *m,
			 const struct core_expert *ex,
			 const struct gpu_layout *gl, uint8_t *dst)
{
	struct kern_pack_layout pl;

	/* the device layout has one quantization (gpu-ctx.c refuses) */
	if (m->down_quant != m->quant)
		return -EOPNOTSUPP;
	if (kern_pack_layout(m->quant, m->hidden, m->inter, m->group_size,
			     &pl))
		return -EINVAL;
	memset(dst, 0, gl->total);
	pack_one(&pl, gl, KERN_MAT_GATE, &ex->gate, dst);
	pack_one(&pl, gl, KERN_MAT_UP, &ex->up, dst);
	pack_one(&pl, gl, KERN_MAT_DOWN, &ex->down, dst);
	return 0;
}
