/* SPDX-License-Identifier: MIT */
/*
 * core.h - what ktcore offers the other folders: the context's worker
 * pools (fork-join over every worker), logging, CPU features; node memory
 * is ktcore/mem.h.
 */
#ifndef KT_CORE_CORE_H
#define KT_CORE_CORE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <kt/kt.h>

#define KT_EXPORT __attribute__((visibility("default")))

/* Who runs a job: given to each call of a job function. */
struct core_worker_info {
	unsigned int node_idx;	/* index among the context's nodes */
	int node;		/* NUMA node id */
	unsigned int id;	/* worker index within the node */
	unsigned int n_node;	/* workers of this node */
	unsigned int global;	/* worker index within the context */
};

typedef void (*core_job_fn)(void *arg, const struct core_worker_info *w);

/* Handler of one opcode; runs on the leader worker; returns cqe->res. */
typedef int (*core_op_fn)(struct kt_ctx *ctx, const struct kt_sqe *sqe);

/*
 * Build a context. @isa_available tells whether kernels exist for a
 * variant: KT_ISA_AUTO takes the best variant the CPU runs and that has
 * kernels; a forced one (opts or KT_ISA) without either is -EOPNOTSUPP.
 * Handlers left NULL answer -EOPNOTSUPP, except KT_OP_NOP (answers 0).
 */
int core_ctx_create(const struct kt_ctx_opts *opts,
		    const core_op_fn handlers[KT_OP_COUNT],
		    bool (*isa_available)(enum kt_isa isa),
		    struct kt_ctx **out);

/*
 * Run @fn once on every worker of @ctx (the caller, the leader, included)
 * and return when all calls have returned. Only from an op handler.
 */
void core_ctx_run(struct kt_ctx *ctx, core_job_fn fn, void *arg);

/*
 * Run @fn(@ctx, @arg) on the leader worker, where it may call
 * core_ctx_run(), and wait for it; serialised with every other op of @ctx.
 * From any thread but a worker. Returns what @fn returns.
 */
int core_ctx_exec(struct kt_ctx *ctx, int (*fn)(struct kt_ctx *, void *),
		  void *arg);

unsigned int core_ctx_nodes(const struct kt_ctx *ctx);
int core_ctx_node_id(const struct kt_ctx *ctx, unsigned int node_idx);
unsigned int core_ctx_node_threads(const struct kt_ctx *ctx,
				   unsigned int node_idx);

/*
 * Per-context state of another folder (kernels' scratch). @free runs at
 * kt_ctx_destroy(), after the workers stopped.
 */
void *core_ctx_priv(const struct kt_ctx *ctx);
void core_ctx_set_priv(struct kt_ctx *ctx, void *priv, void (*free)(void *));

/* Node-placed memory: ktcore/mem.h. */

/*
 * Read a caller's options struct (it starts with size_t sz) into @dst, the
 * struct as this library knows it: a shorter, older caller's missing tail
 * reads as zero; a longer, newer caller's extra tail must be zero (a field
 * we do not know would be ignored). NULL @src gives all zero with sz set.
 * @min_field is the last field every version has. 0, or -EINVAL.
 *   struct kt_ctx_opts o;
 *   ret = CORE_OPTS_GET(&o, opts, flags);
 */
#define CORE_OPTS_GET(dst, src, min_field)				\
	core_opts_get((dst), sizeof(*(dst)), (src),			\
		      offsetof(__typeof__(*(dst)), min_field) +		\
		      sizeof((dst)->min_field))
int core_opts_get(void *dst, size_t dst_sz, const void *src, size_t min_sz);

/* Logging through the context's callback (or stderr), filtered by the
 * context's level: kt_ctx_opts.log_level, else KT_LOG. */
void core_log(const struct kt_ctx *ctx, enum kt_log_level level,
	      const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/*
 * A documented invalid use by the caller: KT_DEBUG builds (make DEBUG=1)
 * print "kt: misuse: ..." to stderr and abort; release builds log it as an
 * error and carry on in the safe way the caller of this function chose.
 */
void core_misuse(const struct kt_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Without a context (library-wide), to stderr filtered by KT_LOG. */
void core_logv_global(enum kt_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* CPU features: KT_CPU_* usable now; AMX permission is requested once. */
uint32_t core_cpu_flags(void);
enum kt_isa core_isa_best(uint32_t cpu_flags);
/* The next variant below @isa in preference (scalar: KT_ISA_AUTO). */
enum kt_isa core_isa_lower(enum kt_isa isa);
/* @isa is a variant (not AUTO) that a CPU with @cpu_flags runs. */
bool core_isa_runs(enum kt_isa isa, uint32_t cpu_flags);
/* Parse a KT_ISA spelling; -EINVAL when unknown. */
int core_isa_parse(const char *name, enum kt_isa *isa);

/* The CPU brand string. */
void core_cpu_model(char *buf, size_t n);
/* The KT_LOG level (warn when unset): the default of every context. */
int core_log_level(void);

uint64_t core_now_ns(void);

#endif /* KT_CORE_CORE_H */
