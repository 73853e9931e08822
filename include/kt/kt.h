/* SPDX-License-Identifier: MIT */
/*
 * kt.h - the public API of kt, a runtime for the routed experts of MoE layers.
 * Include only this header; it pulls in the ring definitions (kt/ring.h).
 */
#ifndef KT_KT_H
#define KT_KT_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include <kt/version.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * kt_version() - the version of the libkt actually loaded, which may be
 *	newer than the headers a program was built with (KT_VERSION_CODE).
 * Return: KT_VERSION(major, minor, patch).
 */
unsigned int kt_version(void);

/**
 * kt_version_string() - the same as "major.minor.patch".
 * Return: a static string.
 */
const char *kt_version_string(void);

struct kt_ctx;
struct kt_model;

/* Element types of op arguments and source weights. */
enum kt_dtype {
	KT_DTYPE_F32 = 0,
	KT_DTYPE_BF16 = 1,
	KT_DTYPE_F16 = 2,
	KT_DTYPE_I32 = 3,
	KT_DTYPE_I64 = 4,
};

/* How expert weights are stored in memory (the packed layout). */
enum kt_quant {
	KT_QUANT_INT8 = 1,	/* symmetric per output row, f32 scales */
	KT_QUANT_INT4 = 2,	/* symmetric per group along K, f32 scales */
	KT_QUANT_BF16 = 3,
	/* E4M3 (fn) bytes with f32 scales per 128x128 block or per row */
	KT_QUANT_FP8 = 4,
	/* GGUF Q8_0 as read: int8 per group of 32 along K, one f16 scale
	 * each (held as f32); activations quantized per 32 as ggml does */
	KT_QUANT_Q8_0 = 5,
	/* GGUF Q4_K as read: super-blocks of 256 along K, 4-bit q with a
	 * 6-bit scale and min per 32, w = d * sc * q - dmin * m */
	KT_QUANT_Q4_K = 6,
	/* GGUF Q5_K as read: as Q4_K with 5-bit q (0..31) */
	KT_QUANT_Q5_K = 7,
	/* GGUF Q6_K as read: super-blocks of 256, 6-bit q with a signed
	 * 8-bit scale per 16, w = d * sc * (q - 32) */
	KT_QUANT_Q6_K = 8,
	/* OCP MXFP4 as GPT-OSS ships its experts: E2M1 values (4 bits), one
	 * E8M0 scale per 32 along K; computed through BF16 */
	KT_QUANT_MXFP4 = 9,
};

/*
 * The experts' gated activation: out = act(g, u) with g = gate . x (+ its
 * bias) and u = up . x (+ its bias).
 */
enum kt_act {
	KT_ACT_SILU = 0,	/* silu(g) * u (Qwen, DeepSeek, Mixtral) */
	/*
	 * GPT-OSS: g' = min(g, limit), u' = clamp(u, -limit, limit),
	 * out = g' * sigmoid(alpha * g') * (u' + 1)
	 */
	KT_ACT_SWIGLU_OAI = 1,
};

/* GPT-OSS's constants of KT_ACT_SWIGLU_OAI (its config's swiglu_limit). */
#define KT_SWIGLU_OAI_ALPHA	1.702f
#define KT_SWIGLU_OAI_LIMIT	7.0f

/*
 * group_size of KT_QUANT_FP8 with one scale per output row (per-channel
 * FP8 checkpoints, weight_scale) instead of 128x128 blocks.
 */
#define KT_GROUP_CHANNEL	0xffffffffu

/* Kernel variants; KT_ISA_AUTO picks the best the CPU runs. */
enum kt_isa {
	KT_ISA_AUTO = 0,
	KT_ISA_SCALAR = 1,
	KT_ISA_AVX2 = 2,	/* AVX2 + FMA + F16C */
	KT_ISA_AVX_VNNI = 3,	/* AVX2 + AVX-VNNI */
	KT_ISA_AVX512 = 4,	/* AVX-512 F/BW/VL/VNNI/BF16 */
	KT_ISA_AMX = 5,		/* AVX-512 variant + AMX tile/int8/bf16 */
	KT_ISA_AVX512BW = 6,	/* AVX-512 F/BW/VL/DQ (Skylake-SP) */
	KT_ISA_AVX512VNNI = 7,	/* AVX-512 F/BW/VL/DQ/VNNI (Cascade/Ice Lake) */
	KT_ISA_COUNT
};

/* Log levels, as KT_LOG spells them: error, warn, info, debug. */
enum kt_log_level {
	KT_LOG_ERROR = 0,
	KT_LOG_WARN = 1,
	KT_LOG_INFO = 2,
	KT_LOG_DEBUG = 3,
};

typedef void (*kt_log_fn)(void *arg, enum kt_log_level level, const char *msg);

#define KT_MAX_NODES 64

/**
 * struct kt_ctx_opts - how a context is built; zero means "default".
 * @sz: sizeof(struct kt_ctx_opts), so that older callers keep working.
 * @threads: total workers (0: one per physical core of the nodes used).
 * @n_nodes: entries used in @nodes (0: every node with memory and CPUs).
 * @nodes: NUMA node ids to run on.
 * @isa: kernel variant to force (KT_ISA_AUTO: best; KT_ISA overrides).
 * @spin_us: busy-poll time before a worker sleeps (0: 50 ms default;
 *	     use KT_CTX_SPIN_NONE to sleep at once).
 * @log_fn: log callback (NULL: messages go to stderr).
 * @log_arg: passed to @log_fn.
 * @flags: KT_CTX_F_*; unknown bits are -EINVAL.
 * @log_level: the most verbose level passed to @log_fn (or stderr), as
 *	       KT_CTX_LOG_LEVEL(KT_LOG_*); 0 takes the KT_LOG environment
 *	       variable, which defaults to warn.
 * @gpu_mask: CUDA devices to use, bit i for device ordinal i (0: none,
 *	      the context is CPU-only). One device per context for now
 *	      (Documentation/gpu.md); the driver is libcuda.so.1, or the
 *	      library named by the KT_CUDA_LIB environment variable.
 * @reserved: must be zero.
 *
 * A caller built against an older, shorter struct passes its own @sz and
 * the fields it lacks read as zero; a newer, longer one is accepted when
 * the bytes this library does not know are zero (else -EINVAL).
 */
struct kt_ctx_opts {
	size_t sz;
	uint32_t threads;
	uint32_t n_nodes;
	int32_t nodes[KT_MAX_NODES];
	enum kt_isa isa;
	uint32_t spin_us;
	kt_log_fn log_fn;
	void *log_arg;
	uint32_t flags;
	uint32_t log_level;
	uint64_t gpu_mask;
	uint32_t reserved[12];
};

#define KT_CTX_SPIN_NONE	UINT32_MAX
#define KT_CTX_F_NO_PIN		(1u << 0)	/* do not pin workers to cores */
#define KT_CTX_F_ALL		KT_CTX_F_NO_PIN
/* kt_ctx_opts.log_level of a KT_LOG_* level (0 is "unset") */
#define KT_CTX_LOG_LEVEL(level)	((uint32_t)(level) + 1)

/**
 * kt_ctx_create() - start a context: worker pools, kernel dispatch.
 * @opts: options, may be NULL for defaults; read only during the call.
 * @out: receives the context; release with kt_ctx_destroy().
 *
 * Context: any thread; blocks while workers start.
 * Return: 0; -EINVAL bad options (@sz too small, unknown flags or log
 *	   level, non-zero reserved or unknown trailing bytes) or
 *	   environment (KT_ISA unknown);
 *	   -EOPNOTSUPP the forced ISA is not supported by this CPU;
 *	   -ENODEV a requested NUMA node has no CPUs, or a GPU of @gpu_mask
 *	   is not usable (no driver, no such device; logged with the
 *	   reason); -EOPNOTSUPP more than one GPU in @gpu_mask; -ENOMEM.
 */
int kt_ctx_create(const struct kt_ctx_opts *opts, struct kt_ctx **out);

/**
 * kt_ctx_destroy() - stop workers and free the context.
 * @ctx: context, may be NULL. Models and rings of @ctx must be released
 *	 first; ops still in flight are completed before workers stop. A
 *	 ring still attached is cut off (see kt_ring_exit()) and logged.
 *
 * Context: any thread but a kt worker; blocks until workers exit.
 */
void kt_ctx_destroy(struct kt_ctx *ctx);

/**
 * kt_ctx_isa() - the kernel variant chosen for @ctx.
 * @ctx: context.
 * Return: a KT_ISA_* other than KT_ISA_AUTO.
 */
enum kt_isa kt_ctx_isa(const struct kt_ctx *ctx);

/**
 * kt_ctx_threads() - number of workers of @ctx, over all nodes.
 * @ctx: context.
 * Return: the count (at least 1).
 */
unsigned int kt_ctx_threads(const struct kt_ctx *ctx);

/**
 * struct kt_worker_stats - what one worker has done since it started.
 * @node: NUMA node of the worker.
 * @cpu: CPU it is pinned to (-1 when not pinned).
 * @busy_ns: time spent running tasks.
 * @spin_ns: time spent polling for work.
 * @sleeps: times it went to sleep on its futex.
 * @tasks: tasks it ran.
 */
struct kt_worker_stats {
	int32_t node;
	int32_t cpu;
	uint64_t busy_ns;
	uint64_t spin_ns;
	uint64_t sleeps;
	uint64_t tasks;
	uint64_t reserved[4];
};

/**
 * kt_ctx_worker_stats() - read the counters of one worker.
 * @ctx: context.
 * @idx: worker index, 0 .. kt_ctx_threads() - 1.
 * @st: filled on success.
 *
 * Context: any thread; the counters are read without stopping workers.
 * Return: 0; -EINVAL when @idx is out of range.
 */
int kt_ctx_worker_stats(const struct kt_ctx *ctx, unsigned int idx,
			struct kt_worker_stats *st);

/* ---- what the machine offers ------------------------------------------- */

#define KT_CPU_AVX2		(1u << 0)
#define KT_CPU_FMA		(1u << 1)
#define KT_CPU_F16C		(1u << 2)
#define KT_CPU_AVX_VNNI		(1u << 3)
#define KT_CPU_AVX512F		(1u << 4)
#define KT_CPU_AVX512BW		(1u << 5)
#define KT_CPU_AVX512VL		(1u << 6)
#define KT_CPU_AVX512VNNI	(1u << 7)
#define KT_CPU_AVX512BF16	(1u << 8)
#define KT_CPU_AMX_TILE		(1u << 9)
#define KT_CPU_AMX_INT8		(1u << 10)
#define KT_CPU_AMX_BF16		(1u << 11)
#define KT_CPU_AVX512FP16	(1u << 12)
#define KT_CPU_AVX512DQ		(1u << 13)
#define KT_CPU_AVX512VBMI	(1u << 14)

/**
 * struct kt_sysinfo - what kt found on this machine.
 * @cpu_flags: KT_CPU_* usable now (cpuid, XCR0 and AMX permission agree).
 * @cpu_model: the CPU brand string.
 * @best_isa: the variant KT_ISA_AUTO picks.
 * @n_nodes: NUMA nodes with CPUs.
 * @node_ids: their ids.
 * @node_cores: physical cores per node (SMT siblings not counted).
 * @node_mem_mb: memory per node.
 * @n_hpage_sizes: entries in @hpage_kb / @hpage_free.
 * @hpage_kb: hugepage sizes offered by the kernel.
 * @hpage_free: free pages of each size, summed over nodes.
 * @io_uring: io_uring_setup() works here.
 * @cuda_driver: libcuda.so.1 loaded and cuInit succeeded.
 * @cuda_devices: GPUs the driver reports.
 * @cuda_version: driver version as CUDA encodes it (12040 = 12.4).
 * @cuda_kernels: this build of kt embeds its GPU kernels (nvcc was there).
 * @cuda_why: when no GPU is usable, why, in one sentence; else "".
 */
struct kt_sysinfo {
	uint32_t cpu_flags;
	char cpu_model[64];
	enum kt_isa best_isa;
	uint32_t n_nodes;
	int32_t node_ids[KT_MAX_NODES];
	uint32_t node_cores[KT_MAX_NODES];
	uint64_t node_mem_mb[KT_MAX_NODES];
	uint32_t n_hpage_sizes;
	uint64_t hpage_kb[4];
	uint64_t hpage_free[4];
	bool io_uring;
	bool cuda_driver;
	int32_t cuda_devices;
	int32_t cuda_version;
	bool cuda_kernels;
	char cuda_why[55];
	uint32_t reserved[2];
};

/**
 * kt_sysinfo_get() - probe the machine (cpuid, NUMA, hugepages, io_uring,
 *	CUDA driver).
 * @si: filled on success.
 *
 * Context: any thread; may block briefly (sysfs reads, dlopen).
 * Return: 0, or -ENOMEM.
 */
int kt_sysinfo_get(struct kt_sysinfo *si);

/**
 * kt_isa_name() - the KT_ISA spelling of a variant ("amx", "avx512", ...).
 * @isa: variant.
 * Return: a static string; "?" for an unknown value.
 */
const char *kt_isa_name(enum kt_isa isa);

/**
 * kt_quant_name() - "int8", "int4", "bf16", "fp8", "q8_0", "q4_k", "q5_k"
 *	or "q6_k".
 * @q: quantization.
 * Return: a static string; "?" for an unknown value.
 */
const char *kt_quant_name(enum kt_quant q);

/**
 * kt_ctx_measure_read_bw() - STREAM-like read bandwidth of @ctx's workers:
 *	every worker reads its share of a buffer on its own node, repeatedly.
 * @ctx: context.
 * @bytes: buffer size over all workers (0: 1 GiB).
 * @ms: how long to measure (0: 500).
 * @gbps: receives GB/s (1e9 bytes per second).
 *
 * Context: any thread but a worker; blocks; allocates @bytes.
 * Return: 0; -ENOMEM.
 */
int kt_ctx_measure_read_bw(struct kt_ctx *ctx, size_t bytes, uint32_t ms,
			   double *gbps);

/**
 * kt_ctx_measure_peak() - compute peak of @ctx's kernel variant for @q,
 *	measured with register-resident operands on every worker.
 * @ctx: context.
 * @q: KT_QUANT_INT8 (and INT4, which runs on the int8 units) or _BF16.
 * @ms: how long to measure (0: 300).
 * @tops: receives tera-ops per second (a multiply-add counts as 2 ops).
 *
 * Context: any thread but a worker; blocks.
 * Return: 0; -EINVAL unknown @q.
 */
int kt_ctx_measure_peak(struct kt_ctx *ctx, enum kt_quant q, uint32_t ms,
			double *tops);

/* ---- models --------------------------------------------------------------- */

/**
 * struct kt_expert_src - one expert's unquantized matrices, row-major as
 *	torch Linear.weight: gate [inter][hidden], up [inter][hidden],
 *	down [hidden][inter], all of the descriptor's @src_dtype; with
 *	KT_DESC_F_BIAS its biases, f32: gate and up [inter], down [hidden]
 *	(NULL: zeros). kt zeroes the struct before each call, so a caller
 *	built before the biases existed fills only the matrices.
 */
struct kt_expert_src {
	const void *gate;
	const void *up;
	const void *down;
	const float *gate_bias;
	const float *up_bias;
	const float *down_bias;
};

/**
 * typedef kt_expert_fn - hands kt_model_create() one expert's weights.
 * @arg: the descriptor's @arg.
 * @layer: layer index, 0 .. n_layers - 1.
 * @expert: expert index.
 * @src: to fill; the pointers must stay valid until the next call.
 * Return: 0, or a -errno that aborts the creation and is returned by it.
 */
typedef int (*kt_expert_fn)(void *arg, uint32_t layer, uint32_t expert,
			    struct kt_expert_src *src);

/**
 * struct kt_model_desc - a model built from weights in memory.
 * @sz: sizeof(struct kt_model_desc).
 * @hidden: H, a multiple of 32 (kt pads it to its tiles, 128, or 256
 *	for the K-quants, with zero weights: GPT-OSS's 2880 runs as 2944).
 * @inter: I (per expert intermediate size), a multiple of 32 (padded
 *	likewise).
 * @n_experts: E, routed experts per layer.
 * @n_layers: MoE layers.
 * @layer_ids: checkpoint layer number of each MoE layer (NULL: 0..n-1).
 * @src_dtype: KT_DTYPE_F32, _BF16 or _F16.
 * @quant: packed format to build.
 * @group_size: INT4 group along K: 32, 64 or 128 (0: 128); FP8: the edge
 *	of its square scale blocks, 128 (0: 128), or KT_GROUP_CHANNEL.
 * @get_expert: source of the weights, called once per (layer, expert).
 * @arg: passed to @get_expert.
 * @expert_mask: optional bitmap of E bits; a set bit means the expert
 *	 lives elsewhere (the GPU) in every layer: it is neither packed nor
 *	 run.
 * @layer_masks: optional per-layer bitmaps, uint64_t[n_layers]
 *	 [KT_PLACE_WORDS(E)] (kt/place.h; kt_place_plan() writes them): a
 *	 set bit of layer l leaves that expert of that layer out, as
 *	 @expert_mask does for all layers (an expert is left out when either
 *	 says so).
 * @down_quant: quantization of down when it differs from @quant (0: the
 *	same): both must then be GGUF block types (KT_QUANT_Q8_0, _Q4_K,
 *	_Q5_K, _Q6_K), as a GGUF Q4_K_M file's gate/up Q4_K and down Q6_K.
 * @act: enum kt_act (0: silu(g) * u).
 * @act_alpha, @act_limit: KT_ACT_SWIGLU_OAI's alpha and limit (0: GPT-OSS's
 *	KT_SWIGLU_OAI_ALPHA, KT_SWIGLU_OAI_LIMIT); zero for KT_ACT_SILU.
 * @desc_flags: KT_DESC_F_*.
 * @reserved: must be zero.
 */
struct kt_model_desc {
	size_t sz;
	uint32_t hidden;
	uint32_t inter;
	uint32_t n_experts;
	uint32_t n_layers;
	const int32_t *layer_ids;
	enum kt_dtype src_dtype;
	enum kt_quant quant;
	uint32_t group_size;
	kt_expert_fn get_expert;
	void *arg;
	const uint64_t *expert_mask;
	const uint64_t *layer_masks;
	uint32_t down_quant;
	uint32_t act;
	float act_alpha;
	float act_limit;
	uint32_t desc_flags;
	uint32_t reserved[1];
};

/* kt_model_desc.desc_flags: the experts have biases (kt_expert_src). */
#define KT_DESC_F_BIAS	(1u << 0)

/**
 * kt_model_create() - quantize and pack experts into a model of @ctx.
 * @ctx: context whose nodes will hold the weights.
 * @desc: descriptor; read only during the call.
 * @out: receives the model; release with kt_model_destroy().
 *
 * Context: any thread; blocks while packing (uses the caller's thread).
 * Return: 0; -EINVAL bad geometry, dtype or quantization; -ENOMEM;
 *	   or the error returned by @desc->get_expert.
 */
int kt_model_create(struct kt_ctx *ctx, const struct kt_model_desc *desc,
		    struct kt_model **out);

/**
 * struct kt_model_opts - how a model (.ktw, GGUF file or checkpoint folder)
 *	is opened.
 * @sz: sizeof(struct kt_model_opts).
 * @flags: KT_MODEL_F_*.
 * @expert_mask: optional bitmap of E bits; set bits are experts that live
 *	 elsewhere (the GPU) in every layer and are not loaded.
 * @io_block: bytes per read request, a multiple of 4096 (0: 4 MiB).
 * @io_depth: read requests in flight (0: 32).
 * @budget: bytes of memory for experts (0: no limit). Below the model's
 *	size the model opens with a cache of expert slots and reads the
 *	rest on demand (kt/cache.h, Documentation/cache.md); it must hold
 *	at least one whole layer.
 * @cache_flags: KT_CACHE_F_* (kt/cache.h).
 * @prefetch_next: with a cache, while layer L computes, read this many
 *	of layer L + 1's most likely experts (by the routing counters).
 * @halflife: ageing of the eviction counts, in ops (0: 64 x layers).
 * @pad0: must be zero.
 * @layer_masks: optional per-layer bitmaps, uint64_t[n_layers]
 *	[KT_PLACE_WORDS(E)] (kt/place.h): a set bit of layer l is an expert
 *	of that layer that lives elsewhere (the GPU) and is not loaded into
 *	host memory nor run; combined with @expert_mask (either leaves an
 *	expert out). With KT_MODEL_F_GPU_UPLOAD they are uploaded to
 *	the GPU from the file at open (a GGUF file's or a folder's packed
 *	one at a time), so a placement plan (kt/place.h)
 *	given here opens the model with its GPU experts placed and not in
 *	host memory. A GPU expert without a host copy cannot leave the GPU
 *	(kt_model_place() refuses); to keep a host copy (for re-placement
 *	in both directions), do not mask it.
 * @reserved2: must be zero.
 * @quant: a Hugging Face checkpoint folder only: enum kt_quant to pack
 *	its experts to at load, as `kt convert --method` (KT_QUANT_INT8,
 *	_INT4, _BF16, _FP8). 0: the checkpoint's own numbers kept as they
 *	are: compressed-tensors INT4 -> INT4 with its group, F8_E4M3 (128x128
 *	block or per-channel scales) -> FP8, BF16/F16/F32 -> BF16. A .ktw or
 *	GGUF file holds its own quantization (of gate/up where down has
 *	another, kt_model_info.down_quant): another nonzero value is refused.
 * @group_size: with @quant, as kt_convert_opts.group_size (0: 128, or
 *	the checkpoint's own INT4 group).
 * @progress: optional, a checkpoint folder only: called on the calling
 *	thread after each layer is packed with experts done and in all
 *	(the signature of kt_progress_fn).
 * @progress_arg: passed to @progress.
 */
struct kt_model_opts {
	size_t sz;
	uint32_t flags;
	const uint64_t *expert_mask;
	uint32_t io_block;
	uint32_t io_depth;
	uint32_t reserved[6];
	uint64_t budget;
	uint32_t cache_flags;
	uint32_t prefetch_next;
	uint32_t halflife;
	uint32_t pad0;
	const uint64_t *layer_masks;
	uint32_t reserved2[4];
	int quant;
	uint32_t group_size;
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
};

#define KT_MODEL_F_NO_VERIFY	(1u << 0)	/* skip CRC32C checks */
#define KT_MODEL_F_NO_URING	(1u << 1)	/* read with pread */
#define KT_MODEL_F_NO_HUGEPAGE	(1u << 2)	/* plain 4 KiB pages */
/* map the file and compute from its pages: page faults read the experts
 * (the baseline of `kt bench --load mmap`); no checksums, no budget */
#define KT_MODEL_F_MMAP		(1u << 3)
/* on a context with a GPU: the experts the masks leave out (@expert_mask,
 * @layer_masks) are read from the .ktw (or packed from the GGUF file or
 * checkpoint folder) straight to the GPU at open and run there; they are
 * in host memory only while staged, one at a time
 * (Documentation/placement.md) */
#define KT_MODEL_F_GPU_UPLOAD	(1u << 4)

/**
 * kt_model_open() - load a .ktw file (or map a staged copy on hugetlbfs),
 *	a GGUF file, or a Hugging Face checkpoint folder.
 * @ctx: context whose nodes will hold the weights (and, for a folder,
 *	whose workers pack them).
 * @path: the file or folder.
 * @opts: options, may be NULL.
 * @out: receives the model.
 *
 * Every count, offset and size of the file is checked before use, and each
 * blob's CRC32C unless KT_MODEL_F_NO_VERIFY (Documentation/loading.md). A
 * folder (config.json and *.safetensors, as kt_convert() reads) has every
 * expert tensor checked first, then is packed to @opts->quant in memory,
 * layer by layer on all of @ctx's workers; nothing is written to disk.
 *
 * Context: any thread but one of @ctx's workers; blocks while reading (a
 *	folder: @ctx's ops wait while a layer is packed).
 * Return: 0; -ENOENT/-EACCES from open; -EINVAL a malformed file or a
 *	   missing, misshapen or mistyped tensor; -EIO a short read or a
 *	   checksum mismatch; -EOPNOTSUPP an option or format that does not
 *	   apply; -ENOMEM. kt_last_error() says which file, field, tensor or
 *	   expert. With KT_MODEL_F_GPU_UPLOAD also: -ENODEV no GPU in @ctx;
 *	   -EOPNOTSUPP no GPU kernels for the model's quantization (INT8,
 *	   INT4 and BF16 have them), biases or activation; -errno of the
 *	   driver (-ENOMEM: the GPU is full); -EIO a masked expert's blob
 *	   does not read or check; a GGUF file's or folder's packing error.
 */
int kt_model_open(struct kt_ctx *ctx, const char *path,
		  const struct kt_model_opts *opts, struct kt_model **out);

/**
 * kt_model_destroy() - free a model; no op of it may be in flight.
 * @m: model, may be NULL.
 *
 * A ring op still running is waited for (logged as a misuse); stream-
 * ordered ops (kt_moe_stream_submit()) past their kt_moe_stream_sync() are
 * waited for on their stream; one submitted and not synced is a misuse:
 * logged, its stream synchronised and the op finished without writing
 * its y. A KT_DEBUG build aborts on either misuse
 * (Documentation/debugging.md).
 * Context: any thread but a worker; may block.
 */
void kt_model_destroy(struct kt_model *m);

/**
 * struct kt_model_info - geometry of a model.
 * @quant: quantization of gate and up (and of down unless @down_quant
 *	says otherwise).
 * @down_quant: quantization of down (enum kt_quant): @quant, or another
 *	GGUF block type for a file that mixes them (Q4_K_M: gate/up Q4_K,
 *	down Q6_K; Documentation/formats.md). Was reserved (0) before kt
 *	filled it. Where down's type varies by layer (llama.cpp's Q4_K_M
 *	and Q5_K_M recipes), layer 0's: kt_model_layer_down_quant() gives
 *	each layer's.
 * @act, @act_alpha, @act_limit: the gated activation (enum kt_act) and
 *	its constants, as kt_model_desc has them (0 where unused).
 * @bias: 1 when the experts have biases (GPT-OSS), else 0.
 * @hidden, @inter are the model's own sizes; the packed matrices may be
 * padded beyond them (kt_model_desc.hidden).
 */
struct kt_model_info {
	uint32_t hidden;
	uint32_t inter;
	uint32_t n_experts;
	uint32_t n_layers;
	enum kt_quant quant;
	uint32_t group_size;
	uint64_t expert_bytes;	/* packed bytes of one expert */
	uint64_t resident_bytes;	/* packed bytes held in memory */
	uint32_t down_quant;
	uint32_t act;
	float act_alpha;
	float act_limit;
	uint32_t bias;
	uint32_t reserved[3];
};

/**
 * kt_model_get_info() - geometry of @m.
 * @m: model.
 * @info: filled.
 */
void kt_model_get_info(const struct kt_model *m, struct kt_model_info *info);

/**
 * kt_model_layer_index() - the index of a checkpoint layer number.
 * @m: model.
 * @layer_id: layer number as the checkpoint names it.
 * Return: the index (0 .. n_layers - 1), or -EINVAL when not a MoE layer.
 */
int kt_model_layer_index(const struct kt_model *m, int32_t layer_id);

/**
 * kt_model_layer_down_quant() - the quantization of down in one layer.
 * @m: model.
 * @layer: layer index (0 .. n_layers - 1, kt_model_layer_index()).
 *
 * A GGUF file written by llama.cpp's Q4_K_M or Q5_K_M recipe gives down
 * Q6_K in some layers and gate/up's type in the others; every other model
 * has kt_model_info.down_quant in every layer.
 * Context: any thread.
 * Return: the enum kt_quant (> 0), or -EINVAL for a NULL @m or a @layer
 * out of range.
 */
int kt_model_layer_down_quant(const struct kt_model *m, uint32_t layer);

/* ---- the MoE op ----------------------------------------------------------- */

/**
 * struct kt_moe_args - one MoE layer's inputs and output.
 * @x: hidden states [T][H] of @x_dtype (KT_DTYPE_F32 or _BF16).
 * @ids: router top-k expert ids [T][k] of @ids_dtype (_I32 or _I64);
 *	 ids < 0 or >= E are skipped.
 * @w: router weights [T][k], f32.
 * @y: output [T][H] of @y_dtype (_F32 or _BF16); overwritten unless
 *     KT_MOE_F_ACCUMULATE.
 * @tokens: T, 1 .. KT_MOE_MAX_TOKENS.
 * @top_k: k, 1 .. KT_MOE_MAX_TOPK.
 * @layer: layer index within the model (see kt_model_layer_index()).
 * @flags: KT_MOE_F_*.
 * @skip_mask: optional bitmap of E bits: experts to skip in this op.
 *
 * All buffers belong to the caller and must stay valid until the
 * completion is seen; @y must not overlap the inputs.
 */
struct kt_moe_args {
	const void *x;
	const void *ids;
	const float *w;
	void *y;
	uint32_t tokens;
	uint32_t top_k;
	uint32_t layer;
	uint32_t flags;
	uint8_t x_dtype;
	uint8_t ids_dtype;
	uint8_t y_dtype;
	uint8_t pad0;
	uint32_t pad1;
	const uint64_t *skip_mask;
	uint64_t reserved[2];
};

#define KT_MOE_F_ACCUMULATE	(1u << 0)	/* y += result */
/* x, ids, w and y are device addresses on the context's GPU (kt/gpu.h) */
#define KT_MOE_F_DEVICE		(1u << 1)
#define KT_MOE_F_ALL		(KT_MOE_F_ACCUMULATE | KT_MOE_F_DEVICE)
#define KT_MOE_MAX_TOPK		16
#define KT_MOE_MAX_TOKENS	65536

/**
 * kt_moe_forward() - run one MoE op and wait for it; the same checks and
 *	work as a KT_OP_MOE submitted on a ring, without one.
 * @ctx: context.
 * @m: model.
 * @args: op arguments (pad and reserved fields zero).
 *
 * Context: any thread but a kt worker; blocks. Calls are serialised per ctx.
 * Return: 0; -EINVAL bad arguments (logged at debug level); -EOPNOTSUPP
 *	   no kernels for @m's quantization on the context's ISA.
 */
int kt_moe_forward(struct kt_ctx *ctx, struct kt_model *m,
		   const struct kt_moe_args *args);

#ifdef __cplusplus
}
#endif

#include <kt/ring.h>
#include <kt/ktw.h>
#include <kt/cache.h>
#include <kt/place.h>
#include <kt/gpu.h>

#endif /* KT_KT_H */
