/* SPDX-License-Identifier: MIT */
/*
 * simd.h - what the per-ISA files of kernels/ offer each other: the
 * measurement loops of limits.c and the micro-kernels the ops tables use.
 */
#ifndef KT_KERNELS_SIMD_H
#define KT_KERNELS_SIMD_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kern.h"
#include "kernels/layout.h"

/*
 * Read loops of kt_ctx_measure_read_bw(): read [p, p + bytes) once with
 * several concurrent streams of the widest loads; @bytes is a multiple of
 * 1 KiB. The return value folds what was read so the loads stay.
 */
uint64_t kern_read_scalar(const void *p, size_t bytes);
uint64_t kern_read_avx2(const void *p, size_t bytes);
uint64_t kern_read_avx512(const void *p, size_t bytes);	/* AVX512F only */

/*
 * Peak loops of kt_ctx_measure_peak(): @iters rounds of register-resident
 * multiply-adds on independent accumulators; return the multiply-adds done
 * (the caller counts 2 ops each). @sink keeps the results alive.
 */
uint64_t kern_peak_int8_scalar(uint64_t iters, uint64_t *sink);
uint64_t kern_peak_int8_avx2(uint64_t iters, uint64_t *sink);
uint64_t kern_peak_int8_avxvnni(uint64_t iters, uint64_t *sink);
uint64_t kern_peak_int8_avx512bw(uint64_t iters, uint64_t *sink);
uint64_t kern_peak_int8_avx512(uint64_t iters, uint64_t *sink);	/* VNNI */
uint64_t kern_peak_int8_amx(uint64_t iters, uint64_t *sink);
uint64_t kern_peak_bf16_scalar(uint64_t iters, uint64_t *sink);
uint64_t kern_peak_bf16_avx2(uint64_t iters, uint64_t *sink);
uint64_t kern_peak_bf16_avx512bw(uint64_t iters, uint64_t *sink);	/* FMA */
uint64_t kern_peak_bf16_avx512(uint64_t iters, uint64_t *sink);
uint64_t kern_peak_bf16_amx(uint64_t iters, uint64_t *sink);

/*
 * Bytes of one activation row of the SIMD variants (Documentation/simd.md):
 * INT8 / INT4 K int8, the f32 scale, one int32 sum of q over the row
 * (@group 0) or per group; BF16 K bf16. Padded to a cache line, so that
 * rows stay aligned when the buffer is.
 */
static inline size_t kern_act_row_bytes_q(unsigned int K, unsigned int group)
{
	size_t b = (size_t)K + 4 + 4 * (size_t)(group ? K / group : 1);

	return (b + 63) & ~(size_t)63;
}

static inline size_t kern_act_row_bytes_b16(unsigned int K)
{
	return ((size_t)K * 2 + 63) & ~(size_t)63;
}

/*
 * The per-ISA halves of the ops tables (kern.h), declared once so that the
 * AMX table can reuse the AVX-512 ones and the tests can call each.
 */
#define KERN_DECLARE_QUANT(quant, isa)					\
	size_t kern_act_row_bytes_##quant##_##isa(unsigned int K,	\
						  unsigned int group);	\
	void kern_act_prepare_##quant##_##isa(const void *src,		\
			size_t src_stride, enum kt_dtype dtype,		\
			unsigned int rows, unsigned int K,		\
			unsigned int group, uint8_t *dst,		\
			size_t dst_stride);				\
	void kern_gate_up_##quant##_##isa(				\
			const struct kern_gate_up_args *a);		\
	void kern_down_##quant##_##isa(const struct kern_down_args *a)

#define KERN_DECLARE_ISA(isa)						\
	KERN_DECLARE_QUANT(int8, isa);					\
	KERN_DECLARE_QUANT(int4, isa);					\
	KERN_DECLARE_QUANT(bf16, isa);					\
	size_t kern_scratch_bytes_##isa(const struct kern_geom *g,	\
					unsigned int max_m)

/* The ops table of a variant whose quantizations are all its own. */
#define KERN_QUANT_OPS(quant, isa)					\
	{								\
		.act_row_bytes = kern_act_row_bytes_##quant##_##isa,	\
		.act_prepare = kern_act_prepare_##quant##_##isa,	\
		.scratch_bytes = kern_scratch_bytes_##isa,		\
		.gate_up = kern_gate_up_##quant##_##isa,		\
		.down = kern_down_##quant##_##isa,			\
	}

/*
 * FP8 and MXFP4 on the variants without AVX-512 BF16, over the variant's
 * own bf16 activation rows (plain bf16, the same format in every
 * variant): built at 256 bits (@body avx2: AVX2, AVX-VNNI; FP8 by f32
 * FMA over the weights widened (fp8-vec.h), MXFP4 by int16 dots
 * (moe-mxfp4-avx2.c)) and at 512 (avx512bw: the AVX-512 variants without
 * BF16, both by f32 FMA: fp8-vec.h, mxfp4-vec.h).
 */
#define KERN_DECLARE_F32_BODY(quant, body)				\
	void kern_gate_up_##quant##_##body(				\
		const struct kern_gate_up_args *a);			\
	void kern_down_##quant##_##body(const struct kern_down_args *a);\
	size_t kern_scratch_bytes_##quant##_##body(			\
		const struct kern_geom *g, unsigned int max_m)

KERN_DECLARE_F32_BODY(fp8, avx2);
KERN_DECLARE_F32_BODY(fp8, avx512bw);
KERN_DECLARE_F32_BODY(mxfp4, avx2);
KERN_DECLARE_F32_BODY(mxfp4, avx512bw);

#define KERN_F32_BODY_OPS(quant, sfx, body)				\
	{								\
		.act_row_bytes = kern_act_row_bytes_bf16_##sfx,		\
		.act_prepare = kern_act_prepare_bf16_##sfx,		\
		.scratch_bytes = kern_scratch_bytes_##quant##_##body,	\
		.gate_up = kern_gate_up_##quant##_##body,		\
		.down = kern_down_##quant##_##body,			\
	}

/* @body: the FP8 and MXFP4 kernels' width (KERN_F32_BODY_OPS); ...: more
 * slots (designated initializers) of quantizations kept in their own
 * files, e.g. [KT_QUANT_Q8_0] = KERN_Q8_0_OPS(avx512) */
#define KERN_OPS(id, sfx, body, ...)					\
	{								\
		.isa = id,						\
		.name = #sfx,						\
		.q = {							\
			[KT_QUANT_INT8] = KERN_QUANT_OPS(int8, sfx),	\
			[KT_QUANT_INT4] = KERN_QUANT_OPS(int4, sfx),	\
			[KT_QUANT_BF16] = KERN_QUANT_OPS(bf16, sfx),	\
			[KT_QUANT_FP8] =				\
				KERN_F32_BODY_OPS(fp8, sfx, body),	\
			[KT_QUANT_MXFP4] =				\
				KERN_F32_BODY_OPS(mxfp4, sfx, body),	\
			__VA_ARGS__					\
		},							\
	}

KERN_DECLARE_ISA(avx2);
KERN_DECLARE_ISA(avxvnni);
KERN_DECLARE_ISA(avx512);
KERN_DECLARE_ISA(avx512bw);
KERN_DECLARE_ISA(avx512vnni);
KERN_DECLARE_ISA(amx);
KERN_DECLARE_ISA(avxvnni_evex);

/*
 * The vector exp and silu(g) * u of the variants, over arrays (@n a
 * multiple of 16): the AMX variant's post-processing and the tests.
 */
#define KERN_DECLARE_EXP(isa)						\
	void kern_exp_f32_##isa(float *out, const float *x,		\
				unsigned int n);			\
	void kern_silu_mul_f32_##isa(float *out, const float *g,	\
				     const float *u, unsigned int n)

KERN_DECLARE_EXP(avx512);
KERN_DECLARE_EXP(avx512bw);
KERN_DECLARE_EXP(avx512vnni);
KERN_DECLARE_EXP(avx2);
KERN_DECLARE_EXP(avxvnni);
KERN_DECLARE_EXP(avxvnni_evex);

/*
 * Tokens per expert from which the AMX variant runs its tile kernels
 * instead of the AVX-512 ones, per quantization: where the tiles were
 * measured to overtake AVX-512 (the table in Documentation/simd.md,
 * scripts/amx-cross.sh). INT8 switches where AVX-512 needs a second pass
 * of its 8-token register block, INT4 a little before, as its tiles
 * widen the nibbles a tile at a time in L1; BF16 early, as AVX-512 BF16
 * costs one vdpbf16ps per token and line; FP8 once 3 tokens share the
 * tiles it widens once per call, MXFP4 only from 10, as its AVX-512 body
 * dots int16 at half BF16's cost per token; the K-quants late, as
 * their tiles widen the row blocks first and fold a scale per super-block
 * into f32; Q8_0, which folds one per 32 k, from 8, where its tiles keep
 * the fold's vector work under AVX-512's.
 */
#define KERN_AMX_MIN_M_INT8	9
#define KERN_AMX_MIN_M_INT4	7
#define KERN_AMX_MIN_M_BF16	2
#define KERN_AMX_MIN_M_FP8	3
#define KERN_AMX_MIN_M_MXFP4	10
#define KERN_AMX_MIN_M_Q8_0	8
#define KERN_AMX_MIN_M_Q4_K	32
#define KERN_AMX_MIN_M_Q5_K	32
#define KERN_AMX_MIN_M_Q6_K	32

/* The AVX-VNNI body on EVEX encodings, for tests on AVX-512 CPUs. */
extern const struct kern_ops kern_ops_avxvnni_evex;

#endif /* KT_KERNELS_SIMD_H */
