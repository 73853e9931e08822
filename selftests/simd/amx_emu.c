// SPDX-License-Identifier: MIT
/*
 * amx_emu.c - the AMX tile kernels (kernels/moe-amx.h, q8_0-amx.h, qk-amx.h,
 * mxfp4-amx.h) built
 * against a software emulation of the tile instructions and compared with
 * the scalar oracle: proves the tile shapes, strides and data flow on machines
 * without AMX. The emulation also checks every tile shape it is given.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/amx.h"
#include "kernels/fp.h"

/* ---- the emulation: 8 tiles of 16 rows x 64 bytes and palette 1 ---- */

static struct kern_amx_cfg emu_cfg;
static uint8_t emu_tile[8][16][64];
static int emu_configured;
static unsigned long emu_bad, emu_dots;

static void emu_check(int ok)
{
	if (!ok)
		emu_bad++;
}

static void emu_loadconfig(const void *p)
{
	int t;

	memcpy(&emu_cfg, p, sizeof(emu_cfg));
	emu_check(emu_cfg.palette == 1);
	for (t = 0; t < 8; t++)
		emu_check(emu_cfg.rows[t] <= 16 && emu_cfg.colsb[t] <= 64);
	/* ldtilecfg zeroes every tile */
	memset(emu_tile, 0, sizeof(emu_tile));
	emu_configured = 1;
}

static void emu_release(void)
{
	emu_check(emu_configured);
	emu_configured = 0;
}

static int emu_valid(int t)
{
	return emu_configured && t >= 0 && t < 8 && emu_cfg.rows[t] &&
	       emu_cfg.colsb[t];
}

static void emu_zero(int t)
{
	emu_check(emu_valid(t));
	memset(emu_tile[t], 0, sizeof(emu_tile[t]));
}

static void emu_loadd(int t, const void *base, long stride)
{
	int r;

	emu_check(emu_valid(t));
	memset(emu_tile[t], 0, sizeof(emu_tile[t]));
	for (r = 0; r < emu_cfg.rows[t]; r++)
		memcpy(emu_tile[t][r], (const uint8_t *)base + r * stride,
		       emu_cfg.colsb[t]);
}

static void emu_stored(int t, void *base, long stride)
{
	int r;

	emu_check(emu_valid(t));
	for (r = 0; r < emu_cfg.rows[t]; r++)
		memcpy((uint8_t *)base + r * stride, emu_tile[t][r],
		       emu_cfg.colsb[t]);
}

/* The shape rules of TDP*: C is M x N dwords, A is M x K/4 dwords, B is
 * K/4 rows of N dwords. */
static void emu_shape(int c, int a, int b)
{
	emu_check(emu_valid(c) && emu_valid(a) && emu_valid(b));
	emu_check(c != a && c != b && a != b);
	emu_check(emu_cfg.rows[c] == emu_cfg.rows[a]);
	emu_check(emu_cfg.colsb[a] == 4 * emu_cfg.rows[b]);
	emu_check(emu_cfg.colsb[c] == emu_cfg.colsb[b]);
	emu_dots++;
}

/* TDPBSSD (@bu 0) and TDPBSUD (@bu 1: B's bytes unsigned); A signed */
static void emu_dpbs(int c, int a, int b, int bu)
{
	int m, n, k, i;

	emu_shape(c, a, b);
	for (m = 0; m < emu_cfg.rows[c]; m++)
		for (n = 0; n < emu_cfg.colsb[c] / 4; n++) {
			int32_t acc;

			memcpy(&acc, &emu_tile[c][m][n * 4], 4);
			for (k = 0; k < emu_cfg.colsb[a] / 4; k++)
				for (i = 0; i < 4; i++) {
					uint8_t w = emu_tile[b][k][n * 4 + i];

					acc += (int8_t)emu_tile[a][m][k * 4 + i] *
					       (bu ? (int)w : (int)(int8_t)w);
				}
			memcpy(&emu_tile[c][m][n * 4], &acc, 4);
		}
}

static void emu_dpbf16ps(int c, int a, int b)
{
	int m, n, k, i;

	emu_shape(c, a, b);
	for (m = 0; m < emu_cfg.rows[c]; m++)
		for (n = 0; n < emu_cfg.colsb[c] / 4; n++) {
			float acc;

			memcpy(&acc, &emu_tile[c][m][n * 4], 4);
			for (k = 0; k < emu_cfg.colsb[a] / 4; k++)
				for (i = 0; i < 2; i++) {
					uint16_t x, w;

					memcpy(&x, &emu_tile[a][m][k * 4 +
						2 * i], 2);
					memcpy(&w, &emu_tile[b][k][n * 4 +
						2 * i], 2);
					acc = fmaf(kern_bf16_to_f32(x),
						   kern_bf16_to_f32(w), acc);
				}
			memcpy(&emu_tile[c][m][n * 4], &acc, 4);
		}
}

#include "kernels/amx-untile.h"
#define _tile_loadconfig(p)	emu_loadconfig(p)
#define _tile_release()		emu_release()
#define _tile_zero(t)		emu_zero(t)
#define _tile_loadd(t, b, s)	emu_loadd(t, b, s)
#define _tile_stored(t, b, s)	emu_stored(t, b, s)
#define _tile_dpbssd(c, a, b)	emu_dpbs(c, a, b, 0)
#define _tile_dpbsud(c, a, b)	emu_dpbs(c, a, b, 1)
#define _tile_dpbf16ps(c, a, b)	emu_dpbf16ps(c, a, b)

/*
 * The tile bodies finish C tiles with AVX-512 (the test skips on CPUs
 * without it before any of them runs); the rest of this file is built for
 * the baseline ISA.
 */
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#define AMX_NAME(x) emu_##x
#include "kernels/moe-amx.h"
#include "kernels/q8_0-amx.h"
#include "kernels/qk-amx.h"
#define MXA_NAME(x) emu_mx_##x
#include "kernels/mxfp4-amx.h"
#pragma GCC pop_options

#include "kt_test.h"
#include "ktcore/core.h"
#include "simd/check.h"

static size_t emu_scratch_bytes(const struct kern_geom *g, unsigned int max_m)
{
	size_t t = amx_scratch_bytes(g, max_m);
	size_t v = kern_scratch_bytes_avx512(g, max_m);

	return t > v ? t : v;
}

/* The AMX table with emulated tiles; many_min_m 1 runs tiles for all. */
static const struct kern_ops emu_ops = {
	.isa = KT_ISA_AMX,
	.name = "amx-emu",
	.q = {
		[KT_QUANT_INT8] = {
			.act_row_bytes = kern_act_row_bytes_int8_avx512,
			.act_prepare = kern_act_prepare_int8_avx512,
			.scratch_bytes = emu_scratch_bytes,
			.gate_up = kern_gate_up_int8_avx512,
			.down = kern_down_int8_avx512,
			.gate_up_many = emu_gate_up_q8,
			.down_many = emu_down_q8,
			.many_min_m = 1,
		},
		[KT_QUANT_INT4] = {
			.act_row_bytes = kern_act_row_bytes_int4_avx512,
			.act_prepare = kern_act_prepare_int4_avx512,
			.scratch_bytes = emu_scratch_bytes,
			.gate_up = kern_gate_up_int4_avx512,
			.down = kern_down_int4_avx512,
			.gate_up_many = emu_gate_up_q4,
			.down_many = emu_down_q4,
			.many_min_m = 1,
		},
		[KT_QUANT_BF16] = {
			.act_row_bytes = kern_act_row_bytes_bf16_avx512,
			.act_prepare = kern_act_prepare_bf16_avx512,
			.scratch_bytes = emu_scratch_bytes,
			.gate_up = kern_gate_up_bf16_avx512,
			.down = kern_down_bf16_avx512,
			.gate_up_many = emu_gate_up_bf16,
			.down_many = emu_down_bf16,
			.many_min_m = 1,
		},
		[KT_QUANT_MXFP4] = {
			.act_row_bytes = kern_act_row_bytes_bf16_avx512,
			.act_prepare = kern_act_prepare_bf16_avx512,
			.scratch_bytes = emu_mx_scratch_bytes,
			.gate_up = kern_gate_up_mxfp4_avx512,
			.down = kern_down_mxfp4_avx512,
			.gate_up_many = emu_mx_gate_up,
			.down_many = emu_mx_down,
			.many_min_m = 1,
		},
		AMX_GGUF_SLOTS(1, 1, 1, 1),
	},
};

/* Token counts around the 16- and 32-token blocks of the tile kernels;
 * 100: INT4 gate+up widens whole row blocks (AMX_Q4_RING_M). */
static const struct sc_case emu_cases[] = {
	{ .T = 1 },
	{ .T = 17 },
	{ .T = 33 },
	{ .T = 100 },
	{ .T = 32, .n0 = 128, .n1 = 256, .dn0 = 16, .dn1 = 64 },
	{ .T = 5, .c0 = 1, .c1 = 2 },
};

static void check_emu(struct kt_test_meta *_metadata, enum kt_quant q,
		      unsigned int group)
{
	/* GGUF: int32 dots, f32 sums of the sub-blocks in another order */
	const bool gguf = kern_quant_is_gguf(q);
	/* MXFP4: the AVX-512 body below the tiles dots int16 */
	const double tol = sc_tol(q, true);
	unsigned int ci;
	struct sc_expert e;

	/* the fallback and the SiLU of the AMX variant are AVX-512 code */
	if (!core_isa_runs(KT_ISA_AVX512, core_cpu_flags()))
		SKIP(return, "CPU lacks avx512 (the AMX variant's vector half)");
	/* GGUF: H of two K-quant super-blocks, so that gate/up's activation
	 * scales and weight records change along K */
	ASSERT_EQ(sc_expert_make(&e, q, gguf ? 512 : 256, 512, group, 7), 0);
	emu_bad = emu_dots = 0;
	for (ci = 0; ci < sizeof(emu_cases) / sizeof(emu_cases[0]); ci++) {
		double err = sc_run(&emu_ops.q[q], &e, &emu_cases[ci], 77 + ci);

		if (err < 0 || err > tol / 10)
			TH_LOG("amx-emu %s g%u T%u: rel err %.3g",
			       kt_quant_name(q), group, emu_cases[ci].T, err);
		EXPECT_GE(err, 0.0);
		EXPECT_LE(err, tol);
	}
	EXPECT_EQ(emu_bad, 0ul);
	EXPECT_GT(emu_dots, 0ul);
	EXPECT_EQ(emu_configured, 0);
	free(e.blob);
}

TEST(int8) { check_emu(_metadata, KT_QUANT_INT8, 0); }
TEST(int4_g32) { check_emu(_metadata, KT_QUANT_INT4, 32); }
TEST(int4_g64) { check_emu(_metadata, KT_QUANT_INT4, 64); }
TEST(int4_g128) { check_emu(_metadata, KT_QUANT_INT4, 128); }
TEST(bf16) { check_emu(_metadata, KT_QUANT_BF16, 0); }
/* MXFP4: the scales folded into the bf16 B tiles (mxfp4-amx.h) */
TEST(mxfp4) { check_emu(_metadata, KT_QUANT_MXFP4, 0); }
/* GGUF blocks: one K span per weight scale (q8_0-amx.h, qk-amx.h) */
TEST(q8_0) { check_emu(_metadata, KT_QUANT_Q8_0, 0); }
TEST(q4_k) { check_emu(_metadata, KT_QUANT_Q4_K, 0); }
TEST(q5_k) { check_emu(_metadata, KT_QUANT_Q5_K, 0); }
TEST(q6_k) { check_emu(_metadata, KT_QUANT_Q6_K, 0); }

TEST_HARNESS_MAIN
