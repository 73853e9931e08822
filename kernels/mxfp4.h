/* SPDX-License-Identifier: MIT */
/*
 * mxfp4.h - OCP MXFP4 in plain C: E2M1 codes and E8M0 scales to f32, the
 * two block byte orders files use, and the MXFP4 entry points the kernel
 * files share. Loaders may include it (kernels/ has no other dependency).
 */
#ifndef KT_KERNELS_MXFP4_H
#define KT_KERNELS_MXFP4_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/kern.h"
#include "kernels/pack.h"

/* Weights per E8M0 scale, along K. */
#define KERN_MXFP4_GROUP	32
/* The E8M0 encoding of NaN; refused by the packer (-EINVAL). */
#define KERN_E8M0_NAN		255
/* Largest E2M1 magnitude. */
#define KERN_E2M1_MAX		6.0f

/*
 * E2M1: sign (bit 3), two exponent bits with bias 1, one mantissa bit;
 * codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 and 8..15 their negatives.
 * Every value is exact in bf16 and f32.
 */
static inline float kern_e2m1_to_f32(uint8_t code)
{
	static const float mag[8] = { 0.0f, 0.5f, 1.0f, 1.5f,
				      2.0f, 3.0f, 4.0f, 6.0f };
	float v = mag[code & 7];

	return (code & 8) ? -v : v;
}

/* The bf16 bits of E2M1 @code (code 8 is -0, 0x8000). */
static inline uint16_t kern_e2m1_to_bf16(uint8_t code)
{
	static const uint16_t mag[8] = { 0x0000, 0x3f00, 0x3f80, 0x3fc0,
					 0x4000, 0x4040, 0x4080, 0x40c0 };

	return (uint16_t)(mag[code & 7] | ((code & 8) ? 0x8000 : 0));
}

/*
 * E8M0: 2^(e - 127), exactly (e = 0 is the f32 subnormal 2^-127);
 * e = 255 is NaN.
 */
static inline float kern_e8m0_to_f32(uint8_t e)
{
	return e == KERN_E8M0_NAN ? NAN : ldexpf(1.0f, (int)e - 127);
}

/* The dequantized weight: e2m1(@code) * 2^(@e - 127). */
static inline float kern_mxfp4_value(uint8_t code, uint8_t e)
{
	return e == KERN_E8M0_NAN ? NAN :
	       ldexpf(kern_e2m1_to_f32(code), (int)e - 127);
}

/*
 * The 32 codes of one block of 16 bytes in the two orders files use:
 * OCP / GPT-OSS safetensors ("blocks"): element 2j in the low nibble of
 * byte j, 2j + 1 in the high one; ggml's block_mxfp4 (GGUF): element j in
 * the low nibble of byte j, j + 16 in the high one.
 */
static inline void kern_mxfp4_unpack_ocp(const uint8_t b[16],
					 uint8_t codes[32])
{
	for (int j = 0; j < 16; j++) {
		codes[2 * j] = b[j] & 0xf;
		codes[2 * j + 1] = b[j] >> 4;
	}
}

static inline void kern_mxfp4_unpack_ggml(const uint8_t b[16],
					  uint8_t codes[32])
{
	for (int j = 0; j < 16; j++) {
		codes[j] = b[j] & 0xf;
		codes[j + 16] = b[j] >> 4;
	}
}

/*
 * kern_mxfp4_quant_block() - quantize 32 values as ggml's
 *	quantize_row_mxfp4_ref does: e = floor(log2(amax)) - 2 + 127
 *	(clamped to 0..254; 0 when amax is 0 or NaN), each code the nearest
 *	E2M1 value of v / 2^(e - 127), ties to the smaller magnitude, +0
 *	for anything that rounds to zero. Return: e.
 */
uint8_t kern_mxfp4_quant_block(const float *v, uint8_t codes[32]);

/*
 * kern_pack_mxfp4_matrix() - quantize matrix @id from f32/bf16/f16 rows
 *	(kern_mxfp4_quant_block() per 32 along K) and pack it into @blob.
 * Return: 0; -ENOMEM.
 */
int kern_pack_mxfp4_matrix(const struct kern_pack_layout *l,
			   enum kern_mat_id id, const void *src,
			   enum kt_dtype dtype, size_t src_stride,
			   uint8_t *blob);

/* E8M0 byte of row @n, group @g of a packed matrix with @N rows. */
static inline size_t kern_mxfp4_scale_idx(unsigned int N, unsigned int n,
					  unsigned int g)
{
	return (size_t)g * N + n;
}

/*
 * Whether variant @isa dots MXFP4 weights with activations made int16 per
 * group of 32 (formats.md, "MXFP4"): avx512 and amx's few-token slot,
 * avx2 and avxvnni; the others widen to f32 and multiply bf16 exactly.
 */
static inline bool kern_mxfp4_int16(enum kt_isa isa)
{
	return isa == KT_ISA_AVX512 || isa == KT_ISA_AMX ||
	       isa == KT_ISA_AVX2 || isa == KT_ISA_AVX_VNNI;
}

/* The MXFP4 rows of the ops tables: scalar oracle, AVX-512, AVX2, AMX. */
void kern_gate_up_mxfp4_scalar(const struct kern_gate_up_args *a);
void kern_down_mxfp4_scalar(const struct kern_down_args *a);
void kern_gate_up_mxfp4_avx512(const struct kern_gate_up_args *a);
void kern_down_mxfp4_avx512(const struct kern_down_args *a);
size_t kern_scratch_bytes_mxfp4_avx512(const struct kern_geom *g,
				       unsigned int max_m);
void kern_gate_up_mxfp4_avx2(const struct kern_gate_up_args *a);
void kern_down_mxfp4_avx2(const struct kern_down_args *a);
size_t kern_scratch_bytes_mxfp4_avx2(const struct kern_geom *g,
				     unsigned int max_m);
void kern_gate_up_mxfp4_amx(const struct kern_gate_up_args *a);
void kern_down_mxfp4_amx(const struct kern_down_args *a);
size_t kern_scratch_bytes_mxfp4_amx(const struct kern_geom *g,
				    unsigned int max_m);

#endif /* KT_KERNELS_MXFP4_H */
