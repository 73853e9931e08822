/* SPDX-License-Identifier: MIT */
/*
 * cache.h - models larger than memory: routing statistics, the expert
 * cache of a model opened with a budget, pinning and prefetch.
 * Included by kt/kt.h; Documentation/cache.md explains the policy.
 */
#ifndef KT_CACHE_H
#define KT_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kt_ctx;
struct kt_model;
struct kt_sqe;

/* ---- routing statistics ---------------------------------------------------- */

/**
 * kt_model_route_counts() - tokens routed to each expert of one layer since
 *	the model was built, the last reset or the last load.
 * @m: model.
 * @layer: layer index.
 * @counts: receives n_experts counters (a token naming an expert twice
 *	counts once).
 *
 * Context: any thread; counters are read while ops may add to them.
 * Return: 0; -EINVAL bad @layer or NULL.
 */
int kt_model_route_counts(const struct kt_model *m, uint32_t layer,
			  uint64_t *counts);

/**
 * kt_model_route_reset() - set every routing counter of @m to zero.
 * @m: model.
 *
 * Context: any thread.
 */
void kt_model_route_reset(struct kt_model *m);

/**
 * kt_model_route_save() - write the routing counters of @m to @path
 *	(temporary name, fsync, rename; format in Documentation/cache.md).
 * @m: model.
 * @path: the file; replaced atomically.
 *
 * Context: any thread; blocks on the file system.
 * Return: 0; -errno of a failed create, write, fsync or rename.
 */
int kt_model_route_save(const struct kt_model *m, const char *path);

/**
 * kt_model_route_load() - replace the routing counters of @m with those
 *	of @path. The file is checked (size, magic, version, geometry,
 *	CRC32C) before anything is changed.
 * @m: model.
 * @path: a file written by kt_model_route_save() for the same geometry.
 *
 * Context: any thread; blocks on the file system.
 * Return: 0; -EINVAL a malformed file or another geometry (kt_last_error()
 *	   says why); -errno of open or read.
 */
int kt_model_route_load(struct kt_model *m, const char *path);

/* ---- the expert cache ------------------------------------------------------- */

/* kt_model_opts.cache_flags */
#define KT_CACHE_F_LRU		(1u << 0)	/* evict least recently used */
#define KT_CACHE_F_VERIFY_ALL	(1u << 1)	/* CRC32C on every read */
#define KT_CACHE_F_SQPOLL	(1u << 2)	/* io_uring SQPOLL thread */
#define KT_CACHE_F_NO_FIXED	(1u << 3)	/* no registered buffers */

/**
 * struct kt_cache_stats - what the expert cache of a model has done.
 * @slots: expert slots in memory (0: the model is fully resident).
 * @used: slots holding an expert.
 * @pinned: experts pinned.
 * @hits: experts an op found resident.
 * @misses: experts an op had to read (or wait for).
 * @prefetches: experts read ahead of use (KT_OP_PREFETCH, self-prefetch).
 * @prefetch_hits: misses avoided because a prefetch had read the expert.
 * @evictions: experts dropped to make room.
 * @bytes_read: bytes read from the file.
 * @reads: read requests completed.
 * @io_errors: reads failed (I/O error, short read, checksum mismatch).
 * @ops: MoE ops run.
 * @tokens: tokens of those ops.
 * @op_ns: time in those ops.
 * @io_wait_ns: part of @op_ns spent waiting for reads (not computing).
 * @io_ns: time with at least one read in flight, over all reads.
 */
struct kt_cache_stats {
	uint64_t slots;
	uint64_t used;
	uint64_t pinned;
	uint64_t hits;
	uint64_t misses;
	uint64_t prefetches;
	uint64_t prefetch_hits;
	uint64_t evictions;
	uint64_t bytes_read;
	uint64_t reads;
	uint64_t io_errors;
	uint64_t ops;
	uint64_t tokens;
	uint64_t op_ns;
	uint64_t io_wait_ns;
	uint64_t io_ns;
	uint64_t reserved[8];
};

/**
 * kt_model_cache_stats() - read the cache counters of @m.
 * @m: model.
 * @st: filled; all zero for a fully resident model.
 * @reset: zero the counters after reading them.
 *
 * Context: any thread but a worker; serialised with ops.
 * Return: 0; -EINVAL NULL.
 */
int kt_model_cache_stats(struct kt_model *m, struct kt_cache_stats *st,
			 bool reset);

/**
 * kt_model_pin() - keep an expert resident (read now if it is not), or
 *	let it go again. Pins count: each pin needs an unpin.
 * @m: model opened with a budget (a resident model answers 0).
 * @layer: layer index.
 * @expert: expert index.
 * @pin: true to pin, false to unpin.
 *
 * At most slots - n_experts experts may be pinned, so that any op still
 * finds room for a whole layer.
 *
 * Context: any thread but a worker; serialised with ops; blocks on the read.
 * Return: 0; -EINVAL bad index or unpin of an unpinned expert; -ENOSPC
 *	   too many pinned; -EIO the read failed.
 */
int kt_model_pin(struct kt_model *m, uint32_t layer, uint32_t expert,
		 bool pin);

/**
 * kt_prep_prefetch() - KT_OP_PREFETCH: start reading experts of a layer
 *	into the cache; the completion comes when the reads are queued, not
 *	done (an op that needs them waits for what is still in flight).
 * @sqe: entry from kt_get_sqe().
 * @m: model.
 * @layer: layer index.
 * @experts: int32 expert ids, or NULL for the @n most likely experts of
 *	@layer by the routing counters.
 * @n: entries of @experts, or how many most likely ones.
 * @user_data: echoed in the completion.
 *
 * The completion's res is the number of reads started (0 for a resident
 * model or when everything is already in), or -EINVAL.
 */
void kt_prep_prefetch(struct kt_sqe *sqe, struct kt_model *m, uint32_t layer,
		      const int32_t *experts, uint32_t n, uint64_t user_data);

/**
 * kt_model_prefetch() - KT_OP_PREFETCH submitted and waited for.
 * @ctx: context of @m.
 * @m: model.
 * @layer: layer index.
 * @experts: as kt_prep_prefetch().
 * @n: as kt_prep_prefetch().
 *
 * Context: any thread but a worker; blocks until the reads are queued.
 * Return: the number of reads started; -EINVAL.
 */
int kt_model_prefetch(struct kt_ctx *ctx, struct kt_model *m, uint32_t layer,
		      const int32_t *experts, uint32_t n);


/* ---- synthetic models on disk (benchmarks, tests) ---------------------------- */

/**
 * struct kt_ktw_synth - a .ktw of random experts for kt_ktw_write_synth().
 * @sz: sizeof(struct kt_ktw_synth).
 * @path: the file; replaced atomically.
 * @quant: KT_QUANT_INT8, _INT4 or _BF16.
 * @hidden: H, a multiple of 128.
 * @inter: I, a multiple of 128.
 * @n_experts: experts per layer.
 * @n_layers: layers.
 * @group_size: INT4 group (0: 128).
 * @top_k: recorded in the header.
 * @seed: of the random weights.
 * @distinct: experts packed from their own random weights; the others
 *	repeat them in turn (0: all distinct). Packing is the slow part of
 *	writing a file of tens of GB; the bytes on disk are real either way.
 * @progress: optional, bytes written of all.
 * @progress_arg: passed to @progress.
 */
struct kt_ktw_synth {
	size_t sz;
	const char *path;
	int quant;
	uint32_t hidden;
	uint32_t inter;
	uint32_t n_experts;
	uint32_t n_layers;
	uint32_t group_size;
	uint32_t top_k;
	uint64_t seed;
	uint32_t distinct;
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
	uint32_t reserved[8];
};

/**
 * kt_ktw_write_synth() - write a .ktw of random experts (temporary name,
 *	space reserved first, fsync, rename).
 * @o: what to write.
 *
 * Context: any thread; blocks while writing.
 * Return: 0; -EINVAL bad geometry; -ENOSPC; -errno of the file system.
 *	   kt_last_error() says why.
 */
int kt_ktw_write_synth(const struct kt_ktw_synth *o);

#ifdef __cplusplus
}
#endif

#endif /* KT_CACHE_H */
