/* SPDX-License-Identifier: MIT */
/*
 * ktw.h - .ktw weight files: converting a Hugging Face checkpoint, checking
 * and describing a file, staging it on hugetlbfs. Included by kt/kt.h.
 */
#ifndef KT_KTW_H
#define KT_KTW_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * kt_last_error() - what went wrong in the last failed call of this thread
 *	to kt_convert(), kt_ktw_*() or kt_model_open().
 *
 * Context: any thread; the text is thread-local.
 * Return: a message naming the file, tensor or field at fault; "" when none.
 *	   Valid until the next such call on this thread.
 */
const char *kt_last_error(void);

/**
 * typedef kt_progress_fn - progress of a long operation.
 * @arg: the options' @progress_arg.
 * @done: units finished (experts for kt_convert(), bytes for kt_ktw_stage()).
 * @total: units in all.
 *
 * Called serialised (never concurrently), from any thread of the call.
 */
typedef void (*kt_progress_fn)(void *arg, uint64_t done, uint64_t total);

/**
 * struct kt_convert_opts - what kt_convert() does.
 * @sz: sizeof(struct kt_convert_opts).
 * @input: Hugging Face checkpoint folder (config.json, *.safetensors and,
 *	   when sharded, model.safetensors.index.json), or a GGUF file
 *	   (Documentation/formats.md).
 * @output: the .ktw file to write; replaced atomically when it exists.
 * @quant: KT_QUANT_INT8, _INT4, _BF16 or _FP8 (enum kt_quant). FP8 keeps
 *	an F8_E4M3 checkpoint's bytes and 128x128 block scales as they are
 *	(BF16/F16/F32 sources are quantized to E4M3 per 128x128 block). 0:
 *	the checkpoint's own numbers (compressed-tensors INT4 -> INT4, F8_E4M3
 *	-> FP8, else BF16), as kt_model_open() on the folder. For a GGUF
 *	@input: 0 (the file's blocks are kept, never re-quantized).
 * @group_size: INT4 group along K: 32, 64 or 128 (0: 128); FP8: 128 (0: 128)
 *	or KT_GROUP_CHANNEL; an FP8 checkpoint's own scales decide (per-channel
 *	weight_scale or 128x128 weight_scale_inv) when it is kept as it is.
 * @layer_first: first checkpoint layer number to convert (with @layer_last;
 *		 both 0 and @layer_last < 0 mean "all MoE layers").
 * @layer_last: last checkpoint layer number, inclusive; -1: no limit.
 * @threads: packing threads (0: one per online CPU).
 * @progress: optional, called after each expert.
 * @progress_arg: passed to @progress.
 * @cancel: optional; when it reads nonzero (e.g. set by a signal handler)
 *	    the conversion stops and returns -EINTR, leaving no output.
 */
struct kt_convert_opts {
	size_t sz;
	const char *input;
	const char *output;
	int quant;
	uint32_t group_size;
	int32_t layer_first;
	int32_t layer_last;
	uint32_t threads;
	kt_progress_fn progress;
	void *progress_arg;
	const volatile sig_atomic_t *cancel;
	uint32_t reserved[8];
};

/**
 * kt_convert() - convert the routed experts of a checkpoint into a .ktw.
 * @opts: options; read during the call only.
 *
 * Source tensors may be BF16, F16, F32 or F8_E4M3 with weight_scale_inv
 * 128x128 block scales. Layers are converted one at a time, so memory
 * stays at a few experts per thread whatever the checkpoint size. The
 * output is written under a temporary name (an O_TMPFILE when the file
 * system has it), synced and renamed: on any failure nothing is left.
 *
 * Context: any thread; blocks; starts @opts->threads threads.
 * Return: 0; -EINVAL bad options or a malformed, incomplete or unsupported
 *	   checkpoint (kt_last_error() names the file and tensor); -ENOENT a
 *	   missing file; -EIO a failed write; -ENOMEM; -EINTR cancelled.
 */
int kt_convert(const struct kt_convert_opts *opts);

#define KT_KTW_ARCH_LEN 32

/**
 * struct kt_ktw_info - what a .ktw file holds (from its validated header).
 * @version_major: format version of the file.
 * @version_minor: minor version (newer minors are read).
 * @quant: enum kt_quant.
 * @hidden: H, the model's own (the width of x and y rows).
 * @inter: I, per expert, the model's own.
 * @n_experts: routed experts per layer.
 * @n_layers: MoE layers.
 * @group_size: INT4 group; FP8 the edge of its square scale blocks (128)
 *	or KT_GROUP_CHANNEL; 0 for other quantizations.
 * @top_k: experts per token from the checkpoint's config (0: unknown).
 * @expert_bytes: packed bytes of one expert.
 * @file_size: bytes of the file.
 * @data_bytes: bytes of all blobs, padding included.
 * @arch: config.json model_type of the source checkpoint.
 * @hugetlbfs: the file lives on a hugetlbfs mount (a staged copy).
 * @down_quant: enum kt_quant of the down matrix: @quant, or (a 2.2 file
 *	converted from a GGUF file that mixes block types) another one.
 * @hidden_packed, @inter_packed: H and I of the packed matrices, padded
 *	with zero weights beyond @hidden and @inter (the model's own, as
 *	kt_model_get_info() has them) in a 2.3 file of a GPT-OSS model
 *	(2880 packs as 2944); equal to them otherwise. Were reserved (0).
 * @act, @act_alpha, @act_limit: the experts' gated activation (enum
 *	kt_act) and its constants (0 for KT_ACT_SILU).
 * @bias: 1 when the file holds expert biases (2.3), else 0.
 */
struct kt_ktw_info {
	uint32_t version_major;
	uint32_t version_minor;
	int quant;
	uint32_t hidden;
	uint32_t inter;
	uint32_t n_experts;
	uint32_t n_layers;
	uint32_t group_size;
	uint32_t top_k;
	uint64_t expert_bytes;
	uint64_t file_size;
	uint64_t data_bytes;
	char arch[KT_KTW_ARCH_LEN];
	int hugetlbfs;
	int down_quant;
	uint32_t hidden_packed;
	uint32_t inter_packed;
	uint32_t act;
	float act_alpha;
	float act_limit;
	uint32_t bias;
	uint32_t reserved[1];
};

/**
 * kt_ktw_inspect() - read and validate the header and table of a .ktw.
 * @path: the file.
 * @info: filled on success.
 * @layer_ids: optional, receives up to @max_layers checkpoint layer numbers.
 * @max_layers: entries of @layer_ids.
 *
 * Every count, offset and size is checked against the file length and the
 * geometry; blob checksums are not read (see kt_ktw_verify()).
 *
 * Context: any thread; blocks on reads.
 * Return: 0; -ENOENT/-EACCES from open; -EINVAL a malformed file (see
 *	   kt_last_error()); -EIO a failed read; -ENOMEM.
 */
int kt_ktw_inspect(const char *path, struct kt_ktw_info *info,
		   int32_t *layer_ids, uint32_t max_layers);

/**
 * kt_ktw_verify() - check the CRC32C of every blob of a .ktw.
 * @path: the file.
 * @bad: optional, receives the number of blobs whose checksum is wrong.
 *
 * Context: any thread; blocks while it reads the whole file.
 * Return: 0 when every blob and the bias section (a 2.3 file's) match;
 *	   -EIO when one does not (the first is named by kt_last_error(); the
 *	   bias section counts as one in @bad) or a read fails; -EINVAL a malformed
 *	   file; -ENOENT/-EACCES; -ENOMEM.
 */
int kt_ktw_verify(const char *path, uint64_t *bad);

/**
 * kt_ktw_stage() - copy a .ktw onto a hugetlbfs mount, so that
 *	kt_model_open() maps it instead of reading it.
 * @path: the .ktw file.
 * @dir: a folder on a hugetlbfs mount (see scripts/setup-hugepages.sh).
 * @out: optional, receives the staged file's path.
 * @out_len: bytes of @out.
 * @progress: optional, called with bytes copied.
 * @progress_arg: passed to @progress.
 *
 * The source is validated and its checksums verified during the copy.
 * With several NUMA nodes, each node's slice of every expert is placed in
 * that node's hugepages, as kt_model_open() would place it.
 *
 * Context: any thread; blocks.
 * Return: 0; -EINVAL malformed source or @dir not on hugetlbfs; -ENOSPC
 *	   too few free hugepages; -EIO a failed read or a bad checksum;
 *	   -ENOENT/-EACCES; -ENOMEM.
 */
int kt_ktw_stage(const char *path, const char *dir, char *out,
		 size_t out_len, kt_progress_fn progress, void *progress_arg);

/**
 * struct kt_load_stats - how the last kt_model_open() of this thread went.
 * @bytes: bytes read from the file (0 when a staged copy was mapped).
 * @ns: wall time of reading and checking the blobs.
 * @io_uring: 1 when io_uring did the reads, 0 for pread.
 * @direct: 1 when the reads bypassed the page cache (O_DIRECT).
 * @mapped: 1 when a staged copy was mapped instead of read.
 * @verified: 1 when checksums were checked.
 * @page_kb: page size of the model memory in KiB (4, 2048 or 1048576).
 * @block: bytes per read request.
 * @depth: requests in flight.
 */
struct kt_load_stats {
	uint64_t bytes;
	uint64_t ns;
	int io_uring;
	int direct;
	int mapped;
	int verified;
	uint64_t page_kb;
	uint32_t block;
	uint32_t depth;
	uint32_t reserved[8];
};

/**
 * kt_load_stats_get() - statistics of this thread's last kt_model_open().
 * @st: filled.
 *
 * Context: any thread; thread-local.
 */
void kt_load_stats_get(struct kt_load_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* KT_KTW_H */
