/* SPDX-License-Identifier: MIT */
/*
 * moe.h - the MoE op executor: what the op table and the
 * model builders (kt_model_create, kt_model_open) call.
 */
#ifndef KT_CORE_MOE_H
#define KT_CORE_MOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <kt/kt.h>

/* Routed expert @i of @ids, an array of KT_DTYPE_I32 or KT_DTYPE_I64. */
static inline int64_t core_moe_id(const void *ids, int dtype, size_t i)
{
	if (dtype == KT_DTYPE_I64)
		return ((const int64_t *)ids)[i];
	return ((const int32_t *)ids)[i];
}

/* Handler of KT_OP_MOE (a core_op_fn): runs on the leader worker. */
int core_moe_op(struct kt_ctx *ctx, const struct kt_sqe *sqe);
/*
 * The CPU part of an op the GPU path split (moe-gpu.c, moe-stream.c):
 * core_moe_op() without the residency snapshot's skips. The caller's skip
 * mask already holds every expert it runs on the GPU, decided from the
 * device table alone; a snapshot taken later could name a joiner that the
 * split had given the CPU, and the op would lose it.
 */
int core_moe_cpu_part(struct kt_ctx *ctx, const struct kt_sqe *sqe);

/*
 * Grow @ctx's per-node scratch so that ops of @m run without allocating.
 * Context: any thread but a worker; serialised with ops (core_ctx_exec).
 * Return: 0; -ENOMEM; -EINVAL no kernels for @m's quantization.
 */
int core_moe_reserve(struct kt_ctx *ctx, const struct kt_model *m);

/*
 * Largest token chunk the scratch is sized for (default 8192, a power of
 * two >= 16); read by core_moe_reserve(). For tests.
 */
extern unsigned int core_moe_max_chunk;

/* Kernels exist for @isa in this build (core_ctx_create's callback). */
bool core_isa_has_kernels(enum kt_isa isa);

#endif /* KT_CORE_MOE_H */
