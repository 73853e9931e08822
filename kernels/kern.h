/* SPDX-License-Identifier: MIT */
/*
 * kern.h - the kernel ops table: what one ISA variant (scalar, AVX2,
 * AVX-VNNI, AVX-512 and its BW / VNNI subsets, AMX) offers the MoE executor, per quantization.
 */
#ifndef KT_KERNELS_KERN_H
#define KT_KERNELS_KERN_H

#include <stddef.h>
#include <stdint.h>
#include <kt/kt.h>

/*
 * One packed matrix of one expert: tiles, then f32 scales (none for BF16;
 * for MXFP4 the E8M0 bytes, read through a uint8_t pointer).
 */
struct kern_mat {
	const uint8_t *tiles;
	const float *scales;
};

/*
 * Most tokens one gate_up/down call gets; the executor splits longer lists.
 * 512: at T = 4096 (256 tokens per expert on average) an expert past 256
 * would be two calls that each read its weights (INT8 T = 4096 6% slower).
 */
#define KERN_MAX_M	512

/* Slots of struct kern_ops.q, indexed by enum kt_quant. */
#define KERN_QUANT_SLOTS	10

/*
 * Geometry the kernels and their scratch depend on.
 * @hidden: H. @inter: I. @group: INT4 group along K (0 otherwise; the
 * layout's group where the executor fills it: FP8, Q8_0, MXFP4).
 * @kc: KC, the down chunk (Documentation/packed-layout.md).
 */
struct kern_geom {
	unsigned int hidden;
	unsigned int inter;
	unsigned int group;
	unsigned int kc;
};

/*
 * The gated activation of one expert's gate+up, where it is not plain
 * silu(g) * u: g and u get their bias (per output row n, NULL: none),
 * then enum kt_act with its constants (kern_glu_f32() defines it).
 */
struct kern_glu {
	enum kt_act act;
	float alpha, limit;		/* KT_ACT_SWIGLU_OAI */
	const float *gate_bias;		/* [N] or NULL */
	const float *up_bias;		/* [N] or NULL */
};

/*
 * Fused gate+up of one expert for m tokens and output rows [n0, n1):
 *   out[i][n - n0] = glu(n, gate[n] . x_i, up[n] . x_i)
 * with glu kern_glu_f32(@glu, ...) (silu(g) * u when @glu is NULL) and
 * x_i the prepared activation row at act + act_rows[i] * act_stride (one
 * row of K = H, made by act_prepare), in f32.
 */
struct kern_gate_up_args {
	const struct kern_mat *gate;	/* whole matrix, [N = I][K = H] */
	const struct kern_mat *up;
	unsigned int N;			/* I */
	unsigned int K;			/* H */
	unsigned int group;		/* INT4 group, else 0 */
	unsigned int n0, n1;		/* multiples of 16, n0 < n1 <= N */
	const uint8_t *act;
	size_t act_stride;		/* bytes */
	const uint32_t *act_rows;	/* m row indices */
	unsigned int m;			/* 1 .. KERN_MAX_M */
	float *out;			/* out + i * out_stride, i < m */
	size_t out_stride;		/* floats */
	void *scratch;			/* per worker, scratch_bytes() */
	const struct kern_glu *glu;	/* NULL: silu(g) * u */
};

/*
 * Down of one expert for m tokens, output columns [n0, n1) of y, over the
 * K range [k0, k1) of the intermediate (whole chunks of KC):
 *   y[y_rows[i]][n] += w[i] * sum_{k0 <= k < k1} a_i[k] * down[n][k]
 * Row i of the activation is at act + i * act_stride (contiguous rows): the
 * (k1 - k0) / KC prepared rows of K = KC of chunks k0/KC, k0/KC + 1, ...,
 * each act_row_bytes(KC) bytes, back to back. Per token, the sum over k is
 * formed in f32 and only then scaled by w[i] and added to y, once. The
 * y_rows of one call are distinct (the executor merges duplicate ids).
 *
 * For both calls, the value of one output element must not depend on the
 * block [n0, n1) it was computed in (the executor sizes blocks by the thread
 * count; m comes from routing only): y is then the same bits for any thread
 * count (Documentation/kernels.md).
 */
struct kern_down_args {
	const struct kern_mat *down;	/* whole matrix, [N = H][K = I] */
	unsigned int N;			/* H */
	unsigned int K;			/* I */
	unsigned int kc;		/* KC */
	unsigned int group;		/* INT4 group, else 0 */
	unsigned int n0, n1;		/* multiples of 16, n0 < n1 <= N */
	unsigned int k0, k1;		/* multiples of KC, k0 < k1 <= K */
	const uint8_t *act;
	size_t act_stride;		/* bytes */
	unsigned int m;			/* 1 .. KERN_MAX_M */
	const uint32_t *y_rows;		/* m row indices of y */
	const float *w;			/* m weights */
	float *y;
	size_t y_stride;		/* floats */
	void *scratch;			/* per worker, scratch_bytes() */
	/*
	 * Optional hint, may be NULL: the matrix of the executor's next down
	 * call (same n0, n1, k0, k1). A kernel may prefetch its tiles while
	 * it reuses its own from cache; it must not depend on it otherwise.
	 */
	const struct kern_mat *next_down;
};

/*
 * kern_down_pf() - where a down kernel prefetches @dist bytes after @t,
 *	@t inside one chunk's run of tiles (@t0, @len bytes: the call's rows
 *	of that chunk): still in the run, @t + @dist; past its end the same
 *	place of the next call's run (@a->next_down, the same rows), so that
 *	the next expert's first tiles arrive while this one ends, not lines
 *	of rows no call of this task reads. NULL past that run too, or
 *	without a next call: the caller picks what to fetch then.
 */
static inline __attribute__((always_inline)) const uint8_t *
kern_down_pf(const struct kern_down_args *a, const uint8_t *t0, size_t len,
	     const uint8_t *t, size_t dist)
{
	size_t o = (size_t)(t - t0) + dist;

	if (o < len)
		return t + dist;
	if (!a->next_down || o - len >= len)
		return NULL;
	return a->next_down->tiles + (t0 - a->down->tiles) + (o - len);
}

/*
 * What one quantization offers on one ISA. A NULL @gate_up means "not
 * implemented here". The activation format is private to the variant: only
 * its own kernels read what its act_prepare wrote.
 *
 * @act_row_bytes: bytes of one prepared row of K elements (a multiple of 64
 *	so that rows stay aligned when the buffer is).
 * @act_prepare: prepare @rows rows of K elements: row r read at
 *	src + r * src_stride (bytes) of @dtype (KT_DTYPE_F32 or _BF16), written
 *	at dst + r * dst_stride. INT8/INT4: symmetric int8 per row,
 *	q = rint(x * (127 / amax)) (nearest even, as cvtps2dq) with the f32
 *	scale amax / 127, amax = max|x| (0: all q and the scale 0), plus any
 *	sums the kernels need; BF16: bf16, nearest even.
 * @scratch_bytes: per-worker scratch of one gate_up/down call of at most
 *	@max_m tokens on geometry @g (may be 0).
 * @gate_up, @down: see struct kern_gate_up_args, struct kern_down_args.
 * @gate_up_many, @down_many: optional variants for calls of at least
 *	@many_min_m tokens (AMX tiles instead of vectors); NULL: use the
 *	plain ones for every m.
 */
struct kern_quant_ops {
	size_t (*act_row_bytes)(unsigned int K, unsigned int group);
	void (*act_prepare)(const void *src, size_t src_stride,
			    enum kt_dtype dtype, unsigned int rows,
			    unsigned int K, unsigned int group,
			    uint8_t *dst, size_t dst_stride);
	size_t (*scratch_bytes)(const struct kern_geom *g, unsigned int max_m);
	void (*gate_up)(const struct kern_gate_up_args *a);
	void (*down)(const struct kern_down_args *a);
	void (*gate_up_many)(const struct kern_gate_up_args *a);
	void (*down_many)(const struct kern_down_args *a);
	unsigned int many_min_m;
};

/*
 * struct kern_ops - one ISA variant.
 * @isa: the variant.
 * @name: as KT_ISA spells it.
 * @q: per quantization, indexed by enum kt_quant (slot 0 unused).
 */
struct kern_ops {
	enum kt_isa isa;
	const char *name;
	struct kern_quant_ops q[KERN_QUANT_SLOTS];
};

extern const struct kern_ops kern_ops_scalar;
extern const struct kern_ops kern_ops_avx2;
extern const struct kern_ops kern_ops_avxvnni;
extern const struct kern_ops kern_ops_avx512;
extern const struct kern_ops kern_ops_amx;
extern const struct kern_ops kern_ops_avx512bw;
extern const struct kern_ops kern_ops_avx512vnni;

/*
 * The ops of @isa, or NULL when that variant is not compiled in (or @isa
 * is not a variant). Does not check that the CPU runs it.
 */
const struct kern_ops *kern_ops_get(enum kt_isa isa);

/* The quantization's ops of @ops, or NULL when not implemented. */
static inline const struct kern_quant_ops *
kern_quant_ops_get(const struct kern_ops *ops, enum kt_quant q)
{
	if (!ops || (unsigned int)q >= KERN_QUANT_SLOTS || !ops->q[q].gate_up)
		return NULL;
	return &ops->q[q];
}

/*
 * The measurement loops of an ISA (kernels/simd.h has each one's contract):
 * a read loop returns a fold of what it read; a peak loop runs @iters
 * rounds and returns the multiply-adds done. Any @isa is accepted: the
 * scalar loops stand in for variants without their own.
 */
typedef uint64_t (*kern_read_fn)(const void *p, size_t bytes);
typedef uint64_t (*kern_peak_fn)(uint64_t iters, uint64_t *sink);
kern_read_fn kern_read_for(enum kt_isa isa);
kern_peak_fn kern_peak_for(enum kt_isa isa, enum kt_quant q);

/*
 * silu(g) = g / (1 + exp(-g)) with libm's expf: the oracle's definition.
 * Vector variants use their own exp whose relative error must stay within
 * KERN_EXP_MAX_REL_ERR on [-87, 88] (saturating to 0 / +inf outside), so
 * that silu never yields NaN for finite g (Documentation/kernels.md).
 */
#define KERN_EXP_MAX_REL_ERR	4e-7f
float kern_silu_f32(float g);

/*
 * The oracle's gated activation of output row @n (struct kern_glu; @e
 * NULL: silu(g) * u). KT_ACT_SWIGLU_OAI:
 *   g' = min(g, limit), u' = max(min(u, limit), -limit),
 *   g' / (1 + exp(-alpha * g')) * (u' + 1)
 * Vector variants compute the same with their own exp (vexp-*.h).
 */
float kern_glu_f32(const struct kern_glu *e, unsigned int n, float g,
		   float u);

#endif /* KT_KERNELS_KERN_H */
