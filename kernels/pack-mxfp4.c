// SPDX-License-Identifier: MIT
/*
 * pack-mxfp4.c - MXFP4 matrices into the packed layout: quantized from
 * f32/bf16/f16 per 32 along K (ggml's reference rule), or a file's E2M1
 * codes and E8M0 scales kept as they are.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/mxfp4.h"
#include "kernels/no-fma.h"

static void mx_dims(const struct kern_pack_layout *l, enum kern_mat_id id,
		    unsigned int *n, unsigned int *k)
{
	*n = id == KERN_MAT_DOWN ? l->hidden : l->inter;
	*k = id == KERN_MAT_DOWN ? l->inter : l->hidden;
}

/*
 * Midpoints between neighbouring E2M1 magnitudes: a magnitude t (in units
 * of the scale) takes the index of the number of midpoints below it, so
 * that a tie goes to the smaller one, as ggml's first-minimum search.
 */
static const float e2m1_mid[7] = { 0.25f, 0.75f, 1.25f, 1.75f,
				   2.5f, 3.5f, 5.0f };

uint8_t kern_mxfp4_quant_block(const float *v, uint8_t codes[32])
{
	float amax = 0.0f;
	int i, j, ex, e;

	for (i = 0; i < KERN_MXFP4_GROUP; i++)
		if (amax < fabsf(v[i]))		/* NaN ignored, as ggml */
			amax = fabsf(v[i]);
	if (!(amax > 0.0f)) {
		memset(codes, 0, KERN_MXFP4_GROUP);
		return 0;
	}
	/* floor(log2(amax)) exactly: amax = f * 2^ex, f in [0.5, 1); an
	 * infinite amax takes the largest scale */
	ex = 131;
	if (!isinf(amax))
		frexpf(amax, &ex);
	e = ex - 1 - 2 + 127;
	e = e < 0 ? 0 : e > 254 ? 254 : e;
	for (i = 0; i < KERN_MXFP4_GROUP; i++) {
		/* exact: a power-of-two scaling of a normal result */
		float t = ldexpf(fabsf(v[i]), 127 - e);
		int idx = 0;

		for (j = 0; j < 7; j++)
			idx += t > e2m1_mid[j];
		codes[i] = (uint8_t)(idx && signbit(v[i]) ? 8 | idx : idx);
	}
	return (uint8_t)e;
}

/*
 * Codes of rows [n0, n0 + 16) (@codes [16][K], rows @stride apart) into
 * their tiles and their scales (@e8 [16][K/32]) into [K/32][N].
 */
static void mx_write_block(const struct kern_pack_layout *l,
			   enum kern_mat_id id, uint8_t *blob,
			   unsigned int n0, const uint8_t *codes,
			   size_t stride, const uint8_t *e8)
{
	uint8_t *tiles = blob + l->tiles_off[id];
	uint8_t *scales = blob + l->scales_off[id];
	unsigned int N, K, nb = n0 / KERN_TILE_ROWS, kb, r, c, g;

	mx_dims(l, id, &N, &K);
	for (kb = 0; kb < K / KERN_TILE_K_MXFP4; kb++) {
		size_t t = id == KERN_MAT_DOWN ?
			kern_tile_kcm(N, l->kc, KERN_TILE_K_MXFP4, nb, kb) :
			kern_tile_rbm(K, KERN_TILE_K_MXFP4, nb, kb);
		uint8_t *d = tiles + kern_tile_off(t);

		memset(d, 0, KERN_TILE_BYTES);
		for (r = 0; r < KERN_TILE_ROWS; r++) {
			const uint8_t *s = codes + (size_t)r * stride +
					   (size_t)kb * KERN_TILE_K_MXFP4;

			for (c = 0; c < KERN_TILE_K_MXFP4; c++)
				d[kern_tile_byte(KT_QUANT_MXFP4, r, c)] |=
					(uint8_t)(s[c] << (kern_mxfp4_hi(c) ?
							   4 : 0));
		}
	}
	for (r = 0; r < KERN_TILE_ROWS; r++)
		for (g = 0; g < K / KERN_MXFP4_GROUP; g++)
			scales[kern_mxfp4_scale_idx(N, n0 + r, g)] =
				e8[(size_t)r * (K / KERN_MXFP4_GROUP) + g];
}

int kern_pack_rows_mxfp4(const struct kern_pack_layout *l0,
			 enum kern_mat_id id, unsigned int nb,
			 const uint8_t *codes, const uint8_t *e8m0,
			 uint8_t *blob)
{
	struct kern_pack_layout ml_;
	const struct kern_pack_layout *l = kern_pack_for(l0, id, &ml_);
	unsigned int N, K;
	size_t i;

	if (l->quant != KT_QUANT_MXFP4)
		return -EINVAL;
	mx_dims(l, id, &N, &K);
	if (nb >= N / KERN_TILE_ROWS)
		return -EINVAL;
	for (i = 0; i < (size_t)KERN_TILE_ROWS * K; i++)
		if (codes[i] > 15)
			return -EINVAL;
	for (i = 0; i < (size_t)KERN_TILE_ROWS * (K / KERN_MXFP4_GROUP); i++)
		if (e8m0[i] == KERN_E8M0_NAN)
			return -EINVAL;
	mx_write_block(l, id, blob, nb * KERN_TILE_ROWS, codes, K, e8m0);
	return 0;
}

int kern_pack_mxfp4_matrix(const struct kern_pack_layout *l,
			   enum kern_mat_id id, const void *src,
			   enum kt_dtype dtype, size_t src_stride,
			   uint8_t *blob)
{
	const unsigned int R = KERN_TILE_ROWS;
	unsigned int N, K, n0, r, g;
	uint8_t *codes, *e8;
	float *rows;

	mx_dims(l, id, &N, &K);
	rows = malloc((size_t)R * K * sizeof(float));
	codes = malloc((size_t)R * K);
	e8 = malloc((size_t)R * (K / KERN_MXFP4_GROUP));
	if (!rows || !codes || !e8) {
		free(rows);
		free(codes);
		free(e8);
		return -ENOMEM;
	}
	for (n0 = 0; n0 < N; n0 += R) {
		kern_pack_load_rows(src, dtype, src_stride, n0, R, K, rows);
		for (r = 0; r < R; r++)
			for (g = 0; g < K / KERN_MXFP4_GROUP; g++) {
				size_t at = (size_t)r * K +
					    g * KERN_MXFP4_GROUP;

				e8[(size_t)r * (K / KERN_MXFP4_GROUP) + g] =
					kern_mxfp4_quant_block(rows + at,
							       codes + at);
			}
		mx_write_block(l, id, blob, n0, codes, K, e8);
	}
	free(rows);
	free(codes);
	free(e8);
	return 0;
}
