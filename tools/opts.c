// SPDX-License-Identifier: MIT
/*
 * opts.c - strict parsers for option values: a value with trailing junk,
 * out of range or empty is refused with -EINVAL, never silently clamped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tools/opts.h"

/**
 * opt_u64() - parse a decimal unsigned integer.
 * @s: text.
 * @out: the value.
 * Return: 0; -EINVAL when @s is not a plain decimal number.
 */
int opt_u64(const char *s, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

/**
 * opt_u32() - parse a decimal integer in [@min, @max].
 * @s: text.
 * @min: smallest value accepted.
 * @max: largest value accepted.
 * @out: the value.
 * Return: 0; -EINVAL when not a number or out of range.
 */
int opt_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v;

	if (opt_u64(s, &v) || v < min || v > max)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/**
 * opt_u32_list() - parse "a,b,c" into at most @cap integers in [@min, @max].
 * @s: text.
 * @min: smallest value accepted.
 * @max: largest value accepted.
 * @out: the values, in the order given.
 * @cap: room in @out.
 * Return: the count (at least 1); -EINVAL on a bad or empty item or when
 *	   more than @cap are given.
 */
int opt_u32_list(const char *s, uint32_t min, uint32_t max, uint32_t *out,
		 unsigned int cap)
{
	unsigned int n = 0;
	char item[32];

	if (!s || !*s)
		return -EINVAL;
	for (;;) {
		size_t len = strcspn(s, ",");

		if (!len || len >= sizeof(item) || n == cap)
			return -EINVAL;
		memcpy(item, s, len);
		item[len] = '\0';
		if (opt_u32(item, min, max, &out[n]))
			return -EINVAL;
		n++;
		if (!s[len])
			return (int)n;
		s += len + 1;
	}
}

/**
 * opt_size() - parse a byte count with an optional binary suffix:
 *	"512", "64K", "300M", "2G" (also "KiB", "MiB", "GiB", any case).
 * @s: text.
 * @out: bytes.
 * Return: 0; -EINVAL when malformed or overflowing.
 */
int opt_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned int shift = 0;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (*end) {
	case '\0':
		break;
	case 'k': case 'K':
		shift = 10;
		break;
	case 'm': case 'M':
		shift = 20;
		break;
	case 'g': case 'G':
		shift = 30;
		break;
	case 't': case 'T':
		shift = 40;
		break;
	default:
		return -EINVAL;
	}
	if (shift) {
		end++;
		if (*end && strcasecmp(end, "iB") && strcasecmp(end, "B"))
			return -EINVAL;
	} else if (*end) {
		return -EINVAL;
	}
	if (shift && v > (~0ull >> shift))
		return -EINVAL;
	*out = v << shift;
	return 0;
}

/**
 * opt_isa() - parse a KT_ISA spelling ("auto", "scalar", "avx2", ...).
 * @s: text.
 * @out: the variant.
 * Return: 0; -EINVAL when unknown.
 */
int opt_isa(const char *s, enum kt_isa *out)
{
	int i;

	if (!s)
		return -EINVAL;
	if (!strcmp(s, "auto")) {
		*out = KT_ISA_AUTO;
		return 0;
	}
	/* the library owns the spellings; ask it rather than copy them */
	for (i = KT_ISA_SCALAR; i < KT_ISA_COUNT; i++) {
		if (!strcmp(s, kt_isa_name((enum kt_isa)i))) {
			*out = (enum kt_isa)i;
			return 0;
		}
	}
	return -EINVAL;
}

/**
 * opt_quant() - parse "int8", "int4", "bf16", "fp8", "q8_0", "q4_k",
 *	"q5_k", "q6_k" or "mxfp4".
 * @s: text.
 * @out: the quantization.
 * Return: 0; -EINVAL when unknown.
 */
int opt_quant(const char *s, enum kt_quant *out)
{
	static const enum kt_quant all[] = {
		KT_QUANT_INT8, KT_QUANT_INT4, KT_QUANT_BF16, KT_QUANT_FP8,
		KT_QUANT_Q8_0, KT_QUANT_Q4_K, KT_QUANT_Q5_K, KT_QUANT_Q6_K,
		KT_QUANT_MXFP4,
	};
	size_t i;

	if (!s)
		return -EINVAL;
	for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		if (!strcmp(s, kt_quant_name(all[i]))) {
			*out = all[i];
			return 0;
		}
	}
	return -EINVAL;
}
