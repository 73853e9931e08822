// SPDX-License-Identifier: MIT
/*
 * vnni-mix.c - which vector operations a core issues beside vpdpbusd zmm
 * for free and which take its slots: ns per dot of 8 independent dot
 * chains alone, then with 4 operations of one kind among the 8 dots, best
 * of 7 runs, one thread. On a Zen 4 FMA and multiplies take a dot's slot
 * each while conversions, integer adds, logic, shifts, shuffles and
 * broadcast loads do not; the epilogue costs of the GGUF bodies in
 * Documentation/kernels.md ("What the epilogues cost") come from it. Not
 * part of the library.
 */
#pragma GCC target("avx512f,avx512vnni")
#include <stdio.h>
#include <time.h>

#define ITERS	20000000L
#define RUNS	7

static int buf[64] __attribute__((aligned(64)));

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* two dots (chains a, b) then one @op writing zmm r from zmm s */
#define DOT2(a, b)	"vpdpbusd %%zmm16,%%zmm31,%%zmm" a "\n"		\
			"vpdpbusd %%zmm16,%%zmm31,%%zmm" b "\n"
#define BODY(op)	DOT2("0", "1") op("8", "9")			\
			DOT2("2", "3") op("10", "11")			\
			DOT2("4", "5") op("12", "13")			\
			DOT2("6", "7") op("14", "15")

#define NONE(r, s)	""
#define FMA(r, s)	"vfmadd231ps %%zmm" s ",%%zmm30,%%zmm" r "\n"
#define MUL(r, s)	"vmulps %%zmm" s ",%%zmm30,%%zmm" r "\n"
#define CVT(r, s)	"vcvtdq2ps %%zmm" s ",%%zmm" r "\n"
#define SUB(r, s)	"vpsubd %%zmm" s ",%%zmm30,%%zmm" r "\n"
#define ADDPS(r, s)	"vaddps %%zmm" s ",%%zmm30,%%zmm" r "\n"
#define AND(r, s)	"vpandd %%zmm" s ",%%zmm30,%%zmm" r "\n"
#define SRL(r, s)	"vpsrlw $4,%%zmm" s ",%%zmm" r "\n"
#define SHUF(r, s)	"vpshufb %%zmm" s ",%%zmm30,%%zmm" r "\n"
#define BCAST(r, s)	"vpbroadcastd 4(%0),%%zmm" r "\n"

#define MEASURE(name, op)						\
	do {								\
		double best = 1e30, t0;					\
		long i;							\
		int run;						\
									\
		for (run = 0; run < RUNS; run++) {			\
			t0 = now();					\
			for (i = 0; i < ITERS; i++)			\
				__asm__ volatile(BODY(op) : : "r"(buf)	\
						 : "memory");		\
			if (now() - t0 < best)				\
				best = now() - t0;			\
		}							\
		printf("%-14s %.3f ns per dot\n", name,		\
		       best / ITERS / 8 * 1e9);				\
	} while (0)

int main(void)
{
	if (!__builtin_cpu_supports("avx512vnni")) {
		fprintf(stderr, "vnni-mix: this CPU has no AVX512-VNNI\n");
		return 1;
	}
	printf("8 dot chains, 4 of each operation among 8 dots:\n");
	MEASURE("dots alone", NONE);
	MEASURE("vfmadd231ps", FMA);
	MEASURE("vmulps", MUL);
	MEASURE("vcvtdq2ps", CVT);
	MEASURE("vpsubd", SUB);
	MEASURE("vaddps", ADDPS);
	MEASURE("vpandd", AND);
	MEASURE("vpsrlw", SRL);
	MEASURE("vpshufb", SHUF);
	MEASURE("vpbroadcastd m", BCAST);
	return 0;
}
