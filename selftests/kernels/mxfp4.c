// SPDX-License-Identifier: MIT
/*
 * mxfp4.c - MXFP4 packing: the E2M1 / E8M0 definitions, a file's codes and
 * scales read back exactly for every code and the extreme scales, the
 * refusals, the quantization rule against ggml's first-minimum search,
 * and the f32/bf16/f16 packer read back.
 */
#include <errno.h>

#include "kt_test.h"
#include "kernels/fp.h"
#include "kernels/mxfp4.h"
#include "util.h"

TEST(e2m1_e8m0)
{
	static const double mag[8] = { 0, 0.5, 1, 1.5, 2, 3, 4, 6 };
	unsigned int c, e;

	for (c = 0; c < 16; c++) {
		double v = (c & 8 ? -1 : 1) * mag[c & 7];

		ASSERT_EQ((double)kern_e2m1_to_f32((uint8_t)c), v);
		ASSERT_EQ(kern_bits_f32((uint32_t)kern_e2m1_to_bf16(
				(uint8_t)c) << 16), (float)v);
	}
	for (e = 0; e < 255; e++)
		ASSERT_EQ((double)kern_e8m0_to_f32((uint8_t)e),
			  ldexp(1.0, (int)e - 127));
	ASSERT_EQ(kern_f32_bits(kern_e8m0_to_f32(0)), 0x00400000u);
	ASSERT_TRUE(isnan(kern_e8m0_to_f32(KERN_E8M0_NAN)));
	ASSERT_TRUE(isnan(kern_mxfp4_value(3, KERN_E8M0_NAN)));
}

TEST(unpack_orders)
{
	uint8_t b[16], c[32];
	int j;

	for (j = 0; j < 16; j++)
		b[j] = (uint8_t)(j | (15 - j) << 4);
	kern_mxfp4_unpack_ocp(b, c);
	for (j = 0; j < 16; j++) {
		ASSERT_EQ(c[2 * j], j);
		ASSERT_EQ(c[2 * j + 1], 15 - j);
	}
	kern_mxfp4_unpack_ggml(b, c);
	for (j = 0; j < 16; j++) {
		ASSERT_EQ(c[j], j);
		ASSERT_EQ(c[j + 16], 15 - j);
	}
}

/*
 * Every matrix packed from codes and scales with kern_pack_rows_mxfp4():
 * each code appears in every group, the scales cycle through the extreme
 * and ordinary exponents; kern_pack_get() returns e2m1 * 2^(e - 127)
 * exactly (as f32: +-inf beyond its range), and the scale bytes sit at
 * [K/32][N].
 */
TEST(rows_exact)
{
	static const uint8_t es[] = { 0, 1, 2, 126, 127, 200, 254, 130, 100 };
	const unsigned int H = 256, I = 384;
	struct kern_pack_layout l;
	unsigned int id, nb, n, k, N, K, i;
	uint8_t *blob, *codes, *e8;

	ASSERT_EQ(kern_pack_layout(KT_QUANT_MXFP4, H, I, 0, &l), 0);
	ASSERT_EQ(l.group, 32);
	ASSERT_EQ(l.kt, 128);
	ASSERT_EQ(l.total, 3 * (size_t)H * I / 2 + 3 * (size_t)H * I / 32);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_MXFP4, H, I, 32, &l), 0);
	blob = malloc(l.total);
	memset(blob, 0xa5, l.total);
	codes = malloc(16 * 384);
	e8 = malloc(16 * 384 / 32);
	for (id = 0; id < 3; id++) {
		N = id == KERN_MAT_DOWN ? H : I;
		K = id == KERN_MAT_DOWN ? I : H;
		for (nb = 0; nb < N / 16; nb++) {
			struct tu_rng r2 = { 1000 + nb };

			for (i = 0; i < 16 * K; i++)
				codes[i] = (uint8_t)(tu_next(&r2) % 16);
			for (i = 0; i < 16 * K / 32; i++)
				e8[i] = es[(i + nb * 5 + id) % sizeof(es)];
			ASSERT_EQ(kern_pack_rows_mxfp4(&l, id, nb, codes, e8,
						       blob), 0);
			for (n = 0; n < 16; n++)
				for (k = 0; k < K; k++) {
					uint8_t c = codes[n * K + k];
					uint8_t e = e8[n * (K / 32) + k / 32];
					/* f32: 6 * 2^127 is +inf */
					float want = (float)ldexp(
						kern_e2m1_to_f32(c), (int)e - 127);
					float got = kern_pack_get(&l, id, blob,
						nb * 16 + n, k);

					ASSERT_EQ(got, want);
					ASSERT_EQ(blob[l.scales_off[id] +
						(size_t)(k / 32) * N + nb * 16 + n],
						  e);
				}
		}
	}
	free(blob);
	free(codes);
	free(e8);
}

TEST(rows_refused)
{
	struct kern_pack_layout l, l8;
	uint8_t codes[16 * 128] = { 0 }, e8[16 * 4], *blob;

	memset(e8, 127, sizeof(e8));
	ASSERT_EQ(kern_pack_layout(KT_QUANT_MXFP4, 128, 128, 0, &l), 0);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT8, 128, 128, 0, &l8), 0);
	blob = calloc(1, l.total);
	ASSERT_EQ(kern_pack_rows_mxfp4(&l, KERN_MAT_GATE, 0, codes, e8, blob),
		  0);
	e8[37] = KERN_E8M0_NAN;
	ASSERT_EQ(kern_pack_rows_mxfp4(&l, KERN_MAT_UP, 0, codes, e8, blob),
		  -EINVAL);
	e8[37] = 254;
	codes[1000] = 16;
	ASSERT_EQ(kern_pack_rows_mxfp4(&l, KERN_MAT_UP, 0, codes, e8, blob),
		  -EINVAL);
	codes[1000] = 15;
	ASSERT_EQ(kern_pack_rows_mxfp4(&l, KERN_MAT_DOWN, 8, codes, e8, blob),
		  -EINVAL);
	ASSERT_EQ(kern_pack_rows_mxfp4(&l8, KERN_MAT_UP, 0, codes, e8, blob),
		  -EINVAL);
	free(blob);
}

/* ggml's quantize_row_mxfp4_ref, literally (kvalues doubled, d halved). */
static uint8_t ggml_block(const float *x, uint8_t *q)
{
	static const int8_t kv[16] = { 0, 1, 2, 3, 4, 6, 8, 12,
				       0, -1, -2, -3, -4, -6, -8, -12 };
	float amax = 0.0f, d;
	uint8_t e;
	int i, j;

	for (j = 0; j < 32; j++)
		if (amax < fabsf(x[j]))
			amax = fabsf(x[j]);
	e = amax > 0.0f ? (uint8_t)(floorf(log2f(amax)) - 2 + 127) : 0;
	d = ldexpf(1.0f, (int)e - 128);
	for (j = 0; j < 32; j++) {
		int best = 0;
		float be = fabsf(kv[0] * d - x[j]);

		for (i = 1; i < 16; i++) {
			float err = fabsf(kv[i] * d - x[j]);

			if (err < be) {
				best = i;
				be = err;
			}
		}
		q[j] = (uint8_t)best;
	}
	return e;
}

TEST(quant_rule)
{
	struct tu_rng r = { 5 };
	float v[32];
	uint8_t q[32], g[32];
	unsigned int b, j, diff = 0, total = 0;

	/* amax 1: e = 125, step 0.25; ties go to the smaller magnitude */
	memset(v, 0, sizeof(v));
	v[0] = 1.0f;
	v[1] = 0.625f;		/* 2.5 steps: 2 */
	v[2] = -0.625f;
	v[3] = 0.0625f;		/* 0.25 steps: 0, +0 */
	v[4] = -0.0625f;
	v[5] = -0.07f;		/* just above the tie: -0.5 */
	v[6] = 0.875f;		/* 3.5 steps: 3 */
	v[7] = NAN;		/* ignored by amax, code 0 */
	ASSERT_EQ(kern_mxfp4_quant_block(v, q), 125);
	ASSERT_EQ(q[0], 6);
	ASSERT_EQ(q[1], 4);
	ASSERT_EQ(q[2], 12);
	ASSERT_EQ(q[3], 0);
	ASSERT_EQ(q[4], 0);
	ASSERT_EQ(q[5], 9);
	ASSERT_EQ(q[6], 5);
	ASSERT_EQ(q[7], 0);
	/* amax 1.75 (7 steps) clips to 6 */
	v[0] = -1.75f;
	ASSERT_EQ(kern_mxfp4_quant_block(v, q), 125);
	ASSERT_EQ(q[0], 15);
	memset(v, 0, sizeof(v));
	ASSERT_EQ(kern_mxfp4_quant_block(v, q), 0);
	for (j = 0; j < 32; j++)
		ASSERT_EQ(q[j], 0);
	/* random blocks of many magnitudes: the same as ggml's search */
	for (b = 0; b < 20000; b++) {
		double s = ldexp(1.0, (int)(tu_next(&r) % 60) - 40);
		uint8_t e1, e2;

		for (j = 0; j < 32; j++)
			v[j] = (float)(s * tu_normal(&r));
		e1 = kern_mxfp4_quant_block(v, q);
		e2 = ggml_block(v, g);
		ASSERT_EQ(e1, e2);
		for (j = 0; j < 32; j++, total++)
			diff += q[j] != g[j];
	}
	TH_LOG("codes unlike ggml's: %u of %u", diff, total);
	EXPECT_EQ(diff, 0u);
}

/*
 * kern_pack_matrix() from f32, bf16 and f16: every weight read back is
 * the block rule's value for the source row (converted to f32), and
 * close to the source.
 */
static void round_trip(struct kt_test_meta *_metadata, unsigned int H,
		       unsigned int I, enum kt_dtype dt)
{
	struct kern_pack_layout l;
	struct tu_rng r = { 9 + dt };
	unsigned int id, n, k, N, K;
	double num = 0, den = 0;
	uint8_t *blob, q[32];

	ASSERT_EQ(kern_pack_layout(KT_QUANT_MXFP4, H, I, 0, &l), 0);
	blob = malloc(l.total);
	for (id = 0; id < 3; id++) {
		float *w, *row;
		uint16_t *h;

		N = id == KERN_MAT_DOWN ? H : I;
		K = id == KERN_MAT_DOWN ? I : H;
		w = malloc((size_t)N * K * 4);
		h = malloc((size_t)N * K * 2);
		row = malloc((size_t)K * 4);
		tu_fill_weights(&r, w, N, K);
		for (size_t i = 0; i < (size_t)N * K; i++) {
			h[i] = dt == KT_DTYPE_BF16 ? kern_f32_to_bf16(w[i]) :
			       kern_f32_to_f16(w[i]);
			if (dt != KT_DTYPE_F32)
				w[i] = dt == KT_DTYPE_BF16 ?
					kern_bf16_to_f32(h[i]) :
					kern_f16_to_f32(h[i]);
		}
		ASSERT_EQ(kern_pack_matrix(&l, id, dt == KT_DTYPE_F32 ?
					   (const void *)w : (const void *)h,
					   dt, K, blob), 0);
		for (n = 0; n < N; n++) {
			memcpy(row, w + (size_t)n * K, (size_t)K * 4);
			for (k = 0; k < K; k += 32) {
				uint8_t e = kern_mxfp4_quant_block(row + k, q);

				for (unsigned int j = 0; j < 32; j++) {
					float got = kern_pack_get(&l, id, blob,
								  n, k + j);

					ASSERT_EQ(got, kern_mxfp4_value(q[j],
									e));
					num += fabs((double)got - row[k + j]);
					den += fabs((double)row[k + j]);
				}
			}
		}
		free(w);
		free(h);
		free(row);
	}
	TH_LOG("mxfp4 from %s: rel MAE %.4f", dt == KT_DTYPE_F32 ? "f32" :
	       dt == KT_DTYPE_BF16 ? "bf16" : "f16", num / den);
	/* E2M1 with a power-of-two scale: ~0.1 on Gaussian weights */
	EXPECT_LE(num / den, 0.15);
	free(blob);
}

TEST(round_trip)
{
	round_trip(_metadata, 256, 384, KT_DTYPE_F32);
	round_trip(_metadata, 128, 256, KT_DTYPE_BF16);
	round_trip(_metadata, 256, 128, KT_DTYPE_F16);
}

TEST_HARNESS_MAIN
