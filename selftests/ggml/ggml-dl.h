/* SPDX-License-Identifier: MIT */
/*
 * ggml-dl.h - llama.cpp's ggml and gguf, loaded with dlopen from the
 * prebuilt libraries scripts/fetch-ggml.sh fetches, for the ggml
 * cross-check (selftests/ggml) and benchmark (scripts/ggml-bench.c):
 * GGUF files written by llama.cpp's own writer, MoE layers computed by
 * ggml's own CPU graph. kt never links them.
 *
 * There are no headers: the few functions used are declared here from
 * ggml.h, gguf.h, ggml-backend.h and ggml-cpu.h of the pinned build
 * (@node-llama-cpp/linux-x64 3.22.1 = ggml 0.25.1, commit 0ad4a86;
 * scripts/fetch-ggml.sh). Only opaque pointers and accessors are used, no
 * struct ggml_tensor layout; what is relied on by value is the ggml_type
 * numbering (the GGUF spec's, stable), struct ggml_init_params and struct
 * gguf_init_params (passed by value), and enum ggml_status 0 = success.
 */
#ifndef KT_SELFTESTS_GGML_GGML_DL_H
#define KT_SELFTESTS_GGML_GGML_DL_H

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* enum ggml_type (ggml.h; the GGUF spec's numbering) */
enum {
	GG_F32 = 0, GG_F16 = 1, GG_Q4_0 = 2, GG_Q8_0 = 8, GG_Q4_K = 12,
	GG_Q5_K = 13, GG_Q6_K = 14, GG_I32 = 26, GG_BF16 = 30, GG_MXFP4 = 39,
};

struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct gguf_context;
struct ggml_backend;
struct ggml_threadpool;

/* ggml.h: struct ggml_init_params, by value */
struct gg_init_params {
	size_t mem_size;
	void *mem_buffer;
	bool no_alloc;
};

/* gguf.h: struct gguf_init_params, by value */
struct gg_gguf_init_params {
	bool no_alloc;
	struct ggml_context **ctx;
};

#define GG_FUNCS(X, C)							\
	X(const char *, version, (void))				\
	X(const char *, commit, (void))					\
	X(struct ggml_context *, init, (struct gg_init_params))		\
	X(void, free, (struct ggml_context *))				\
	X(size_t, tensor_overhead, (void))				\
	X(size_t, graph_overhead_custom, (size_t, bool))		\
	X(struct ggml_tensor *, new_tensor_1d, (struct ggml_context *, int, \
						int64_t))		\
	X(struct ggml_tensor *, new_tensor_2d, (struct ggml_context *, int, \
						int64_t, int64_t))	\
	X(struct ggml_tensor *, new_tensor_3d, (struct ggml_context *, int, \
						int64_t, int64_t, int64_t)) \
	X(struct ggml_tensor *, set_name, (struct ggml_tensor *, const char *)) \
	X(struct ggml_tensor *, get_tensor, (struct ggml_context *,	\
					     const char *))		\
	X(void *, get_data, (const struct ggml_tensor *))		\
	X(size_t, nbytes, (const struct ggml_tensor *))			\
	X(size_t, row_size, (int, int64_t))				\
	X(const char *, type_name, (int))				\
	X(int64_t, blck_size, (int))					\
	X(size_t, type_size, (int))					\
	X(size_t, quantize_chunk, (int, const float *, void *, int64_t, \
				   int64_t, int64_t, const float *))	\
	X(struct ggml_tensor *, mul_mat_id, (struct ggml_context *,	\
					     struct ggml_tensor *,	\
					     struct ggml_tensor *,	\
					     struct ggml_tensor *))	\
	X(struct ggml_tensor *, swiglu_split, (struct ggml_context *,	\
					       struct ggml_tensor *,	\
					       struct ggml_tensor *))	\
	X(struct ggml_tensor *, mul, (struct ggml_context *,		\
				      struct ggml_tensor *,		\
				      struct ggml_tensor *))		\
	X(struct ggml_tensor *, swiglu_oai, (struct ggml_context *,	\
					     struct ggml_tensor *,	\
					     struct ggml_tensor *, float, \
					     float))			\
	X(struct ggml_tensor *, add, (struct ggml_context *,		\
				      struct ggml_tensor *,		\
				      struct ggml_tensor *))		\
	X(struct ggml_tensor *, add_id, (struct ggml_context *,		\
					 struct ggml_tensor *,		\
					 struct ggml_tensor *,		\
					 struct ggml_tensor *))		\
	X(struct ggml_tensor *, cont, (struct ggml_context *,		\
				       struct ggml_tensor *))		\
	X(struct ggml_tensor *, cpy, (struct ggml_context *,		\
				      struct ggml_tensor *,		\
				      struct ggml_tensor *))		\
	X(struct ggml_tensor *, get_rows, (struct ggml_context *,	\
					   struct ggml_tensor *,	\
					   struct ggml_tensor *))	\
	X(struct ggml_tensor *, reshape_2d, (struct ggml_context *,	\
					     struct ggml_tensor *, int64_t, \
					     int64_t))			\
	X(struct ggml_tensor *, reshape_3d, (struct ggml_context *,	\
					     struct ggml_tensor *, int64_t, \
					     int64_t, int64_t))		\
	X(struct ggml_tensor *, view_2d, (struct ggml_context *,	\
					  struct ggml_tensor *, int64_t, \
					  int64_t, size_t, size_t))	\
	X(struct ggml_cgraph *, new_graph_custom, (struct ggml_context *, \
						   size_t, bool))	\
	X(void, build_forward_expand, (struct ggml_cgraph *,		\
				       struct ggml_tensor *))		\
	X(int, backend_graph_compute, (struct ggml_backend *,		\
				       struct ggml_cgraph *))		\
	X(void, backend_free, (struct ggml_backend *))			\
	X(void, threadpool_params_init, (void *, int))			\
	C(struct gguf_context *, gguf_init_empty, (void))		\
	C(struct gguf_context *, gguf_init_from_file, (const char *,	\
				struct gg_gguf_init_params))		\
	C(void, gguf_free, (struct gguf_context *))			\
	C(int64_t, gguf_find_key, (const struct gguf_context *,		\
				   const char *))			\
	C(uint32_t, gguf_get_val_u32, (const struct gguf_context *,	\
				       int64_t))			\
	C(void, gguf_set_val_str, (struct gguf_context *, const char *, \
				   const char *))			\
	C(void, gguf_set_val_u32, (struct gguf_context *, const char *, \
				   uint32_t))				\
	C(void, gguf_set_val_f32, (struct gguf_context *, const char *, \
				   float))				\
	C(int64_t, gguf_find_tensor, (const struct gguf_context *,	\
				      const char *))			\
	C(int, gguf_get_tensor_type, (const struct gguf_context *,	\
				      int64_t))				\
	C(void, gguf_add_tensor, (struct gguf_context *,		\
				  const struct ggml_tensor *))		\
	C(bool, gguf_write_to_file, (const struct gguf_context *,	\
				     const char *, bool))

/* ggml-cpu.h, from the CPU variant library */
#define GG_CPU_FUNCS(X)							\
	X(struct ggml_backend *, backend_cpu_init, (void))		\
	X(void, backend_cpu_set_n_threads, (struct ggml_backend *, int)) \
	X(struct ggml_threadpool *, threadpool_new, (void *))		\
	X(void, threadpool_free, (struct ggml_threadpool *))		\
	X(void, backend_cpu_set_threadpool, (struct ggml_backend *,	\
					     struct ggml_threadpool *))

/*
 * struct ggml_threadpool_params (ggml.h: a cpumask of GGML_MAX_N_THREADS
 * bools, then n_threads, prio, poll, strict_cpu, paused: 532 bytes in
 * 0.25.1) is only filled by ggml_threadpool_params_init() and passed by
 * pointer: this room is its upper bound.
 */
union gg_threadpool_params {
	char bytes[4096];
	long double align;
};

struct gg {
	void *base, *cpu;
	char dir[PATH_MAX - 64];
	char cpu_name[32];		/* the variant chosen: "zen4" */
#define GG_X(ret, name, args) ret (*name) args;
#define GG_C(ret, name, args) ret (*name) args;
	GG_FUNCS(GG_X, GG_C)
	GG_CPU_FUNCS(GG_X)
#undef GG_X
#undef GG_C
};

/* the CPU variants of the package (GGML_CPU_ALL_VARIANTS) */
static const char *const gg_cpu_variants[] = {
	"sapphirerapids", "zen4", "cooperlake", "cascadelake", "icelake",
	"cannonlake", "skylakex", "alderlake", "haswell", "piledriver",
	"ivybridge", "sandybridge", "sse42", "x64",
};

static inline bool gg_dir_has(const char *dir)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/libggml-base.so", dir);
	return access(p, R_OK) == 0;
}

/*
 * Find the libraries: $KT_GGML_DIR, then build/ggml from the working
 * directory (the top of the tree), then beside the binary's build tree
 * (build/selftests/ggml/X, build/san-*\/selftests/ggml/X, build/scripts/X).
 */
static inline int gg_find(struct gg *g)
{
	static const char *const up[] = { "../ggml", "../../ggml",
					  "../../../ggml" };
	const char *env = getenv("KT_GGML_DIR");
	char self[PATH_MAX], *d;
	ssize_t l;
	unsigned int i;

	if (env && *env) {
		snprintf(g->dir, sizeof(g->dir), "%s", env);
		return gg_dir_has(g->dir) ? 0 : -ENOENT;
	}
	snprintf(g->dir, sizeof(g->dir), "build/ggml");
	if (gg_dir_has(g->dir))
		return 0;
	l = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[l > 0 ? l : 0] = '\0';
	d = dirname(self);
	for (i = 0; i < sizeof(up) / sizeof(up[0]); i++) {
		snprintf(g->dir, sizeof(g->dir), "%s/%s", d, up[i]);
		if (gg_dir_has(g->dir))
			return 0;
	}
	snprintf(g->dir, sizeof(g->dir), "%s", env && *env ? env :
		 "$KT_GGML_DIR or build/ggml");
	return -ENOENT;
}

/*
 * Load libggml-base.so and the best CPU variant this CPU runs (the
 * highest ggml_backend_score(), as ggml's backend registry chooses;
 * $KT_GGML_CPU=name forces one). Return: 0, or -ENOENT / -ENOSYS with
 * @why saying what is missing.
 */
static inline int gg_open(struct gg *g, char *why, size_t n)
{
	char p[PATH_MAX];
	const char *force = getenv("KT_GGML_CPU");
	int best = 0;
	unsigned int i;

	memset(g, 0, sizeof(*g));
	if (gg_find(g)) {
		snprintf(why, n, "no ggml libraries in %.200s "
			 "(scripts/fetch-ggml.sh fetches them)", g->dir);
		return -ENOENT;
	}
	snprintf(p, sizeof(p), "%s/libggml-base.so", g->dir);
	g->base = dlopen(p, RTLD_NOW | RTLD_LOCAL);
	if (!g->base) {
		snprintf(why, n, "dlopen %.200s: %.200s", p, dlerror());
		return -ENOENT;
	}
#define GG_X(ret, name, args)						\
	*(void **)&g->name = dlsym(g->base, "ggml_" #name);		\
	if (!g->name) {							\
		snprintf(why, n, "libggml-base.so lacks ggml_%s", #name);\
		return -ENOSYS;						\
	}
#define GG_C(ret, name, args)						\
	*(void **)&g->name = dlsym(g->base, #name);			\
	if (!g->name) {							\
		snprintf(why, n, "libggml-base.so lacks %s", #name);\
		return -ENOSYS;						\
	}
	GG_FUNCS(GG_X, GG_C)
#undef GG_C
	for (i = 0; i < sizeof(gg_cpu_variants) / sizeof(*gg_cpu_variants);
	     i++) {
		int (*score)(void);
		void *h;
		int s;

		if (force && strcmp(force, gg_cpu_variants[i]))
			continue;
		snprintf(p, sizeof(p), "%s/libggml-cpu-%s.so", g->dir,
			 gg_cpu_variants[i]);
		h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
		if (!h)
			continue;
		*(void **)&score = dlsym(h, "ggml_backend_score");
		s = score ? score() : 0;
		if (s > best) {
			if (g->cpu)
				dlclose(g->cpu);
			g->cpu = h;
			best = s;
			snprintf(g->cpu_name, sizeof(g->cpu_name), "%s",
				 gg_cpu_variants[i]);
		} else {
			dlclose(h);
		}
	}
	if (!g->cpu) {
		snprintf(why, n, "no libggml-cpu-%.32s.so in %.200s runs on this CPU",
			 force ? force : "*", g->dir);
		return -ENOENT;
	}
	snprintf(p, sizeof(p), "libggml-cpu-%s.so", g->cpu_name);
#undef GG_X
#define GG_X(ret, name, args)						\
	*(void **)&g->name = dlsym(g->cpu, "ggml_" #name);		\
	if (!g->name) {							\
		snprintf(why, n, "libggml-base.so lacks ggml_%s", #name);\
		return -ENOSYS;						\
	}
	GG_CPU_FUNCS(GG_X)
#undef GG_X
	return 0;
}

/* The libraries stay loaded: ggml keeps global state in them. */

/* enum llama_ftype (llama.h): what llama-quantize's type names select */
enum {
	GG_FTYPE_Q4_0 = 2, GG_FTYPE_Q8_0 = 7, GG_FTYPE_Q4_K_M = 15,
	GG_FTYPE_Q5_K_M = 17, GG_FTYPE_Q6_K = 18,
};

/*
 * struct llama_model_quantize_params (llama.h) starts with nthread and
 * ftype in every release; the rest is only filled by
 * llama_model_quantize_default_params(), returned in memory (it is larger
 * than 16 bytes): this room is its upper bound.
 */
union gg_quantize_params {
	struct {
		int32_t nthread;
		int32_t ftype;
	} f;
	char bytes[1024];
	void *align;
};

/* llama.cpp's log, kept to its warnings and errors */
static inline void gg_llama_log(int level, const char *text, void *user)
{
	(void)user;
	if (level == 3 || level == 4)	/* GGML_LOG_LEVEL_WARN, _ERROR */
		fprintf(stderr, "# llama.cpp: %s", text);
}

/*
 * Quantize the GGUF file @in to @out with llama.cpp's own quantizer,
 * llama_model_quantize() of libllama (what the llama-quantize tool runs),
 * to the llama_ftype @ftype with its tensor-type rules (Q4_K_M: Q6_K down
 * tensors in the use_more_bits() layers). @in needs the keys
 * gg_set_llama_keys() writes. Return: 0; -ENOENT with @why when libllama
 * is not there; -EIO when it fails.
 */
static inline int gg_llama_quantize(const struct gg *g, const char *in,
				    const char *out, int ftype, char *why,
				    size_t n)
{
	union gg_quantize_params (*defaults)(void);
	uint32_t (*quantize)(const char *, const char *,
			     const union gg_quantize_params *);
	void (*init)(void), (*log_set)(void (*)(int, const char *, void *),
				       void *);
	union gg_quantize_params qp;
	char p[PATH_MAX];
	void *h;

	snprintf(p, sizeof(p), "%s/libllama.v0.5.0.so", g->dir);
	h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(why, n, "dlopen %.200s: %.200s", p, dlerror());
		return -ENOENT;
	}
	*(void **)&defaults = dlsym(h, "llama_model_quantize_default_params");
	*(void **)&quantize = dlsym(h, "llama_model_quantize");
	*(void **)&init = dlsym(h, "llama_backend_init");
	*(void **)&log_set = dlsym(h, "llama_log_set");
	if (!defaults || !quantize || !init || !log_set) {
		snprintf(why, n, "%.200s lacks llama_model_quantize", p);
		return -ENOENT;
	}
	log_set(gg_llama_log, NULL);
	init();
	qp = defaults();
	qp.f.nthread = 2;
	qp.f.ftype = ftype;
	if (quantize(in, out, &qp)) {
		snprintf(why, n, "llama_model_quantize(%.100s, ftype %d) failed",
			 in, ftype);
		return -EIO;
	}
	return 0;
}

/*
 * Random weights for the three expert tensors of @L layers, quantized by
 * ggml_quantize_chunk() to @type (gate, up) and @type_down, in a GGUF of
 * @arch (NULL: qwen3moe) written by gguf_write_to_file(). ggml shapes
 * [H, I, E] (gate, up) and [I, H, E] (down). @bias > 0 adds F32 expert
 * biases uniform in [-bias, bias) as llama.cpp's gpt-oss files have them:
 * blk.L.ffn_{gate,up}_exps.bias [I, E], blk.L.ffn_down_exps.bias [H, E].
 * Return: 0, or -EIO.
 */
struct gg_moe_cfg {
	uint32_t H, I, E, k, L;
	int type, type_down;
	uint64_t seed;
	const char *arch;
	float bias;
	bool llama_keys;
};

static inline uint64_t gg_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* uniform in [-1, 1) */
static inline float gg_uniform(uint64_t *s)
{
	return (float)((double)(gg_rand(s) >> 11) / (double)(1ull << 52) - 1.0);
}

/*
 * The keys llama.cpp's model loader requires of every file before it
 * quantizes one (llama_model::load_hparams): a context length, attention
 * heads of 128 that divide @H, and the RMS norm epsilon.
 */
static inline void gg_set_llama_keys(const struct gg *g,
				     struct gguf_context *gf, const char *arch,
				     uint32_t H)
{
	static const char *const key[5] = {
		"context_length", "attention.head_count",
		"attention.head_count_kv", "attention.key_length",
		"attention.value_length",
	};
	const uint32_t val[5] = { 4096, H / 128, 1, 128, 128 };
	char name[96];
	unsigned int i;

	for (i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "%s.%s", arch, key[i]);
		g->gguf_set_val_u32(gf, name, val[i]);
	}
	snprintf(name, sizeof(name), "%s.attention.layer_norm_rms_epsilon",
		 arch);
	g->gguf_set_val_f32(gf, name, 1e-6f);
}

static inline int gg_write_moe(const struct gg *g, const struct gg_moe_cfg *c,
			       const char *path)
{
	static const char *const mat[3] = { "gate", "up", "down" };
	static const char *const key[5] = {
		"block_count", "embedding_length",
		"expert_feed_forward_length", "expert_count",
		"expert_used_count",
	};
	const uint32_t val[5] = { c->L, c->H, c->I, c->E, c->k };
	const char *arch = c->arch ? c->arch : "qwen3moe";
	size_t per = (size_t)c->H * c->I;
	size_t mem = 3 * c->L * (2 * g->tensor_overhead() +
		     g->row_size(GG_F32, (int64_t)per) * c->E +
		     g->row_size(GG_F32, c->H + c->I) * c->E) + (1 << 20);
	struct gg_init_params ip = { mem, NULL, false };
	struct ggml_context *ctx = g->init(ip);
	struct gguf_context *gf = g->gguf_init_empty();
	float *src = malloc(per * sizeof(float));
	uint64_t s = c->seed * 0x9e3779b97f4a7c15ull + 1;
	uint32_t l, m, e;
	size_t i;
	int ret = -EIO;

	if (!ctx || !gf || !src)
		goto out;
	g->gguf_set_val_str(gf, "general.architecture", arch);
	g->gguf_set_val_str(gf, "general.name", "kt ggml cross-check");
	for (i = 0; i < 5; i++) {
		char name[96];

		snprintf(name, sizeof(name), "%s.%s", arch, key[i]);
		g->gguf_set_val_u32(gf, name, val[i]);
	}
	if (c->llama_keys)
		gg_set_llama_keys(g, gf, arch, c->H);
	for (l = 0; l < c->L; l++) {
		for (m = 0; m < 3; m++) {
			int type = m == 2 ? c->type_down : c->type;
			int64_t K = m == 2 ? c->I : c->H, N = m == 2 ? c->H : c->I;
			struct ggml_tensor *t;
			char name[64];
			uint8_t *d;

			t = g->new_tensor_3d(ctx, type, K, N, c->E);
			if (!t)
				goto out;
			snprintf(name, sizeof(name), "blk.%u.ffn_%s_exps.weight",
				 l, mat[m]);
			g->set_name(t, name);
			d = g->get_data(t);
			for (e = 0; e < c->E; e++) {
				for (i = 0; i < per; i++)
					src[i] = gg_uniform(&s);
				g->quantize_chunk(type, src, d, 0, N, K, NULL);
				d += g->row_size(type, K) * (size_t)N;
			}
			g->gguf_add_tensor(gf, t);
		}
		/* after the layer's weights: a file without keeps its bits */
		for (m = 0; m < 3 && c->bias > 0; m++) {
			int64_t N = m == 2 ? c->H : c->I;
			struct ggml_tensor *t;
			char name[64];
			float *b;

			t = g->new_tensor_2d(ctx, GG_F32, N, c->E);
			if (!t)
				goto out;
			snprintf(name, sizeof(name), "blk.%u.ffn_%s_exps.bias",
				 l, mat[m]);
			g->set_name(t, name);
			b = g->get_data(t);
			for (i = 0; i < (size_t)N * c->E; i++)
				b[i] = c->bias * gg_uniform(&s);
			g->gguf_add_tensor(gf, t);
		}
	}
	if (g->gguf_write_to_file(gf, path, false))
		ret = 0;
out:
	free(src);
	if (gf)
		g->gguf_free(gf);
	if (ctx)
		g->free(ctx);
	return ret;
}

/*
 * One MoE layer as llama.cpp's build_moe_ffn() builds it (ggml 0.25.1,
 * LLM_FFN_SILU with a gate, weights after down, no bias or scaling):
 *
 *	cur  = reshape_3d(x, H, 1, T)
 *	up   = mul_mat_id(up_exps, cur, ids)		[I, k, T]
 *	gate = mul_mat_id(gate_exps, cur, ids)		[I, k, T]
 *	par  = swiglu_split(gate, up)			silu(gate) * up
 *	exps = mul_mat_id(down_exps, par, ids)		[H, k, T]
 *	exps = mul(exps, w)				w: [1, k, T]
 *	y    = view(exps, slot 0) + view(slot 1) + ...	[H, T]
 *
 * @x [T][H] f32, @ids [T][k] i32, @w [T][k] f32 are tensors of @ctx.
 * gg_moe_par() is the first half (par), gg_moe_down() the second.
 */
static inline struct ggml_tensor *
gg_moe_par(const struct gg *g, struct ggml_context *ctx,
	   struct ggml_tensor *gate, struct ggml_tensor *up,
	   struct ggml_tensor *x, struct ggml_tensor *ids, uint32_t H,
	   uint32_t T)
{
	struct ggml_tensor *cur = g->reshape_3d(ctx, x, H, 1, T);
	struct ggml_tensor *u = g->mul_mat_id(ctx, up, cur, ids);

	return g->swiglu_split(ctx, g->mul_mat_id(ctx, gate, cur, ids), u);
}

/* exps [H, k, T] times w, the k slots added */
static inline struct ggml_tensor *
gg_moe_weigh(const struct gg *g, struct ggml_context *ctx,
	     struct ggml_tensor *exps, struct ggml_tensor *w, uint32_t H,
	     uint32_t k, uint32_t T)
{
	struct ggml_tensor *y = NULL;
	size_t row = g->row_size(GG_F32, H);
	uint32_t j;

	exps = g->mul(ctx, exps, g->reshape_3d(ctx, w, 1, k, T));
	for (j = 0; j < k; j++) {
		struct ggml_tensor *v = g->view_2d(ctx, exps, H, T, row * k,
						   row * j);

		y = j ? g->add(ctx, y, v) : v;
	}
	return k == 1 ? g->cont(ctx, y) : y;
}

static inline struct ggml_tensor *
gg_moe_down(const struct gg *g, struct ggml_context *ctx,
	    struct ggml_tensor *down, struct ggml_tensor *par,
	    struct ggml_tensor *ids, struct ggml_tensor *w, uint32_t H,
	    uint32_t k, uint32_t T)
{
	return gg_moe_weigh(g, ctx, g->mul_mat_id(ctx, down, par, ids), w, H,
			    k, T);
}

static inline struct ggml_tensor *
gg_moe_layer(const struct gg *g, struct ggml_context *ctx,
	     struct ggml_tensor *gate, struct ggml_tensor *up,
	     struct ggml_tensor *down, struct ggml_tensor *x,
	     struct ggml_tensor *ids, struct ggml_tensor *w, uint32_t H,
	     uint32_t k, uint32_t T)
{
	return gg_moe_down(g, ctx, down, gg_moe_par(g, ctx, gate, up, x, ids,
						   H, T), ids, w, H, k, T);
}

/*
 * The same for gpt-oss, as llama.cpp's llm_build_openai_moe() calls
 * build_moe_ffn() (LLM_FFN_SWIGLU_OAI_MOE, the experts' biases; weights
 * after down):
 *
 *	up   = add_id(mul_mat_id(up_exps, cur, ids), up_b, ids)
 *	gate = add_id(mul_mat_id(gate_exps, cur, ids), gate_b, ids)
 *	par  = swiglu_oai(gate, up, 1.702, 7)
 *	exps = add_id(mul_mat_id(down_exps, par, ids), down_b, ids)
 *	y    = the k slots of exps * w added, as above
 *
 * @b: gate, up and down biases ([I, E], [I, E], [H, E] f32); @gu, when
 * not NULL, gets the biased gate and up (the activation's inputs).
 */
#define GG_OAI_ALPHA	1.702f
#define GG_OAI_LIMIT	7.0f

static inline struct ggml_tensor *
gg_oss_par(const struct gg *g, struct ggml_context *ctx,
	   struct ggml_tensor *gate, struct ggml_tensor *up,
	   struct ggml_tensor *const b[3], struct ggml_tensor *x,
	   struct ggml_tensor *ids, uint32_t H, uint32_t T,
	   struct ggml_tensor *gu[2])
{
	struct ggml_tensor *cur = g->reshape_3d(ctx, x, H, 1, T);
	struct ggml_tensor *u = g->mul_mat_id(ctx, up, cur, ids);
	struct ggml_tensor *gt;

	u = g->add_id(ctx, u, b[1], ids);
	gt = g->add_id(ctx, g->mul_mat_id(ctx, gate, cur, ids), b[0], ids);
	if (gu) {
		gu[0] = gt;
		gu[1] = u;
	}
	return g->swiglu_oai(ctx, gt, u, GG_OAI_ALPHA, GG_OAI_LIMIT);
}

static inline struct ggml_tensor *
gg_oss_down(const struct gg *g, struct ggml_context *ctx,
	    struct ggml_tensor *down, struct ggml_tensor *bias,
	    struct ggml_tensor *par, struct ggml_tensor *ids,
	    struct ggml_tensor *w, uint32_t H, uint32_t k, uint32_t T)
{
	struct ggml_tensor *exps = g->mul_mat_id(ctx, down, par, ids);

	if (bias)
		exps = g->add_id(ctx, exps, bias, ids);
	return gg_moe_weigh(g, ctx, exps, w, H, k, T);
}

#endif /* KT_SELFTESTS_GGML_GGML_DL_H */
