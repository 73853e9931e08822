// SPDX-License-Identifier: MIT
/*
 * isa.c - every compiled SIMD variant the CPU runs against the scalar
 * oracle, on the same packed weights and f32 activations: gate+up (with
 * the plain SiLU epilogue, biases and GPT-OSS's clamped SwiGLU) and down
 * for each quantization, token counts on both sides of the "many tokens"
 * threshold, and sub-ranges of rows, columns and K chunks.
 */
#include <errno.h>
#include <xmmintrin.h>

#include "kt_test.h"
#include "isa-variants.h"
#include "kernels/fp.h"
#include "kernels/fp8.h"
#include "kernels/mxfp4.h"
#include "kernels/kern.h"
#include "kernels/pack.h"
#include "ktcore/core.h"
#include "util.h"

/* rel MAE against the oracle: only summation order and exp may differ */
#define ISA_TOL 2e-5

struct blob {
	struct kern_pack_layout l;
	uint8_t *p;
	struct kern_mat mat[3];
};

/* skip the test where the kernels @ops of @isa are not built or the CPU
 * cannot run them */
#define SKIP_UNLESS_RUNS(ops, isa)					\
	do {								\
		if (!(ops))						\
			SKIP(return, "%s kernels are not compiled in",	\
			     kt_isa_name(isa));				\
		if (!core_isa_runs(isa, core_cpu_flags()))		\
			SKIP(return, "this CPU cannot run %s",		\
			     kt_isa_name(isa));				\
	} while (0)

static int blob_make(struct blob *b, enum kt_quant q, unsigned int H,
		     unsigned int I, unsigned int group, uint64_t seed)
{
	struct tu_rng r = { seed };
	float *w[3];
	int id, ret;

	ret = kern_pack_layout(q, H, I, group, &b->l);
	if (ret)
		return ret;
	b->p = aligned_alloc(4096, (b->l.total + 4095) & ~(size_t)4095);
	for (id = 0; id < 3; id++) {
		w[id] = malloc((size_t)H * I * 4);
		tu_fill_weights(&r, w[id], id == 2 ? H : I, id == 2 ? I : H);
	}
	ret = kern_pack_expert(&b->l, w[0], w[1], w[2], KT_DTYPE_F32, b->p);
	for (id = 0; id < 3; id++) {
		free(w[id]);
		kern_pack_mat(&b->l, id, b->p, &b->mat[id]);
	}
	return ret;
}

static double rel_mae_f(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		num += fabs((double)a[i] - b[i]);
		den += fabs((double)b[i]);
	}
	return den > 0 ? num / den : num;
}

static void *scratch_for(const struct kern_quant_ops *qo,
			 const struct kern_pack_layout *l, unsigned int m)
{
	struct kern_geom g = { l->hidden, l->inter, l->group, l->kc };

	return aligned_alloc(64, (qo->scratch_bytes(&g, m) + 4096) &
			     ~(size_t)63);
}

/*
 * gate+up of @qo and of the oracle for m tokens (picked out of 2m) of
 * normal activations; with @unit of +-[1, 2) each, through @qo's plain
 * gate_up whatever m (the few-token body of a table with tile kernels).
 */
static double cmp_gate_up(struct kt_test_meta *_metadata,
			  const struct kern_quant_ops *qo,
			  const struct kern_quant_ops *ref,
			  const struct blob *b, enum kt_dtype xdt,
			  unsigned int m, unsigned int n0, unsigned int n1,
			  const struct kern_glu *glu, int unit)
{
	const struct kern_quant_ops *ops[2] = { qo, ref };
	unsigned int H = b->l.hidden, nr = n1 - n0, i, v;
	struct tu_rng r = { 3 + m };
	float *x = malloc((size_t)2 * m * H * 4), *out[2];
	uint16_t *xb = malloc((size_t)2 * m * H * 2);
	uint32_t *rows = malloc(m * 4);
	double e;

	if (!unit)
		tu_fill_normal(&r, x, (size_t)2 * m * H, 1.0);
	for (i = 0; unit && i < 2 * m * H; i++)
		x[i] = (float)((1.0 + tu_unif(&r)) *
			       (tu_unif(&r) < 0.5 ? -1 : 1));
	for (i = 0; i < 2 * m * H; i++)
		xb[i] = kern_f32_to_bf16(x[i]);
	for (i = 0; i < m; i++)
		rows[i] = (i * 7 + 3) % (2 * m);
	if ((2 * m) % 7 == 0)
		for (i = 0; i < m; i++)
			rows[i] = 2 * i;
	for (v = 0; v < 2; v++) {
		size_t rb = ops[v]->act_row_bytes(H, b->l.group);
		uint8_t *act = aligned_alloc(64, rb * 2 * m);
		void *scratch = scratch_for(ops[v], &b->l, m);
		struct kern_gate_up_args a = {
			.gate = &b->mat[0], .up = &b->mat[1], .N = b->l.inter,
			.K = H, .group = b->l.group, .n0 = n0, .n1 = n1,
			.act = act, .act_stride = rb, .act_rows = rows, .m = m,
			.scratch = scratch, .glu = glu,
		};

		ASSERT_EQ(rb % 64, 0);
		out[v] = malloc((size_t)m * nr * 4);
		a.out = out[v];
		a.out_stride = nr;
		if (xdt == KT_DTYPE_BF16)
			ops[v]->act_prepare(xb, (size_t)H * 2, xdt, 2 * m, H,
					    b->l.group, act, rb);
		else
			ops[v]->act_prepare(x, (size_t)H * 4, xdt, 2 * m, H,
					    b->l.group, act, rb);
		if (v == 0 && !unit && ops[v]->gate_up_many &&
		    m >= ops[v]->many_min_m)
			ops[v]->gate_up_many(&a);
		else
			ops[v]->gate_up(&a);
		free(act);
		free(scratch);
	}
	e = rel_mae_f(out[0], out[1], (size_t)m * nr);
	free(out[0]);
	free(out[1]);
	free(x);
	free(xb);
	free(rows);
	return e;
}

/* down of @qo and of the oracle: m tokens into distinct rows of y. */
static double cmp_down(struct kt_test_meta *_metadata,
		       const struct kern_quant_ops *qo,
		       const struct kern_quant_ops *ref, const struct blob *b,
		       unsigned int m, unsigned int n0, unsigned int n1,
		       unsigned int k0, unsigned int k1)
{
	const struct kern_quant_ops *ops[2] = { qo, ref };
	unsigned int H = b->l.hidden, I = b->l.inter, kc = b->l.kc;
	unsigned int nch = (k1 - k0) / kc, i, c, v;
	struct tu_rng r = { 11 + m };
	float *av = malloc((size_t)m * I * 4), *y[2], *w = malloc(m * 4);
	uint32_t *yrows = malloc(m * 4);
	double e;

	tu_fill_normal(&r, av, (size_t)m * I, 0.05);
	for (i = 0; i < m; i++) {
		w[i] = (float)(0.1 + tu_unif(&r));
		yrows[i] = m - 1 - i;
	}
	for (v = 0; v < 2; v++) {
		size_t crb = ops[v]->act_row_bytes(kc, b->l.group);
		size_t rb = crb * nch;
		uint8_t *act = aligned_alloc(64, rb * m);
		void *scratch = scratch_for(ops[v], &b->l, m);
		struct tu_rng ry = { 5 };
		struct kern_down_args a = {
			.down = &b->mat[2], .N = H, .K = I, .kc = kc,
			.group = b->l.group, .n0 = n0, .n1 = n1, .k0 = k0,
			.k1 = k1, .act = act, .act_stride = rb, .m = m,
			.y_rows = yrows, .w = w, .y_stride = H,
			.scratch = scratch,
		};

		for (i = 0; i < m; i++)
			for (c = 0; c < nch; c++)
				ops[v]->act_prepare(av + (size_t)i * I + k0 +
						    c * kc, 0, KT_DTYPE_F32, 1,
						    kc, b->l.group,
						    act + i * rb + c * crb, crb);
		y[v] = malloc((size_t)m * H * 4);
		tu_fill_normal(&ry, y[v], (size_t)m * H, 0.1);
		a.y = y[v];
		if (v == 0 && ops[v]->down_many && m >= ops[v]->many_min_m)
			ops[v]->down_many(&a);
		else
			ops[v]->down(&a);
		free(act);
		free(scratch);
	}
	e = rel_mae_f(y[0], y[1], (size_t)m * H);
	/* columns outside [n0, n1) untouched by both: equal bits */
	for (i = 0; i < m; i++)
		for (c = 0; c < H; c++)
			if (c < n0 || c >= n1)
				ASSERT_EQ(y[0][(size_t)i * H + c],
					  y[1][(size_t)i * H + c]);
	free(y[0]);
	free(y[1]);
	free(av);
	free(w);
	free(yrows);
	return e;
}

static void check_isa(struct kt_test_meta *_metadata, enum kt_isa isa)
{
	static const enum kt_quant qs[] = { KT_QUANT_INT8, KT_QUANT_INT4,
					    KT_QUANT_BF16, KT_QUANT_FP8,
					    KT_QUANT_Q8_0, KT_QUANT_Q4_K,
					    KT_QUANT_Q5_K, KT_QUANT_Q6_K,
					    KT_QUANT_MXFP4 };
	/* remainders 1 to 5 after blocks of 4, 6 and 8 tokens; the GGUF
	 * bodies' even blocks (rows-vec.h) of every size 1 to 6; 13: the FP8
	 * panels' passes of 5, 5 and 3 */
	static const unsigned int ms[] = { 1, 2, 3, 11, 13, 14, 16, 37,
					   KERN_MAX_M };
	const struct kern_ops *ops = kern_ops_get(isa);
	const struct kern_ops *scalar = kern_ops_get(KT_ISA_SCALAR);
	unsigned int qi, mi, tested = 0, i;
	float gb[768], ub[768];
	struct tu_rng rb = { 77 };
	/* GPT-OSS's activation with both biases (a low limit, so that the
	 * clamps bite), and silu(g) * u with an up bias only */
	const struct kern_glu oai = {
		.act = KT_ACT_SWIGLU_OAI, .alpha = KT_SWIGLU_OAI_ALPHA,
		.limit = 0.5f, .gate_bias = gb, .up_bias = ub,
	};
	const struct kern_glu silu_b = { .act = KT_ACT_SILU, .up_bias = ub };

	SKIP_UNLESS_RUNS(ops, isa);
	for (i = 0; i < 768; i++) {
		gb[i] = (float)(0.5 * tu_normal(&rb));
		ub[i] = (float)(0.5 * tu_normal(&rb));
	}
	for (qi = 0; qi < sizeof(qs) / sizeof(qs[0]); qi++) {
		const struct kern_quant_ops *qo = kern_quant_ops_get(ops, qs[qi]);
		const struct kern_quant_ops *ref =
			kern_quant_ops_get(scalar, qs[qi]);
		struct blob b, b2;
		double worst = 0, e;

		if (!qo) {
			TH_LOG("%s: no %s kernels (falls back)", ops->name,
			       kt_quant_name(qs[qi]));
			continue;
		}
		tested++;
		/* H = 384, I = 768: six chunks of KC */
		/* K-quants: multiples of 256 (H = 512; I = 512 below) */
		ASSERT_EQ(blob_make(&b, qs[qi], kern_quant_is_k(qs[qi]) ?
				    512 : 384, 768, 0, 21), 0);
		/* H = 256, I = 384: three chunks; INT4 with group 32, FP8
		 * with per-row scales */
		ASSERT_EQ(blob_make(&b2, qs[qi], 256,
				    kern_quant_is_k(qs[qi]) ? 512 : 384,
				    qs[qi] == KT_QUANT_INT4 ? 32 :
				    qs[qi] == KT_QUANT_FP8 ? KT_GROUP_CHANNEL :
				    0, 22), 0);
		for (mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
			unsigned int m = ms[mi];

			e = cmp_gate_up(_metadata, qo, ref, &b, KT_DTYPE_F32,
					m, 0, 768, NULL, 0);
			worst = fmax(worst, e);
			e = cmp_gate_up(_metadata, qo, ref, &b2, KT_DTYPE_BF16,
					m, 48, 176, NULL, 0);
			worst = fmax(worst, e);
			e = cmp_gate_up(_metadata, qo, ref, &b2, KT_DTYPE_BF16,
					m, 16, 384, &oai, 0);
			worst = fmax(worst, e);
			e = cmp_gate_up(_metadata, qo, ref, &b, KT_DTYPE_F32,
					m, 256, 512, &silu_b, 0);
			worst = fmax(worst, e);
			e = cmp_down(_metadata, qo, ref, &b, m, 0, 384, 0, 768);
			worst = fmax(worst, e);
			e = cmp_down(_metadata, qo, ref, &b, m, 128, 256, 256,
				     512);
			worst = fmax(worst, e);
			e = cmp_down(_metadata, qo, ref, &b2, m, 16, 48, 128,
				     384);
			worst = fmax(worst, e);
		}
		TH_LOG("%s %s vs scalar: worst rel MAE %.2e (bound %.0e)",
		       ops->name, kt_quant_name(qs[qi]), worst, ISA_TOL);
		EXPECT_LE(worst, ISA_TOL);
		free(b.p);
		free(b2.p);
	}
	if (!tested)
		SKIP(return, "%s implements no quantization yet", ops->name);
}

FIXTURE(isa) {
	int unused;
};

FIXTURE_VARIANT(isa) {
	enum kt_isa isa;
};

KT_SIMD_VARIANTS(isa);

FIXTURE_SETUP(isa)
{
}

FIXTURE_TEARDOWN(isa)
{
}

TEST_F(isa, vs_scalar)
{
	check_isa(_metadata, variant->isa);
}

/*
 * gate+up and down of @m tokens in one call of @qo, bitwise against the
 * same tokens in calls of at most @split: kernels that take a call of many
 * tokens another way than a few (FP8 on AVX-512 widens each block once for
 * more than 8; the GGUF bodies' down keeps sums in registers for more than
 * one token block) must give the same result either way.
 */
static void split_same_bits(struct kt_test_meta *_metadata,
			    const struct kern_quant_ops *qo,
			    const struct blob *b, unsigned int m,
			    unsigned int split)
{
	unsigned int H = b->l.hidden, I = b->l.inter, kc = b->l.kc;
	size_t rb = qo->act_row_bytes(H, b->l.group);
	size_t crb = qo->act_row_bytes(kc, b->l.group), drb = crb * (I / kc);
	struct tu_rng r = { 40 + m };
	float *x = malloc((size_t)m * H * 4), *av = malloc((size_t)m * I * 4);
	float *out[2], *y[2], *w = malloc(m * 4);
	uint8_t *act = aligned_alloc(64, rb * m);
	uint8_t *dact = aligned_alloc(64, drb * m);
	void *scratch = scratch_for(qo, &b->l, m);
	uint32_t *rows = malloc(m * 4);
	unsigned int i, c, v, i0, n;

	tu_fill_normal(&r, x, (size_t)m * H, 1.0);
	tu_fill_normal(&r, av, (size_t)m * I, 0.05);
	for (i = 0; i < m; i++) {
		rows[i] = i;
		w[i] = (float)(0.1 + tu_unif(&r));
	}
	qo->act_prepare(x, (size_t)H * 4, KT_DTYPE_F32, m, H, b->l.group, act,
			rb);
	for (i = 0; i < m; i++)
		for (c = 0; c < I / kc; c++)
			qo->act_prepare(av + (size_t)i * I + c * kc, 0,
					KT_DTYPE_F32, 1, kc, b->l.group,
					dact + i * drb + c * crb, crb);
	for (v = 0; v < 2; v++) {
		out[v] = calloc((size_t)m * I, 4);
		y[v] = calloc((size_t)m * H, 4);
		for (i0 = 0; i0 < m; i0 += n) {
			n = v == 0 ? m : (m - i0 < split ? m - i0 : split);
			struct kern_gate_up_args g = {
				.gate = &b->mat[0], .up = &b->mat[1], .N = I,
				.K = H, .group = b->l.group, .n0 = 0, .n1 = I,
				.act = act, .act_stride = rb,
				.act_rows = rows + i0, .m = n,
				.out = out[v] + (size_t)i0 * I, .out_stride = I,
				.scratch = scratch,
			};
			/* all rows but the last block: an odd count of
			 * row blocks, for kernels that pair them */
			struct kern_down_args d = {
				.down = &b->mat[2], .N = H, .K = I, .kc = kc,
				.group = b->l.group, .n0 = 0,
				.n1 = H - KERN_TILE_ROWS,
				.k0 = 0, .k1 = I, .act = dact + i0 * drb,
				.act_stride = drb, .m = n, .y_rows = rows + i0,
				.w = w + i0, .y = y[v], .y_stride = H,
				.scratch = scratch,
			};

			qo->gate_up(&g);
			qo->down(&d);
		}
	}
	EXPECT_EQ(memcmp(out[0], out[1], (size_t)m * I * 4), 0);
	EXPECT_EQ(memcmp(y[0], y[1], (size_t)m * H * 4), 0);
	for (v = 0; v < 2; v++) {
		free(out[v]);
		free(y[v]);
	}
	free(x);
	free(av);
	free(w);
	free(act);
	free(dact);
	free(scratch);
	free(rows);
}

TEST(fp8_avx512_one_call_same_bits_as_eight_token_calls)
{
	static const unsigned int ms[] = { 9, 37, 70, KERN_MAX_M };
	const struct kern_ops *ops = kern_ops_get(KT_ISA_AVX512);
	struct blob b, bc;
	unsigned int i;

	if (!ops || !core_isa_runs(KT_ISA_AVX512, core_cpu_flags()))
		SKIP(return, "this CPU cannot run avx512");
	/* H = 1152: down's rows span three passes of 512 */
	ASSERT_EQ(blob_make(&b, KT_QUANT_FP8, 1152, 384, 0, 31), 0);
	ASSERT_EQ(blob_make(&bc, KT_QUANT_FP8, 256, 384, KT_GROUP_CHANNEL,
			    32), 0);
	for (i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
		split_same_bits(_metadata,
				kern_quant_ops_get(ops, KT_QUANT_FP8), &b,
				ms[i], 8);
		split_same_bits(_metadata,
				kern_quant_ops_get(ops, KT_QUANT_FP8), &bc,
				ms[i], 8);
	}
	free(b.p);
	free(bc.p);
}

/*
 * MXFP4 on the int16 variants (kern_mxfp4_int16()) dots the weights with
 * the activations as int16 per group of 32: a group whose elements lie
 * within 2^7 of its largest (here all in [1, 2)) is exact, so only the
 * f32 sums over groups differ from the oracle; and a group's dot is an
 * exact int32 whatever the chains or passes, so a token's result is the
 * same bits in a call of any size (one call against calls of one token).
 */
TEST(mxfp4_int16_exact_and_same_bits_for_any_m)
{
	static const unsigned int ms[] = { 1, 2, 3, 4, 7, 13, 37 };
	const struct kern_quant_ops *ref =
		kern_quant_ops_get(kern_ops_get(KT_ISA_SCALAR), KT_QUANT_MXFP4);
	unsigned int i, ran = 0;
	struct blob b;
	int v;

	/* H = 1280: down's rows are a run of 1024 and one of 256 */
	ASSERT_EQ(blob_make(&b, KT_QUANT_MXFP4, 1280, 512, 0, 24), 0);
	for (v = KT_ISA_SCALAR; v < KT_ISA_COUNT; v++) {
		const struct kern_ops *ops = kern_ops_get(v);
		const struct kern_quant_ops *qo;

		if (!kern_mxfp4_int16(v) || !ops ||
		    !core_isa_runs(v, core_cpu_flags()))
			continue;
		qo = kern_quant_ops_get(ops, KT_QUANT_MXFP4);
		for (i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
			double e = cmp_gate_up(_metadata, qo, ref, &b,
					       KT_DTYPE_F32, ms[i], 0,
					       b.l.inter, NULL, 1);

			TH_LOG("%s m %u: rel MAE %.2e against the oracle",
			       ops->name, ms[i], e);
			EXPECT_LE(e, 1e-6);
			split_same_bits(_metadata, qo, &b, ms[i], 1);
		}
		ran++;
	}
	free(b.p);
	if (!ran)
		SKIP(return, "this CPU runs no int16 MXFP4 variant");
}

/*
 * One call of m tokens bitwise against the same tokens in calls of at most
 * @split, on each variant: a token's result may not depend on how many
 * others share its call. The splits are small enough that down goes chunk
 * by chunk through scratch, where the GGUF bodies' one call keeps its sums
 * in registers. Integer dots take any split; BF16's f32 sums are one chain
 * per token in k order whatever the block. H = 1280: down's rows are a
 * run of 1024 and one of 256, an odd number of row blocks per run (the
 * 512-bit bodies take two at once); 7 to 37 leave remainders of 1, 2
 * and 4 after blocks of 4 and 6 tokens (the GGUF bodies: blocks of 3 to
 * 6, as even as they come). Down's prefill takes up to 48
 * tokens row pair by row pair and more block by block (rows-vec.h): 53
 * takes the second order.
 */
TEST_F(isa, one_call_same_bits_as_split_calls)
{
	static const unsigned int ms[] = { 7, 11, 13, 14, 37, 53, 0 };
	static const struct {
		enum kt_quant q;
		unsigned int group;
	} qs[] = {
		{ KT_QUANT_INT8, 0 }, { KT_QUANT_INT4, 32 },
		{ KT_QUANT_BF16, 0 }, { KT_QUANT_Q8_0, 0 },
		{ KT_QUANT_Q4_K, 0 }, { KT_QUANT_Q5_K, 0 },
		{ KT_QUANT_Q6_K, 0 },
	};
	const struct kern_ops *ops = kern_ops_get(variant->isa);
	unsigned int qi;
	const unsigned int *m;

	SKIP_UNLESS_RUNS(ops, variant->isa);
	for (qi = 0; qi < sizeof(qs) / sizeof(qs[0]); qi++) {
		const struct kern_quant_ops *qo = kern_quant_ops_get(ops,
								     qs[qi].q);
		struct blob b;

		if (!qo)
			continue;
		ASSERT_EQ(blob_make(&b, qs[qi].q, 1280, 512, qs[qi].group,
				    23), 0);
		for (m = ms; *m; m++)
			split_same_bits(_metadata, qo, &b, *m, 2);
		free(b.p);
	}
}

/*
 * The GGUF types' prepared activation rows (one format for every variant:
 * int8 q, scales, sums) of each variant, byte for byte those of the scalar
 * definitions, from f32 and bf16, for rows of K = H (blocks of 256) and of
 * one down chunk (K = 128): normal values, a zero row, a row of exact
 * halves (x * 127 / amax = n + 0.5, where rounding to even shows) and one
 * where amax is negative.
 */
TEST_F(isa, gguf_act_prepare_same_bytes_as_scalar)
{
	static const enum kt_quant qs[] = { KT_QUANT_Q8_0, KT_QUANT_Q4_K,
					    KT_QUANT_Q5_K, KT_QUANT_Q6_K };
	static const unsigned int Ks[] = { 2048, 128 };
	enum { ROWS = 5 };
	const struct kern_ops *ops = kern_ops_get(variant->isa);
	const struct kern_ops *scalar = kern_ops_get(KT_ISA_SCALAR);
	unsigned int qi, ki, i, dt, tested = 0;

	SKIP_UNLESS_RUNS(ops, variant->isa);
	for (ki = 0; ki < sizeof(Ks) / sizeof(Ks[0]); ki++) {
		unsigned int K = Ks[ki];
		struct tu_rng r = { 90 + K };
		float *x = malloc((size_t)ROWS * K * 4);
		uint16_t *xb = malloc((size_t)ROWS * K * 2);

		tu_fill_normal(&r, x, (size_t)2 * K, 1.0);
		memset(x + 2 * K, 0, (size_t)K * 4);
		for (i = 0; i < K; i++) {
			/* amax 127: x / 1 = n + 0.5 for n in -64..63 */
			x[3 * K + i] = (float)((int)(i % 128) - 64) + 0.5f;
			x[4 * K + i] = (float)(0.01 * tu_normal(&r));
		}
		x[3 * K] = 127.0f;
		x[4 * K + 7] = -3.0f;
		for (i = 0; i < ROWS * K; i++)
			xb[i] = kern_f32_to_bf16(x[i]);
		for (qi = 0; qi < sizeof(qs) / sizeof(qs[0]); qi++) {
			const struct kern_quant_ops *qo =
				kern_quant_ops_get(ops, qs[qi]);
			const struct kern_quant_ops *ref =
				kern_quant_ops_get(scalar, qs[qi]);
			size_t rb;
			uint8_t *p[2];

			if (!qo || qo == ref)
				continue;
			tested++;
			rb = ref->act_row_bytes(K, 0);
			ASSERT_EQ(qo->act_row_bytes(K, 0), rb);
			for (dt = 0; dt < 2; dt++) {
				const void *src = dt ? (const void *)xb : x;
				size_t stride = (size_t)K * (dt ? 2 : 4);
				enum kt_dtype t = dt ? KT_DTYPE_BF16 :
						       KT_DTYPE_F32;

				p[0] = calloc(ROWS, rb);
				p[1] = calloc(ROWS, rb);
				qo->act_prepare(src, stride, t, ROWS, K, 0,
						p[0], rb);
				ref->act_prepare(src, stride, t, ROWS, K, 0,
						 p[1], rb);
				for (i = 0; i < ROWS; i++) {
					int diff = memcmp(p[0] + i * rb,
							  p[1] + i * rb, rb);

					if (diff)
						TH_LOG("%s K %u row %u (%s)",
						       kt_quant_name(qs[qi]), K,
						       i, dt ? "bf16" : "f32");
					EXPECT_EQ(diff, 0);
				}
				free(p[0]);
				free(p[1]);
			}
		}
		free(x);
		free(xb);
	}
	if (!tested)
		SKIP(return, "%s has no GGUF kernels of its own", ops->name);
}

/*
 * Every E4M3 code widened by each variant that runs here: a down matrix
 * (H 256, I 128, a scale of 1 per row) holding code (n + 3k) % 256 at row
 * n, column k, so that each column has all 256; token i's activation is
 * one-hot at column i, so y's row of token i is column i exactly (one
 * product of 1.0). m = 8 takes the register path, m = 128 the widened one
 * (AMX: its tiles). The NaN codes read as +-480 (fp8-zmm.h, fp8-vec.h).
 * Each call runs once more with DAZ and FTZ set, as a caller may have
 * them: the subnormal codes still read exactly, and the caller's MXCSR
 * is as it was.
 */
#define DAZ_FTZ		0x8040u	/* MXCSR's flush-to-zero and denormals-are-zero */

TEST(fp8_every_code_exact)
{
	static const enum kt_isa isas[] = { KT_ISA_AVX2, KT_ISA_AVX512BW,
					    KT_ISA_AVX512, KT_ISA_AMX };
	const unsigned int H = 256, I = 128;
	struct kern_pack_layout l;
	struct kern_mat mat;
	uint8_t *blob, *q = malloc((size_t)H * I);
	float *ones = malloc(H * 4), *x = calloc((size_t)I * I, 4);
	float *y = malloc((size_t)I * H * 4), w[128];
	uint32_t rows[128];
	unsigned int v, n, k, i, ran = 0, csr0 = _mm_getcsr(), passes;

	/* valgrind keeps only MXCSR's rounding mode */
	_mm_setcsr(csr0 | DAZ_FTZ);
	passes = (_mm_getcsr() & DAZ_FTZ) == DAZ_FTZ ? 4 : 2;
	_mm_setcsr(csr0);
	if (passes < 4)
		TH_LOG("MXCSR does not keep DAZ here: no DAZ passes");
	ASSERT_EQ(kern_pack_layout(KT_QUANT_FP8, H, I, KT_GROUP_CHANNEL, &l),
		  0);
	blob = aligned_alloc(4096, (l.total + 4095) & ~(size_t)4095);
	memset(blob, 0, l.total);
	for (n = 0; n < H; n++) {
		ones[n] = 1.0f;
		for (k = 0; k < I; k++)
			q[(size_t)n * I + k] = (uint8_t)((n + 3 * k) % 256);
	}
	kern_pack_fp8_raw(&l, KERN_MAT_DOWN, q, I, ones, blob);
	kern_pack_mat(&l, KERN_MAT_DOWN, blob, &mat);
	for (i = 0; i < I; i++) {
		x[(size_t)i * I + i] = 1.0f;
		w[i] = 1.0f;
		rows[i] = i;
	}
	for (v = 0; v < sizeof(isas) / sizeof(isas[0]); v++) {
		const struct kern_ops *ops = kern_ops_get(isas[v]);
		const struct kern_quant_ops *qo;
		unsigned int pass, i0;

		if (!ops || !core_isa_runs(isas[v], core_cpu_flags()))
			continue;
		qo = kern_quant_ops_get(ops, KT_QUANT_FP8);
		for (pass = 0; pass < passes; pass++) {
			const unsigned int m = pass & 1 ? I : 8;
			const bool daz = pass >= 2;
			size_t rb = qo->act_row_bytes(I, l.group);
			uint8_t *act = aligned_alloc(64, rb * I);
			void *scratch = scratch_for(qo, &l, m);

			qo->act_prepare(x, I * 4, KT_DTYPE_F32, I, I, l.group,
					act, rb);
			memset(y, 0, (size_t)I * H * 4);
			for (i0 = 0; i0 < I; i0 += m) {
				struct kern_down_args a = {
					.down = &mat, .N = H, .K = I,
					.kc = l.kc, .group = l.group, .n0 = 0,
					.n1 = H, .k0 = 0, .k1 = I,
					.act = act + i0 * rb, .act_stride = rb,
					.m = m, .y_rows = rows + i0,
					.w = w + i0, .y = y, .y_stride = H,
					.scratch = scratch,
				};

				unsigned int csr = _mm_getcsr();

				if (daz)
					_mm_setcsr(csr | DAZ_FTZ);
				if (qo->down_many && m >= qo->many_min_m)
					qo->down_many(&a);
				else
					qo->down(&a);
				/* the controls; the status flags are sticky */
				ASSERT_EQ(_mm_getcsr() & ~0x3fu,
					  (daz ? csr | DAZ_FTZ : csr) & ~0x3fu);
				_mm_setcsr(csr);
			}
			for (i = 0; i < I; i++)
				for (n = 0; n < H; n++) {
					uint8_t c = q[(size_t)n * I + i];
					/* the NaN codes read as +-480 */
					float e = (c & 0x7f) == 0x7f ?
						(c & 0x80 ? -480.0f : 480.0f) :
						kern_fp8_to_f32(c);

					if (y[(size_t)i * H + n] != e) {
						TH_LOG("%s m %u%s: code %#x gives %g, not %g",
						       kt_isa_name(isas[v]), m,
						       daz ? " (DAZ)" : "", c,
						       y[(size_t)i * H + n], e);
						ASSERT_TRUE(false);
					}
				}
			free(act);
			free(scratch);
			ran++;
		}
	}
	free(blob);
	free(q);
	free(ones);
	free(x);
	free(y);
	if (!ran)
		SKIP(return, "this CPU runs none of these FP8 kernels");
}

/*
 * The avx2 FP8 body widens a pass's weights to f32 bits where FMAs take
 * subnormals at full speed, else through F16C; both give the same bits:
 * block and per-row scales, one token to two panels' worth.
 */
TEST(fp8_avx2_widening_routes_same_bits)
{
	static const unsigned int ms[] = { 1, 2, 3, 4, 5, 6, 7, 9, 13, 25 };
	const struct kern_quant_ops *qo;
	struct kern_quant_ops f16;
	struct blob b, b2;
	unsigned int mi;

	if (!core_isa_runs(KT_ISA_AVX2, core_cpu_flags()))
		SKIP(return, "this CPU cannot run avx2");
	qo = kern_quant_ops_get(kern_ops_get(KT_ISA_AVX2), KT_QUANT_FP8);
	f16 = *qo;
	f16.gate_up = kern_gate_up_fp8_f16_avx2;
	f16.down = kern_down_fp8_f16_avx2;
	f16.scratch_bytes = kern_scratch_bytes_fp8_f16_avx2;
	ASSERT_EQ(blob_make(&b, KT_QUANT_FP8, 384, 768, 0, 21), 0);
	ASSERT_EQ(blob_make(&b2, KT_QUANT_FP8, 256, 384, KT_GROUP_CHANNEL,
			    22), 0);
	for (mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
		unsigned int m = ms[mi];

		ASSERT_LE(cmp_gate_up(_metadata, qo, &f16, &b, KT_DTYPE_F32,
				      m, 0, 768, NULL, 0), 0.0);
		ASSERT_LE(cmp_gate_up(_metadata, qo, &f16, &b2,
				      KT_DTYPE_BF16, m, 16, 384, NULL, 0),
			  0.0);
		ASSERT_LE(cmp_down(_metadata, qo, &f16, &b, m, 0, 384, 0,
				   768), 0.0);
		ASSERT_LE(cmp_down(_metadata, qo, &f16, &b2, m, 16, 48, 128,
				   384), 0.0);
	}
	TH_LOG("passes through %s", kern_fma_subnormals_free() ?
	       "f32 bits against F16C" :
	       "F16C in both (this CPU's FMAs are slow on subnormals)");
	free(b.p);
	free(b2.p);
}

/* The scalar table checked by the same code: the harness itself works. */
TEST(scalar_self)
{
	const struct kern_quant_ops *q =
		kern_quant_ops_get(kern_ops_get(KT_ISA_SCALAR), KT_QUANT_INT8);
	struct blob b;

	ASSERT_EQ(blob_make(&b, KT_QUANT_INT8, 256, 384, 0, 5), 0);
	ASSERT_LE(cmp_gate_up(_metadata, q, q, &b, KT_DTYPE_F32, 3, 0, 384,
			      NULL, 0), 0.0);
	ASSERT_LE(cmp_down(_metadata, q, q, &b, 3, 0, 256, 0, 384), 0.0);
	free(b.p);
}

TEST_HARNESS_MAIN
