/* SPDX-License-Identifier: MIT */
/*
 * fp8.h - E4M3 ("fn": bias 7, no infinities, S.1111.111 is NaN) to and from
 * f32 in plain C, and the FP8 entry points the other kernel files share.
 */
#ifndef KT_KERNELS_FP8_H
#define KT_KERNELS_FP8_H

#include <math.h>
#include <stdint.h>

#include "kernels/kern.h"
#include "kernels/pack.h"

/* Largest finite E4M3 magnitude: 1.75 * 2^8. */
#define KERN_FP8_MAX	448.0f

/* Exact: every E4M3 value is a bf16 and an f32. */
static inline float kern_fp8_to_f32(uint8_t v)
{
	unsigned int e = (v >> 3) & 0xf, m = v & 7;
	float r;

	if (e == 0xf && m == 7)
		return NAN;
	/* subnormal m/8 * 2^-6, normal (1 + m/8) * 2^(e-7) */
	r = e ? ldexpf((float)(8 + m), (int)e - 10) : ldexpf((float)m, -9);
	return (v & 0x80) ? -r : r;
}

/*
 * Nearest E4M3, ties to even; magnitudes beyond the largest finite value
 * saturate to +-448 (what quantizers of FP8 checkpoints do), NaN to NaN.
 */
static inline uint8_t kern_f32_to_fp8(float f)
{
	uint8_t s = signbit(f) ? 0x80 : 0;
	float a = fabsf(f), fr;
	int ex, e, m;

	if (isnan(f))
		return 0x7f;
	if (a < 0x1p-6f)		/* subnormal (m = 8 is 2^-6, e = 1) */
		return s | (uint8_t)rintf(a * 0x1p9f);
	fr = frexpf(a, &ex);		/* a = fr * 2^ex, fr in [0.5, 1) */
	e = ex - 1 + 7;
	m = (int)rintf((fr * 2.0f - 1.0f) * 8.0f);
	if (m == 8) {
		m = 0;
		e++;
	}
	if (e > 15 || (e == 15 && m == 7))
		return s | 0x7e;
	return s | (uint8_t)(e << 3 | m);
}

/*
 * kern_pack_fp8_matrix() - quantize matrix @id from f32/bf16/f16 rows to
 *	E4M3 per 128x128 block or per row (@l->group; scale = amax / 448)
 *	and pack it into @blob.
 * kern_pack_fp8_raw() - pack E4M3 bytes @q ([N][K], rows @stride bytes
 *	apart) and their scales @scales (f32 [N/128][K/128], the
 *	weight_scale_inv of a block-scaled checkpoint, or [N], a per-channel
 *	weight_scale: w = fp8 * scale) as they are.
 * Return: 0; -EINVAL bad dtype; -ENOMEM.
 */
int kern_pack_fp8_matrix(const struct kern_pack_layout *l, enum kern_mat_id id,
			 const void *src, enum kt_dtype dtype,
			 size_t src_stride, uint8_t *blob);
void kern_pack_fp8_raw(const struct kern_pack_layout *l, enum kern_mat_id id,
		       const uint8_t *q, size_t stride, const float *scales,
		       uint8_t *blob);

/*
 * Index of the scale of element (n, k) of a packed FP8 matrix with K
 * columns and scale group @group (KERN_FP8_BLOCK or KERN_FP8_CHANNEL).
 */
static inline size_t kern_fp8_scale_idx(unsigned int group, unsigned int K,
					unsigned int n, unsigned int k)
{
	if (group == KERN_FP8_CHANNEL)
		return n;
	return (size_t)(n / KERN_FP8_BLOCK) * (K / KERN_FP8_BLOCK) +
	       k / KERN_FP8_BLOCK;
}

static inline float kern_fp8_scale(const float *scales, unsigned int group,
				   unsigned int K, unsigned int n,
				   unsigned int k)
{
	return scales[kern_fp8_scale_idx(group, K, n, k)];
}

/* The FP8 rows of the ops tables: scalar oracle, AVX-512 (bf16), AMX. */
size_t kern_act_row_bytes_fp8_scalar(unsigned int K, unsigned int group);
void kern_act_prepare_fp8_scalar(const void *src, size_t src_stride,
				 enum kt_dtype dtype, unsigned int rows,
				 unsigned int K, unsigned int group,
				 uint8_t *dst, size_t dst_stride);
void kern_gate_up_fp8_scalar(const struct kern_gate_up_args *a);
void kern_down_fp8_scalar(const struct kern_down_args *a);
void kern_gate_up_fp8_avx512(const struct kern_gate_up_args *a);
void kern_down_fp8_avx512(const struct kern_down_args *a);
size_t kern_scratch_bytes_fp8_avx512(const struct kern_geom *g,
				     unsigned int max_m);
void kern_gate_up_fp8_avx2(const struct kern_gate_up_args *a);
void kern_down_fp8_avx2(const struct kern_down_args *a);
size_t kern_scratch_bytes_fp8_avx2(const struct kern_geom *g,
				   unsigned int max_m);
/* the avx2 body with F16C widening in its passes too: where
 * kern_fma_subnormals_free() is false, the avx2 entry points run these */
void kern_gate_up_fp8_f16_avx2(const struct kern_gate_up_args *a);
void kern_down_fp8_f16_avx2(const struct kern_down_args *a);
size_t kern_scratch_bytes_fp8_f16_avx2(const struct kern_geom *g,
				       unsigned int max_m);
void kern_gate_up_fp8_amx(const struct kern_gate_up_args *a);
void kern_down_fp8_amx(const struct kern_down_args *a);
size_t kern_scratch_bytes_fp8_amx(const struct kern_geom *g,
				  unsigned int max_m);

/*
 * Whether f32 FMAs take subnormal inputs at full speed: on AMD's cores
 * (Zen 3: 12 chains, none to all inputs subnormal, 0.60-0.73 TSC ticks
 * per FMA), not on Intel's (about 146 cycles each, Sapphire Rapids).
 */
static inline bool kern_fma_subnormals_free(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_is("amd");
}

#endif /* KT_KERNELS_FP8_H */
