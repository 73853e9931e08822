/* SPDX-License-Identifier: MIT */
/*
 * cache-open.h - the branch of kt_model_open() for a budget below the
 * model's size (loader/cache-open.c).
 */
#ifndef KT_LOADER_CACHE_OPEN_H
#define KT_LOADER_CACHE_OPEN_H

#include <stdbool.h>
#include <kt/kt.h>

#include "loader/ktw.h"

/* @o asks for a budget below the present experts' bytes. */
bool ldr_cache_wanted(const struct ldr_ktw *k, const struct kt_model_opts *o);

/* Mark present experts and give @m its cache; -EINVAL budget too small. */
int ldr_cache_attach(struct kt_ctx *ctx, const struct ldr_ktw *k,
		     const struct kt_model_opts *o, struct kt_model *m);

#endif /* KT_LOADER_CACHE_OPEN_H */
