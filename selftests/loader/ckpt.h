/* SPDX-License-Identifier: MIT */
/*
 * ckpt.h - test checkpoints written from C: safetensors files (single or
 * sharded with an index), config.json in Qwen-MoE, DeepSeek-V3 and Mixtral
 * styles, BF16/F16/F32/FP8 sources; plus an f64 reference MoE forward
 * computed from the exact values the source files hold.
 */
#ifndef KT_SELFTESTS_LOADER_CKPT_H
#define KT_SELFTESTS_LOADER_CKPT_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kt/kt.h>

enum tck_style { TCK_QWEN, TCK_DEEPSEEK, TCK_MIXTRAL };
enum tck_dtype { TCK_F32, TCK_BF16, TCK_F16, TCK_FP8 };

struct tck {
	enum tck_style style;
	enum tck_dtype dtype;
	uint32_t hidden, inter, n_experts, n_layers, top_k;
	uint32_t shards;	/* 1: model.safetensors; >1: index + shards */
	uint64_t seed;
	/* filled by tck_write: the MoE layer numbers and exact weights */
	uint32_t n_moe;
	int32_t moe_ids[16];
	float *w;		/* [n_moe][E][3][I*H], gate, up, down */
};

#define TCK(st, dt, h, i, e, l, k, sh, sd)				\
	((struct tck){ .style = (st), .dtype = (dt), .hidden = (h),	\
		       .inter = (i), .n_experts = (e), .n_layers = (l),	\
		       .top_k = (k), .shards = (sh), .seed = (sd) })

static inline float *tck_mat(const struct tck *c, uint32_t l, uint32_t e,
			     int m)
{
	size_t per = (size_t)c->inter * c->hidden;

	return c->w + (((size_t)l * c->n_experts + e) * 3 + (size_t)m) * per;
}

static inline uint64_t tck_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Uniform in [-1, 1). */
static inline float tck_uniform(uint64_t *s)
{
	return (float)((double)(tck_rand(s) >> 11) / (double)(1ull << 52) - 1.0);
}

static inline uint16_t tck_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static inline float tck_from_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* f16 through the compiler's own conversions: independent of kt's. */
static inline uint16_t tck_f16(float f)
{
	_Float16 h = (_Float16)f;
	uint16_t u;

	memcpy(&u, &h, 2);
	return u;
}

static inline float tck_from_f16(uint16_t u)
{
	_Float16 h;

	memcpy(&h, &u, 2);
	return (float)h;
}

/* E4M3FN: nearest representable, ties to even mantissa, |v| <= 448. */
static inline float tck_fp8_value(uint8_t b)
{
	int e = (b >> 3) & 15, m = b & 7;
	double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);

	return (float)((b & 0x80) ? -v : v);
}

static inline uint8_t tck_fp8(float v)
{
	uint8_t best = 0, s = v < 0 ? 0x80 : 0;
	double a = fabs(v), bd = 1e30;
	int b;

	/* 127 magnitudes: a linear search keeps this obviously right */
	for (b = 0; b < 127; b++) {
		double d = fabs(tck_fp8_value((uint8_t)b) - a);

		if (d < bd || (d == bd && !(b & 1))) {
			bd = d;
			best = (uint8_t)b;
		}
	}
	return best | s;
}

struct tck_tensor {
	char name[256];
	const char *dtype;
	uint64_t shape[2];
	void *data;
	size_t bytes;
};

struct tck_list {
	struct tck_tensor *t;
	size_t n, cap;
};

static inline void tck_add(struct tck_list *l, const char *name,
			   const char *dtype, uint64_t r, uint64_t c,
			   void *data, size_t bytes)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 64;
		l->t = realloc(l->t, l->cap * sizeof(*l->t));
	}
	snprintf(l->t[l->n].name, sizeof(l->t[l->n].name), "%s", name);
	l->t[l->n].dtype = dtype;
	l->t[l->n].shape[0] = r;
	l->t[l->n].shape[1] = c;
	l->t[l->n].data = data;
	l->t[l->n].bytes = bytes;
	l->n++;
}

/* One safetensors file of tensors [from, to) with stride @step. */
static inline int tck_write_st(const char *path, struct tck_list *l,
			       size_t first, size_t step)
{
	size_t cap = 1 << 20, len = 0, i;
	char *h = malloc(cap);
	uint64_t off = 0, hl;
	FILE *f;

	len += (size_t)snprintf(h + len, cap - len,
				"{\"__metadata__\":{\"format\":\"pt\"}");
	for (i = first; i < l->n; i += step) {
		char shape[64];

		/* a second dimension of 0 writes a 1-D tensor */
		if (l->t[i].shape[1])
			snprintf(shape, sizeof(shape), "%llu,%llu",
				 (unsigned long long)l->t[i].shape[0],
				 (unsigned long long)l->t[i].shape[1]);
		else
			snprintf(shape, sizeof(shape), "%llu",
				 (unsigned long long)l->t[i].shape[0]);
		len += (size_t)snprintf(h + len, cap - len,
			",\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%llu,%llu]}",
			l->t[i].name, l->t[i].dtype, shape,
			(unsigned long long)off,
			(unsigned long long)(off + l->t[i].bytes));
		off += l->t[i].bytes;
	}
	h[len++] = '}';
	while (len % 8)
		h[len++] = ' ';
	f = fopen(path, "wb");
	if (!f) {
		free(h);
		return -errno;
	}
	hl = len;
	fwrite(&hl, 8, 1, f);
	fwrite(h, 1, len, f);
	for (i = first; i < l->n; i += step)
		fwrite(l->t[i].data, 1, l->t[i].bytes, f);
	free(h);
	return fclose(f) ? -EIO : 0;
}

/* Make a source-dtype copy of @src [r][c]; write back the exact values. */
static inline void tck_encode(struct tck_list *l, struct tck *c,
			      const char *name, float *src, uint64_t r,
			      uint64_t cols)
{
	size_t n = r * cols, i;

	switch (c->dtype) {
	case TCK_F32: {
		float *d = malloc(n * 4);

		memcpy(d, src, n * 4);
		tck_add(l, name, "F32", r, cols, d, n * 4);
		break;
	}
	case TCK_BF16: {
		uint16_t *d = malloc(n * 2);

		for (i = 0; i < n; i++) {
			d[i] = tck_bf16(src[i]);
			src[i] = tck_from_bf16(d[i]);
		}
		tck_add(l, name, "BF16", r, cols, d, n * 2);
		break;
	}
	case TCK_F16: {
		uint16_t *d = malloc(n * 2);

		for (i = 0; i < n; i++) {
			d[i] = tck_f16(src[i]);
			src[i] = tck_from_f16(d[i]);
		}
		tck_add(l, name, "F16", r, cols, d, n * 2);
		break;
	}
	case TCK_FP8: {
		uint64_t br = (r + 127) / 128, bc = (cols + 127) / 128, a, b, x, y;
		uint8_t *d = malloc(n);
		float *s = malloc(br * bc * 4);
		char sname[200];

		for (a = 0; a < br; a++)
			for (b = 0; b < bc; b++) {
				float amax = 0;

				for (x = a * 128; x < r && x < a * 128 + 128; x++)
					for (y = b * 128; y < cols && y < b * 128 + 128; y++)
						amax = fmaxf(amax, fabsf(src[x * cols + y]));
				s[a * bc + b] = amax > 0 ? amax / 448.0f : 1.0f;
				for (x = a * 128; x < r && x < a * 128 + 128; x++)
					for (y = b * 128; y < cols && y < b * 128 + 128; y++) {
						size_t k = x * cols + y;

						d[k] = tck_fp8(src[k] / s[a * bc + b]);
						src[k] = tck_fp8_value(d[k]) * s[a * bc + b];
					}
			}
		tck_add(l, name, "F8_E4M3", r, cols, d, n);
		snprintf(sname, sizeof(sname), "%s_scale_inv", name);
		tck_add(l, sname, "F32", br, bc, s, br * bc * 4);
		break;
	}
	}
}

static inline int tck_write(struct tck *c, const char *dir)
{
	static const char *const qn[3] = { "gate_proj", "up_proj", "down_proj" };
	static const char *const mn[3] = { "w1", "w3", "w2" };
	uint64_t seed = c->seed ? c->seed : 88172645463325252ull;
	size_t per = (size_t)c->inter * c->hidden, i;
	struct tck_list l = { 0 };
	char path[512], name[200];
	uint32_t layer, e;
	int m, ret = 0;
	FILE *f;
	float *tmp;

	mkdir(dir, 0755);
	c->n_moe = 0;
	for (layer = 0; layer < c->n_layers; layer++)
		if (c->style != TCK_DEEPSEEK || layer >= 1)
			c->moe_ids[c->n_moe++] = (int32_t)layer;
	c->w = malloc((size_t)c->n_moe * c->n_experts * 3 * per * sizeof(float));
	tmp = malloc(per * 4 * sizeof(float));
	/* a non-expert tensor first, so expert data is not at offset 0; with
	 * an odd seed it is 7 bytes long and every later tensor is unaligned
	 * (safetensors does not promise alignment) */
	for (i = 0; i < 7; i++)
		tmp[i] = (float)i;
	if (c->seed & 1)
		tck_add(&l, "model.norm.weight", "U8", 1, 7,
			memcpy(malloc(7), tmp, 7), 7);
	else
		tck_add(&l, "model.norm.weight", "F32", 1, 7,
			memcpy(malloc(28), tmp, 28), 28);
	for (layer = 0; layer < c->n_layers; layer++) {
		uint32_t li;
		int moe = 0;

		for (li = 0; li < c->n_moe; li++)
			if (c->moe_ids[li] == (int32_t)layer)
				moe = 1;
		if (!moe) {
			/* DeepSeek's dense layer: its MLP is not an expert */
			for (m = 0; m < 3; m++) {
				uint64_t r = m == 2 ? c->hidden : 2 * c->inter;
				uint64_t cc = m == 2 ? 2 * c->inter : c->hidden;

				for (i = 0; i < r * cc; i++)
					tmp[i] = tck_uniform(&seed) * 0.1f;
				snprintf(name, sizeof(name), "model.layers.%u.mlp.%s.weight",
					 layer, qn[m]);
				tck_encode(&l, c, name, tmp, r, cc);
			}
			continue;
		}
		li = 0;
		while (c->moe_ids[li] != (int32_t)layer)
			li++;
		snprintf(name, sizeof(name), "model.layers.%u.%s.gate.weight", layer,
			 c->style == TCK_MIXTRAL ? "block_sparse_moe" : "mlp");
		for (i = 0; i < (size_t)c->n_experts * c->hidden; i++)
			tmp[i] = tck_uniform(&seed);
		tck_add(&l, name, "F32", c->n_experts, c->hidden,
			memcpy(malloc((size_t)c->n_experts * c->hidden * 4), tmp,
			       (size_t)c->n_experts * c->hidden * 4),
			(size_t)c->n_experts * c->hidden * 4);
		for (e = 0; e < c->n_experts; e++)
			for (m = 0; m < 3; m++) {
				float *w = tck_mat(c, li, e, m);
				/* bell-shaped (sum of three uniforms), a few
				 * 3x outliers, like trained weights */
				for (i = 0; i < per; i++) {
					w[i] = (tck_uniform(&seed) + tck_uniform(&seed) +
						tck_uniform(&seed)) * 0.02f;
					if (tck_rand(&seed) % 997 == 0)
						w[i] *= 3;
				}
				if (c->style == TCK_MIXTRAL)
					snprintf(name, sizeof(name),
						 "model.layers.%u.block_sparse_moe.experts.%u.%s.weight",
						 layer, e, mn[m]);
				else
					snprintf(name, sizeof(name),
						 "model.layers.%u.mlp.experts.%u.%s.weight",
						 layer, e, qn[m]);
				tck_encode(&l, c, name, w, m == 2 ? c->hidden : c->inter,
					   m == 2 ? c->inter : c->hidden);
			}
		if (c->style == TCK_DEEPSEEK)
			for (m = 0; m < 3; m++) {
				for (i = 0; i < per; i++)
					tmp[i] = tck_uniform(&seed) * 0.05f;
				snprintf(name, sizeof(name),
					 "model.layers.%u.mlp.shared_experts.%s.weight",
					 layer, qn[m]);
				tck_encode(&l, c, name, tmp, m == 2 ? c->hidden : c->inter,
					   m == 2 ? c->inter : c->hidden);
			}
	}
	free(tmp);
	if (c->shards <= 1) {
		snprintf(path, sizeof(path), "%s/model.safetensors", dir);
		ret = tck_write_st(path, &l, 0, 1);
	} else {
		uint32_t s;

		for (s = 0; s < c->shards && !ret; s++) {
			snprintf(path, sizeof(path), "%s/model-%05u-of-%05u.safetensors",
				 dir, s + 1, c->shards);
			ret = tck_write_st(path, &l, s, c->shards);
		}
		snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
		f = fopen(path, "w");
		fprintf(f, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
		for (i = 0; i < l.n; i++)
			fprintf(f, "%s\"%s\": \"model-%05zu-of-%05u.safetensors\"",
				i ? ", " : "", l.t[i].name, i % c->shards + 1, c->shards);
		fprintf(f, "}}\n");
		fclose(f);
	}
	snprintf(path, sizeof(path), "%s/config.json", dir);
	f = fopen(path, "w");
	switch (c->style) {
	case TCK_QWEN:
		fprintf(f, "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\",\n"
			" \"hidden_size\": %u, \"intermediate_size\": %u, \"moe_intermediate_size\": %u,\n"
			" \"num_experts\": %u, \"num_experts_per_tok\": %u, \"num_hidden_layers\": %u,\n"
			" \"decoder_sparse_step\": 1, \"mlp_only_layers\": [], \"torch_dtype\": \"bfloat16\"}\n",
			c->hidden, 3 * c->inter, c->inter, c->n_experts, c->top_k,
			c->n_layers);
		break;
	case TCK_DEEPSEEK:
		fprintf(f, "{\"model_type\": \"deepseek_v3\", \"hidden_size\": %u,\n"
			" \"intermediate_size\": %u, \"moe_intermediate_size\": %u,\n"
			" \"n_routed_experts\": %u, \"n_shared_experts\": 1, \"num_experts_per_tok\": %u,\n"
			" \"num_hidden_layers\": %u, \"first_k_dense_replace\": 1, \"moe_layer_freq\": 1%s}\n",
			c->hidden, 2 * c->inter, c->inter, c->n_experts, c->top_k,
			c->n_layers,
			c->dtype == TCK_FP8 ? ",\n \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}" : "");
		break;
	case TCK_MIXTRAL:
		fprintf(f, "{\"model_type\": \"mixtral\", \"hidden_size\": %u, \"intermediate_size\": %u,\n"
			" \"num_local_experts\": %u, \"num_experts_per_tok\": %u, \"num_hidden_layers\": %u}\n",
			c->hidden, c->inter, c->n_experts, c->top_k, c->n_layers);
		break;
	}
	fclose(f);
	for (i = 0; i < l.n; i++)
		free(l.t[i].data);
	free(l.t);
	return ret;
}

static inline void tck_free(struct tck *c)
{
	free(c->w);
	c->w = NULL;
}

/* rm -r of a flat test folder. */
static inline void tck_rmdir(const char *dir)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		return;
}

/*
 * A fresh @dir holding checkpoint @c (freed here), converted with @o into
 * @ktw (a path inside @dir). Return: 0 or the failing step's -errno.
 */
static inline int tck_convert(struct tck *c, const char *dir,
			      struct kt_convert_opts *o, const char *ktw)
{
	int ret;

	tck_rmdir(dir);
	ret = tck_write(c, dir);
	tck_free(c);
	if (ret)
		return ret;
	o->input = dir;
	o->output = ktw;
	return kt_convert(o);
}

static inline double tck_silu(double g)
{
	return g / (1.0 + exp(-g));
}

/*
 * y[T][H] = sum_j w[t][j] * down_e (silu(gate_e x) * up_e x), in f64, with
 * @get(l, e, m, n, k) giving the weights; ids < 0 or >= E are skipped.
 */
typedef double (*tck_get_fn)(void *arg, uint32_t e, int m, uint32_t n,
			     uint32_t k);

/* The checkpoint's own weights of layer @l, as tck_forward_ref() reads them. */
struct tck_src {
	const struct tck *c;
	uint32_t l;
};

static inline double tck_src_get(void *arg, uint32_t e, int m, uint32_t n,
				 uint32_t k)
{
	const struct tck_src *r = arg;
	uint32_t K = m == 2 ? r->c->inter : r->c->hidden;

	return tck_mat(r->c, r->l, e, m)[(size_t)n * K + k];
}

static inline void tck_forward_ref(uint32_t H, uint32_t I, uint32_t E,
				   uint32_t T, uint32_t K, const float *x,
				   const int32_t *ids, const float *w,
				   tck_get_fn get, void *arg, double *y)
{
	double *a = malloc(I * sizeof(double));
	uint32_t t, j, n, k;

	memset(y, 0, (size_t)T * H * sizeof(double));
	for (t = 0; t < T; t++)
		for (j = 0; j < K; j++) {
			int32_t e = ids[t * K + j];

			if (e < 0 || (uint32_t)e >= E)
				continue;
			for (n = 0; n < I; n++) {
				double g = 0, u = 0;

				for (k = 0; k < H; k++) {
					g += get(arg, (uint32_t)e, 0, n, k) * x[(size_t)t * H + k];
					u += get(arg, (uint32_t)e, 1, n, k) * x[(size_t)t * H + k];
				}
				a[n] = tck_silu(g) * u;
			}
			for (n = 0; n < H; n++) {
				double s = 0;

				for (k = 0; k < I; k++)
					s += get(arg, (uint32_t)e, 2, n, k) * a[k];
				y[(size_t)t * H + n] += w[t * K + j] * s;
			}
		}
	free(a);
}

/* mean |y - ref| / mean |ref| */
static inline double tck_rel_mae(const double *ref, const float *y, size_t n)
{
	double num = 0, den = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		num += fabs((double)y[i] - ref[i]);
		den += fabs(ref[i]);
	}
	return den > 0 ? num / den : num;
}

#endif /* KT_SELFTESTS_LOADER_CKPT_H */
