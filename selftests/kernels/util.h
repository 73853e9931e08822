/* SPDX-License-Identifier: MIT */
/*
 * util.h - what the kernels and moe selftests share: a seeded generator,
 * expert weights N(0, 0.02) with per-row magnitudes that vary, and an f64
 * reference of one expert from unquantized f32 weights.
 */
#ifndef KT_SELFTESTS_KERNELS_UTIL_H
#define KT_SELFTESTS_KERNELS_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "../no-tsan.h"

struct tu_rng {
	uint64_t s;
};

static inline uint64_t tu_next(struct tu_rng *r)
{
	/* splitmix64: good enough, and the same stream on every machine */
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double tu_unif(struct tu_rng *r)
{
	return (double)(tu_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static inline double tu_normal(struct tu_rng *r)
{
	double u = tu_unif(r), v = tu_unif(r);

	return sqrt(-2.0 * log(u + 1e-300)) * cos(2.0 * M_PI * v);
}

/*
 * Near-normal and cheap (no libm calls): the sum of four uniforms, scaled
 * to unit variance; tails stop at 3.46 sigma.
 */
static inline double tu_normal_fast(struct tu_rng *r)
{
	uint64_t z = tu_next(r);
	double s = 0;
	int i;

	for (i = 0; i < 4; i++, z >>= 16)
		s += (double)(z & 0xffff) * (1.0 / 65536.0);
	return (s - 2.0) * 1.7320508075688772;
}

/* Rows of N(0, 0.02) scaled by a per-row factor in [0.25, 4). */
static inline void tu_fill_weights(struct tu_rng *r, float *w, size_t rows,
				   size_t cols)
{
	size_t i, j;

	for (i = 0; i < rows; i++) {
		double mag = 0.25 * pow(16.0, tu_unif(r));

		for (j = 0; j < cols; j++)
			w[i * cols + j] = (float)(0.02 * mag *
						  tu_normal_fast(r));
	}
}

static inline void tu_fill_normal(struct tu_rng *r, float *x, size_t n,
				  double sd)
{
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = (float)(sd * tu_normal(r));
}

static inline double tu_silu(double g)
{
	return g / (1.0 + exp(-g));
}

/*
 * y[H] += wt * down . (silu(gate . x) * (up . x)) in f64, over the
 * intermediate rows [i0, i1) (all: 0, I).
 */
KT_TEST_NO_TSAN
static inline void tu_expert_ref(const float *gate, const float *up,
				 const float *down, unsigned int H,
				 unsigned int I, unsigned int i0,
				 unsigned int i1, const double *x, double wt,
				 double *y)
{
	/* the cast: selftests/gpu/ffn-emu.cc includes this as C++ */
	double *a = (double *)malloc(sizeof(double) * I);
	unsigned int i, h;

	for (i = i0; i < i1; i++) {
		double g = 0, u = 0;

		for (h = 0; h < H; h++) {
			g += (double)gate[(size_t)i * H + h] * x[h];
			u += (double)up[(size_t)i * H + h] * x[h];
		}
		a[i] = tu_silu(g) * u;
	}
	for (h = 0; h < H; h++) {
		double s = 0;

		for (i = i0; i < i1; i++)
			s += (double)down[(size_t)h * I + i] * a[i];
		y[h] += wt * s;
	}
	free(a);
}

/* mean|y - ref| / mean|ref| */
static inline double tu_rel_mae(const double *y, const double *ref, size_t n)
{
	double num = 0, den = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		num += fabs(y[i] - ref[i]);
		den += fabs(ref[i]);
	}
	return den > 0 ? num / den : num;
}

#endif /* KT_SELFTESTS_KERNELS_UTIL_H */
