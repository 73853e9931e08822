// SPDX-License-Identifier: MIT
/*
 * pack-fp8.c - FP8 (E4M3) matrices into the packed layout: quantized from
 * f32/bf16/f16 per 128x128 block, or an FP8 checkpoint's bytes and block
 * scales kept as they are.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp8.h"
#include "kernels/no-fma.h"

static void fp8_dims(const struct kern_pack_layout *l, enum kern_mat_id id,
		     unsigned int *n, unsigned int *k)
{
	*n = id == KERN_MAT_DOWN ? l->hidden : l->inter;
	*k = id == KERN_MAT_DOWN ? l->inter : l->hidden;
}

/* Rows [n0, n0 + 16) of @q (rows @stride bytes apart) into their tiles. */
static void fp8_write_block(const struct kern_pack_layout *l,
			    enum kern_mat_id id, uint8_t *tiles,
			    unsigned int N, unsigned int K, unsigned int n0,
			    const uint8_t *q, size_t stride)
{
	unsigned int nb = n0 / KERN_TILE_ROWS, kb, r, c;

	for (kb = 0; kb < K / KERN_TILE_K_FP8; kb++) {
		size_t t = id == KERN_MAT_DOWN ?
			kern_tile_kcm(N, l->kc, KERN_TILE_K_FP8, nb, kb) :
			kern_tile_rbm(K, KERN_TILE_K_FP8, nb, kb);
		uint8_t *d = tiles + kern_tile_off(t);

		for (r = 0; r < KERN_TILE_ROWS; r++) {
			const uint8_t *s = q + (size_t)r * stride +
					   (size_t)kb * KERN_TILE_K_FP8;

			for (c = 0; c < KERN_TILE_K_FP8; c++)
				d[kern_tile_byte(KT_QUANT_FP8, r, c)] = s[c];
		}
	}
}

void kern_pack_fp8_raw(const struct kern_pack_layout *l, enum kern_mat_id id,
		       const uint8_t *q, size_t stride, const float *scales,
		       uint8_t *blob)
{
	unsigned int N, K, n;

	fp8_dims(l, id, &N, &K);
	for (n = 0; n < N; n += KERN_TILE_ROWS)
		fp8_write_block(l, id, blob + l->tiles_off[id], N, K, n,
				q + (size_t)n * stride, stride);
	memcpy(blob + l->scales_off[id], scales, l->group == KERN_FP8_CHANNEL ?
	       (size_t)N * 4 :
	       (size_t)(N / KERN_FP8_BLOCK) * (K / KERN_FP8_BLOCK) * 4);
}

int kern_pack_fp8_matrix(const struct kern_pack_layout *l, enum kern_mat_id id,
			 const void *src, enum kt_dtype dtype,
			 size_t src_stride, uint8_t *blob)
{
	const unsigned int B = KERN_FP8_BLOCK;
	float *scales = (float *)(blob + l->scales_off[id]);
	unsigned int N, K, n0, kb, r, k;
	uint8_t *q;
	float *rows;

	fp8_dims(l, id, &N, &K);
	rows = malloc((size_t)B * K * sizeof(float));
	q = malloc((size_t)B * K);
	if (!rows || !q) {
		free(rows);
		free(q);
		return -ENOMEM;
	}
	for (n0 = 0; n0 < N; n0 += B) {
		kern_pack_load_rows(src, dtype, src_stride, n0, B, K, rows);
		if (l->group == KERN_FP8_CHANNEL) {
			for (r = 0; r < B; r++) {
				const float *v = rows + (size_t)r * K;
				float amax = 0.0f, s;

				for (k = 0; k < K; k++)
					amax = fabsf(v[k]) > amax ? fabsf(v[k]) :
					       amax;
				s = amax / KERN_FP8_MAX;
				scales[n0 + r] = s;
				for (k = 0; k < K; k++)
					q[(size_t)r * K + k] = s > 0.0f ?
						kern_f32_to_fp8(v[k] / s) : 0;
			}
			kb = K / B;	/* no blocks */
		} else {
			kb = 0;
		}
		for (; kb < K / B; kb++) {
			float amax = 0.0f, s;

			for (r = 0; r < B; r++)
				for (k = kb * B; k < (kb + 1) * B; k++) {
					float a = fabsf(rows[(size_t)r * K + k]);

					amax = a > amax ? a : amax;
				}
			s = amax / KERN_FP8_MAX;
			scales[(size_t)(n0 / B) * (K / B) + kb] = s;
			for (r = 0; r < B; r++)
				for (k = kb * B; k < (kb + 1) * B; k++)
					q[(size_t)r * K + k] = s > 0.0f ?
						kern_f32_to_fp8(rows[(size_t)r *
								K + k] / s) :
						0;
		}
		for (r = 0; r < B; r += KERN_TILE_ROWS)
			fp8_write_block(l, id, blob + l->tiles_off[id], N, K,
					n0 + r, q + (size_t)r * K, K);
	}
	free(rows);
	free(q);
	return 0;
}
