// SPDX-License-Identifier: MIT
/*
 * opts.c - the one reader of public options structs (CORE_OPTS_GET): the
 * sz check that lets them grow in both directions.
 */
#include <errno.h>
#include <string.h>

#include "ktcore/core.h"

/* A larger sz than this is garbage, not a struct from the future. */
#define OPTS_MAX_SZ 4096

int core_opts_get(void *dst, size_t dst_sz, const void *src, size_t min_sz)
{
	const unsigned char *p = src;
	size_t sz, i;

	memset(dst, 0, dst_sz);
	*(size_t *)dst = dst_sz;
	if (!src)
		return 0;
	memcpy(&sz, src, sizeof(sz));
	if (sz < min_sz || sz > OPTS_MAX_SZ)
		return -EINVAL;
	for (i = dst_sz; i < sz; i++)
		if (p[i])
			return -EINVAL;
	memcpy(dst, src, sz < dst_sz ? sz : dst_sz);
	*(size_t *)dst = dst_sz;
	return 0;
}
