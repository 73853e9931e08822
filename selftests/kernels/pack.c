// SPDX-License-Identifier: MIT
/*
 * pack.c - the packed layout: geometry checks, element offsets against the
 * formulas of Documentation/packed-layout.md worked by hand, quantize/read
 * back round trips per quantization and group, node ranges, conversions.
 */
#include <errno.h>

#include "kt_test.h"
#include "kernels/fp.h"
#include "kernels/fp8.h"
#include "kernels/mxfp4.h"
#include "kernels/pack.h"
#include "util.h"

TEST(layout_rejects_bad_geometry)
{
	struct kern_pack_layout l;

	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT8, 100, 256, 0, &l), -EINVAL);
	ASSERT_TRUE(l.err != NULL);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT8, 256, 0, 0, &l), -EINVAL);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT4, 256, 256, 48, &l), -EINVAL);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT4, 256, 256, 256, &l), -EINVAL);
	ASSERT_EQ(kern_pack_layout((enum kt_quant)10, 256, 256, 0, &l),
		  -EINVAL);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_MXFP4, 256, 256, 64, &l),
		  -EINVAL);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT4, 256, 384, 0, &l), 0);
	ASSERT_EQ(l.group, 128);
	ASSERT_EQ(l.kc, 128);
	/* KC is 128 whatever I is: the NUMA split's unit */
	ASSERT_EQ(kern_pack_layout(KT_QUANT_BF16, 256, 512, 0, &l), 0);
	ASSERT_EQ(l.kc, 128);
	ASSERT_EQ(l.group, 0);
}

TEST(layout_sizes)
{
	struct kern_pack_layout l;
	size_t nk = 256 * 384;

	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT8, 256, 384, 0, &l), 0);
	ASSERT_EQ(l.total, 3 * nk + (384 + 384 + 256) * 4);
	ASSERT_EQ(l.scales_off[KERN_MAT_GATE], 3 * nk);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_BF16, 256, 384, 0, &l), 0);
	ASSERT_EQ(l.total, 6 * nk);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT4, 256, 384, 64, &l), 0);
	ASSERT_EQ(l.total, 3 * nk / 2 + (4 * 384 * 2 + 6 * 256) * 4);
	ASSERT_EQ(l.tiles_off[KERN_MAT_DOWN], nk);
	ASSERT_EQ(l.scales_off[KERN_MAT_DOWN], 3 * nk / 2 + 4 * 384 * 2 * 4);
}

/* Offsets worked by hand from the tables of packed-layout.md. */
TEST(elem_offsets_by_hand)
{
	struct kern_pack_layout l;

	/* INT8, H = 128, I = 256 (KC 128): gate K = 128, 2 K blocks */
	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT8, 128, 256, 0, &l), 0);
	/* (17, 70): nb 1, kb 1 -> tile 3; c 6 -> 64 + 4 + 2 */
	ASSERT_EQ(kern_pack_elem_off(&l, KERN_MAT_GATE, 17, 70),
		  3 * 1024 + 70);
	/* down N = 128, K = 256: P = 2; (33, 200): kb 3, kc 1, kin 1,
	 * nb 2 -> tile 1*8*2 + 2*2 + 1 = 21; c 8 -> 2*64 + 1*4 + 0 */
	ASSERT_EQ(kern_pack_elem_off(&l, KERN_MAT_DOWN, 33, 200),
		  21 * 1024 + 132);
	/* BF16, (5, 33) of gate K = 128: kb 1, tile 1; c 1 -> 0 + 20 + 2 */
	ASSERT_EQ(kern_pack_layout(KT_QUANT_BF16, 128, 256, 0, &l), 0);
	ASSERT_EQ(kern_pack_elem_off(&l, KERN_MAT_GATE, 5, 33), 1024 + 22);
	/* INT4, (3, 100): tile 0; kk 36 -> 9*64 + 12 + 0 (high nibble) */
	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT4, 128, 256, 0, &l), 0);
	ASSERT_EQ(kern_pack_elem_off(&l, KERN_MAT_GATE, 3, 100), 588);
	/* down N = 128, K = 256, KC 128, P = 1: (20, 130): kb 1, kc 1,
	 * nb 1 -> tile 1*8*1 + 1 = 9; kk 2 -> 0 + 16 + 2 */
	ASSERT_EQ(kern_pack_elem_off(&l, KERN_MAT_DOWN, 20, 130),
		  9 * 1024 + 18);
}

/* Every element maps to a distinct byte (nibble for INT4) of the tiles. */
static void check_bijective(struct kt_test_meta *_metadata,
			    enum kt_quant q, unsigned int H, unsigned int I)
{
	struct kern_pack_layout l;
	unsigned int id, n, k, N, K;
	uint8_t *seen;

	ASSERT_EQ(kern_pack_layout(q, H, I, 0, &l), 0);
	seen = calloc(l.tiles_bytes[0] * 2, 1);
	ASSERT_TRUE(seen != NULL);
	for (id = 0; id < 3; id++) {
		memset(seen, 0, l.tiles_bytes[0] * 2);
		N = id == KERN_MAT_DOWN ? H : I;
		K = id == KERN_MAT_DOWN ? I : H;
		for (n = 0; n < N; n++)
			for (k = 0; k < K; k++) {
				size_t off = kern_pack_elem_off(&l, id, n, k);
				unsigned int esz = q == KT_QUANT_BF16 ? 2 : 1;
				size_t slot = q == KT_QUANT_INT4 ?
					off * 2 + (k % 128 >= 64) :
					q == KT_QUANT_MXFP4 ? off * 2 +
					kern_mxfp4_hi(k % 128) : off;

				ASSERT_LE(off + esz, l.tiles_bytes[id]);
				ASSERT_EQ(seen[slot], 0);
				seen[slot] = 1;
			}
	}
	free(seen);
}

TEST(elem_offsets_bijective)
{
	check_bijective(_metadata, KT_QUANT_INT8, 256, 384);
	check_bijective(_metadata, KT_QUANT_INT4, 256, 384);
	check_bijective(_metadata, KT_QUANT_BF16, 128, 512);
	check_bijective(_metadata, KT_QUANT_MXFP4, 256, 384);
}

/*
 * INT4 element (n, k): its nibble decodes to q in [-8, 7] and the value read
 * back is q times the group's scale, which is positive or, for an all-zero
 * group, 0 with q 0.
 */
static void check_int4(struct kt_test_meta *_metadata,
		       const struct kern_pack_layout *l, unsigned int id,
		       const uint8_t *blob, unsigned int n, unsigned int k,
		       double got)
{
	unsigned int N = id == KERN_MAT_DOWN ? l->hidden : l->inter;
	const uint8_t *p = blob + l->tiles_off[id] +
		kern_pack_elem_off(l, id, n, k);
	int nib = k % 128 < 64 ? (*p & 0xf) : (*p >> 4);
	float scale;

	memcpy(&scale, blob + l->scales_off[id] +
	       ((size_t)(k / l->group) * N + n) * 4, 4);
	ASSERT_TRUE(scale >= 0.0f && isfinite(scale));
	if (scale == 0.0f)
		ASSERT_EQ(nib, 8);
	ASSERT_EQ(got, (double)((float)(nib - 8) * scale));
}

/* Squared error of @v under the old rule: scale max/7, q in [-7, 7]. */
static double sq_err_max7(double v, double amax)
{
	double s = amax / 7, q;

	if (s == 0)
		return v * v;
	q = round(v / s);
	return (v - q * s) * (v - q * s);
}

static void round_trip(struct kt_test_meta *_metadata, enum kt_quant q,
		       unsigned int H, unsigned int I, unsigned int group,
		       enum kt_dtype dtype)
{
	struct tu_rng r = { 42 + q * 7 + group };
	struct kern_pack_layout l;
	float *w[3];
	void *src[3];
	uint8_t *blob;
	unsigned int id, n, k;

	ASSERT_EQ(kern_pack_layout(q, H, I, group, &l), 0);
	blob = malloc(l.total);
	ASSERT_TRUE(blob != NULL);
	memset(blob, 0x5a, l.total);
	for (id = 0; id < 3; id++) {
		size_t cnt = (size_t)H * I;

		w[id] = malloc(cnt * 4);
		src[id] = malloc(cnt * 4);
		tu_fill_weights(&r, w[id], id == KERN_MAT_DOWN ? H : I,
				id == KERN_MAT_DOWN ? I : H);
		/* one all-zero row: scale 0, q 0 */
		memset(w[id], 0, (id == KERN_MAT_DOWN ? I : H) * 4);
		for (size_t i = 0; i < cnt; i++) {
			if (dtype == KT_DTYPE_F32) {
				((float *)src[id])[i] = w[id][i];
				continue;
			}
			uint16_t h = dtype == KT_DTYPE_BF16 ?
				kern_f32_to_bf16(w[id][i]) :
				kern_f32_to_f16(w[id][i]);
			((uint16_t *)src[id])[i] = h;
			w[id][i] = dtype == KT_DTYPE_BF16 ?
				kern_bf16_to_f32(h) : kern_f16_to_f32(h);
		}
	}
	ASSERT_EQ(kern_pack_expert(&l, src[0], src[1], src[2], dtype, blob), 0);
	for (id = 0; id < 3; id++) {
		unsigned int N = id == KERN_MAT_DOWN ? H : I;
		unsigned int K = id == KERN_MAT_DOWN ? I : H;
		unsigned int G = q == KT_QUANT_INT4 ? l.group : K;
		double qmax = 127, err_sum = 0, ref_sum = 0;

		for (n = 0; n < N; n++) {
			for (unsigned int g0 = 0; g0 < K; g0 += G) {
				double amax = 0, got_max = 0, err = 0, ref = 0;

				for (k = g0; k < g0 + G; k++)
					amax = fmax(amax, fabs(w[id][(size_t)n * K + k]));
				for (k = g0; k < g0 + G; k++) {
					double v = w[id][(size_t)n * K + k];
					double got = kern_pack_get(&l, id, blob,
								   n, k);

					got_max = fmax(got_max, fabs(got));
					if (q == KT_QUANT_BF16) {
						ASSERT_EQ(got, (double)kern_bf16_to_f32(
							kern_f32_to_bf16((float)v)));
						continue;
					}
					if (q == KT_QUANT_INT4) {
						check_int4(_metadata, &l, id, blob,
							   n, k, got);
						err += (got - v) * (got - v);
						ref += sq_err_max7(v, amax);
						continue;
					}
					/* within half a step of the source */
					ASSERT_LE(fabs(got - v),
						  amax / qmax * 0.5 * (1 + 1e-5) + 1e-12);
				}
				/* INT4: never worse than max/7 (f32 sums) */
				ASSERT_LE(err, ref * (1 + 1e-4) + 1e-30);
				err_sum += err;
				ref_sum += ref;
				/* INT8: the largest magnitude uses the full range */
				if (q == KT_QUANT_INT8)
					ASSERT_NEAR(got_max, amax, amax * 1e-6);
			}
		}
		/* INT4 on Gaussian rows: the search must pay (measured 0.73-0.8
		 * of max/7's squared error; g128 lowest) */
		if (q == KT_QUANT_INT4) {
			TH_LOG("int4 g%u: squared error %.3f of max/7's",
			       l.group, err_sum / ref_sum);
			ASSERT_LT(err_sum, 0.88 * ref_sum);
		}
	}
	for (id = 0; id < 3; id++) {
		free(w[id]);
		free(src[id]);
	}
	free(blob);
}

TEST(round_trip_int8)
{
	round_trip(_metadata, KT_QUANT_INT8, 256, 384, 0, KT_DTYPE_F32);
	round_trip(_metadata, KT_QUANT_INT8, 128, 256, 0, KT_DTYPE_BF16);
	round_trip(_metadata, KT_QUANT_INT8, 128, 128, 0, KT_DTYPE_F16);
}

TEST(round_trip_int4)
{
	round_trip(_metadata, KT_QUANT_INT4, 256, 384, 32, KT_DTYPE_F32);
	round_trip(_metadata, KT_QUANT_INT4, 256, 256, 64, KT_DTYPE_BF16);
	round_trip(_metadata, KT_QUANT_INT4, 128, 384, 128, KT_DTYPE_F16);
}

TEST(round_trip_bf16)
{
	round_trip(_metadata, KT_QUANT_BF16, 256, 384, 0, KT_DTYPE_F32);
	round_trip(_metadata, KT_QUANT_BF16, 128, 256, 0, KT_DTYPE_F16);
}

/* Halves round away from zero; NaN does not poison a row's scale. */
TEST(quantize_ties)
{
	struct kern_pack_layout l;
	float *w = calloc(128 * 128, 4);
	uint8_t *blob;
	unsigned int k;

	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT8, 128, 128, 0, &l), 0);
	blob = malloc(l.total);
	/* row 0: amax 127, so scale 1 and every value is exact or a tie */
	w[0] = 127.0f;
	w[1] = 2.5f;
	w[2] = -2.5f;
	w[3] = 0.5f;
	w[4] = -0.5f;
	w[5] = 126.5f;
	w[6] = -126.5f;
	w[7] = 3.4999998f;
	/* row 1: a NaN among finite values */
	w[128] = NAN;
	w[129] = -63.5f;
	w[130] = 127.0f;
	ASSERT_EQ(kern_pack_matrix(&l, KERN_MAT_GATE, w, KT_DTYPE_F32, 128,
				   blob), 0);
	static const float want[] = { 127, 3, -3, 1, -1, 127, -127, 3 };
	for (k = 0; k < 8; k++)
		ASSERT_EQ(kern_pack_get(&l, KERN_MAT_GATE, blob, 0, k), want[k]);
	ASSERT_EQ(kern_pack_get(&l, KERN_MAT_GATE, blob, 1, 1), -64.0f);
	ASSERT_EQ(kern_pack_get(&l, KERN_MAT_GATE, blob, 1, 2), 127.0f);
	free(w);
	free(blob);
}

/*
 * INT4 by hand: a group that is exactly q * 0.5 for q = -8..7 comes back
 * exact (the search reaches max/8 and uses -8); a NaN leaves its group at
 * max/7 with the other values intact; an all-zero group is scale 0.
 */
TEST(int4_rule)
{
	struct kern_pack_layout l;
	float *w = calloc(128 * 128, 4);
	uint8_t *blob;
	unsigned int k;

	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT4, 128, 128, 32, &l), 0);
	blob = malloc(l.total);
	ASSERT_TRUE(w != NULL && blob != NULL);
	/* row 0, group 0: q = -8..7 twice, times 0.5 */
	for (k = 0; k < 32; k++)
		w[k] = (float)((int)(k % 16) - 8) * 0.5f;
	/* row 1, group 0: a NaN, 7 and -3 (max/7 = 1, all exact) */
	w[128] = NAN;
	w[129] = 7.0f;
	w[130] = -3.0f;
	/* row 1, group 1 (k 32..63): all zero */
	ASSERT_EQ(kern_pack_matrix(&l, KERN_MAT_GATE, w, KT_DTYPE_F32, 128,
				   blob), 0);
	for (k = 0; k < 32; k++)
		ASSERT_EQ(kern_pack_get(&l, KERN_MAT_GATE, blob, 0, k), w[k]);
	ASSERT_EQ(kern_pack_get(&l, KERN_MAT_GATE, blob, 1, 1), 7.0f);
	ASSERT_EQ(kern_pack_get(&l, KERN_MAT_GATE, blob, 1, 2), -3.0f);
	ASSERT_EQ(kern_pack_get(&l, KERN_MAT_GATE, blob, 1, 3), 0.0f);
	for (k = 32; k < 64; k++)
		ASSERT_EQ(kern_pack_get(&l, KERN_MAT_GATE, blob, 1, k), 0.0f);
	free(w);
	free(blob);
}

TEST(bad_dtype)
{
	struct kern_pack_layout l;
	float w[4] = { 0 };
	uint8_t *blob;

	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT8, 128, 128, 0, &l), 0);
	blob = malloc(l.total);
	ASSERT_EQ(kern_pack_expert(&l, w, w, w, KT_DTYPE_I32, blob), -EINVAL);
	ASSERT_EQ(kern_pack_expert(&l, NULL, w, w, KT_DTYPE_F32, blob),
		  -EINVAL);
	free(blob);
}

/* The nodes' ranges cover every tile byte exactly once. */
TEST(node_ranges_partition)
{
	static const enum kt_quant qs[] = { KT_QUANT_INT8, KT_QUANT_INT4,
					    KT_QUANT_BF16, KT_QUANT_MXFP4 };
	struct kern_range rg[KERN_PACK_MAX_RANGES];
	struct kern_pack_layout l;
	unsigned int qi, nn, node;

	for (qi = 0; qi < 4; qi++) {
		ASSERT_EQ(kern_pack_layout(qs[qi], 256, 1024, 0, &l), 0);
		for (nn = 1; nn <= 5; nn++) {
			uint8_t *cnt = calloc(l.total, 1);
			size_t b;

			for (node = 0; node < nn; node++) {
				int n = kern_pack_node_ranges(&l, nn, node, rg);

				ASSERT_LE(n, KERN_PACK_MAX_RANGES);
				for (int i = 0; i < n; i++)
					for (b = rg[i].off;
					     b < rg[i].off + rg[i].len; b++) {
						ASSERT_LT(b, l.total);
						cnt[b]++;
					}
			}
			for (b = 0; b < l.total; b++)
				ASSERT_EQ(cnt[b], 1);
			free(cnt);
		}
	}
}

/* The byte of @l's scale part of matrix @id that element (n, k) reads. */
static size_t scale_byte(const struct kern_pack_layout *l, unsigned int id,
			 unsigned int n, unsigned int k)
{
	bool down = id == KERN_MAT_DOWN;
	enum kt_quant q = down ? l->quant_down : l->quant;
	unsigned int N = down ? l->hidden : l->inter;
	unsigned int K = down ? l->inter : l->hidden;
	unsigned int g = down ? l->group_down : l->group;
	static uint8_t base[1];
	struct kern_qk_rec r;

	switch ((int)q) {
	case KT_QUANT_INT8:
		return (size_t)n * 4;
	case KT_QUANT_INT4:
	case KT_QUANT_Q8_0:
		return ((size_t)(k / g) * N + n) * 4;
	case KT_QUANT_MXFP4:
		return kern_mxfp4_scale_idx(N, n, k / KERN_MXFP4_GROUP);
	case KT_QUANT_FP8:
		return kern_fp8_scale_idx(g, K, n, k) * 4;
	default:	/* K-quants: the record lane of row n */
		kern_qk_rec_at(q, base, K, n, k, &r);
		return (size_t)((uint8_t *)r.d - base);
	}
}

/*
 * Each node's ranges hold the scales of the weights its slice reads
 * (gate/up rows, down k) wherever the part is laid out along the slice,
 * else node 0 holds the part: the scales of the rows a node computes sit
 * in its memory, not node 0's.
 */
TEST(node_ranges_hold_their_scales)
{
	static const struct {
		enum kt_quant q, qd;
		unsigned int group;
		bool gu_split, down_split;
	} cs[] = {
		{ KT_QUANT_INT8, KT_QUANT_INT8, 0, true, false },
		{ KT_QUANT_INT4, KT_QUANT_INT4, 32, false, true },
		{ KT_QUANT_INT4, KT_QUANT_INT4, 128, false, true },
		{ KT_QUANT_FP8, KT_QUANT_FP8, KERN_FP8_BLOCK, true, false },
		{ KT_QUANT_FP8, KT_QUANT_FP8, KERN_FP8_CHANNEL, true, false },
		{ KT_QUANT_MXFP4, KT_QUANT_MXFP4, 0, false, true },
		{ KT_QUANT_Q8_0, KT_QUANT_Q8_0, 32, false, true },
		{ KT_QUANT_Q4_K, KT_QUANT_Q4_K, 32, true, false },
		{ KT_QUANT_Q4_K, KT_QUANT_Q6_K, 32, true, false },
		{ KT_QUANT_Q6_K, KT_QUANT_Q8_0, 32, true, true },
	};
	const unsigned int Hh = 512, Ii = 768;	/* six KC chunks */
	struct kern_range rg[KERN_PACK_MAX_RANGES];
	struct kern_pack_layout l;

	for (size_t c = 0; c < sizeof(cs) / sizeof(cs[0]); c++) {
		ASSERT_EQ(kern_pack_layout_mix(cs[c].q, cs[c].qd, Hh, Ii,
					       cs[c].group, &l), 0);
		for (unsigned int nn = 1; nn <= 4; nn++) {
			uint8_t *own = malloc(l.total);

			memset(own, 0xff, l.total);
			for (unsigned int node = 0; node < nn; node++) {
				int nr = kern_pack_node_ranges(&l, nn, node, rg);

				for (int j = 0; j < nr; j++)
					memset(own + rg[j].off, node, rg[j].len);
			}
			for (unsigned int node = 0; node < nn; node++) {
				unsigned int i0, i1, id;

				kern_node_slice(l.inter, l.kc, nn, node, &i0, &i1);
				for (id = 0; id < 3; id++) {
					bool dn = id == KERN_MAT_DOWN;
					bool split = dn ? cs[c].down_split :
							  cs[c].gu_split;
					unsigned int want = split ? node : 0;
					unsigned int N = dn ? Hh : Ii, K = dn ? Ii : Hh;

					/* the slice's first and last row or k,
					 * over the other dimension's ends */
					for (unsigned int e = 0; e < 4; e++) {
						unsigned int s = e & 1 ? i1 - 1 : i0;
						unsigned int o = e & 2 ? (dn ? N : K) - 1 : 0;
						unsigned int n = dn ? o : s, k = dn ? s : o;
						size_t b = l.scales_off[id] +
							   scale_byte(&l, id, n, k);

						if (i1 == i0)
							continue;
						ASSERT_LT(b, l.total);
						if (own[b] != want)
							TH_LOG("case %zu, %u nodes, node %u, mat %u, (%u, %u)",
							       c, nn, node, id, n, k);
						EXPECT_EQ(own[b], want);
					}
				}
			}
			free(own);
		}
	}
}

/*
 * A mixed layout (gate/up of one GGUF type, down of another) holds each
 * matrix exactly as the single-type layout of its own type does, at its
 * own offset: same bytes, same values; the node ranges still partition
 * the blob. INT8 and friends do not mix.
 */
TEST(mixed_down_type)
{
	static const enum kt_quant pairs[][2] = {
		{ KT_QUANT_Q4_K, KT_QUANT_Q6_K }, { KT_QUANT_Q5_K, KT_QUANT_Q6_K },
		{ KT_QUANT_Q8_0, KT_QUANT_Q6_K }, { KT_QUANT_Q4_K, KT_QUANT_Q8_0 },
	};
	const unsigned int Hh = 256, Ii = 512;
	struct kern_range rg[KERN_PACK_MAX_RANGES];
	struct kern_pack_layout l, lg, ld;
	struct tu_rng r = { 3 };
	float *gate = malloc(sizeof(float) * Hh * Ii);
	float *down = malloc(sizeof(float) * Hh * Ii);
	unsigned int pi, n, k, nn, node;
	size_t i;

	for (i = 0; i < (size_t)Hh * Ii; i++) {
		gate[i] = (float)(tu_unif(&r) * 2 - 1);
		down[i] = (float)(tu_unif(&r) * 2 - 1);
	}
	EXPECT_EQ(kern_pack_layout_mix(KT_QUANT_INT8, KT_QUANT_Q6_K, Hh, Ii, 0,
				       &l), -EINVAL);
	EXPECT_TRUE(l.err != NULL);
	EXPECT_EQ(kern_pack_layout_mix(KT_QUANT_Q4_K, KT_QUANT_BF16, Hh, Ii,
				       32, &l), -EINVAL);
	/* the K-quants need multiples of 256 for down's K too */
	EXPECT_EQ(kern_pack_layout_mix(KT_QUANT_Q8_0, KT_QUANT_Q6_K, 256, 384,
				       32, &l), -EINVAL);
	for (pi = 0; pi < sizeof(pairs) / sizeof(pairs[0]); pi++) {
		uint8_t *bm, *bg, *bd, *cnt;

		ASSERT_EQ(kern_pack_layout_mix(pairs[pi][0], pairs[pi][1], Hh,
					       Ii, 32, &l), 0);
		ASSERT_EQ(kern_pack_layout(pairs[pi][0], Hh, Ii, 32, &lg), 0);
		ASSERT_EQ(kern_pack_layout(pairs[pi][1], Hh, Ii, 32, &ld), 0);
		EXPECT_EQ(l.quant, pairs[pi][0]);
		EXPECT_EQ(l.quant_down, pairs[pi][1]);
		EXPECT_EQ(l.tiles_bytes[KERN_MAT_UP], lg.tiles_bytes[KERN_MAT_UP]);
		EXPECT_EQ(l.tiles_bytes[KERN_MAT_DOWN],
			  ld.tiles_bytes[KERN_MAT_DOWN]);
		EXPECT_EQ(l.scales_bytes[KERN_MAT_DOWN],
			  ld.scales_bytes[KERN_MAT_DOWN]);
		EXPECT_EQ(l.total, 2 * lg.tiles_bytes[0] + ld.tiles_bytes[2] +
			  2 * lg.scales_bytes[0] + ld.scales_bytes[2]);
		EXPECT_EQ(l.scales_off[KERN_MAT_GATE],
			  2 * lg.tiles_bytes[0] + ld.tiles_bytes[2]);
		bm = calloc(l.total, 1);
		bg = calloc(lg.total, 1);
		bd = calloc(ld.total, 1);
		ASSERT_EQ(kern_pack_matrix(&l, KERN_MAT_GATE, gate, KT_DTYPE_F32,
					   Hh, bm), 0);
		ASSERT_EQ(kern_pack_matrix(&l, KERN_MAT_DOWN, down, KT_DTYPE_F32,
					   Ii, bm), 0);
		ASSERT_EQ(kern_pack_matrix(&lg, KERN_MAT_GATE, gate,
					   KT_DTYPE_F32, Hh, bg), 0);
		ASSERT_EQ(kern_pack_matrix(&ld, KERN_MAT_DOWN, down,
					   KT_DTYPE_F32, Ii, bd), 0);
		EXPECT_EQ(memcmp(bm + l.tiles_off[0], bg + lg.tiles_off[0],
				 lg.tiles_bytes[0]), 0);
		EXPECT_EQ(memcmp(bm + l.scales_off[0], bg + lg.scales_off[0],
				 lg.scales_bytes[0]), 0);
		EXPECT_EQ(memcmp(bm + l.tiles_off[2], bd + ld.tiles_off[2],
				 ld.tiles_bytes[2]), 0);
		EXPECT_EQ(memcmp(bm + l.scales_off[2], bd + ld.scales_off[2],
				 ld.scales_bytes[2]), 0);
		for (n = 0; n < Hh; n += 37)
			for (k = 0; k < Ii; k += 13)
				ASSERT_EQ(kern_pack_get(&l, KERN_MAT_DOWN, bm, n, k),
					  kern_pack_get(&ld, KERN_MAT_DOWN, bd,
							n, k));
		for (nn = 1; nn <= 4; nn++) {
			cnt = calloc(l.total, 1);
			for (node = 0; node < nn; node++) {
				int nr = kern_pack_node_ranges(&l, nn, node, rg);

				for (int j = 0; j < nr; j++)
					for (i = rg[j].off;
					     i < rg[j].off + rg[j].len; i++)
						cnt[i]++;
			}
			for (i = 0; i < l.total; i++)
				ASSERT_EQ(cnt[i], 1);
			free(cnt);
		}
		free(bm);
		free(bg);
		free(bd);
	}
	free(gate);
	free(down);
}

TEST(node_slices)
{
	unsigned int i0, i1;

	kern_node_slice(1024, 256, 3, 0, &i0, &i1);
	ASSERT_EQ(i0, 0);
	ASSERT_EQ(i1, 256);
	kern_node_slice(1024, 256, 3, 2, &i0, &i1);
	ASSERT_EQ(i0, 512);
	ASSERT_EQ(i1, 1024);
	kern_node_slice(256, 256, 2, 0, &i0, &i1);
	ASSERT_EQ(i0, i1);
}

TEST(conversions)
{
	struct tu_rng r = { 7 };
	unsigned int i;

	ASSERT_EQ(kern_f32_to_bf16(1.0f), 0x3f80);
	/* 1 + 2^-8 is a tie: to even (1.0); 1 + 3*2^-8 rounds up */
	ASSERT_EQ(kern_f32_to_bf16(1.00390625f), 0x3f80);
	ASSERT_EQ(kern_f32_to_bf16(1.01171875f), 0x3f82);
	ASSERT_TRUE(isnan(kern_bf16_to_f32(kern_f32_to_bf16(NAN))));
	ASSERT_EQ(kern_f32_to_f16(1.0f), 0x3c00);
	ASSERT_EQ(kern_f32_to_f16(65504.0f), 0x7bff);
	ASSERT_EQ(kern_f32_to_f16(65520.0f), 0x7c00);
	ASSERT_EQ(kern_f32_to_f16(5.9604645e-08f), 0x0001);
	/* against the compiler's _Float16 on many values, incl. subnormals */
	for (i = 0; i < 200000; i++) {
		float f = (float)(tu_normal(&r) * pow(2.0, -30 + 45 * tu_unif(&r)));
		_Float16 h = (_Float16)f;
		uint16_t hb;

		memcpy(&hb, &h, 2);
		ASSERT_EQ(kern_f32_to_f16(f), hb);
		ASSERT_EQ(kern_f16_to_f32(hb), (float)h);
	}
}

TEST_HARNESS_MAIN
