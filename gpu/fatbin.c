// SPDX-License-Identifier: MIT
/*
 * fatbin.c - the device kernels nvcc built from gpu/ffn.cu (sm_80, 86, 89,
 * 90 and compute_90 PTX), embedded in libkt with .incbin; none without nvcc.
 */
#include <stddef.h>

#include "gpu/gpu.h"

#ifdef KT_FATBIN
/* the driver reads the fatbin header with 8-byte loads: align it */
__asm__(".section .rodata.kt_fatbin,\"a\"\n"
	".balign 64\n"
	"kt_fatbin_start:\n"
	".incbin \"" KT_FATBIN "\"\n"
	"kt_fatbin_end:\n"
	".byte 0\n"
	".previous\n");
extern const unsigned char kt_fatbin_start[] __attribute__((visibility("hidden")));
extern const unsigned char kt_fatbin_end[] __attribute__((visibility("hidden")));

const void *gpu_fatbin(size_t *bytes)
{
	*bytes = (size_t)(kt_fatbin_end - kt_fatbin_start);
	return kt_fatbin_start;
}
#else
const void *gpu_fatbin(size_t *bytes)
{
	*bytes = 0;
	return NULL;
}
#endif
