// SPDX-License-Identifier: MIT
/*
 * cache-open.c - kt_model_open() with a budget below the model's size:
 * nothing is read at open; the experts get a cache of slots (ktcore/cache.c)
 * that reads them from the file on demand.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ktcore/cache.h"
#include "ktcore/core.h"
#include "ktcore/model.h"
#include "loader/error.h"
#include "loader/ktw.h"
#include "loader/cache-open.h"
#include "loader/mask.h"
#include "loader/placement.h"

/* The new fields are there (an older caller's struct ends before). */
static bool has_budget(const struct kt_model_opts *o)
{
	return o && o->sz >= offsetof(struct kt_model_opts, pad0);
}

static bool masked(const struct ldr_ktw *k, const struct kt_model_opts *o,
		   uint64_t i)
{
	return ldr_masked(o->expert_mask, o->layer_masks, k->hdr.n_experts,
			  k->table[i].layer, k->table[i].expert);
}

bool ldr_cache_wanted(const struct ldr_ktw *k, const struct kt_model_opts *o)
{
	uint64_t i, n = 0;

	if (!has_budget(o) || !o->budget || k->hugetlbfs)
		return false;
	for (i = 0; i < k->n_entries; i++)
		n += !masked(k, o, i);
	return o->budget < n * k->hdr.blob_stride;
}

int ldr_cache_attach(struct kt_ctx *ctx, const struct ldr_ktw *k,
		     const struct kt_model_opts *o, struct kt_model *m)
{
	struct core_cache_desc d = { 0 };
	struct kern_pack_layout l;
	struct ldr_placement place;
	uint64_t *off, i;
	uint32_t *crc;
	int ret;

	off = malloc(k->n_entries * sizeof(*off));
	crc = malloc(k->n_entries * sizeof(*crc));
	if (!off || !crc) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < k->n_entries; i++) {
		off[i] = k->table[i].offset;
		crc[i] = k->table[i].crc;
		m->experts[i].present = !masked(k, o, i);
	}
	d.path = k->path;
	d.budget = o->budget;
	d.blob_stride = k->hdr.blob_stride;
	d.file_off = off;
	d.crc = crc;
	d.verify = !(o->flags & KT_MODEL_F_NO_VERIFY);
	d.no_uring = o->flags & KT_MODEL_F_NO_URING;
	d.flags = o->cache_flags;
	d.io_block = o->io_block;
	d.io_depth = o->io_depth;
	d.prefetch_next = o->prefetch_next;
	d.halflife = o->halflife;
	ret = kern_pack_layout_mix(m->quant, m->down_quant, m->hidden,
				   m->inter, m->group_size, &l);
	if (ret) {
		ldr_err(ret, "%s: no packed layout for this geometry", k->path);
		goto out;
	}
	/* each node's slice of a slot on that node, as a resident model's */
	ldr_placement_init(&place, &l, core_ctx_nodes(ctx), 0, 1,
			   k->hdr.blob_stride);
	d.place = &place.lay;
	if (o->cache_flags & ~(KT_CACHE_F_LRU | KT_CACHE_F_VERIFY_ALL |
			       KT_CACHE_F_SQPOLL | KT_CACHE_F_NO_FIXED)) {
		ret = ldr_err(-EINVAL, "kt_model_open: unknown cache_flags %#x",
			      o->cache_flags);
		goto out;
	}
	ret = core_cache_create(ctx, m, &d);
	if (ret == -EINVAL)
		ldr_err(ret, "%s: budget %llu bytes is below the minimum %llu (one layer: %u experts of %llu bytes)",
			k->path, (unsigned long long)o->budget,
			(unsigned long long)core_cache_min_budget(m, d.blob_stride),
			m->n_experts, (unsigned long long)d.blob_stride);
	else if (ret)
		ldr_err(ret, "%s: expert cache: %s", k->path, strerror(-ret));
out:
	free(off);
	free(crc);
	return ret;
}
