// SPDX-License-Identifier: MIT
/*
 * simd-bench.c - kernel-level benchmark of one SIMD variant on the
 * context's workers: decode (T tokens, each expert once, weights streamed
 * from DRAM) in GB/s against kt_ctx_measure_read_bw(), and prefill (T
 * tokens on one expert) in TOPS against kt_ctx_measure_peak().
 * Built and run by scripts/simd-bench.sh; not part of the library.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "kernels/kern.h"
#include "kernels/pack.h"
#include "ktcore/core.h"
#include "tools/opts.h"

struct bench {
	const struct kern_quant_ops *v;
	struct kern_pack_layout l;
	unsigned int n_exp, T, reps, nw;
	uint8_t **blob;
	struct kern_mat *mats;	/* [n_exp][3] */
	uint8_t *act, *iact;	/* prepared x [T], intermediate [T][chunks] */
	size_t arow, crow;
	uint32_t *rows;
	float *w, *y, *out;	/* out: [nw][T][I / nw] */
	void **scratch;
	uint8_t *scratch_mem;	/* every worker's scratch, apart */
	double t_ns;
	int only;		/* 1: gate+up only, 2: down only */
};

static unsigned int part(unsigned int n, unsigned int i, unsigned int k)
{
	return (unsigned int)((uint64_t)n / 16 * i / k) * 16;
}

/* between workers' scratch: the executor's MOE_SCRATCH_GAP */
#define SCRATCH_GAP	(64u << 10)

/* gate+up rows per call of the one-block kernels: the executor's task
 * (ktcore/moe.c plan_rows(), one down chunk); the many-token kernels take
 * the worker's whole slice, as the executor's whole-chunk tasks */
#define GU_ROWS		128

static void gate_up_one(struct bench *b, const struct core_worker_info *wi,
			unsigned int e)
{
	unsigned int I = b->l.inter, i0, mm, r0, r1, rs;
	unsigned int n0 = part(I, wi->global, b->nw);
	unsigned int n1 = part(I, wi->global + 1, b->nw);
	struct kern_mat *m = b->mats + e * 3;
	float *out = b->out + (size_t)wi->global * b->T * I;

	for (i0 = 0; i0 < b->T; i0 += mm) {
		bool many;

		mm = b->T - i0 < KERN_MAX_M ? b->T - i0 : KERN_MAX_M;
		many = b->v->gate_up_many && mm >= b->v->many_min_m;
		rs = many ? n1 - n0 : GU_ROWS;
		for (r0 = n0; r0 < n1; r0 = r1) {
			struct kern_gate_up_args a = {
				.gate = &m[0], .up = &m[1], .N = I,
				.K = b->l.hidden,
				.group = b->l.quant == KT_QUANT_INT4 ?
					 b->l.group : 0,
				.n0 = r0, .act = b->act, .act_stride = b->arow,
				.act_rows = b->rows + i0, .m = mm,
				.out_stride = I, .scratch = b->scratch[wi->global],
			};

			r1 = n1 - r0 < rs ? n1 : r0 + rs;
			a.n1 = r1;
			a.out = out + (r0 - n0);
			if (many)
				b->v->gate_up_many(&a);
			else
				b->v->gate_up(&a);
		}
	}
}

/*
 * Down of expert @e on columns [n0, n1), the next expert's tiles named for
 * the kernels' L2 prefetch, as the executor's down tasks do.
 */
static void down_one(struct bench *b, const struct core_worker_info *wi,
		     unsigned int e, unsigned int n0, unsigned int n1)
{
	unsigned int H = b->l.hidden, I = b->l.inter, i0, mm;
	size_t stride = (size_t)(I / b->l.kc) * b->crow;
	struct kern_mat *m = b->mats + e * 3;

	for (i0 = 0; i0 < b->T; i0 += mm) {
		struct kern_down_args a = {
			.down = &m[2], .N = H, .K = I, .kc = b->l.kc,
			.group = b->l.quant == KT_QUANT_INT4 ? b->l.group : 0,
			.n0 = n0, .n1 = n1,
			.k0 = 0, .k1 = I, .act = b->iact + i0 * stride,
			.act_stride = stride, .y_rows = b->rows + i0,
			.w = b->w + i0, .y = b->y, .y_stride = H,
			.scratch = b->scratch[wi->global],
			.next_down = e + 1 < b->n_exp ? &m[5] : NULL,
		};

		mm = b->T - i0 < KERN_MAX_M ? b->T - i0 : KERN_MAX_M;
		a.m = mm;
		if (b->v->down_many && mm >= b->v->many_min_m)
			b->v->down_many(&a);
		else
			b->v->down(&a);
	}
}

/* Like the executor: one fork-join for every expert's gate+up, one for
 * every expert's down; each worker owns a slice of rows / columns. */
static void job_gate_up(void *arg, const struct core_worker_info *wi)
{
	struct bench *b = arg;
	unsigned int e;

	for (e = 0; e < b->n_exp; e++)
		gate_up_one(b, wi, e);
}

/* down: the worker's columns in blocks of down_cols() (the executor's
 * down task: ktcore/moe.c plan()), every expert over each block before the
 * next; the blocks are the worker's share halved to at most 1024 */
static unsigned int down_cols(unsigned int share)
{
	unsigned int cols = share;

	while (cols > 1024 && cols % 32 == 0)
		cols /= 2;
	return cols;
}

static void job_down(void *arg, const struct core_worker_info *wi)
{
	struct bench *b = arg;
	unsigned int H = b->l.hidden, n0 = part(H, wi->global, b->nw);
	unsigned int n1 = part(H, wi->global + 1, b->nw), c, e;
	unsigned int cols = down_cols(n1 - n0);

	for (c = n0; c < n1; c += cols)
		for (e = 0; e < b->n_exp; e++)
			down_one(b, wi, e, c, n1 - c < cols ? n1 : c + cols);
}

static int run_exec(struct kt_ctx *ctx, void *arg)
{
	struct bench *b = arg;
	uint64_t t0 = core_now_ns();
	unsigned int r;

	for (r = 0; r < b->reps; r++) {
		if (b->only != 2)
			core_ctx_run(ctx, job_gate_up, b);
		if (b->only != 1)
			core_ctx_run(ctx, job_down, b);
	}
	b->t_ns = (double)(core_now_ns() - t0);
	return 0;
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

static int setup(struct bench *b, struct kt_ctx *ctx, enum kt_quant q,
		 unsigned int H, unsigned int I, size_t total_bytes)
{
	struct kern_geom g;
	unsigned int e, i, k, G;
	size_t nsc, chunks, sz, stride;
	float *x;

	if (kern_pack_layout(q, H, I, q == KT_QUANT_INT4 ? 128 : 0, &b->l))
		return -EINVAL;
	G = q == KT_QUANT_INT4 ? b->l.group : 0;
	b->n_exp = (unsigned int)(total_bytes / b->l.total);
	if (!b->n_exp)
		b->n_exp = 1;
	b->blob = calloc(b->n_exp, sizeof(*b->blob));
	b->mats = calloc(b->n_exp * 3, sizeof(*b->mats));
	for (e = 0; e < b->n_exp; e++) {
		/* 2 MiB pages, as the loader gives models */
		sz = (b->l.total + (2ul << 20) - 1) & ~((2ul << 20) - 1);
		b->blob[e] = aligned_alloc(2ul << 20, sz);
		if (!b->blob[e])
			return -ENOMEM;
		madvise(b->blob[e], sz, MADV_HUGEPAGE);
		fill(b->blob[e], b->l.total, e + 1);
		/* finite small scales; tiles are random bytes */
		for (k = 0; k < 3; k++) {
			float *sc = (float *)(b->blob[e] + b->l.scales_off[k]);

			nsc = b->l.scales_bytes[k] / 4;
			for (i = 0; i < nsc; i++)
				sc[i] = 1e-3f;
			kern_pack_mat(&b->l, (enum kern_mat_id)k, b->blob[e],
				      &b->mats[e * 3 + k]);
		}
		if (q == KT_QUANT_BF16)
			/* bf16 tiles: keep exponents sane (0x3c.. ~ 0.01) */
			for (i = 0; i < b->l.scales_off[0]; i += 2)
				b->blob[e][i + 1] = 0x3c;
	}
	b->arow = b->v->act_row_bytes(H, G);
	b->crow = b->v->act_row_bytes(b->l.kc, G);
	chunks = I / b->l.kc;
	b->act = aligned_alloc(64, b->arow * b->T);
	b->iact = aligned_alloc(64, b->crow * chunks * b->T);
	x = malloc(sizeof(float) * H * b->T);
	for (i = 0; i < H * b->T; i++)
		x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
	b->v->act_prepare(x, H * 4, KT_DTYPE_F32, b->T, H, G, b->act, b->arow);
	for (i = 0; i < b->T * chunks; i++)
		b->v->act_prepare(x, 0, KT_DTYPE_F32, 1, b->l.kc, G,
				  b->iact + i * b->crow, b->crow);
	free(x);
	b->rows = malloc(sizeof(uint32_t) * b->T);
	b->w = malloc(sizeof(float) * b->T);
	for (i = 0; i < b->T; i++) {
		b->rows[i] = i;
		b->w[i] = 0.5f;
	}
	b->y = calloc((size_t)b->T * H, sizeof(float));
	b->nw = kt_ctx_threads(ctx);
	b->out = calloc((size_t)b->nw * b->T * I, sizeof(float));
	b->scratch = calloc(b->nw, sizeof(void *));
	g = (struct kern_geom){ H, I, G, b->l.kc };
	/* apart, on their own pages, as the executor's (ktcore/moe.c,
	 * MOE_SCRATCH_GAP) */
	stride = ((b->v->scratch_bytes(&g, KERN_MAX_M) + 4095) & ~4095ul) +
		 SCRATCH_GAP;
	b->scratch_mem = aligned_alloc(4096, SCRATCH_GAP + b->nw * stride);
	for (i = 0; i < b->nw; i++)
		b->scratch[i] = b->scratch_mem + SCRATCH_GAP + i * stride;
	return 0;
}

int main(int argc, char **argv)
{
	enum kt_quant q = KT_QUANT_INT8;
	unsigned int H = 7168, I = 2048, T = 1, threads = 0;
	enum kt_isa isa = KT_ISA_AUTO;
	struct kt_ctx_opts o = { .sz = sizeof(o) };
	struct kt_ctx *ctx;
	struct bench b = { 0 };
	double gbps = 0, tops = 0, bytes, ops;
	size_t total = 384ull << 20;
	unsigned int reps = 0;	/* timed passes; 0: 3 or 4 */
	int opt;

	while ((opt = getopt(argc, argv, "q:T:H:I:t:i:m:o:r:")) != -1) {
		switch (opt) {
		case 'q':
			if (opt_quant(optarg, &q)) {
				fprintf(stderr, "simd-bench: -q %s: not a quantization kt_quant_name() knows\n",
					optarg);
				return 2;
			}
			break;
		case 'T': T = (unsigned int)atoi(optarg); break;
		case 'H': H = (unsigned int)atoi(optarg); break;
		case 'I': I = (unsigned int)atoi(optarg); break;
		case 't': threads = (unsigned int)atoi(optarg); break;
		case 'i':
			if (core_isa_parse(optarg, &isa))
				return 2;
			break;
		case 'm': total = (size_t)atol(optarg) << 20; break;
		case 'r': reps = (unsigned int)atoi(optarg); break;
		case 'o': b.only = !strcmp(optarg, "gate_up") ? 1 : 2; break;
		default:
			fprintf(stderr, "usage: simd-bench [-q int8|int4|bf16|fp8|q8_0|q4_k|...] "
				"[-T tokens] [-H hidden] [-I inter] "
				"[-t threads] [-i isa] [-m weight MiB] "
				"[-o gate_up|down] [-r passes]\n");
			return 2;
		}
	}
	o.threads = threads;
	o.isa = isa;
	if (kt_ctx_create(&o, &ctx)) {
		fprintf(stderr, "simd-bench: no context\n");
		return 1;
	}
	b.v = kern_quant_ops_get(kern_ops_get(kt_ctx_isa(ctx)), q);
	b.T = T;
	if (!b.v || setup(&b, ctx, q, H, I, T > 64 ? 1 : total)) {
		fprintf(stderr, "simd-bench: setup failed\n");
		return 1;
	}
	kt_ctx_measure_read_bw(ctx, 0, 0, &gbps);
	/* the GGUF types and MXFP4 run on the int8 or bf16 units, as kt
	 * bench counts them */
	kt_ctx_measure_peak(ctx, q == KT_QUANT_MXFP4 ? KT_QUANT_BF16 :
			    q == KT_QUANT_FP8 || q == KT_QUANT_BF16 ||
			    q == KT_QUANT_INT4 ? q : KT_QUANT_INT8, 0, &tops);
	/* warm up, then about 0.5-2 s of work */
	b.reps = 1;
	core_ctx_exec(ctx, run_exec, &b);
	b.reps = reps ? reps : T > 64 ? 3 : 4;
	core_ctx_exec(ctx, run_exec, &b);
	bytes = (double)b.l.total * b.n_exp * b.reps;
	ops = 2.0 * 3.0 * H * I * (double)T * b.n_exp * b.reps;
	if (b.only) {
		/* gate+up is 2/3 of the bytes and ops, down 1/3 */
		bytes *= b.only == 1 ? 2.0 / 3 : 1.0 / 3;
		ops *= b.only == 1 ? 2.0 / 3 : 1.0 / 3;
	}
	printf("isa %s quant %s H %u I %u T %u threads %u experts %u\n",
	       kt_isa_name(kt_ctx_isa(ctx)), kt_quant_name(q), H, I, T, b.nw,
	       b.n_exp);
	printf("time/expert %.1f us  weights %.2f GB/s (read bw %.2f GB/s, "
	       "%.2f)  compute %.3f TOPS (peak %.3f TOPS, %.2f)\n",
	       b.t_ns / 1e3 / b.n_exp / b.reps, bytes / b.t_ns, gbps,
	       bytes / b.t_ns / gbps, ops / b.t_ns / 1e3, tops,
	       ops / b.t_ns / 1e3 / tops);
	kt_ctx_destroy(ctx);
	return 0;
}
