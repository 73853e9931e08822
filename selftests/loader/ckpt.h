/* SPDX-License-Identifier: MIT */
/*
 * ckpt.h - test checkpoints written from C: safetensors files (single or
 * sharded with an index), config.json in Qwen-MoE, DeepSeek-V3 and Mixtral
 * styles, BF16/F16/F32/FP8 sources, GPT-OSS's stacked experts (BF16 and
 * MXFP4 releases); plus f64 reference MoE forwards computed from the exact
 * values the source files hold.
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
	/* shape[1] 0: 1-D; ndim > 2 (tck_add_nd()): all of shape[] */
	unsigned int ndim;
	uint64_t shape[4];
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
	l->t[l->n].ndim = c ? 2 : 1;
	l->t[l->n].shape[0] = r;
	l->t[l->n].shape[1] = c;
	l->t[l->n].data = data;
	l->t[l->n].bytes = bytes;
	l->n++;
}

/* A tensor of @nd (up to 4) dims @dims. */
static inline void tck_add_nd(struct tck_list *l, const char *name,
			      const char *dtype, unsigned int nd,
			      const uint64_t *dims, void *data, size_t bytes)
{
	unsigned int d;

	tck_add(l, name, dtype, dims[0], nd > 1 ? dims[1] : 0, data, bytes);
	l->t[l->n - 1].ndim = nd;
	for (d = 2; d < nd; d++)
		l->t[l->n - 1].shape[d] = dims[d];
}

/* The tensor named @name, NULL when absent. */
static inline struct tck_tensor *tck_find(struct tck_list *l, const char *name)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		if (!strcmp(l->t[i].name, name))
			return &l->t[i];
	return NULL;
}

static inline void tck_list_free(struct tck_list *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->t[i].data);
	free(l->t);
	memset(l, 0, sizeof(*l));
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
		char shape[96];

		/* a second dimension of 0 writes a 1-D tensor */
		if (l->t[i].ndim > 2) {
			unsigned int d;
			size_t at = 0;

			for (d = 0; d < l->t[i].ndim; d++)
				at += (size_t)snprintf(shape + at, sizeof(shape) - at,
						       "%s%llu", d ? "," : "",
						       (unsigned long long)l->t[i].shape[d]);
		} else if (l->t[i].shape[1])
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

/*
 * GPT-OSS (transformers' GptOssForCausalLM): every layer's experts stacked
 * in model.layers.L.mlp.experts.*. BF16 release: gate_up_proj [E, H, 2I]
 * (x @ W; gate the even columns, up the odd), down_proj [E, I, H]; MXFP4
 * release: gate_up_proj_blocks [E, 2I, H/32, 16] U8 (element 2j in the
 * low nibble of byte j, 2j + 1 in the high one) with E8M0 scales
 * gate_up_proj_scales [E, 2I, H/32], down_proj_blocks [E, H, I/32, 16];
 * biases gate_up_proj_bias [E, 2I] and down_proj_bias [E, H] in both.
 */
struct tck_oss {
	uint32_t hidden, inter, n_experts, n_layers, top_k;
	int mxfp4;
	int f32_bias;		/* F32 biases, else BF16 */
	float limit;		/* swiglu_limit written; 0: the key left out */
	uint64_t seed;
	/* filled by tck_oss_build(): kt's orientation, exact values */
	float *w;	/* [L][E][3][I*H]: gate [I][H], up [I][H], down [H][I] */
	float *b;	/* [L][E][2I + H]: gate, up, down biases */
};

static inline float *tck_oss_mat(const struct tck_oss *c, uint32_t l,
				 uint32_t e, int m)
{
	return c->w + (((size_t)l * c->n_experts + e) * 3 + (size_t)m) *
		      c->inter * c->hidden;
}

static inline float *tck_oss_bias(const struct tck_oss *c, uint32_t l,
				  uint32_t e)
{
	return c->b + ((size_t)l * c->n_experts + e) *
		      (2 * c->inter + c->hidden);
}

/* OCP E2M1, from its definition: sign, 2 exponent bits (bias 1), 1 mantissa. */
static inline double tck_e2m1(unsigned int code)
{
	unsigned int e = (code >> 1) & 3, m = code & 1;
	double v = e ? ldexp(1.0 + m / 2.0, (int)e - 1) : m / 2.0;

	return code & 8 ? -v : v;
}

/*
 * An MXFP4 matrix of @rows x @K: random codes and scales (2^-4 .. 2^-1,
 * so that gate and up pass the limit often) into @blk and @sc, the exact
 * values of row r into @out[r][0, K).
 */
static inline void tck_oss_mx_rows(uint64_t *seed, uint32_t rows, uint32_t K,
				   uint8_t *blk, uint8_t *sc, float *const *out)
{
	uint32_t r, g, j;

	for (r = 0; r < rows; r++)
		for (g = 0; g < K / 32; g++) {
			uint8_t e = (uint8_t)(123 + tck_rand(seed) % 4);

			sc[(size_t)r * (K / 32) + g] = e;
			for (j = 0; j < 16; j++) {
				uint8_t lo = (uint8_t)(tck_rand(seed) & 15);
				uint8_t hi = (uint8_t)(tck_rand(seed) & 15);

				blk[((size_t)r * (K / 32) + g) * 16 + j] =
					(uint8_t)(lo | hi << 4);
				out[r][g * 32 + 2 * j] =
					(float)ldexp(tck_e2m1(lo), e - 127);
				out[r][g * 32 + 2 * j + 1] =
					(float)ldexp(tck_e2m1(hi), e - 127);
			}
		}
}

/* The tensors of @c into @l (a router and a norm beside the experts). */
static inline void tck_oss_build(struct tck_oss *c, struct tck_list *l)
{
	uint64_t seed = c->seed ? c->seed : 0x9e3779b97f4a7c15ull;
	uint64_t E = c->n_experts, H = c->hidden, I = c->inter, i;
	size_t per = (size_t)H * I;
	char name[200];
	uint32_t layer, e, n, k;

	memset(l, 0, sizeof(*l));
	c->w = malloc((size_t)c->n_layers * E * 3 * per * sizeof(float));
	c->b = malloc((size_t)c->n_layers * E * (2 * I + H) * sizeof(float));
	tck_add(l, "model.norm.weight", "U8", 1, 7, calloc(1, 7), 7);
	for (layer = 0; layer < c->n_layers; layer++) {
		const char *pre = "model.layers";
		uint16_t *bb16;
		float *bb32;

		snprintf(name, sizeof(name), "%s.%u.mlp.router.weight", pre, layer);
		tck_add(l, name, "F32", E, H, calloc(E * H, 4), E * H * 4);
		if (c->mxfp4) {
			uint64_t dgu[4] = { E, 2 * I, H / 32, 16 };
			uint64_t ddn[4] = { E, H, I / 32, 16 };
			uint8_t *gu = malloc(E * 2 * I * H / 2);
			uint8_t *gs = malloc(E * 2 * I * H / 32);
			uint8_t *dn = malloc(E * H * I / 2);
			uint8_t *ds = malloc(E * H * I / 32);
			float **rows = malloc((2 * I > H ? 2 * I : H) * sizeof(float *));

			for (e = 0; e < E; e++) {
				/* gate_up row 2n is gate row n, 2n + 1 up's */
				for (n = 0; n < 2 * I; n++)
					rows[n] = tck_oss_mat(c, layer, e, (int)(n & 1)) +
						  (size_t)(n / 2) * H;
				tck_oss_mx_rows(&seed, (uint32_t)(2 * I), (uint32_t)H,
						gu + e * 2 * I * H / 2,
						gs + e * 2 * I * H / 32, rows);
				for (n = 0; n < H; n++)
					rows[n] = tck_oss_mat(c, layer, e, 2) + (size_t)n * I;
				tck_oss_mx_rows(&seed, (uint32_t)H, (uint32_t)I,
						dn + e * H * I / 2, ds + e * H * I / 32,
						rows);
			}
			free(rows);
			snprintf(name, sizeof(name), "%s.%u.mlp.experts.gate_up_proj_blocks", pre, layer);
			tck_add_nd(l, name, "U8", 4, dgu, gu, E * 2 * I * H / 2);
			snprintf(name, sizeof(name), "%s.%u.mlp.experts.gate_up_proj_scales", pre, layer);
			tck_add_nd(l, name, "U8", 3, dgu, gs, E * 2 * I * H / 32);
			snprintf(name, sizeof(name), "%s.%u.mlp.experts.down_proj_blocks", pre, layer);
			tck_add_nd(l, name, "U8", 4, ddn, dn, E * H * I / 2);
			snprintf(name, sizeof(name), "%s.%u.mlp.experts.down_proj_scales", pre, layer);
			tck_add_nd(l, name, "U8", 3, ddn, ds, E * H * I / 32);
		} else {
			uint64_t dgu[3] = { E, H, 2 * I }, ddn[3] = { E, I, H };
			uint16_t *gu = malloc(E * H * 2 * I * 2);
			uint16_t *dn = malloc(E * I * H * 2);

			for (e = 0; e < E; e++) {
				float *g = tck_oss_mat(c, layer, e, 0);
				float *u = tck_oss_mat(c, layer, e, 1);
				float *d = tck_oss_mat(c, layer, e, 2);

				for (n = 0; n < I; n++)
					for (k = 0; k < H; k++) {
						uint16_t a = tck_bf16(tck_uniform(&seed));
						uint16_t b = tck_bf16(tck_uniform(&seed));

						/* [e][k][2n] gate, [e][k][2n + 1] up */
						gu[(e * H + k) * 2 * I + 2 * n] = a;
						gu[(e * H + k) * 2 * I + 2 * n + 1] = b;
						g[(size_t)n * H + k] = tck_from_bf16(a);
						u[(size_t)n * H + k] = tck_from_bf16(b);
					}
				for (n = 0; n < H; n++)
					for (k = 0; k < I; k++) {
						uint16_t a = tck_bf16(tck_uniform(&seed) * 0.2f);

						/* [e][k][n]: x @ W */
						dn[(e * I + k) * H + n] = a;
						d[(size_t)n * I + k] = tck_from_bf16(a);
					}
			}
			snprintf(name, sizeof(name), "%s.%u.mlp.experts.gate_up_proj", pre, layer);
			tck_add_nd(l, name, "BF16", 3, dgu, gu, E * H * 2 * I * 2);
			snprintf(name, sizeof(name), "%s.%u.mlp.experts.down_proj", pre, layer);
			tck_add_nd(l, name, "BF16", 3, ddn, dn, E * I * H * 2);
		}
		/* biases: gate_up_proj_bias interleaved as gate_up_proj */
		bb16 = malloc(E * (2 * I + H) * 2);
		bb32 = malloc(E * (2 * I + H) * 4);
		for (e = 0; e < E; e++) {
			float *b = tck_oss_bias(c, layer, e);

			for (i = 0; i < 2 * I + H; i++) {
				float v = tck_uniform(&seed) * 2.0f;
				size_t at = i < 2 * I ? e * 2 * I + i :
					    E * 2 * I + e * H + (i - 2 * I);

				bb16[at] = tck_bf16(v);
				bb32[at] = c->f32_bias ? v : tck_from_bf16(bb16[at]);
				if (i < 2 * I)
					b[(i & 1) * I + i / 2] = bb32[at];
				else
					b[i] = bb32[at];
			}
		}
		snprintf(name, sizeof(name), "%s.%u.mlp.experts.gate_up_proj_bias", pre, layer);
		if (c->f32_bias)
			tck_add(l, name, "F32", E, 2 * I,
				memcpy(malloc(E * 2 * I * 4), bb32, E * 2 * I * 4),
				E * 2 * I * 4);
		else
			tck_add(l, name, "BF16", E, 2 * I,
				memcpy(malloc(E * 2 * I * 2), bb16, E * 2 * I * 2),
				E * 2 * I * 2);
		snprintf(name, sizeof(name), "%s.%u.mlp.experts.down_proj_bias", pre, layer);
		if (c->f32_bias)
			tck_add(l, name, "F32", E, H,
				memcpy(malloc(E * H * 4), bb32 + E * 2 * I, E * H * 4),
				E * H * 4);
		else
			tck_add(l, name, "BF16", E, H,
				memcpy(malloc(E * H * 2), bb16 + E * 2 * I, E * H * 2),
				E * H * 2);
		free(bb16);
		free(bb32);
	}
}

/* config.json of @c; @extra (or NULL) is spliced in as more keys. */
static inline int tck_oss_config(const struct tck_oss *c, const char *dir,
				 const char *extra)
{
	char path[512], lim[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s/config.json", dir);
	f = fopen(path, "w");
	if (!f)
		return -errno;
	if (c->limit)
		snprintf(lim, sizeof(lim), ", \"swiglu_limit\": %.9g", c->limit);
	fprintf(f, "{\"architectures\": [\"GptOssForCausalLM\"], \"model_type\": \"gpt_oss\",\n"
		" \"hidden_size\": %u, \"intermediate_size\": %u, \"num_local_experts\": %u,\n"
		" \"num_experts_per_tok\": %u, \"num_hidden_layers\": %u%s%s%s%s}\n",
		c->hidden, c->inter, c->n_experts, c->top_k, c->n_layers, lim,
		c->mxfp4 ? ",\n \"quantization_config\": {\"modules_to_not_convert\": [\"model.layers.*.self_attn\", \"model.layers.*.mlp.router\", \"model.embed_tokens\", \"lm_head\"], \"quant_method\": \"mxfp4\"}" : "",
		extra ? ",\n " : "", extra ? extra : "");
	return fclose(f) ? -EIO : 0;
}

/* @l as @dir/model.safetensors plus config.json (@extra keys). */
static inline int tck_oss_write(const struct tck_oss *c, const char *dir,
				struct tck_list *l, const char *extra)
{
	char path[512];
	int ret;

	tck_rmdir(dir);
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	ret = tck_write_st(path, l, 0, 1);
	return ret ? ret : tck_oss_config(c, dir, extra);
}

static inline void tck_oss_free(struct tck_oss *c)
{
	free(c->w);
	free(c->b);
	c->w = c->b = NULL;
}

/*
 * GPT-OSS's experts in f64 for layer @l: a = min(g, L) * sigmoid(1.702
 * min(g, L)) * (clamp(u, -L, L) + 1) with g, u their biases added;
 * y[t] += w * (down a + down's bias).
 */
static inline void tck_oss_ref(const struct tck_oss *c, uint32_t l, double lim,
			       uint32_t T, uint32_t K, const float *x,
			       const int32_t *ids, const float *w, double *y)
{
	uint32_t H = c->hidden, I = c->inter, t, j, n, k;
	double *a = malloc(I * sizeof(double));

	memset(y, 0, (size_t)T * H * sizeof(double));
	for (t = 0; t < T; t++)
		for (j = 0; j < K; j++) {
			int32_t e = ids[t * K + j];
			const float *g, *u, *d, *b;

			if (e < 0 || (uint32_t)e >= c->n_experts)
				continue;
			g = tck_oss_mat(c, l, (uint32_t)e, 0);
			u = tck_oss_mat(c, l, (uint32_t)e, 1);
			d = tck_oss_mat(c, l, (uint32_t)e, 2);
			b = tck_oss_bias(c, l, (uint32_t)e);
			for (n = 0; n < I; n++) {
				double gs = b[n], us = b[I + n];

				for (k = 0; k < H; k++) {
					gs += (double)g[(size_t)n * H + k] * x[(size_t)t * H + k];
					us += (double)u[(size_t)n * H + k] * x[(size_t)t * H + k];
				}
				gs = gs < lim ? gs : lim;
				us = us < -lim ? -lim : us > lim ? lim : us;
				a[n] = gs / (1.0 + exp(-1.702 * gs)) * (us + 1.0);
			}
			for (n = 0; n < H; n++) {
				double s = b[2 * I + n];

				for (k = 0; k < I; k++)
					s += (double)d[(size_t)n * I + k] * a[k];
				y[(size_t)t * H + n] += w[t * K + j] * s;
			}
		}
	free(a);
}

#endif /* KT_SELFTESTS_LOADER_CKPT_H */
