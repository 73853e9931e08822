/* SPDX-License-Identifier: MIT */
/*
 * act-vec.h - activation quantization written once over the width layer
 * (vec.h) for the bodies that take int8 activations (moe-vec.h, q8_0-vec.h,
 * qk-vec.h): per block, amax and q = rint(x * 127 / amax). The bytes are
 * those of the scalar definitions (qk.h, q8_0.h): a max is exact in any
 * order, vcvtps2dq rounds to nearest even as rintf() does, and sums of q
 * are integers.
 */
#ifndef KT_KERNELS_ACT_VEC_H
#define KT_KERNELS_ACT_VEC_H

/* VF_LANES source values from element @k of a row of f32 or bf16 */
AI vf vf_load_src(const uint8_t *s, enum kt_dtype dtype, unsigned int k)
{
	if (dtype == KT_DTYPE_BF16)
		return vf_load_bf16(s + 2 * (size_t)k);
	return vf_load((const float *)(s + 4 * (size_t)k));
}

/*
 * Elements [k0, k0 + n) of the row @s (n a multiple of VF_LANES) quantized
 * to int8 at @q: returns their amax (0 for a zero block, whose q are 0).
 * NaN inputs are not expected (the scalar's (int8_t) of one is undefined).
 */
AI float act_quant_block(const uint8_t *s, enum kt_dtype dtype,
			 unsigned int k0, unsigned int n, int8_t *q)
{
	vf vmax = vf_zero(), vinv;
	float amax;
	unsigned int k;

	for (k = 0; k < n; k += VF_LANES)
		vmax = vf_max(vmax, vf_abs(vf_load_src(s, dtype, k0 + k)));
	amax = vf_hmax(vmax);
	vinv = vf_set1(amax > 0.0f ? 127.0f / amax : 0.0f);
	for (k = 0; k < n; k += VF_LANES)
		vi_store_i8(q + k, vf_cvt_i32(vf_mul(vf_load_src(s, dtype,
							k0 + k), vinv)));
	return amax;
}

/* the sum of the @n int8 at @q (n a multiple of VF_LANES) */
AI int32_t act_sum_q(const int8_t *q, unsigned int n)
{
	vi acc = vi_zero();
	unsigned int k;

	for (k = 0; k < n; k += VF_LANES)
		acc = vi_add32(acc, vi_load_i8(q + k));
	return vi_hadd32(acc);
}

#endif /* KT_KERNELS_ACT_VEC_H */
