// SPDX-License-Identifier: MIT
/*
 * pack.c - quantizing and packing experts into the layout of
 * Documentation/packed-layout.md, and reading them back.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp.h"
#include "kernels/pack.h"

int kern_pack_layout(enum kt_quant q, unsigned int hidden, unsigned int inter,
		     unsigned int group, struct kern_pack_layout *l)
{
	size_t nk = (size_t)hidden * inter;
	size_t tb, sgu, sdn;
	int i;

	memset(l, 0, sizeof(*l));
	l->quant = q;
	l->hidden = hidden;
	l->inter = inter;
	if (!hidden || !inter || hidden % 128 || inter % 128) {
		l->err = "hidden and inter must be nonzero multiples of 128";
		return -EINVAL;
	}
	switch (q) {
	case KT_QUANT_INT8:
		l->kt = 64;
		tb = nk;
		sgu = (size_t)inter * 4;
		sdn = (size_t)hidden * 4;
		break;
	case KT_QUANT_BF16:
		l->kt = 32;
		tb = nk * 2;
		sgu = 0;
		sdn = 0;
		break;
	case KT_QUANT_INT4:
		if (!group)
			group = 128;
		if (group != 32 && group != 64 && group != 128) {
			l->err = "INT4 group size must be 32, 64 or 128";
			return -EINVAL;
		}
		l->group = group;
		l->kt = 128;
		tb = nk / 2;
		/* gate/up: K = H; down: K = I */
		sgu = (size_t)(hidden / group) * inter * 4;
		sdn = (size_t)(inter / group) * hidden * 4;
		break;
	default:
		l->err = "unknown quantization";
		return -EINVAL;
	}
	l->kc = inter % 256 == 0 ? 256 : 128;
	for (i = 0; i < 3; i++)
		l->tiles_bytes[i] = tb;
	l->scales_bytes[KERN_MAT_GATE] = sgu;
	l->scales_bytes[KERN_MAT_UP] = sgu;
	l->scales_bytes[KERN_MAT_DOWN] = sdn;
	l->tiles_off[0] = 0;
	l->tiles_off[1] = tb;
	l->tiles_off[2] = 2 * tb;
	l->scales_off[0] = 3 * tb;
	l->scales_off[1] = 3 * tb + sgu;
	l->scales_off[2] = 3 * tb + 2 * sgu;
	l->total = 3 * tb + 2 * sgu + sdn;
	return 0;
}

static void mat_dims(const struct kern_pack_layout *l, enum kern_mat_id id,
		     unsigned int *n, unsigned int *k)
{
	if (id == KERN_MAT_DOWN) {
		*n = l->hidden;
		*k = l->inter;
	} else {
		*n = l->inter;
		*k = l->hidden;
	}
}

size_t kern_pack_elem_off(const struct kern_pack_layout *l,
			  enum kern_mat_id id, unsigned int n, unsigned int k)
{
	unsigned int N, K, nb = n / 16, r = n % 16, kb = k / l->kt;
	unsigned int c = k % l->kt;
	size_t tile, in;

	mat_dims(l, id, &N, &K);
	if (id == KERN_MAT_DOWN) {
		unsigned int p = l->kc / l->kt;

		tile = (size_t)(kb / p) * (N / 16) * p + (size_t)nb * p + kb % p;
	} else {
		tile = (size_t)nb * (K / l->kt) + kb;
	}
	switch (l->quant) {
	case KT_QUANT_INT8:
		in = (c / 4) * 64 + r * 4 + c % 4;
		break;
	case KT_QUANT_BF16:
		in = (c / 2) * 64 + r * 4 + (c % 2) * 2;
		break;
	default:
		c %= 64;
		in = (c / 4) * 64 + r * 4 + c % 4;
		break;
	}
	return tile * KERN_TILE_BYTES + in;
}

static float src_get(const void *src, enum kt_dtype dtype, size_t i)
{
	switch (dtype) {
	case KT_DTYPE_BF16:
		return kern_bf16_to_f32(((const uint16_t *)src)[i]);
	case KT_DTYPE_F16:
		return kern_f16_to_f32(((const uint16_t *)src)[i]);
	default:
		return ((const float *)src)[i];
	}
}

/* Symmetric quantization of @len values to [-qmax, qmax]; returns scale. */
static float quant_run(const float *v, unsigned int len, int qmax,
		       int8_t *q)
{
	float amax = 0.0f, scale;
	unsigned int i;

	for (i = 0; i < len; i++)
		amax = fmaxf(amax, fabsf(v[i]));
	scale = amax / (float)qmax;
	for (i = 0; i < len; i++) {
		float r = scale > 0.0f ? roundf(v[i] / scale) : 0.0f;

		if (r > qmax)
			r = (float)qmax;
		if (r < -qmax)
			r = (float)-qmax;
		q[i] = (int8_t)r;
	}
	return scale;
}

int kern_pack_matrix(const struct kern_pack_layout *l, enum kern_mat_id id,
		     const void *src, enum kt_dtype dtype, size_t src_stride,
		     uint8_t *blob)
{
	size_t esz = dtype == KT_DTYPE_F32 ? 4 : 2;
	uint8_t *tiles = blob + l->tiles_off[id];
	float *scales = (float *)(blob + l->scales_off[id]);
	unsigned int N, K, n, k, g;
	float *row;
	int8_t *q;

	if (dtype != KT_DTYPE_F32 && dtype != KT_DTYPE_BF16 &&
	    dtype != KT_DTYPE_F16)
		return -EINVAL;
	mat_dims(l, id, &N, &K);
	row = malloc((size_t)K * (sizeof(float) + 1));
	if (!row)
		return -ENOMEM;
	q = (int8_t *)(row + K);
	for (n = 0; n < N; n++) {
		const uint8_t *s = (const uint8_t *)src + n * src_stride * esz;

		for (k = 0; k < K; k++)
			row[k] = src_get(s, dtype, k);
		switch (l->quant) {
		case KT_QUANT_INT8:
			scales[n] = quant_run(row, K, 127, q);
			for (k = 0; k < K; k++)
				tiles[kern_pack_elem_off(l, id, n, k)] =
					(uint8_t)q[k];
			break;
		case KT_QUANT_INT4:
			for (g = 0; g < K / l->group; g++)
				scales[(size_t)g * N + n] =
					quant_run(row + g * l->group,
						  l->group, 7,
						  q + g * l->group);
			for (k = 0; k < K; k++) {
				uint8_t *b = tiles + kern_pack_elem_off(l, id,
									n, k);
				uint8_t nib = (uint8_t)(q[k] + 8);

				if (k % 128 < 64)
					*b = (uint8_t)((*b & 0xf0) | nib);
				else
					*b = (uint8_t)((*b & 0x0f) | nib << 4);
			}
			break;
		default:
			for (k = 0; k < K; k++) {
				uint16_t h = kern_f32_to_bf16(row[k]);

				memcpy(tiles + kern_pack_elem_off(l, id, n, k),
				       &h, 2);
			}
			break;
		}
	}
	free(row);
	return 0;
}

int kern_pack_expert(const struct kern_pack_layout *l, const void *gate,
		     const void *up, const void *down, enum kt_dtype dtype,
		     uint8_t *blob)
{
	int ret;

	if (!gate || !up || !down)
		return -EINVAL;
	ret = kern_pack_matrix(l, KERN_MAT_GATE, gate, dtype, l->hidden, blob);
	if (!ret)
		ret = kern_pack_matrix(l, KERN_MAT_UP, up, dtype, l->hidden,
				       blob);
	if (!ret)
		ret = kern_pack_matrix(l, KERN_MAT_DOWN, down, dtype,
				       l->inter, blob);
	return ret;
}

void kern_pack_mat(const struct kern_pack_layout *l, enum kern_mat_id id,
		   const uint8_t *blob, struct core_mat *mat)
{
	mat->tiles = blob + l->tiles_off[id];
	mat->scales = l->scales_bytes[id] ?
		(const float *)(blob + l->scales_off[id]) : NULL;
}

float kern_pack_get(const struct kern_pack_layout *l, enum kern_mat_id id,
		    const uint8_t *blob, unsigned int n, unsigned int k)
{
	const uint8_t *p = blob + l->tiles_off[id] +
		kern_pack_elem_off(l, id, n, k);
	const float *scales = (const float *)(blob + l->scales_off[id]);
	unsigned int N, K;
	uint16_t h;

	mat_dims(l, id, &N, &K);
	switch (l->quant) {
	case KT_QUANT_INT8:
		return (float)(int8_t)*p * scales[n];
	case KT_QUANT_INT4: {
		int nib = k % 128 < 64 ? (*p & 0xf) : (*p >> 4);

		return (float)(nib - 8) * scales[(size_t)(k / l->group) * N + n];
	}
	default:
		memcpy(&h, p, 2);
		return kern_bf16_to_f32(h);
	}
}

static int add_range(struct kern_range *r, int n, size_t off, size_t len)
{
	if (!len)
		return n;
	r[n].off = off;
	r[n].len = len;
	return n + 1;
}

int kern_pack_node_ranges(const struct kern_pack_layout *l,
			  unsigned int n_nodes, unsigned int node,
			  struct kern_range ranges[KERN_PACK_MAX_RANGES])
{
	unsigned int i0, i1, i;
	size_t row_bytes, chunk_bytes;
	int n = 0;

	kern_node_slice(l->inter, l->kc, n_nodes, node, &i0, &i1);
	/* bytes per row of gate/up (K = H) and per KC chunk of down */
	row_bytes = l->tiles_bytes[KERN_MAT_GATE] / l->inter;
	chunk_bytes = l->tiles_bytes[KERN_MAT_DOWN] / (l->inter / l->kc);
	for (i = KERN_MAT_GATE; i <= KERN_MAT_UP; i++)
		n = add_range(ranges, n, l->tiles_off[i] + i0 * row_bytes,
			      (i1 - i0) * row_bytes);
	n = add_range(ranges, n, l->tiles_off[KERN_MAT_DOWN] +
		      (size_t)(i0 / l->kc) * chunk_bytes,
		      (size_t)((i1 - i0) / l->kc) * chunk_bytes);
	if (l->quant == KT_QUANT_INT8) {
		for (i = KERN_MAT_GATE; i <= KERN_MAT_UP; i++)
			n = add_range(ranges, n, l->scales_off[i] + i0 * 4,
				      (size_t)(i1 - i0) * 4);
		if (node == 0)
			n = add_range(ranges, n, l->scales_off[KERN_MAT_DOWN],
				      l->scales_bytes[KERN_MAT_DOWN]);
	} else if (node == 0) {
		for (i = KERN_MAT_GATE; i <= KERN_MAT_DOWN; i++)
			n = add_range(ranges, n, l->scales_off[i],
				      l->scales_bytes[i]);
	}
	return n;
}
