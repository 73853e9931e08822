/* SPDX-License-Identifier: MIT */
/*
 * place.h - the placement planner's pieces that re-placement reuses
 * (ktcore/place.c, ktcore/residency.c).
 */
#ifndef KT_CORE_PLACE_H
#define KT_CORE_PLACE_H

#include <stdint.h>
#include <kt/kt.h>

/*
 * Check @o (already read with CORE_OPTS_GET) and set *@per_layer from
 * per_layer or ratio. 0; -EINVAL.
 */
int core_place_check(const struct kt_place_opts *o, uint32_t *per_layer);

/*
 * One layer: @out = the experts set in @forced (may be NULL) plus the
 * hottest others by @counts until @n are set (ties: lower id).
 */
void core_place_top(const uint64_t *counts, uint32_t E, uint32_t n,
		    const uint64_t *forced, uint64_t *out);

#endif /* KT_CORE_PLACE_H */
