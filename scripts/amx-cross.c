// SPDX-License-Identifier: MIT
/*
 * amx-cross.c - where the AMX tile kernels overtake the AVX-512 ones: for
 * m tokens on each of many experts (weights from DRAM, calls of 256
 * gate/up rows and 256 down columns, as the executor cut them when the
 * switch points were measured; its down now takes up to 1024, what -c
 * 1024 times), one thread
 * times the AMX table's plain (AVX-512) and many (tile) kernels in
 * alternation and prints the best pass of each (thread CPU time), and the
 * AMX pass against the tile peak loop timed the same way. With -v it
 * times the tile kernels' vector half instead, on any AVX-512 CPU: the
 * same bodies with every tile instruction a no-op (gathering, widening,
 * folding C into f32; their results meaningless). Built and run by
 * scripts/amx-cross.sh; not part of the library.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include "kernels/kern.h"
#include "kernels/pack.h"
#include "kernels/simd.h"
#include "ktcore/core.h"

/* ---- -v: the tile bodies on no-op tiles ---- */
#include <immintrin.h>
#include "kernels/amx-untile.h"
#define _tile_loadconfig(p)	((void)(p))
#define _tile_release()		((void)0)
#define _tile_zero(t)		((void)0)
#define _tile_loadd(t, b, s)	((void)(b))
#define _tile_stored(t, b, s)	((void)(b))
#define _tile_dpbssd(c, a, b)	((void)0)
#define _tile_dpbsud(c, a, b)	((void)0)
#define _tile_dpbf16ps(c, a, b)	((void)0)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#define AMX_NAME(x) vec_##x
#include "kernels/moe-amx.h"
#include "kernels/q8_0-amx.h"
#include "kernels/qk-amx.h"
#pragma GCC pop_options

#define VEC_SLOT(t, T)							\
	{								\
		.act_row_bytes = kern_act_row_bytes_##t##_avx512,	\
		.act_prepare = kern_act_prepare_##t##_avx512,		\
		.scratch_bytes = kern_scratch_bytes_amx,		\
		.gate_up = kern_gate_up_##t##_avx512,			\
		.down = kern_down_##t##_avx512,				\
		.gate_up_many = vec_gate_up_##T,			\
		.down_many = vec_down_##T,				\
		.many_min_m = 1,					\
	}

static const struct kern_ops vec_ops = {
	.isa = KT_ISA_AMX,
	.name = "amx-vector-half",
	.q = {
		[KT_QUANT_INT8] = VEC_SLOT(int8, q8),
		[KT_QUANT_INT4] = VEC_SLOT(int4, q4),
		[KT_QUANT_BF16] = VEC_SLOT(bf16, bf16),
		AMX_GGUF_SLOTS(1, 1, 1, 1),
	},
};

struct cross {
	const struct kern_quant_ops *v;
	struct kern_pack_layout l;
	unsigned int n_exp, G;
	struct kern_mat *mats;
	uint8_t *act, *iact;
	size_t arow, crow;
	uint32_t rows[KERN_MAX_M];
	float w[KERN_MAX_M], *y, *out;
	void *scratch;
	int only;		/* 1: gate+up only, 2: down only */
	unsigned int dcols;	/* columns per down call */
};

/* CPU time of this thread: the machine may be shared, and time the
 * scheduler gives others should not count against either kernel. */
static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		memcpy(p + i, &s, 8);
	}
}

/* One pass over every expert with m tokens; tiles: the many kernels. */
static double pass(struct cross *c, unsigned int m, int tiles)
{
	unsigned int H = c->l.hidden, I = c->l.inter, e, n0;
	size_t stride = (size_t)(I / c->l.kc) * c->crow;
	uint64_t t0 = cpu_ns();

	for (e = 0; e < c->n_exp; e++) {
		struct kern_mat *mt = c->mats + e * 3;

		for (n0 = 0; c->only != 2 && n0 < I; n0 += 256) {
			struct kern_gate_up_args a = {
				.gate = &mt[0], .up = &mt[1], .N = I, .K = H,
				.group = c->G, .n0 = n0,
				.n1 = n0 + 256 < I ? n0 + 256 : I,
				.act = c->act, .act_stride = c->arow,
				.act_rows = c->rows, .m = m, .out = c->out,
				.out_stride = I, .scratch = c->scratch,
			};

			(tiles ? c->v->gate_up_many : c->v->gate_up)(&a);
		}
		for (n0 = 0; c->only != 1 && n0 < H; n0 += c->dcols) {
			struct kern_down_args a = {
				.down = &mt[2], .N = H, .K = I, .kc = c->l.kc,
				.group = c->G, .n0 = n0,
				.n1 = n0 + c->dcols < H ? n0 + c->dcols : H,
				.k0 = 0,
				.k1 = I, .act = c->iact, .act_stride = stride,
				.m = m, .y_rows = c->rows, .w = c->w,
				.y = c->y, .y_stride = H,
				.scratch = c->scratch,
				.next_down = e + 1 < c->n_exp ?
					     &c->mats[(e + 1) * 3 + 2] : NULL,
			};

			(tiles ? c->v->down_many : c->v->down)(&a);
		}
	}
	return (double)(cpu_ns() - t0) / c->n_exp;
}

static int setup(struct cross *c, enum kt_quant q, unsigned int H,
		 unsigned int I, unsigned int G, size_t total)
{
	struct kern_geom g;
	unsigned int e, i, k, chunks;
	size_t sz;
	float *x;

	if (kern_pack_layout(q, H, I, G, &c->l))
		return -1;
	c->G = q == KT_QUANT_INT4 ? c->l.group : 0;
	c->n_exp = (unsigned int)(total / c->l.total) + 1;
	c->mats = calloc((size_t)c->n_exp * 3, sizeof(*c->mats));
	for (e = 0; e < c->n_exp; e++) {
		uint8_t *blob;

		sz = (c->l.total + (2ul << 20) - 1) & ~((2ul << 20) - 1);
		blob = aligned_alloc(2ul << 20, sz);
		if (!blob)
			return -1;
		madvise(blob, sz, MADV_HUGEPAGE);
		fill(blob, c->l.total, e + 1);
		for (k = 0; k < 3; k++) {
			float *sc = (float *)(blob + c->l.scales_off[k]);

			for (i = 0; i < c->l.scales_bytes[k] / 4; i++)
				sc[i] = 1e-3f;
			kern_pack_mat(&c->l, (enum kern_mat_id)k, blob,
				      &c->mats[e * 3 + k]);
		}
		if (q == KT_QUANT_BF16)
			for (i = 0; i < c->l.scales_off[0]; i += 2)
				blob[i + 1] = 0x3c;
	}
	chunks = I / c->l.kc;
	c->arow = c->v->act_row_bytes(H, c->G);
	c->crow = c->v->act_row_bytes(c->l.kc, c->G);
	c->act = aligned_alloc(64, c->arow * KERN_MAX_M);
	c->iact = aligned_alloc(64, c->crow * chunks * KERN_MAX_M);
	x = malloc(sizeof(float) * H * KERN_MAX_M);
	for (i = 0; i < H * KERN_MAX_M; i++)
		x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
	c->v->act_prepare(x, H * 4, KT_DTYPE_F32, KERN_MAX_M, H, c->G,
			  c->act, c->arow);
	for (i = 0; i < KERN_MAX_M * chunks; i++)
		c->v->act_prepare(x + i, 0, KT_DTYPE_F32, 1, c->l.kc, c->G,
				  c->iact + i * c->crow, c->crow);
	free(x);
	for (i = 0; i < KERN_MAX_M; i++) {
		/* spread over 4x the rows, as routing picks tokens */
		c->rows[i] = (i * 97) % KERN_MAX_M;
		c->w[i] = 0.5f;
	}
	c->y = calloc((size_t)KERN_MAX_M * H, sizeof(float));
	c->out = calloc((size_t)KERN_MAX_M * I, sizeof(float));
	g = (struct kern_geom){ H, I, c->G, c->l.kc };
	sz = (c->v->scratch_bytes(&g, KERN_MAX_M) + 127) & ~63ul;
	c->scratch = aligned_alloc(64, sz);
	if (!c->scratch)
		return -1;
	/* -v folds C buffers no tile store wrote: zeros, not garbage */
	memset(c->scratch, 0, sz);
	return 0;
}

/* The quantization named @s (kt_quant_name()), 0 when none is. */
static enum kt_quant quant_named(const char *s)
{
	int q;

	for (q = KT_QUANT_INT8; q <= KT_QUANT_MXFP4; q++)
		if (!strcmp(s, kt_quant_name((enum kt_quant)q)))
			return (enum kt_quant)q;
	return (enum kt_quant)0;
}

/* Single-thread tile peak of @q in multiply-adds per ns (best of 3). */
static double tile_peak(enum kt_quant q)
{
	uint64_t sink = 0, n = 0, t0;
	double best = 0;
	int r;

	for (r = 0; r < 3; r++) {
		t0 = cpu_ns();
		n = (q == KT_QUANT_BF16 ? kern_peak_bf16_amx :
		     kern_peak_int8_amx)(50000, &sink);
		if (n / (double)(cpu_ns() - t0) > best)
			best = n / (double)(cpu_ns() - t0);
	}
	return best;
}

int main(int argc, char **argv)
{
	static const unsigned int ms[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
					   12, 16, 24, 32, 48, 64, 96, 128,
					   192, 256 };
	enum kt_quant q = KT_QUANT_INT8;
	unsigned int H = 2048, I = 768, G = 0, reps = 3, r, mi, mmax = 256;
	unsigned int mmin = 1;
	size_t total = 768ull << 20;
	struct cross c = { .dcols = 256 };
	int opt, vec = 0;

	while ((opt = getopt(argc, argv, "q:H:I:g:r:s:m:M:o:c:v")) != -1) {
		switch (opt) {
		case 'q':
			q = quant_named(optarg);
			break;
		case 'H': H = (unsigned int)atoi(optarg); break;
		case 'I': I = (unsigned int)atoi(optarg); break;
		case 'g': G = (unsigned int)atoi(optarg); break;
		case 'r': reps = (unsigned int)atoi(optarg); break;
		case 's': total = (size_t)atol(optarg) << 20; break;
		case 'm': mmin = (unsigned int)atoi(optarg); break;
		case 'M': mmax = (unsigned int)atoi(optarg); break;
		case 'o': c.only = !strcmp(optarg, "gate_up") ? 1 : 2; break;
		case 'c': c.dcols = (unsigned int)atoi(optarg); break;
		case 'v': vec = 1; break;
		default:
			fprintf(stderr, "usage: amx-cross "
				"[-q int8|int4|bf16|fp8|mxfp4|q8_0|q4_k|q5_k|"
				"q6_k] "
				"[-H hidden] [-I inter] [-g group] [-r reps] "
				"[-s weight MiB] [-m min m] [-M max m] "
				"[-o gate_up|down] [-c down columns] [-v]\n");
			return 2;
		}
	}
	if (!c.dcols || c.dcols % 16) {
		fprintf(stderr, "amx-cross: -c takes a multiple of 16\n");
		return 2;
	}
	if (!q) {
		fprintf(stderr, "amx-cross: unknown quantization\n");
		return 2;
	}
	c.v = kern_quant_ops_get(vec ? &vec_ops : kern_ops_get(KT_ISA_AMX), q);
	if (!c.v || !c.v->gate_up_many) {
		fprintf(stderr, "amx-cross: no tile kernels for %s\n",
			kt_quant_name(q));
		return 1;
	}
	if (!core_isa_runs(vec ? KT_ISA_AVX512 : KT_ISA_AMX,
			   core_cpu_flags())) {
		fprintf(stderr, "amx-cross: %s\n", vec ? "no AVX-512 here" :
			"no AMX here (-v times the vector half on AVX-512)");
		return 1;
	}
	/* -g: INT4's group; the blocks of 32 of Q8_0 and MXFP4 are fixed */
	if (!G)
		G = q == KT_QUANT_Q8_0 || q == KT_QUANT_MXFP4 ? 32 : 128;
	if (setup(&c, q, H, I, G, total)) {
		fprintf(stderr, "amx-cross: setup failed\n");
		return 1;
	}
	printf("quant %s H %u I %u group %u experts %u (%.0f MiB), "
	       "many_min_m %u; us per expert, best of %u\n",
	       kt_quant_name(q), H, I, c.G, c.n_exp,
	       (double)c.n_exp * c.l.total / (1 << 20),
	       kern_quant_ops_get(kern_ops_get(KT_ISA_AMX), q)->many_min_m, reps);
	if (vec)
		printf("tile kernels' vector half (no-op tiles)\n");
	printf("%5s %10s %10s %8s %9s\n", "m", "avx512", vec ? "vec" : "amx",
	       vec ? "vec/avx" : "amx/avx", vec ? "" : "amx/peak");
	pass(&c, 1, 0);
	for (mi = 0; mi < sizeof(ms) / sizeof(ms[0]) && ms[mi] <= mmax; mi++) {
		double best[2] = { 1e300, 1e300 }, peak = 0, p;

		if (ms[mi] < mmin)
			continue;

		for (r = 0; r < reps; r++) {
			int t;

			for (t = 0; t < 2; t++) {
				double ns = pass(&c, ms[mi], t);

				if (ns < best[t])
					best[t] = ns;
			}
			p = vec ? 0 : tile_peak(q);
			peak = p > peak ? p : peak;
		}
		/* multiply-adds of one expert over the best AMX pass */
		p = (c.only ? c.only == 1 ? 2.0 : 1.0 : 3.0) * H * I * ms[mi] /
		    best[1];
		printf("%5u %10.1f %10.1f %8.2f", ms[mi], best[0] / 1e3,
		       best[1] / 1e3, best[1] / best[0]);
		if (peak > 0)
			printf(" %9.2f", p / peak);
		printf("\n");
		fflush(stdout);
	}
	return 0;
}
