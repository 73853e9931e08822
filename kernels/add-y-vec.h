/* SPDX-License-Identifier: MIT */
/*
 * add-y-vec.h - the last step of a down call, written once over the width
 * layer (vec.h) for the bodies that keep a down pass's sums in scratch
 * (moe-vec.h, fp8-vec.h, mxfp4-vec.h, moe-mxfp4-avx2.c).
 */
#ifndef KT_KERNELS_ADD_Y_VEC_H
#define KT_KERNELS_ADD_Y_VEC_H

/*
 * Token i0 + m of a down call: y[y_rows[i0 + m]][n] += w * part[n - ns0]
 * for n in [ns0, ns1), times the weight row's scale first for INT8 (its
 * per-row scale is applied once here, not per chunk).
 */
AI void down_add_y(const struct kern_down_args *a, enum kt_quant q,
		   unsigned int i0, unsigned int ns0, unsigned int ns1,
		   const float *part, const int M)
{
	const unsigned int nsub = ns1 - ns0;
	int m;

#pragma GCC unroll 16
	for (m = 0; m < M; m++) {
		float *y = a->y + a->y_rows[i0 + m] * a->y_stride;
		vf w = vf_set1(a->w[i0 + m]);
		unsigned int n;

		for (n = ns0; n < ns1; n += VF_LANES) {
			vf s = vf_load(part + m * nsub + n - ns0);

			if (q == KT_QUANT_INT8)
				s = vf_mul(s, vf_load(a->down->scales + n));
			vf_store(y + n, vf_fmadd(w, s, vf_load(y + n)));
		}
	}
}

#endif /* KT_KERNELS_ADD_Y_VEC_H */
