// SPDX-License-Identifier: MIT
/*
 * vexp.c - the vector exp of the SIMD variants against libm in double:
 * relative error within KERN_EXP_MAX_REL_ERR on [-87, 88], +inf above the
 * f32 range, 0 far below, and silu(g) * u never NaN for finite g.
 */
#include <math.h>
#include <stdlib.h>

#include "kt_test.h"
#include "kernels/kern.h"
#include "kernels/simd.h"
#include "ktcore/core.h"

#define NPTS (1u << 20)

typedef void (*exp_fn)(float *out, const float *x, unsigned int n);
typedef void (*silu_fn)(float *out, const float *g, const float *u,
			unsigned int n);

static void check_exp(struct kt_test_meta *_metadata, enum kt_isa isa,
		      exp_fn ex, silu_fn silu)
{
	static const float edge_x[16] = {
		89.0f, 100.0f, 1e30f, 88.8f, -104.0f, -200.0f, -1e30f, 0.0f,
		-0.0f, 1e-30f, -1e-30f, 88.0f, -87.0f, 0.5f, -0.5f, 1.0f,
	};
	static const float silu_g[16] = {
		1e30f, -1e30f, 100.0f, -100.0f, 88.9f, -88.9f, 0.0f, -0.0f,
		3.0e38f, -3.0e38f, 1e-30f, -1e-30f, 20.0f, -20.0f, 1.0f, -1.0f,
	};
	float *x = malloc(sizeof(float) * NPTS), *y = malloc(sizeof(float) * NPTS);
	float out[16], u[16];
	double worst = 0;
	unsigned int i;

	if (!core_isa_runs(isa, core_cpu_flags()))
		SKIP(goto out, "CPU lacks %s", kt_isa_name(isa));
	for (i = 0; i < NPTS; i++)
		x[i] = -87.0f + 175.0f * (float)i / (float)(NPTS - 1);
	ex(y, x, NPTS);
	for (i = 0; i < NPTS; i++) {
		double ref = exp((double)x[i]);

		worst = fmax(worst, fabs((double)y[i] - ref) / ref);
	}
	TH_LOG("%s exp: max rel err %.3g on [-87, 88]", kt_isa_name(isa),
	       worst);
	EXPECT_LE(worst, (double)KERN_EXP_MAX_REL_ERR);
	ex(out, edge_x, 16);
	EXPECT_TRUE(isinf(out[0]) && out[0] > 0);
	EXPECT_TRUE(isinf(out[1]) && out[1] > 0);
	EXPECT_TRUE(isinf(out[2]) && out[2] > 0);
	EXPECT_TRUE(isinf(out[3]) && out[3] > 0);
	EXPECT_EQ(out[4], 0.0f);
	EXPECT_EQ(out[5], 0.0f);
	EXPECT_EQ(out[6], 0.0f);
	EXPECT_EQ(out[7], 1.0f);
	EXPECT_EQ(out[8], 1.0f);
	for (i = 0; i < 16; i++)
		u[i] = 1.0f;
	silu(out, silu_g, u, 16);
	for (i = 0; i < 16; i++) {
		double ref = silu_g[i] / (1.0 + exp(-(double)silu_g[i]));

		EXPECT_FALSE(isnan(out[i]));
		if (fabs(ref) > 1e-30)
			EXPECT_LE(fabs(out[i] - ref) / fabs(ref), 1e-6);
	}
out:
	free(x);
	free(y);
}

TEST(avx512) { check_exp(_metadata, KT_ISA_AVX512, kern_exp_f32_avx512, kern_silu_mul_f32_avx512); }
TEST(avx2) { check_exp(_metadata, KT_ISA_AVX2, kern_exp_f32_avx2, kern_silu_mul_f32_avx2); }
TEST(avxvnni) { check_exp(_metadata, KT_ISA_AVX_VNNI, kern_exp_f32_avxvnni, kern_silu_mul_f32_avxvnni); }
TEST(avx512bw) { check_exp(_metadata, KT_ISA_AVX512BW, kern_exp_f32_avx512bw, kern_silu_mul_f32_avx512bw); }

TEST_HARNESS_MAIN
