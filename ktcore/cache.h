/* SPDX-License-Identifier: MIT */
/*
 * cache.h - the expert cache of a model larger than its memory budget and
 * the routing counters: what the executor, the op table and the loader
 * call. Documentation/cache.md.
 */
#ifndef KT_CORE_CACHE_H
#define KT_CORE_CACHE_H

#include <stdbool.h>
#include <stdint.h>
#include <kt/kt.h>

struct kt_model;
struct core_cache;
struct core_mem_layout;

/* ---- routing counters (stats.c) ---- */

/* Allocate @m's counters if it has none (core_moe_reserve). 0; -ENOMEM. */
int core_stats_reserve(const struct kt_model *m);
/*
 * Count the tokens of @a per expert of its layer (a token naming an expert
 * twice counts once; out-of-range ids not at all). Every routed expert
 * counts, also those the op skips or the GPU runs: placement reads their
 * heat. The executor calls it once per op (core_cache_op_begin), the GPU
 * path for a chunk it runs without the executor.
 */
void core_stats_count(const struct kt_model *m, const struct kt_moe_args *a);
/* Free what stats.c and cache.c hung on @m (kt_model_destroy). */
void core_model_extras_free(struct kt_model *m);

/* ---- the cache (cache.c) ---- */

/* What the loader knows of the file, for core_cache_create(). */
struct core_cache_desc {
	const char *path;
	uint64_t budget;		/* bytes of slots at most */
	uint64_t blob_stride;		/* bytes read per expert */
	const uint64_t *file_off;	/* [n_layers * n_experts]; ~0: absent */
	const uint32_t *crc;		/* [n_layers * n_experts] */
	bool verify;			/* check CRC32C on the first read */
	bool no_uring;
	uint32_t flags;			/* KT_CACHE_F_* */
	uint32_t io_block;		/* 0: 1 MiB */
	uint32_t io_depth;		/* 0: 64 */
	uint32_t prefetch_next;
	uint32_t halflife;		/* ops; 0: 64 x n_layers */
	/* each node's bytes of one blob (spans at offsets below
	 * blob_stride; start, stride and count are the cache's): every
	 * slot's pages go to the node that computes on most of them */
	const struct core_mem_layout *place;
};

/* The fewest bytes of slots a model can run with: one whole layer. */
uint64_t core_cache_min_budget(const struct kt_model *m, uint64_t stride);

/*
 * Give @m (geometry and experts[] filled, present flags set) a cache of
 * slots, each page on the node that reads it (@d->place); nothing is
 * read. -EINVAL budget below core_cache_min_budget() (logged with the
 * minimum); -ENOMEM; -errno of open.
 */
int core_cache_create(struct kt_ctx *ctx, struct kt_model *m,
		      const struct core_cache_desc *d);
void core_cache_destroy(struct core_cache *c);

/* One MoE op's view of the cache, on the leader's stack. */
struct core_cache_op {
	uint64_t t0;
	/* per expert of the layer: 0 while its bytes are out, else the
	 * pass in which they were in and checked (1: before the op);
	 * NULL once every expert of the op is (nothing to wait for) */
	const uint8_t *ready;
	uint8_t pass;		/* the latest pass */
};

/*
 * Before an op computes: count its routed tokens and, with a cache, make
 * room for its experts, start the reads of the missing ones and of the
 * self-prefetch. Runs on the leader. 0; -EIO reads could not start.
 */
int core_cache_op_begin(struct kt_ctx *ctx, const struct kt_model *m,
			const struct kt_moe_args *a, struct core_cache_op *op);
/*
 * Wait until one or more experts of the op still out are in, check them
 * and give them the next pass number (op->pass); op->ready becomes NULL
 * when none is left. Returns how many (0: none was out), or -EIO naming
 * the expert when a read or a checksum failed: the slot is freed and the
 * next op reads it again.
 */
int core_cache_op_wait_some(struct kt_ctx *ctx, const struct kt_model *m,
			    struct core_cache_op *op);
void core_cache_op_end(const struct kt_model *m, struct core_cache_op *op,
		       uint32_t tokens);

/* Handler of KT_OP_PREFETCH (a core_op_fn). */
int core_cache_prefetch_op(struct kt_ctx *ctx, const struct kt_sqe *sqe);

/*
 * Test hook, called for every finished read of the cache with the slot's
 * bytes and the result; it may change *res (an error, a short count) or
 * the bytes (a checksum mismatch). Also called before a read is queued
 * with @dst NULL: a nonzero *res then fails the submission.
 */
extern void (*core_cache_fault)(uint32_t layer, uint32_t expert,
				uint8_t *dst, uint32_t len, int *res);

/*
 * Experts an op was about to compute from a slot that was not ready
 * (filling, unchecked, free): must stay 0; the tests read it.
 */
extern uint64_t core_cache_not_ready;

#endif /* KT_CORE_CACHE_H */
