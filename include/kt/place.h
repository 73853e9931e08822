/* SPDX-License-Identifier: MIT */
/*
 * place.h - which experts live on the GPU: per-layer placement plans, the
 * GPU residency of a model and its re-placement from live routing counters,
 * and deferred experts. Included by kt/kt.h; Documentation/placement.md.
 */
#ifndef KT_PLACE_H
#define KT_PLACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kt_model;
struct kt_ring;
struct kt_moe_args;

/* ---- placement plans --------------------------------------------------------- */

/*
 * 64-bit words of one layer's expert bitmap. A per-layer set of experts
 * (a plan, kt_model_opts.layer_masks, kt_model_desc.layer_masks) is
 * uint64_t[n_layers][KT_PLACE_WORDS(n_experts)], bit e of layer l at
 * word l * KT_PLACE_WORDS(E) + e / 64, bit e % 64.
 */
#define KT_PLACE_WORDS(n_experts)	(((uint64_t)(n_experts) + 63) / 64)

/* How kt_place_plan() chooses the GPU experts. */
enum kt_place_strategy {
	KT_PLACE_UNIFORM = 0,		/* the same count and ids in each layer */
	KT_PLACE_FREQUENCY = 1,		/* the most routed of each layer */
	KT_PLACE_FRONT_LOADING = 2,	/* whole layers first, from layer 0 */
	KT_PLACE_RANDOM = 3,		/* seeded, reproducible */
	KT_PLACE_COUNT
};

/**
 * struct kt_place_opts - what kt_place_plan() places.
 * @sz: sizeof(struct kt_place_opts).
 * @strategy: KT_PLACE_*.
 * @n_layers: L, layers of the model.
 * @n_experts: E, experts per layer.
 * @per_layer: GPU experts per layer (at most E).
 * @ratio: used when @per_layer is 0: per_layer = round(@ratio x E), 0 .. 1.
 * @total: GPU experts over all layers; 0: per_layer x L. For
 *	KT_PLACE_FRONT_LOADING the budget to fill from layer 0; for
 *	KT_PLACE_FREQUENCY with @per_layer and @ratio 0, the @total most
 *	routed experts of the whole model (any layer); others ignore it.
 * @seed: of KT_PLACE_RANDOM; the same seed gives the same plan.
 * @counts: routing counters [L][E] (kt_model_route_counts() of each
 *	layer, or kt_route_file_read()); required by KT_PLACE_FREQUENCY,
 *	optional for KT_PLACE_FRONT_LOADING (which experts of the last,
 *	partly filled layer: the most routed instead of the lowest ids).
 *	Ties go to the lower expert id.
 * @reserved: must be zero.
 */
struct kt_place_opts {
	size_t sz;
	uint32_t strategy;
	uint32_t n_layers;
	uint32_t n_experts;
	uint32_t per_layer;
	float ratio;
	uint32_t pad;
	uint64_t total;
	uint64_t seed;
	const uint64_t *counts;
	uint32_t reserved[8];
};

/**
 * kt_place_plan() - choose the GPU experts of every layer.
 * @o: options; read only during the call.
 * @masks: receives the plan, uint64_t[L][KT_PLACE_WORDS(E)] (see
 *	KT_PLACE_WORDS); a set bit is an expert on the GPU. Pass it as
 *	kt_model_opts.layer_masks so that those experts are not loaded
 *	into host memory, or to kt_model_place().
 *
 * Context: any thread; pure computation, allocates nothing.
 * Return: the number of GPU experts placed; -EINVAL bad @o (unknown
 *	   strategy, @per_layer > E, @ratio outside 0 .. 1, no @counts for
 *	   KT_PLACE_FREQUENCY, non-zero @pad or @reserved).
 */
int kt_place_plan(const struct kt_place_opts *o, uint64_t *masks);

/**
 * kt_place_strategy_name() - "uniform", "frequency", "front-loading" or
 *	"random".
 * @s: strategy.
 * Return: a static string; "?" for an unknown value.
 */
const char *kt_place_strategy_name(enum kt_place_strategy s);

/**
 * kt_place_strategy_parse() - the strategy a name spells (as
 *	kt_place_strategy_name() writes it).
 * @name: the name.
 * Return: a KT_PLACE_* value; -EINVAL unknown name or NULL.
 */
int kt_place_strategy_parse(const char *name);

/**
 * kt_route_file_read() - read the counters of a routing statistics file
 *	(kt_model_route_save()) without a model, e.g. to plan a placement
 *	before the model is opened. The file is checked as
 *	kt_model_route_load() checks it.
 * @path: the file.
 * @n_layers: the layers the caller expects.
 * @n_experts: the experts per layer the caller expects.
 * @counts: receives uint64_t[@n_layers][@n_experts].
 *
 * Context: any thread; blocks on the file system.
 * Return: 0; -EINVAL a malformed file or another geometry
 *	   (kt_last_error() says why); -ENOMEM; -errno of open or read.
 */
int kt_route_file_read(const char *path, uint32_t n_layers,
		       uint32_t n_experts, uint64_t *counts);

/* ---- GPU residency and re-placement ---------------------------------------- */

/**
 * kt_model_gpu_experts() - the experts of one layer that are on the GPU
 *	now (GPU residency; CPU ops of @m skip them).
 * @m: model.
 * @layer: layer index.
 * @mask: receives KT_PLACE_WORDS(E) words; all zero when @m has no GPU
 *	backend.
 *
 * Context: any thread; a consistent view, taken while ops may run and
 *	re-placement may change it.
 * Return: the number of GPU experts of @layer; -EINVAL bad @layer or NULL.
 */
int kt_model_gpu_experts(const struct kt_model *m, uint32_t layer,
			 uint64_t *mask);

/**
 * kt_model_place() - make @masks the GPU experts of @m: upload the ones
 *	that are not on the GPU yet, publish the new set (ops that start
 *	from then on use it), wait until no op uses the old set, then evict
 *	the ones that left. The ring and running ops are not stopped: an op
 *	runs with the set it started with, entirely.
 * @m: model with a GPU backend.
 * @masks: uint64_t[L][KT_PLACE_WORDS(E)], as kt_place_plan() writes it.
 *
 * An expert may leave the GPU only if the host has it (loaded, or
 * readable through the expert cache): otherwise nobody could compute it.
 *
 * Context: any thread but a kt worker; calls are serialised per model;
 *	blocks on uploads and while ops of the old set finish.
 * Return: the number of experts moved (uploaded plus evicted); -ENODEV
 *	   @m has no GPU backend; -EINVAL NULL, or an expert with no host
 *	   copy would leave the GPU (nothing changed); an upload's error
 *	   (nothing published; the uploads done are evicted again).
 */
int kt_model_place(struct kt_model *m, const uint64_t *masks);

/**
 * kt_model_replace() - kt_model_place() with a plan computed from @m's
 *	live routing counters (kt_model_route_counts()).
 * @m: model with a GPU backend.
 * @o: the plan's options; @n_layers, @n_experts and @counts are taken
 *	from @m (leave them zero). Experts on the GPU that the host does
 *	not have stay there and take their layer's places first.
 *
 * Context: as kt_model_place().
 * Return: as kt_model_place(); -EINVAL bad @o.
 */
int kt_model_replace(struct kt_model *m, const struct kt_place_opts *o);

/* ---- deferred experts --------------------------------------------------------- */

/**
 * struct kt_defer_opts - how kt_defer_split() defers.
 * @sz: sizeof(struct kt_defer_opts).
 * @max_deferred: experts deferred per token at most (0: none).
 * @n_experts: E of the model; ids outside 0 .. E - 1 are never deferred
 *	(0: no bound, only negative ids are skipped).
 * @keep: optional bitmap of E bits: experts never deferred (the ones on
 *	the GPU, which are cheap to run at once).
 * @reserved: must be zero.
 */
struct kt_defer_opts {
	size_t sz;
	uint32_t max_deferred;
	uint32_t n_experts;
	const uint64_t *keep;
	uint32_t reserved[8];
};

/**
 * kt_defer_split() - split each token's top-k into immediate and deferred
 *	experts: the (at most @o->max_deferred) lowest router weights of a
 *	token are deferred; of equal weights the later slot is deferred
 *	first. Both outputs keep the [T][k] shape: a slot moved to the other
 *	side reads id -1 and weight 0, which ops skip.
 * @o: options.
 * @ids: [@tokens][@top_k] expert ids of @ids_dtype (KT_DTYPE_I32 or _I64).
 * @ids_dtype: the dtype of @ids, @ids_now and @ids_later.
 * @w: [@tokens][@top_k] router weights.
 * @tokens: T.
 * @top_k: k, 1 .. KT_MOE_MAX_TOPK.
 * @ids_now: receives the immediate ids [T][k].
 * @w_now: receives their weights [T][k].
 * @ids_later: receives the deferred ids [T][k].
 * @w_later: receives their weights [T][k].
 *
 * Invalid ids (negative, >= @n_experts) and @keep experts stay immediate;
 * every token keeps at least one valid expert immediate.
 *
 * Context: any thread.
 * Return: the number of (token, slot) pairs deferred; -EINVAL bad
 *	   arguments.
 */
int kt_defer_split(const struct kt_defer_opts *o, const void *ids,
		   uint8_t ids_dtype, const float *w, uint32_t tokens,
		   uint32_t top_k, void *ids_now, float *w_now,
		   void *ids_later, float *w_later);

/**
 * struct kt_defer_bufs - the split of one op, owned by the caller; must
 *	stay valid until both completions are seen.
 * @ids_now: [T][k] of the op's ids_dtype.
 * @w_now: [T][k].
 * @ids_later: [T][k] of the op's ids_dtype.
 * @w_later: [T][k].
 */
struct kt_defer_bufs {
	void *ids_now;
	float *w_now;
	void *ids_later;
	float *w_later;
};

/**
 * kt_submit_moe_deferred() - split a MoE op's experts (kt_defer_split())
 *	and submit two ops on @ring: the immediate experts into @args->y
 *	(with @args->flags), then the deferred ones into @y_next, the next
 *	layer's output, which they overwrite. The next layer's op must then
 *	carry KT_MOE_F_ACCUMULATE, so that it adds its own result to the
 *	deferred one: ops of one ring run in order, and the deferred op runs
 *	while the caller computes the next layer's attention.
 * @ring: ring with two free entries.
 * @m: model.
 * @layer: layer index.
 * @args: the op as kt_prep_moe() takes it; its ids and w are split.
 * @o: deferral options; NULL or @o->max_deferred 0 defers nothing.
 *	Without @o->keep, the experts of @layer on the GPU now
 *	(kt_model_gpu_experts()) are never deferred; @o->n_experts 0 means
 *	@m's E.
 * @y_next: the next layer's output [T][H] of @args->y_dtype; NULL on the
 *	last layer, which never defers.
 * @bufs: where the split goes; unused when nothing is deferred.
 * @user_data: of the immediate op's completion.
 * @user_data_later: of the deferred op's completion.
 *
 * Context: the ring's owning thread.
 * Return: the number of ops submitted (1 without deferral, else 2);
 *	   -EAGAIN fewer than 2 free entries (nothing queued); -EINVAL bad
 *	   arguments (nothing queued).
 */
int kt_submit_moe_deferred(struct kt_ring *ring, struct kt_model *m,
			   uint32_t layer, const struct kt_moe_args *args,
			   const struct kt_defer_opts *o, void *y_next,
			   const struct kt_defer_bufs *bufs,
			   uint64_t user_data, uint64_t user_data_later);

#ifdef __cplusplus
}
#endif

#endif /* KT_PLACE_H */
