// SPDX-License-Identifier: MIT
/*
 * gpu-place.c - the context's GPU as the residency's backend (residency.h):
 * on a context with a GPU, kt_model_place() and kt_model_replace() move
 * experts with the device table's own upload and evict, so the op that
 * splits experts (moe-gpu.c) and the published set agree on the GPU ones.
 */
#include <errno.h>
#include <stdlib.h>

#include "ktcore/ctx.h"
#include "ktcore/model.h"
#include "ktcore/moe-gpu.h"
#include "ktcore/residency.h"

static int upload(void *arg, uint32_t layer, uint32_t expert)
{
	return kt_model_gpu_upload(arg, layer, expert);
}

static int evict(void *arg, uint32_t layer, uint32_t expert)
{
	/* residency.c lets only experts the host has leave the GPU, and
	 * unwinds uploads of a failed placement (those may have none) */
	int ret = core_gpu_evict(arg, layer, expert);

	return ret == -ENOENT ? 0 : ret;	/* evicted by hand meanwhile */
}

int core_gpu_place_attach(struct kt_model *m)
{
	const struct core_place_backend be = { .arg = m, .upload = upload,
					       .evict = evict };
	uint64_t W = KT_PLACE_WORDS(m->n_experts), *initial;
	uint32_t l, e;
	int ret;

	if (m->residency)
		return 0;
	if (!m->ctx->gpu)
		return -ENODEV;
	/* what kt_model_gpu_upload() put there already stays */
	initial = calloc(W * m->n_layers, 8);
	if (!initial)
		return -ENOMEM;
	for (l = 0; l < m->n_layers; l++)
		for (e = 0; e < m->n_experts; e++)
			if (kt_model_gpu_resident(m, l, e) == 1)
				initial[l * W + e / 64] |= 1ull << (e % 64);
	ret = core_residency_attach(m, &be, initial);
	free(initial);
	return ret == -EBUSY ? 0 : ret;		/* another thread was first */
}
