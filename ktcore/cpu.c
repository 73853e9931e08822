// SPDX-License-Identifier: MIT
/*
 * cpu.c - which kernel variants this CPU can run: cpuid for the features,
 * XCR0 for the OS saving their registers, and the AMX permission request
 * that Linux requires before the first tile instruction.
 */
#include <cpuid.h>
#include <stdio.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ktcore/core.h"

#define ARCH_REQ_XCOMP_PERM	0x1023
#define XFEATURE_XTILEDATA	18

#define XCR0_AVX	((1u << 1) | (1u << 2))
#define XCR0_AVX512	((1u << 5) | (1u << 6) | (1u << 7))
#define XCR0_AMX	((1u << 17) | (1u << 18))

static const char *const isa_names[KT_ISA_COUNT] = {
	[KT_ISA_AUTO] = "auto",
	[KT_ISA_SCALAR] = "scalar",
	[KT_ISA_AVX2] = "avx2",
	[KT_ISA_AVX_VNNI] = "avxvnni",
	[KT_ISA_AVX512] = "avx512",
	[KT_ISA_AMX] = "amx",
	[KT_ISA_AVX512BW] = "avx512bw",
	[KT_ISA_AVX512VNNI] = "avx512vnni",
};

#define NEEDS_AVX512BW	(KT_CPU_AVX2 | KT_CPU_FMA | KT_CPU_F16C |	\
			 KT_CPU_AVX512F | KT_CPU_AVX512BW |		\
			 KT_CPU_AVX512VL | KT_CPU_AVX512DQ)

static const uint32_t isa_needs[KT_ISA_COUNT] = {
	[KT_ISA_AVX2] = KT_CPU_AVX2 | KT_CPU_FMA | KT_CPU_F16C,
	[KT_ISA_AVX_VNNI] = KT_CPU_AVX2 | KT_CPU_FMA | KT_CPU_F16C |
			    KT_CPU_AVX_VNNI,
	[KT_ISA_AVX512BW] = NEEDS_AVX512BW,
	[KT_ISA_AVX512VNNI] = NEEDS_AVX512BW | KT_CPU_AVX512VNNI,
	[KT_ISA_AVX512] = NEEDS_AVX512BW | KT_CPU_AVX512VNNI |
			  KT_CPU_AVX512BF16 | KT_CPU_AVX512VBMI,
	[KT_ISA_AMX] = NEEDS_AVX512BW | KT_CPU_AVX512VNNI |
		       KT_CPU_AVX512BF16 | KT_CPU_AVX512VBMI |
		       KT_CPU_AMX_TILE | KT_CPU_AMX_INT8 | KT_CPU_AMX_BF16,
};

/*
 * The variants from the best down: the order auto picks in and a missing
 * quantization falls back in. The enum only grows at its end, so its
 * numbers are not this order.
 */
static const enum kt_isa isa_order[] = {
	KT_ISA_AMX, KT_ISA_AVX512, KT_ISA_AVX512VNNI, KT_ISA_AVX512BW,
	KT_ISA_AVX_VNNI, KT_ISA_AVX2, KT_ISA_SCALAR,
};
_Static_assert(sizeof(isa_order) / sizeof(isa_order[0]) == KT_ISA_COUNT - 1,
	       "every variant has a place in isa_order");

static uint32_t cpu_flags;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

static void cpu_detect(void)
{
	unsigned int a, b, c, d, max;
	uint32_t f = 0;
	uint64_t xcr0 = 0;

	max = __get_cpuid_max(0, NULL);
	if (max < 1 || !__get_cpuid(1, &a, &b, &c, &d))
		return;
	if (!(c & bit_OSXSAVE))
		return;
	xcr0 = xgetbv0();
	if ((xcr0 & XCR0_AVX) != XCR0_AVX)
		return;
	if (c & bit_FMA)
		f |= KT_CPU_FMA;
	if (c & bit_F16C)
		f |= KT_CPU_F16C;
	if (max >= 7) {
		__cpuid_count(7, 0, a, b, c, d);
		if (b & bit_AVX2)
			f |= KT_CPU_AVX2;
		if ((xcr0 & XCR0_AVX512) == XCR0_AVX512) {
			if (b & bit_AVX512F)
				f |= KT_CPU_AVX512F;
			if (b & bit_AVX512DQ)
				f |= KT_CPU_AVX512DQ;
			if (b & bit_AVX512BW)
				f |= KT_CPU_AVX512BW;
			if (b & bit_AVX512VL)
				f |= KT_CPU_AVX512VL;
			if (c & bit_AVX512VNNI)
				f |= KT_CPU_AVX512VNNI;
			if (c & bit_AVX512VBMI)
				f |= KT_CPU_AVX512VBMI;
			if (d & (1u << 23))
				f |= KT_CPU_AVX512FP16;
		}
		/* AMX needs the OS to save tile state and to let us use it */
		if ((xcr0 & XCR0_AMX) == XCR0_AMX && (d & (1u << 24)) &&
		    !syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM,
			     XFEATURE_XTILEDATA)) {
			f |= KT_CPU_AMX_TILE;
			if (d & (1u << 25))
				f |= KT_CPU_AMX_INT8;
			if (d & (1u << 22))
				f |= KT_CPU_AMX_BF16;
		}
		__cpuid_count(7, 1, a, b, c, d);
		if (a & (1u << 4))
			f |= KT_CPU_AVX_VNNI;
		if ((a & (1u << 5)) && (f & KT_CPU_AVX512F))
			f |= KT_CPU_AVX512BF16;
	}
	cpu_flags = f;
}

uint32_t core_cpu_flags(void)
{
	pthread_once(&cpu_once, cpu_detect);
	return cpu_flags;
}

void core_cpu_model(char *buf, size_t n)
{
	unsigned int r[12];
	unsigned int i;
	char *s;

	buf[0] = 0;
	if (__get_cpuid_max(0x80000000, NULL) < 0x80000004)
		return;
	for (i = 0; i < 3; i++)
		__get_cpuid(0x80000002 + i, &r[i * 4], &r[i * 4 + 1],
			    &r[i * 4 + 2], &r[i * 4 + 3]);
	s = (char *)r;
	while (*s == ' ')
		s++;
	snprintf(buf, n, "%.48s", s);
}

bool core_isa_runs(enum kt_isa isa, uint32_t flags)
{
	if (isa <= KT_ISA_AUTO || isa >= KT_ISA_COUNT)
		return false;
	return (flags & isa_needs[isa]) == isa_needs[isa];
}

enum kt_isa core_isa_lower(enum kt_isa isa)
{
	size_t i;

	for (i = 0; i + 1 < sizeof(isa_order) / sizeof(isa_order[0]); i++)
		if (isa_order[i] == isa)
			return isa_order[i + 1];
	return KT_ISA_AUTO;
}

enum kt_isa core_isa_best(uint32_t flags)
{
	enum kt_isa isa;

	for (isa = isa_order[0]; isa != KT_ISA_SCALAR; isa = core_isa_lower(isa))
		if (core_isa_runs(isa, flags))
			return isa;
	return KT_ISA_SCALAR;
}

int core_isa_parse(const char *name, enum kt_isa *isa)
{
	int i;

	for (i = 0; i < KT_ISA_COUNT; i++) {
		if (!strcasecmp(name, isa_names[i])) {
			*isa = (enum kt_isa)i;
			return 0;
		}
	}
	return -EINVAL;
}

KT_EXPORT const char *kt_isa_name(enum kt_isa isa)
{
	if ((int)isa < 0 || isa >= KT_ISA_COUNT)
		return "?";
	return isa_names[isa];
}

KT_EXPORT const char *kt_quant_name(enum kt_quant q)
{
	switch (q) {
	case KT_QUANT_INT8:
		return "int8";
	case KT_QUANT_INT4:
		return "int4";
	case KT_QUANT_BF16:
		return "bf16";
	case KT_QUANT_FP8:
		return "fp8";
	case KT_QUANT_Q8_0:
		return "q8_0";
	case KT_QUANT_Q4_K:
		return "q4_k";
	case KT_QUANT_Q5_K:
		return "q5_k";
	case KT_QUANT_Q6_K:
		return "q6_k";
	case KT_QUANT_MXFP4:
		return "mxfp4";
	default:
		return "?";
	}
}
