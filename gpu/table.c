// SPDX-License-Identifier: MIT
/*
 * table.c - the experts of one model on the device, (layer, expert) ->
 * device memory: upload, evict, residency, and the per-op hold that lets a
 * re-placement evict while ops run.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"

int gpu_table_create(struct gpu_dev *d, const struct gpu_layout *lay,
		     uint32_t n_layers, uint32_t n_experts,
		     struct gpu_table **out)
{
	struct gpu_table *t;

	*out = NULL;
	if (!d || !lay || !n_layers || !n_experts)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->slots = calloc((size_t)n_layers * n_experts, sizeof(*t->slots));
	t->layer_count = calloc(n_layers, sizeof(*t->layer_count));
	if (!t->slots || !t->layer_count) {
		free(t->slots);
		free(t->layer_count);
		free(t);
		return -ENOMEM;
	}
	t->d = d;
	t->lay = *lay;
	t->n_layers = n_layers;
	t->n_experts = n_experts;
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&t->stage_lock, NULL);
	*out = t;
	return 0;
}

/* Under stage_lock, the context current: unregister and free. */
static void stage_free(struct gpu_table *t)
{
	if (!t->stage)
		return;
	gpu_check(t->d, t->d->cu.mem_host_unregister(t->stage),
		  "cuMemHostUnregister (upload staging)");
	free(t->stage);
	t->stage = NULL;
	t->stage_bytes = 0;
}

int gpu_table_stage(struct gpu_table *t, size_t bytes, uint8_t **buf)
{
	void *p;
	int ret;

	*buf = NULL;
	bytes = (bytes + 4095) & ~(size_t)4095;
	pthread_mutex_lock(&t->stage_lock);
	if (t->stage_bytes >= bytes) {
		*buf = t->stage;
		return 0;
	}
	ret = gpu_dev_push(t->d);
	if (ret)
		goto err;
	stage_free(t);
	/* 4 KiB aligned: a blob is read into it with O_DIRECT */
	if (posix_memalign(&p, 4096, bytes)) {
		ret = -ENOMEM;
		if (t->d->log)
			t->d->log(t->d->log_arg, KT_LOG_ERROR,
				  "gpu: no host memory for the upload staging");
		goto err_pop;
	}
	ret = gpu_check(t->d, t->d->cu.mem_host_register(p, bytes, 0),
			"cuMemHostRegister (upload staging)");
	if (ret) {
		free(p);
		goto err_pop;
	}
	gpu_dev_pop(t->d);
	t->stage = p;
	t->stage_bytes = bytes;
	*buf = p;
	return 0;
err_pop:
	gpu_dev_pop(t->d);
err:
	pthread_mutex_unlock(&t->stage_lock);
	return ret;
}

void gpu_table_unstage(struct gpu_table *t)
{
	pthread_mutex_unlock(&t->stage_lock);
}

static struct gpu_slot *slot_of(const struct gpu_table *t, uint32_t layer,
				uint32_t expert)
{
	if (layer >= t->n_layers || expert >= t->n_experts)
		return NULL;
	return &t->slots[(size_t)layer * t->n_experts + expert];
}

/*
 * Under t->lock: the slot is no longer resident; free it once unheld
 * (@wait), or at once when the table goes (no op may hold it then).
 */
static void slot_drop(struct gpu_table *t, uint32_t layer, struct gpu_slot *s,
		      bool wait)
{
	/* seq_cst pairs with gpu_table_get(): either the op's hold is seen
	 * here, or the op sees the slot empty (a Dekker pair) */
	__atomic_store_n(&s->state, GPU_SLOT_EMPTY, __ATOMIC_SEQ_CST);
	while (wait && __atomic_load_n(&s->refs, __ATOMIC_SEQ_CST))
		sched_yield();
	gpu_check(t->d, t->d->cu.mem_free(s->base), "cuMemFree");
	s->base = 0;
	t->bytes -= t->lay.total;
	__atomic_fetch_sub(&t->layer_count[layer], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&t->generation, 1, __ATOMIC_RELAXED);
}

int gpu_table_upload(struct gpu_table *t, uint32_t layer, uint32_t expert,
		     const void *host)
{
	struct gpu_slot *s = slot_of(t, layer, expert);
	CUdeviceptr p = 0;
	int ret;

	if (!s || !host)
		return -EINVAL;
	ret = gpu_dev_push(t->d);
	if (ret)
		return ret;
	pthread_mutex_lock(&t->lock);
	ret = gpu_check(t->d, t->d->cu.mem_alloc(&p, t->lay.total),
			"cuMemAlloc (expert)");
	if (ret)
		goto out;
	ret = gpu_check(t->d, t->d->cu.memcpy_htod(p, host, t->lay.total),
			"cuMemcpyHtoD (expert)");
	if (ret) {
		gpu_check(t->d, t->d->cu.mem_free(p), "cuMemFree");
		goto out;
	}
	if (__atomic_load_n(&s->state, __ATOMIC_RELAXED) == GPU_SLOT_RESIDENT) {
		/* replaced in place, never absent in between: the GPU copy
		 * may be the only one (an expert masked at load) */
		CUdeviceptr old = s->base;

		/* seq_cst pairs with gpu_table_get(): an op either holds a
		 * ref seen below, or loads the new base */
		__atomic_store_n(&s->base, p, __ATOMIC_SEQ_CST);
		while (__atomic_load_n(&s->refs, __ATOMIC_SEQ_CST))
			sched_yield();
		gpu_check(t->d, t->d->cu.mem_free(old), "cuMemFree");
		__atomic_fetch_add(&t->generation, 1, __ATOMIC_RELAXED);
		goto out;
	}
	s->base = p;
	t->bytes += t->lay.total;
	__atomic_fetch_add(&t->layer_count[layer], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&t->generation, 1, __ATOMIC_RELAXED);
	/* release: an op that sees RESIDENT sees base and the copied bytes */
	__atomic_store_n(&s->state, GPU_SLOT_RESIDENT, __ATOMIC_SEQ_CST);
out:
	pthread_mutex_unlock(&t->lock);
	gpu_dev_pop(t->d);
	return ret;
}

int gpu_table_evict(struct gpu_table *t, uint32_t layer, uint32_t expert)
{
	struct gpu_slot *s = slot_of(t, layer, expert);
	int ret = 0;

	if (!s)
		return -EINVAL;
	ret = gpu_dev_push(t->d);
	if (ret)
		return ret;
	pthread_mutex_lock(&t->lock);
	if (__atomic_load_n(&s->state, __ATOMIC_RELAXED) == GPU_SLOT_RESIDENT)
		slot_drop(t, layer, s, true);
	else
		ret = -ENOENT;
	pthread_mutex_unlock(&t->lock);
	gpu_dev_pop(t->d);
	return ret;
}

bool gpu_table_resident(const struct gpu_table *t, uint32_t layer,
			uint32_t expert)
{
	const struct gpu_slot *s = slot_of(t, layer, expert);

	return s && __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) ==
		GPU_SLOT_RESIDENT;
}

uint32_t gpu_table_layer_count(const struct gpu_table *t, uint32_t layer)
{
	if (layer >= t->n_layers)
		return 0;
	return __atomic_load_n(&t->layer_count[layer], __ATOMIC_RELAXED);
}

int gpu_table_get(struct gpu_table *t, uint32_t layer, uint32_t expert,
		  CUdeviceptr *base)
{
	struct gpu_slot *s = slot_of(t, layer, expert);

	if (!s)
		return -ENOENT;
	/* seq_cst: pairs with slot_drop() (see there) */
	__atomic_fetch_add(&s->refs, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) != GPU_SLOT_RESIDENT) {
		__atomic_fetch_sub(&s->refs, 1, __ATOMIC_RELEASE);
		return -ENOENT;
	}
	/* seq_cst: pairs with a replacing gpu_table_upload() */
	*base = __atomic_load_n(&s->base, __ATOMIC_SEQ_CST);
	return 0;
}

void gpu_table_put(struct gpu_table *t, uint32_t layer, uint32_t expert)
{
	struct gpu_slot *s = slot_of(t, layer, expert);

	/* release: the op's last use of the weights (its stream finished)
	 * comes before the eviction that sees the count drop */
	if (s)
		__atomic_fetch_sub(&s->refs, 1, __ATOMIC_RELEASE);
}

void gpu_table_destroy(struct gpu_table *t)
{
	uint32_t l, e;
	int pushed;

	if (!t)
		return;
	/* device memory names its context: free it even if the push failed */
	pushed = !gpu_dev_push(t->d);
	for (l = 0; l < t->n_layers; l++)
		for (e = 0; e < t->n_experts; e++) {
			struct gpu_slot *s = slot_of(t, l, e);

			if (s->state == GPU_SLOT_RESIDENT)
				slot_drop(t, l, s, false);
		}
	stage_free(t);
	if (pushed)
		gpu_dev_pop(t->d);
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&t->stage_lock);
	free(t->slots);
	free(t->layer_count);
	free(t);
}
