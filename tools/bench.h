/* SPDX-License-Identifier: MIT */
/*
 * bench.h - the parts of `kt bench`: configuration, synthetic weights,
 * machine limits, the MoE and NOP timing loops, and the report.
 */
#ifndef KT_TOOLS_BENCH_H
#define KT_TOOLS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kt/kt.h>

#define BENCH_MAX_TOKENS_LIST	32
#define BENCH_MAX_METHODS	11	/* each method once */

struct bench_preset {
	const char *name;
	uint32_t hidden;
	uint32_t inter;
	uint32_t experts;
	uint32_t top_k;
	enum kt_act act;	/* the gated activation */
	bool bias;		/* expert biases (GPT-OSS) */
};

extern const struct bench_preset bench_presets[];
extern const unsigned int bench_n_presets;

/* How the bench thread waits for a completion (--wait). */
enum bench_wait {
	BENCH_WAIT_AUTO = 0,	/* sleep when every CPU runs a worker */
	BENCH_WAIT_POLL,	/* kt_wait_cqe() as the ring is set up */
	BENCH_WAIT_SLEEP,	/* no polling: sleep on the CQ at once */
};

/* Everything the command line decides; zero fields take defaults. */
struct bench_cfg {
	const char *preset;		/* "custom" once a dimension is set */
	uint32_t hidden, inter, experts, top_k;
	enum kt_act act;		/* the preset's */
	bool bias;
	enum kt_quant methods[BENCH_MAX_METHODS];	/* or BENCH_Q*_K_M */
	unsigned int n_methods;
	enum kt_isa isas[KT_ISA_COUNT];
	unsigned int n_isas;
	uint32_t group_size;		/* INT4 only; 0: 128 */
	uint32_t threads;		/* 0: the context's default */
	uint32_t tokens[BENCH_MAX_TOKENS_LIST];
	unsigned int n_tokens;
	uint32_t layers;		/* 0: sized from the L3 */
	uint32_t iters;			/* 0: run until min_ms and min_iters */
	uint32_t warmup;
	uint32_t min_iters;
	uint32_t min_ms;
	uint32_t max_ms;		/* stop a slow case early (>= 3 iters) */
	uint64_t seed;
	uint64_t mem_limit;		/* 0: MemAvailable */
	uint64_t bw_bytes;		/* read-bandwidth buffer; 0: auto */
	uint32_t limit_ms;		/* per limit measurement; 0: library */
	enum kt_dtype src_dtype;	/* synthetic weights handed to kt */
	enum kt_dtype io_dtype;		/* x and y of the op */
	bool json;
	bool limits_only;
	bool nop;
	bool use_forward;		/* kt_moe_forward instead of the ring */
	enum bench_wait wait;
};

bool bench_wait_sleeps(const struct bench_cfg *cfg, unsigned int threads);

/* Read bandwidth and compute peaks of one context, measured together. */
struct bench_limits {
	enum kt_isa isa;
	unsigned int threads;
	double read_gbps;
	double peak_int8_tops;		/* also INT4: same units */
	double peak_bf16_tops;
	uint64_t bw_bytes;
};

int bench_limits_measure(struct kt_ctx *ctx, const struct bench_cfg *cfg,
			 struct bench_limits *l);
double bench_limits_peak(const struct bench_limits *l, enum kt_quant q);

/* Synthetic expert weights: N(0, 0.02) with per-row magnitudes, seeded. */
struct synth;

struct synth_cfg {
	uint32_t hidden, inter, n_experts, n_layers;
	enum kt_dtype dtype;		/* KT_DTYPE_F32 or _BF16 */
	uint64_t seed;
	bool progress;			/* draw a progress line on stderr */
};

int synth_create(const struct synth_cfg *cfg, struct synth **out);
int synth_get_expert(void *arg, uint32_t layer, uint32_t expert,
		     struct kt_expert_src *src);
void synth_destroy(struct synth *s);
uint64_t synth_buffer_bytes(const struct synth_cfg *cfg);
void synth_fill_bf16(uint16_t *dst, size_t n, uint64_t seed, float sigma);
void synth_fill_f32(float *dst, size_t n, uint64_t seed, float sigma);

/* Distinct weights rotated through, in multiples of the L3. */
#define BENCH_ROTATE_L3		4
#define BENCH_MIN_LAYERS	2
#define BENCH_MAX_LAYERS	4096
/* Left free for the kernel, kt's scratch and the bench's own buffers. */
#define BENCH_MEM_RESERVE	(512ull << 20)

/* The packed size of one expert (Documentation/packed-layout.md). */
/*
 * The GGUF mixes as a method: gate/up of one type, down Q6_K (what
 * llama.cpp's Q4_K_M and Q5_K_M store for most layers). Values past
 * enum kt_quant, used only inside the bench.
 */
#define BENCH_Q4_K_M	((enum kt_quant)100)
#define BENCH_Q5_K_M	((enum kt_quant)101)
/* Parse a --method name (opt_quant()'s, "q4_k_m", "q5_k_m"). 0; -EINVAL. */
int bench_method_parse(const char *s, enum kt_quant *out);
/* The quantization of gate/up, of down, and the name of a method. */
enum kt_quant bench_method_quant(enum kt_quant m);
enum kt_quant bench_method_down(enum kt_quant m);
const char *bench_method_name(enum kt_quant m);
uint64_t bench_expert_bytes(uint32_t hidden, uint32_t inter,
			    enum kt_quant q, uint32_t group_size);
int bench_plan_layers(const struct bench_cfg *c, enum kt_quant q,
		      uint64_t expert_bytes, uint32_t *layers);

/* One timed case of the MoE op. */
struct bench_case {
	uint32_t tokens;
	uint32_t iters;
	double median_us, p90_us, p99_us, min_us;
	double experts_touched;		/* mean distinct experts per call */
	uint64_t bytes;			/* distinct expert bytes per call */
	uint64_t ops;			/* 2 * 3 * H * I * valid slots */
	double gbps, tops;
	double roofline_us;		/* max(bytes / bw, ops / peak) */
	double roofline;		/* roofline_us / median_us */
	bool compute_bound;
};

struct bench_moe;

int bench_moe_create(struct kt_ctx *ctx, struct kt_model *m,
		     const struct bench_cfg *cfg, struct bench_moe **out);
int bench_moe_run(struct bench_moe *b, uint32_t tokens,
		  const struct bench_limits *l, struct bench_case *res);
void bench_moe_destroy(struct bench_moe *b);
bool bench_moe_sleeps(const struct bench_moe *b);

/* Submit -> completion round trips of KT_OP_NOP. */
struct bench_nop {
	uint32_t iters;
	double median_us, p90_us, p99_us, min_us;
	uint32_t batch;
	double batch_mops;		/* NOPs per second, in batches */
	bool sleeps;			/* the bench thread slept on the CQ */
};

int bench_nop_run(struct kt_ctx *ctx, const struct bench_cfg *cfg,
		  struct bench_nop *res);

/* What one block of cases ran on: printed before the cases. */
struct bench_setup {
	const struct bench_cfg *cfg;
	enum kt_quant quant;
	enum kt_isa isa;
	unsigned int threads;
	uint32_t layers;
	uint64_t expert_bytes;
	uint64_t model_bytes;
	double gen_s;			/* weight generation and packing */
	bool sleeps;			/* the bench thread sleeps on the CQ */
};

void report_limits(const struct bench_cfg *cfg, const struct bench_limits *l);
void report_setup(const struct bench_setup *s);
void report_case(const struct bench_setup *s, const struct bench_case *c);
void report_nop(const struct bench_cfg *cfg, enum kt_isa isa,
		unsigned int threads, const struct bench_nop *n);

/* Files larger than memory (bench-cache.c): --write-model or --model. */
bool bench_cache_wanted(int argc, char **argv);
int bench_cache_main(int argc, char **argv);
/* `kt bench --gpu` (tools/bench-gpu.c) */
bool bench_gpu_wanted(int argc, char **argv);
int bench_gpu_main(int argc, char **argv);

#endif /* KT_TOOLS_BENCH_H */
