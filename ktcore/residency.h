/* SPDX-License-Identifier: MIT */
/*
 * residency.h - which experts of a model are on the GPU, as a table that
 * re-placement changes while ops run: ops read a snapshot, a change
 * publishes a new one and frees the old (and evicts what left the GPU)
 * only once no op holds it. Documentation/placement.md draws the contract.
 */
#ifndef KT_CORE_RESIDENCY_H
#define KT_CORE_RESIDENCY_H

#include <stdbool.h>
#include <stdint.h>
#include <kt/kt.h>

struct kt_model;

/*
 * The GPU side of re-placement, given by whoever owns the GPU copies
 * (gpu/, wired by the loader; a fake in the tests).
 *
 * upload: make (@layer, @expert) resident on the GPU, from the host copy
 *	(core_model_expert(m, layer, expert), present) or from the file.
 *	Called by kt_model_place() before the expert joins the published
 *	set, so no op sees it before this returned 0; never called from an
 *	op, never twice for an expert without an evict in between, calls of
 *	one model never overlap (kt_model_place() is serialised). May block.
 *	Returns 0 or -errno (-ENOMEM: no room on the GPU); on an error the
 *	placement is abandoned and the experts it uploaded are evicted.
 * evict: free the GPU copy of (@layer, @expert). Called only after the
 *	expert left the published set AND every op that started with a set
 *	holding it has finished (its snapshot was put back), so the GPU side
 *	may free the memory at once. Returns 0 or -errno (logged; the
 *	expert counts as gone either way).
 * release: optional; called once at kt_model_destroy(), when no op is in
 *	flight, to free whatever is still on the GPU and @arg itself.
 */
struct core_place_backend {
	void *arg;
	int (*upload)(void *arg, uint32_t layer, uint32_t expert);
	int (*evict)(void *arg, uint32_t layer, uint32_t expert);
	void (*release)(void *arg);
};

/* One published GPU set: immutable once published. */
struct core_res_snap {
	uint64_t gen;		/* 1, 2, ... in publication order */
	uint64_t count;		/* GPU experts, all layers */
	uint64_t bits[];	/* [n_layers][KT_PLACE_WORDS(E)] */
};

/*
 * Give @m a residency table served by @be (copied). @initial: experts the
 * caller already put on the GPU (NULL: none); they are not uploaded
 * again. From any thread but a worker, before ops of @m use the GPU.
 * 0; -EBUSY @m has a table; -EINVAL; -ENOMEM.
 */
int core_residency_attach(struct kt_model *m,
			  const struct core_place_backend *be,
			  const uint64_t *initial);

/*
 * An op's consistent view: the published set, held until
 * core_residency_put(@m, *@slot). NULL (and nothing to put) when @m has
 * no table. Wait-free apart from a retry when a publication races it;
 * any thread, also workers; the set stays valid (and no expert of it is
 * evicted) while held. Hold it for one op, not longer: kt_model_place()
 * waits for it.
 */
const struct core_res_snap *core_residency_get(const struct kt_model *m,
					       unsigned int *slot);
void core_residency_put(const struct kt_model *m, unsigned int slot);

/* Layer @layer's words of @s. */
const uint64_t *core_res_layer(const struct kt_model *m,
			       const struct core_res_snap *s, uint32_t layer);

/*
 * Scratch of E bits for the executor's combined skip mask (the op's own
 * and the GPU's); only the leader, which runs @m's ops one at a time.
 */
uint64_t *core_residency_scratch(const struct kt_model *m);

/* At kt_model_destroy(): backend release, then the table. */
void core_residency_free(struct kt_model *m);

#endif /* KT_CORE_RESIDENCY_H */
