// SPDX-License-Identifier: MIT
/*
 * hf-src.c - the routed experts of a Hugging Face checkpoint: every tensor
 * found and checked before anything is packed, then one expert at a time
 * packed by the kernels' packer straight from the mapped shards. Shared by
 * kt_convert() and kt_model_open() on a folder. GPT-OSS keeps each layer's
 * experts stacked in one tensor per matrix, gate and up fused: each expert
 * is a view of its slice, de-interleaved, transposed and padded to the
 * tiles as it is packed.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/fp.h"
#include "kernels/fp8.h"
#include "kernels/mxfp4.h"
#include "kernels/pack.h"
#include "ktcore/core.h"
#include "loader/error.h"
#include "loader/fault.h"
#include "loader/fp8.h"
#include "loader/hf-src.h"

enum { STYLE_MLP, STYLE_MIXTRAL, STYLE_OSS };

/* Matrix names per naming style, in enum kern_mat_id order. */
static const char *const style_mat[2][3] = {
	[STYLE_MLP] = { "gate_proj", "up_proj", "down_proj" },
	[STYLE_MIXTRAL] = { "w1", "w3", "w2" },
};
static const char *const style_block[2] = {
	[STYLE_MLP] = "mlp", [STYLE_MIXTRAL] = "block_sparse_moe",
};

/* GPT-OSS's stacked experts: *layers.L.mlp.experts.gate_up_proj... */
static bool is_oss_name(const char *q)
{
	return !strncmp(q, ".mlp.experts.gate_up_proj", 25) ||
	       !strncmp(q, ".mlp.experts.down_proj", 22);
}

/* Find the name prefix and naming style from any expert tensor. */
static int find_style(struct ldr_hf_src *c)
{
	size_t i;
	int s;

	for (i = 0; i < c->ck->n_tensors; i++) {
		const char *name = c->ck->by_name[i]->name, *p = name;

		while ((p = strstr(p, "layers."))) {
			const char *q = p + 7;
			char want[64];

			if (p != name && p[-1] != '.') {
				p++;
				continue;
			}
			while (*q >= '0' && *q <= '9')
				q++;
			if (q > p + 7 && is_oss_name(q) &&
			    (size_t)(p - name) < sizeof(c->prefix)) {
				memcpy(c->prefix, name, (size_t)(p - name));
				c->prefix[p - name] = '\0';
				c->style = STYLE_OSS;
				goto found;
			}
			for (s = 0; s < 2; s++) {
				snprintf(want, sizeof(want), ".%s.experts.",
					 style_block[s]);
				if (q > p + 7 && !strncmp(q, want, strlen(want)) &&
				    (size_t)(p - name) < sizeof(c->prefix)) {
					memcpy(c->prefix, name, (size_t)(p - name));
					c->prefix[p - name] = '\0';
					c->style = s;
					goto found;
				}
			}
			p++;
		}
	}
	return ldr_err(-EINVAL, "%s: no routed expert tensors (looked for *layers.L.mlp.experts.E.gate_proj.weight, *layers.L.block_sparse_moe.experts.E.w1.weight and GPT-OSS's *layers.L.mlp.experts.gate_up_proj)",
		       c->ck->source);
found:
	if ((c->style == STYLE_OSS) != c->cfg.gpt_oss)
		return ldr_err(-EINVAL, c->cfg.gpt_oss ?
			       "%s: model_type is gpt_oss but the expert tensors are not GPT-OSS's stacked *layers.L.mlp.experts.gate_up_proj" :
			       "%s: stacked GPT-OSS expert tensors (*layers.L.mlp.experts.gate_up_proj), but config.json's model_type is not gpt_oss",
			       c->ck->source);
	return 0;
}

static int check_shape(const struct ldr_st_tensor *t, uint64_t rows,
		       uint64_t cols)
{
	if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
		return ldr_err(-EINVAL, "%s: tensor %s: shape [%llu%s%llu], expected [%llu, %llu]",
			       t->file->path, t->name,
			       (unsigned long long)t->shape[0],
			       t->ndim > 1 ? ", " : "",
			       t->ndim > 1 ? (unsigned long long)t->shape[1] : 0ull,
			       (unsigned long long)rows, (unsigned long long)cols);
	return 0;
}

/*
 * A compressed-tensors pack-quantized INT4 matrix @base ("....weight"):
 * weight_packed I32 [n][k/8], weight_scale BF16/F16/F32 [n][k/G] and
 * weight_shape I32/I64 [2] holding {n, k}.
 */
static int find_packed(struct ldr_hf_src *c, const char *base, uint64_t n,
		       uint64_t k, struct ldr_hf_mat *m)
{
	uint64_t G = c->cfg.int4_group, dims[2];
	const struct ldr_st_tensor *t;
	char name[600];
	int ret, i;

	snprintf(name, sizeof(name), "%s_packed", base);
	m->w = ldr_ckpt_find(c->ck, name);
	if (!m->w)
		return ldr_err(-EINVAL, "%s: missing tensor %s (or %s)",
			       c->ck->source, base, name);
	if (m->w->dtype != LDR_ST_I32)
		return ldr_err(-EINVAL, "%s: tensor %s: dtype %s, expected I32 (8 nibbles each)",
			       m->w->file->path, name, m->w->dtype_name);
	ret = check_shape(m->w, n, k / 8);
	if (ret)
		return ret;
	snprintf(name, sizeof(name), "%s_scale", base);
	m->scale = ldr_ckpt_find(c->ck, name);
	if (!m->scale)
		return ldr_err(-EINVAL, "%s: missing tensor %s (the group scales of %s_packed)",
			       c->ck->source, name, base);
	if (m->scale->dtype != LDR_ST_BF16 && m->scale->dtype != LDR_ST_F16 &&
	    m->scale->dtype != LDR_ST_F32)
		return ldr_err(-EINVAL, "%s: tensor %s: unsupported dtype %s (BF16, F16 or F32)",
			       m->scale->file->path, name,
			       m->scale->dtype_name);
	ret = check_shape(m->scale, n, k / G);
	if (ret)
		return ret;
	snprintf(name, sizeof(name), "%s_shape", base);
	t = m->shape = ldr_ckpt_find(c->ck, name);
	if (!t)
		return ldr_err(-EINVAL, "%s: missing tensor %s", c->ck->source,
			       name);
	if ((t->dtype != LDR_ST_I32 && t->dtype != LDR_ST_I64) ||
	    t->ndim != 1 || t->shape[0] != 2)
		return ldr_err(-EINVAL, "%s: tensor %s: %s of %u dims, expected two I32 or I64",
			       t->file->path, name, t->dtype_name, t->ndim);
	for (i = 0; i < 2; i++) {
		if (t->dtype == LDR_ST_I32) {
			int32_t v;

			memcpy(&v, t->data + 4 * i, 4);
			dims[i] = v < 0 ? UINT64_MAX : (uint64_t)v;
		} else {
			int64_t v;

			memcpy(&v, t->data + 8 * i, 8);
			dims[i] = v < 0 ? UINT64_MAX : (uint64_t)v;
		}
	}
	if (dims[0] != n || dims[1] != k)
		return ldr_err(-EINVAL, "%s: tensor %s holds [%lld, %lld], expected [%llu, %llu]",
			       t->file->path, name, (long long)dims[0],
			       (long long)dims[1], (unsigned long long)n,
			       (unsigned long long)k);
	return 0;
}

/* Look up and check the tensors of one (layer, expert, matrix). */
static int find_mat(struct ldr_hf_src *c, int32_t layer, uint32_t e, int id,
		    struct ldr_hf_mat *m)
{
	uint64_t n = id == KERN_MAT_DOWN ? c->cfg.hidden : c->cfg.inter;
	uint64_t k = id == KERN_MAT_DOWN ? c->cfg.inter : c->cfg.hidden;
	uint64_t b0 = c->cfg.fp8_block[0], b1 = c->cfg.fp8_block[1];
	char name[512];
	int ret;

	snprintf(name, sizeof(name), "%slayers.%d.%s.experts.%u.%s.weight",
		 c->prefix, layer, style_block[c->style], e,
		 style_mat[c->style][id]);
	m->w = ldr_ckpt_find(c->ck, name);
	if (!m->w && c->cfg.int4_group)
		return find_packed(c, name, n, k, m);
	if (!m->w)
		return ldr_err(-EINVAL, "%s: missing tensor %s", c->ck->source,
			       name);
	ret = check_shape(m->w, n, k);
	if (ret)
		return ret;
	switch (m->w->dtype) {
	case LDR_ST_BF16:
	case LDR_ST_F16:
	case LDR_ST_F32:
		return 0;
	case LDR_ST_F8_E4M3:
		break;
	default:
		return ldr_err(-EINVAL, "%s: tensor %s: unsupported dtype %s (BF16, F16, F32 or F8_E4M3)",
			       m->w->file->path, name, m->w->dtype_name);
	}
	if (c->fp8_chan) {
		/* per-channel: weight_scale [n, 1] or [n] */
		strcat(name, "_scale");
		m->scale_inv = ldr_ckpt_find(c->ck, name);
		m->chan = true;
		if (!m->scale_inv)
			return ldr_err(-EINVAL, "%s: missing tensor %s (the per-channel scales of an F8_E4M3 weight)",
				       c->ck->source, name);
		if (m->scale_inv->dtype != LDR_ST_F32 &&
		    m->scale_inv->dtype != LDR_ST_BF16)
			return ldr_err(-EINVAL, "%s: tensor %s: unsupported dtype %s (F32 or BF16)",
				       m->scale_inv->file->path, name,
				       m->scale_inv->dtype_name);
		if (m->scale_inv->ndim == 1 && m->scale_inv->shape[0] == n)
			return 0;
		return check_shape(m->scale_inv, n, 1);
	}
	if (c->lay.quant == KT_QUANT_FP8 &&
	    (b0 != KERN_FP8_BLOCK || b1 != KERN_FP8_BLOCK))
		return ldr_err(-EINVAL, "%s/config.json: weight_block_size [%llu, %llu]: --method fp8 keeps 128x128 block scales only",
			       c->dir, (unsigned long long)b0,
			       (unsigned long long)b1);
	strcat(name, "_scale_inv");
	m->scale_inv = ldr_ckpt_find(c->ck, name);
	if (!m->scale_inv)
		return ldr_err(-EINVAL, "%s: missing tensor %s (the block scales of an F8_E4M3 weight)",
			       c->ck->source, name);
	if (m->scale_inv->dtype != LDR_ST_F32 &&
	    m->scale_inv->dtype != LDR_ST_BF16)
		return ldr_err(-EINVAL, "%s: tensor %s: unsupported dtype %s (F32 or BF16)",
			       m->scale_inv->file->path, name,
			       m->scale_inv->dtype_name);
	return check_shape(m->scale_inv, (n + b0 - 1) / b0, (k + b1 - 1) / b1);
}

/* The first expert's gate weight, NULL when absent (find_mat names it). */
static const struct ldr_st_tensor *first_gate(const struct ldr_hf_src *c,
					      char *name, size_t len)
{
	snprintf(name, len, "%slayers.%d.%s.experts.0.%s.weight",
		 c->prefix, c->layer_ids[0], style_block[c->style],
		 style_mat[c->style][KERN_MAT_GATE]);
	return ldr_ckpt_find(c->ck, name);
}

/*
 * An F8_E4M3 checkpoint scales per 128x128 block (weight_scale_inv) or per
 * output row (weight_scale, "FP8 per-channel"); the first expert's gate
 * tells, and every matrix must then follow it.
 */
static bool is_fp8_chan(const struct ldr_hf_src *c)
{
	char name[512];
	const struct ldr_st_tensor *w = first_gate(c, name, sizeof(name));
	size_t len = strlen(name);

	if (!w || w->dtype != LDR_ST_F8_E4M3)
		return false;
	snprintf(name + len, sizeof(name) - len, "_scale_inv");
	if (ldr_ckpt_find(c->ck, name))
		return false;
	snprintf(name + len, sizeof(name) - len, "_scale");
	return ldr_ckpt_find(c->ck, name) != NULL;
}

int ldr_hf_default_quant(const struct ldr_hf_src *c)
{
	char name[512];
	const struct ldr_st_tensor *w;

	if (c->cfg.gpt_oss)
		return c->cfg.mxfp4 ? KT_QUANT_MXFP4 : KT_QUANT_BF16;
	w = first_gate(c, name, sizeof(name));
	if (c->cfg.int4_group)
		return KT_QUANT_INT4;
	if (w && w->dtype == LDR_ST_F8_E4M3 &&
	    (is_fp8_chan(c) || (c->cfg.fp8_block[0] == KERN_FP8_BLOCK &&
				c->cfg.fp8_block[1] == KERN_FP8_BLOCK)))
		return KT_QUANT_FP8;
	return KT_QUANT_BF16;
}

/* The MoE layers numbered @first..@last. */
static int plan_layers(struct ldr_hf_src *c, int32_t first, int32_t last)
{
	uint32_t l, n = 0;

	if (last < 0)
		last = INT32_MAX;
	c->layer_ids = calloc(c->cfg.n_layers, sizeof(*c->layer_ids));
	if (!c->layer_ids)
		return -ENOMEM;
	for (l = 0; l < c->cfg.n_layers; l++)
		if (c->cfg.is_moe[l] && (int32_t)l >= first && (int32_t)l <= last)
			c->layer_ids[n++] = (int32_t)l;
	if (!n)
		return ldr_err(-EINVAL, "%s/config.json: no MoE layer in %d-%d",
			       c->dir, first, last);
	c->n_layers = n;
	/* the .ktw reader's limit (kt_model_open() holds no more either),
	 * checked before the tables are sized by it */
	if ((uint64_t)n * c->cfg.n_experts > KTW_MAX_ENTRIES)
		return ldr_err(-EINVAL, "%s/config.json: %u MoE layers x %u experts = %llu blobs exceed the .ktw limit of %u (convert fewer with --layers)",
			       c->dir, n, c->cfg.n_experts,
			       (unsigned long long)n * c->cfg.n_experts,
			       KTW_MAX_ENTRIES);
	return 0;
}

static int plan_mats(struct ldr_hf_src *c)
{
	uint32_t l, e;
	int id, ret;

	c->mats = calloc((size_t)c->n_layers * c->cfg.n_experts * 3,
			 sizeof(*c->mats));
	if (!c->mats)
		return -ENOMEM;
	for (l = 0; l < c->n_layers; l++)
		for (e = 0; e < c->cfg.n_experts; e++)
			for (id = 0; id < 3; id++) {
				ret = find_mat(c, c->layer_ids[l], e, id,
					       &c->mats[((size_t)l * c->cfg.n_experts + e) * 3 + id]);
				if (ret)
					return ret;
			}
	return 0;
}

/* A group of 0 (not given): INT4 and FP8 128, MXFP4 32. */
static uint32_t group_of(int quant, uint32_t group_size)
{
	if (group_size)
		return group_size;
	return quant == KT_QUANT_INT4 || quant == KT_QUANT_FP8 ? 128 :
	       quant == KT_QUANT_MXFP4 ? KERN_MXFP4_GROUP : 0;
}

/* The packed layout: @quant with its group, from the checkpoint's shape. */
static int plan_layout(struct ldr_hf_src *c, int quant, uint32_t group_size)
{
	uint32_t group = group_of(quant, group_size);
	uint32_t H = c->cfg.hidden, I = c->cfg.inter;
	int ret;

	if (c->cfg.gpt_oss) {
		/* zero weights to the tiles (K-quants: their super-block) */
		uint32_t u = kern_quant_is_k((enum kt_quant)quant) ?
			     KERN_Q4_K_SUPER : KERN_DOWN_CHUNK;

		H = (H + u - 1) / u * u;
		I = (I + u - 1) / u * u;
	}
	if (c->cfg.int4_group && quant == KT_QUANT_INT4) {
		/* kept as they are: the checkpoint's group */
		if (group_size && group_size != c->cfg.int4_group)
			return ldr_err(-EINVAL, "%s/config.json: the checkpoint's INT4 has group size %u; --method int4 keeps it as it is (leave out --group-size or give %u)",
				       c->dir, c->cfg.int4_group,
				       c->cfg.int4_group);
		group = c->cfg.int4_group;
	}
	c->fp8_chan = !c->cfg.gpt_oss && is_fp8_chan(c);
	/* --method fp8 keeps per-row scales as they are */
	if (c->fp8_chan && quant == KT_QUANT_FP8)
		group = KT_GROUP_CHANNEL;
	ret = ldr_geom_init(&c->geom, quant, H, I, group);
	if (ret) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", kt_last_error());
		return ldr_err(ret, "%s/config.json: %s", c->dir, msg);
	}
	kern_pack_layout((enum kt_quant)quant, H, I, group, &c->lay);
	return 0;
}

/* GPT-OSS's six tensors of a layer, in views[] order. */
enum { OSS_GU, OSS_GU_SCALES, OSS_GU_BIAS, OSS_DOWN, OSS_DOWN_SCALES,
       OSS_DOWN_BIAS, OSS_N };

static const char *const oss_names[2][OSS_N] = {
	{ "gate_up_proj", NULL, "gate_up_proj_bias",
	  "down_proj", NULL, "down_proj_bias" },
	{ "gate_up_proj_blocks", "gate_up_proj_scales", "gate_up_proj_bias",
	  "down_proj_blocks", "down_proj_scales", "down_proj_bias" },
};

static void fmt_shape(char *buf, size_t len, unsigned int n,
		      const uint64_t *d)
{
	size_t at = 0;
	unsigned int i;

	buf[0] = '\0';
	for (i = 0; i < n && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%llu",
				       i ? ", " : "", (unsigned long long)d[i]);
}

/* One stacked tensor: U8 (@u8) or BF16/F16/F32, shape @want[@nd]. */
static int oss_check(const struct ldr_st_tensor *t, bool u8, unsigned int nd,
		     const uint64_t *want)
{
	char a[128], b[128];
	unsigned int i;
	bool ok = t->ndim == nd;

	if (u8 && t->dtype != LDR_ST_U8)
		return ldr_err(-EINVAL, "%s: tensor %s: dtype %s, expected U8",
			       t->file->path, t->name, t->dtype_name);
	if (!u8 && t->dtype != LDR_ST_BF16 && t->dtype != LDR_ST_F16 &&
	    t->dtype != LDR_ST_F32)
		return ldr_err(-EINVAL, "%s: tensor %s: unsupported dtype %s (BF16, F16 or F32)",
			       t->file->path, t->name, t->dtype_name);
	for (i = 0; ok && i < nd; i++)
		ok = t->shape[i] == want[i];
	if (ok)
		return 0;
	fmt_shape(a, sizeof(a), t->ndim, t->shape);
	fmt_shape(b, sizeof(b), nd, want);
	return ldr_err(-EINVAL, "%s: tensor %s: shape [%s], expected [%s]",
		       t->file->path, t->name, a, b);
}

/* Expert @e's slice of the stacked @t ([E, ...]) as a tensor of its own. */
static void oss_view(struct ldr_st_tensor *v, const struct ldr_st_tensor *t,
		     uint32_t e, uint32_t E)
{
	uint64_t per = t->len / E;

	*v = *t;
	v->ndim = t->ndim - 1;
	memmove(v->shape, t->shape + 1, v->ndim * sizeof(v->shape[0]));
	v->off = t->off + e * per;
	v->data = t->data + e * per;
	v->len = per;
}

/*
 * Every layer's stacked experts, checked: the BF16 release (x @ W, so
 * gate_up_proj [E, H, 2I], down_proj [E, I, H]) or the MXFP4 one (rows
 * of 32-weight blocks along K: gate_up_proj_blocks [E, 2I, H/32, 16] with
 * E8M0 scales [E, 2I, H/32], down_proj_blocks [E, H, I/32, 16]), biases
 * [E, 2I] and [E, H] in both.
 */
static int plan_oss(struct ldr_hf_src *c)
{
	uint64_t E = c->cfg.n_experts, H = c->cfg.hidden, I = c->cfg.inter;
	bool mx = c->cfg.mxfp4;
	const uint64_t shapes[2][OSS_N][4] = {
		{ { E, H, 2 * I }, { 0 }, { E, 2 * I },
		  { E, I, H }, { 0 }, { E, H } },
		{ { E, 2 * I, H / 32, 16 }, { E, 2 * I, H / 32 }, { E, 2 * I },
		  { E, H, I / 32, 16 }, { E, H, I / 32 }, { E, H } },
	};
	const unsigned int ndims[2][OSS_N] = { { 3, 0, 2, 3, 0, 2 },
					       { 4, 3, 2, 4, 3, 2 } };
	const struct ldr_st_tensor *t[OSS_N];
	char name[512];
	uint32_t l, e;
	int j, id, ret;

	c->mats = calloc((size_t)c->n_layers * E * 3, sizeof(*c->mats));
	c->views = calloc((size_t)c->n_layers * E * OSS_N,
			  sizeof(*c->views));
	if (!c->mats || !c->views)
		return -ENOMEM;
	for (l = 0; l < c->n_layers; l++) {
		for (j = 0; j < OSS_N; j++) {
			t[j] = NULL;
			if (!oss_names[mx][j])
				continue;
			snprintf(name, sizeof(name), "%slayers.%d.mlp.experts.%s",
				 c->prefix, c->layer_ids[l], oss_names[mx][j]);
			t[j] = ldr_ckpt_find(c->ck, name);
			if (!t[j])
				return ldr_err(-EINVAL, "%s: missing tensor %s (%s)",
					       c->ck->source, name,
					       j == OSS_GU_BIAS || j == OSS_DOWN_BIAS ?
					       "GPT-OSS experts have biases" :
					       j == OSS_GU_SCALES || j == OSS_DOWN_SCALES ?
					       "the E8M0 scales of the MXFP4 blocks" :
					       mx ? "config.json's quantization_config says mxfp4" :
					       "the BF16 release of GPT-OSS");
			ret = oss_check(t[j], mx && (j == OSS_GU || j == OSS_DOWN ||
						     j == OSS_GU_SCALES ||
						     j == OSS_DOWN_SCALES),
					ndims[mx][j], shapes[mx][j]);
			if (ret)
				return ret;
		}
		for (e = 0; e < E; e++) {
			uint64_t i = (uint64_t)l * E + e;
			struct ldr_st_tensor *v = &c->views[i * OSS_N];
			struct ldr_hf_mat *m = &c->mats[i * 3];

			for (j = 0; j < OSS_N; j++)
				if (t[j])
					oss_view(&v[j], t[j], e, (uint32_t)E);
			for (id = 0; id < 3; id++) {
				int b = id == KERN_MAT_DOWN ? OSS_DOWN : OSS_GU;

				m[id].w = &v[b];
				m[id].mx = mx ? &v[b + 1] : NULL;
				m[id].bias = &v[b + 2];
			}
		}
	}
	return 0;
}

int ldr_hf_src_open_flags(const char *dir, int quant, uint32_t group_size,
			  int32_t first, int32_t last, unsigned int flags,
			  struct ldr_hf_src **out)
{
	struct ldr_hf_src *c = calloc(1, sizeof(*c));
	int ret;

	*out = NULL;
	if (!c)
		return -ENOMEM;
	c->dir = strdup(dir);
	if (!c->dir) {
		ret = -ENOMEM;
		goto err;
	}
	if (quant) {
		/* bad options first, before any file is read */
		ret = ldr_geom_init(&c->geom, quant, 128, 128,
				    group_of(quant, group_size));
		if (ret)
			goto err;
	}
	ret = ldr_hfconfig_load(dir, &c->cfg);
	if (!ret && !(flags & LDR_HF_F_ANY) && !ldr_hf_src_is_plain(c))
		ret = ldr_err(-EOPNOTSUPP, "%s: a .ktw cannot hold GPT-OSS experts (expert biases, the clamped SwiGLU, H %u and I %u padded to kt's tiles): open the folder itself, kt_model_open() packs it at load",
			      dir, c->cfg.hidden, c->cfg.inter);
	if (!ret)
		ret = ldr_ckpt_open(dir, &c->ck);
	if (!ret)
		ret = find_style(c);
	if (!ret)
		ret = plan_layers(c, first, last);
	if (ret)
		goto err;
	if (!quant)
		quant = ldr_hf_default_quant(c);
	ret = plan_layout(c, quant, group_size);
	if (!ret)
		ret = c->cfg.gpt_oss ? plan_oss(c) : plan_mats(c);
	if (ret)
		goto err;
	*out = c;
	return 0;
err:
	ldr_hf_src_close(c);
	return ret;
}

int ldr_hf_src_open(const char *dir, int quant, uint32_t group_size,
		    int32_t first, int32_t last, struct ldr_hf_src **out)
{
	return ldr_hf_src_open_flags(dir, quant, group_size, first, last, 0,
				     out);
}

bool ldr_hf_src_is_plain(const struct ldr_hf_src *c)
{
	return !c->cfg.gpt_oss;
}

void ldr_hf_src_close(struct ldr_hf_src *c)
{
	if (!c)
		return;
	free(c->views);
	free(c->mats);
	free(c->layer_ids);
	ldr_ckpt_close(c->ck);
	ldr_hfconfig_free(&c->cfg);
	free(c->dir);
	free(c);
}

int ldr_hf_scratch_init(const struct ldr_hf_src *s, struct ldr_hf_scratch *sc)
{
	/* the packed sizes: GPT-OSS's matrices are padded here */
	size_t n = (size_t)s->lay.hidden * s->lay.inter;
	size_t kmax = s->lay.hidden > s->lay.inter ? s->lay.hidden :
						     s->lay.inter;

	/* untouched pages cost nothing: only the paths that need a
	 * matrix-sized buffer (FP8 dequant, unaligned rows) touch it */
	sc->f32 = malloc(n * sizeof(float));
	/* values (one byte each), then [K/G][N] f32 scales */
	sc->q4 = s->cfg.int4_group ? malloc(n + 64 + n / s->cfg.int4_group * 4) :
		 NULL;
	/* 16 rows of codes, then their E8M0 bytes */
	sc->mx = s->cfg.mxfp4 ? malloc(KERN_TILE_ROWS * (kmax + kmax / 32)) :
		 NULL;
	if (!sc->f32 || (s->cfg.int4_group && !sc->q4) ||
	    (s->cfg.mxfp4 && !sc->mx)) {
		ldr_hf_scratch_free(sc);
		return ldr_err(-ENOMEM, "out of memory for packing buffers");
	}
	return 0;
}

void ldr_hf_scratch_free(struct ldr_hf_scratch *sc)
{
	free(sc->f32);
	free(sc->q4);
	free(sc->mx);
	sc->f32 = NULL;
	sc->q4 = NULL;
	sc->mx = NULL;
}

/*
 * Unpack a compressed-tensors INT4 matrix [N][K] into @q (q in [-8, 7]:
 * nibble i of each little-endian int32 is column 8j + i, stored as q + 8)
 * and @sc [K/G][N] f32 (the checkpoint's [N][K/G], transposed).
 */
static void unpack_int4(const struct ldr_hf_mat *m, uint32_t G, int8_t *q,
			float *sc)
{
	uint64_t N = m->w->shape[0], W = m->w->shape[1], K = W * 8, n, j;
	const struct ldr_st_tensor *st = m->scale;
	unsigned int i;

	for (n = 0; n < N; n++)
		for (j = 0; j < W; j++) {
			uint32_t w;

			memcpy(&w, m->w->data + (n * W + j) * 4, 4);
			for (i = 0; i < 8; i++)
				q[n * K + j * 8 + i] =
					(int8_t)((w >> (4 * i)) & 15) - 8;
		}
	for (n = 0; n < N; n++)
		for (j = 0; j < K / G; j++) {
			size_t e = n * (K / G) + j;
			uint16_t h;
			float v;

			if (st->dtype == LDR_ST_F32) {
				memcpy(&v, st->data + e * 4, 4);
			} else {
				memcpy(&h, st->data + e * 2, 2);
				v = st->dtype == LDR_ST_BF16 ?
					kern_bf16_to_f32(h) :
					kern_f16_to_f32(h);
			}
			sc[j * N + n] = v;
		}
}

static int pack_mat(const struct ldr_hf_src *c, struct ldr_hf_scratch *s,
		    const struct ldr_hf_mat *m, enum kern_mat_id id,
		    uint8_t *dst)
{
	const struct ldr_st_tensor *t = m->w;
	size_t elems = (size_t)(t->shape[0] * t->shape[1]);
	unsigned int esz = ldr_st_dtype_size(t->dtype);
	enum kt_dtype dt;

	if (m->scale) {
		uint64_t N = t->shape[0], K = t->shape[1] * 8, i;
		uint32_t G = c->cfg.int4_group;
		float *sc = (float *)(s->q4 + ((N * K + 63) & ~63ull));

		unpack_int4(m, G, s->q4, sc);
		/* kt's INT4 with the same group is the same numbers */
		if (c->lay.quant == KT_QUANT_INT4 && c->lay.group == G) {
			kern_pack_int4_raw(&c->lay, id, s->q4, sc, dst);
			return 0;
		}
		for (i = 0; i < N * K; i++)
			s->f32[i] = (float)s->q4[i] * sc[(i % K) / G * N +
							 i / K];
		return kern_pack_matrix(&c->lay, id, s->f32, KT_DTYPE_F32, K,
					dst);
	}

	if (t->dtype == LDR_ST_F8_E4M3 && c->lay.quant == KT_QUANT_FP8) {
		/* the bytes and scales as they are: no second rounding */
		ldr_fp8_scales_f32(m->scale_inv->data,
				   m->scale_inv->dtype == LDR_ST_BF16,
				   m->scale_inv->len /
				   ldr_st_dtype_size(m->scale_inv->dtype),
				   s->f32);
		kern_pack_fp8_raw(&c->lay, id, t->data, t->shape[1], s->f32,
				  dst);
		return 0;
	}
	if (t->dtype == LDR_ST_F8_E4M3) {
		/* per-channel: blocks of one row by the whole row */
		ldr_fp8_dequant(t->data, (uint32_t)t->shape[0],
				(uint32_t)t->shape[1], m->scale_inv->data,
				m->scale_inv->dtype == LDR_ST_BF16,
				m->chan ? 1 : c->cfg.fp8_block[0],
				m->chan ? (uint32_t)t->shape[1] :
				c->cfg.fp8_block[1], s->f32);
		return kern_pack_matrix(&c->lay, id, s->f32, KT_DTYPE_F32,
					t->shape[1], dst);
	}
	dt = t->dtype == LDR_ST_F32 ? KT_DTYPE_F32 :
	     t->dtype == LDR_ST_F16 ? KT_DTYPE_F16 : KT_DTYPE_BF16;
	if ((uintptr_t)t->data % esz) {
		/* safetensors does not promise element alignment */
		memcpy(s->f32, t->data, elems * esz);
		return kern_pack_matrix(&c->lay, id, s->f32, dt, t->shape[1],
					dst);
	}
	return kern_pack_matrix(&c->lay, id, t->data, dt, t->shape[1], dst);
}

/* Element @i of a BF16, F16 or F32 tensor (view), as f32. */
static float oss_elem(const struct ldr_st_tensor *t, size_t i)
{
	uint16_t h;
	float f;

	if (t->dtype == LDR_ST_F32) {
		memcpy(&f, t->data + i * 4, 4);
		return f;
	}
	memcpy(&h, t->data + i * 2, 2);
	return t->dtype == LDR_ST_BF16 ? kern_bf16_to_f32(h) :
					 kern_f16_to_f32(h);
}

/*
 * The BF16 release's matrices are x @ W: column n of a [K][@cols] slice
 * (gate_up: column 2n + @half) is kt's row n. @out[n][k] (rows @Kp apart)
 * for n < @N, k < @K, read in tiles of 32 x 32 so that neither side
 * strides through more than 32 cache lines.
 */
static void oss_transpose(const struct ldr_st_tensor *t, uint64_t cols,
			  unsigned int step, unsigned int half, uint32_t N,
			  uint32_t K, float *out, uint32_t Kp)
{
	uint32_t n0, k0, n, k;

	for (k0 = 0; k0 < K; k0 += 32)
		for (n0 = 0; n0 < N; n0 += 32) {
			uint32_t n1 = n0 + 32 < N ? n0 + 32 : N;
			uint32_t k1 = k0 + 32 < K ? k0 + 32 : K;

			for (k = k0; k < k1; k++) {
				size_t row = (size_t)k * cols + half;

				for (n = n0; n < n1; n++)
					out[(size_t)n * Kp + k] =
						oss_elem(t, row + (size_t)n * step);
			}
		}
}

/* A scale of 255, E8M0's NaN, named where it is. */
static int oss_nan_scale(const struct ldr_hf_src *c, const struct ldr_hf_mat *m,
			 uint64_t i, uint64_t r, uint32_t g)
{
	return ldr_err(-EINVAL, "%s: tensor %s: expert %u, row %llu, block %u: scale 255 is E8M0's NaN",
		       m->mx->file->path, m->mx->name,
		       (unsigned int)(i % c->cfg.n_experts),
		       (unsigned long long)r, g);
}

/*
 * MXFP4 row @r of a [rows][K/32][16] blocks view with scales [rows][K/32]
 * dequantized into @out[0, K): byte j of a block holds element 2j in its
 * low nibble and 2j + 1 in its high one, w = e2m1 * 2^(scale - 127).
 * Return: 0; -EINVAL a scale of 255 (E8M0 NaN), named.
 */
static int oss_mx_row(const struct ldr_hf_src *c, const struct ldr_hf_mat *m,
		      uint64_t i, uint64_t r, uint32_t K, float *out)
{
	const uint8_t *b = m->w->data + r * (K / 2);
	const uint8_t *sc = m->mx->data + r * (K / 32);
	uint8_t codes[32];
	uint32_t g, j;

	for (g = 0; g < K / 32; g++, b += 16) {
		if (sc[g] == KERN_E8M0_NAN)
			return oss_nan_scale(c, m, i, r, g);
		kern_mxfp4_unpack_ocp(b, codes);
		for (j = 0; j < 32; j++)
			out[g * 32 + j] = kern_mxfp4_value(codes[j], sc[g]);
	}
	return 0;
}

/*
 * An MXFP4 matrix kept as it is: 16 rows at a time of codes and E8M0
 * bytes to the packer, zero codes (scale 2^0) in the padding.
 */
static int pack_oss_mx(const struct ldr_hf_src *c, struct ldr_hf_scratch *s,
		       uint64_t i, enum kern_mat_id id, uint8_t *dst)
{
	const struct ldr_hf_mat *m = &c->mats[i * 3 + id];
	uint32_t N = id == KERN_MAT_DOWN ? c->cfg.hidden : c->cfg.inter;
	uint32_t K = id == KERN_MAT_DOWN ? c->cfg.inter : c->cfg.hidden;
	uint32_t Np = id == KERN_MAT_DOWN ? c->lay.hidden : c->lay.inter;
	uint32_t Kp = id == KERN_MAT_DOWN ? c->lay.inter : c->lay.hidden;
	uint8_t *codes = s->mx, *e8 = s->mx + (size_t)KERN_TILE_ROWS * Kp;
	uint32_t nb, r, g;
	int ret;

	for (nb = 0; nb < Np / KERN_TILE_ROWS; nb++) {
		memset(codes, 0, (size_t)KERN_TILE_ROWS * Kp);
		memset(e8, 127, (size_t)KERN_TILE_ROWS * (Kp / 32));
		for (r = 0; r < KERN_TILE_ROWS; r++) {
			uint32_t n = nb * KERN_TILE_ROWS + r;
			uint64_t row = id == KERN_MAT_DOWN ? n : 2ull * n + id;
			const uint8_t *b = m->w->data + row * (K / 2);
			const uint8_t *sc = m->mx->data + row * (K / 32);

			if (n >= N)
				break;
			for (g = 0; g < K / 32; g++) {
				if (sc[g] == KERN_E8M0_NAN)
					return oss_nan_scale(c, m, i, row, g);
				e8[(size_t)r * (Kp / 32) + g] = sc[g];
				kern_mxfp4_unpack_ocp(b + g * 16, codes +
						      (size_t)r * Kp + g * 32);
			}
		}
		ret = kern_pack_rows_mxfp4(&c->lay, id, nb, codes, e8, dst);
		if (ret)
			return ldr_err(ret, "packing %s of expert %u failed: %s",
				       m->w->name,
				       (unsigned int)(i % c->cfg.n_experts),
				       strerror(-ret));
	}
	return 0;
}

/*
 * Matrix @id of GPT-OSS expert @i as kt's row-major [Np][Kp] f32 in
 * @out, zero past the checkpoint's own N x K.
 */
static int oss_to_f32(const struct ldr_hf_src *c, uint64_t i,
		      enum kern_mat_id id, float *out)
{
	const struct ldr_hf_mat *m = &c->mats[i * 3 + id];
	uint32_t H = c->cfg.hidden, I = c->cfg.inter;
	uint32_t N = id == KERN_MAT_DOWN ? H : I, K = id == KERN_MAT_DOWN ? I : H;
	uint32_t Np = id == KERN_MAT_DOWN ? c->lay.hidden : c->lay.inter;
	uint32_t Kp = id == KERN_MAT_DOWN ? c->lay.inter : c->lay.hidden;
	uint32_t n;
	int ret;

	for (n = 0; n < N; n++)
		memset(out + (size_t)n * Kp + K, 0, (size_t)(Kp - K) * 4);
	memset(out + (size_t)N * Kp, 0, (size_t)(Np - N) * Kp * 4);
	if (!m->mx) {
		if (id == KERN_MAT_DOWN)	/* [I][H] */
			oss_transpose(m->w, H, 1, 0, N, K, out, Kp);
		else				/* [H][2I] */
			oss_transpose(m->w, 2 * (uint64_t)I, 2, id, N, K, out,
				      Kp);
		return 0;
	}
	for (n = 0; n < N; n++) {
		ret = oss_mx_row(c, m, i, id == KERN_MAT_DOWN ? n : 2 * n + id,
				 K, out + (size_t)n * Kp);
		if (ret)
			return ret;
	}
	return 0;
}

static int pack_oss(const struct ldr_hf_src *c, struct ldr_hf_scratch *s,
		    uint64_t i, enum kern_mat_id id, uint8_t *dst)
{
	uint32_t Kp = id == KERN_MAT_DOWN ? c->lay.inter : c->lay.hidden;
	int ret;

	if (c->cfg.mxfp4 && c->lay.quant == KT_QUANT_MXFP4)
		return pack_oss_mx(c, s, i, id, dst);
	ret = oss_to_f32(c, i, id, s->f32);
	if (ret)
		return ret;
	ret = kern_pack_matrix(&c->lay, id, s->f32, KT_DTYPE_F32, Kp, dst);
	if (ret)
		return ldr_err(ret, "packing %s of expert %u failed: %s",
			       c->mats[i * 3 + id].w->name,
			       (unsigned int)(i % c->cfg.n_experts),
			       strerror(-ret));
	return 0;
}

void ldr_hf_expert_bias(const struct ldr_hf_src *c, uint64_t i, float *dst)
{
	const struct ldr_hf_mat *m = &c->mats[i * 3];
	size_t Ip = c->lay.inter, n;

	memset(dst, 0, (2 * Ip + c->lay.hidden) * sizeof(float));
	if (!c->cfg.gpt_oss)
		return;
	/* gate_up_proj_bias interleaves as gate_up_proj does */
	for (n = 0; n < c->cfg.inter; n++) {
		dst[n] = oss_elem(m[KERN_MAT_GATE].bias, 2 * n);
		dst[Ip + n] = oss_elem(m[KERN_MAT_GATE].bias, 2 * n + 1);
	}
	for (n = 0; n < c->cfg.hidden; n++)
		dst[2 * Ip + n] = oss_elem(m[KERN_MAT_DOWN].bias, n);
}

int ldr_hf_pack_expert(const struct ldr_hf_src *c, struct ldr_hf_scratch *s,
		       uint64_t i, uint8_t *dst)
{
	const struct ldr_hf_mat *m = &c->mats[i * 3];
	int id, ret = 0;

	if (c->cfg.gpt_oss) {
		for (id = 0; id < 3 && !ret; id++)
			ret = pack_oss(c, s, i, (enum kern_mat_id)id, dst);
		return ret;
	}

	for (id = 0; id < 3; id++) {
		ret = pack_mat(c, s, &m[id], (enum kern_mat_id)id, dst);
		if (ret)
			return ldr_err(ret, "packing %s failed: %s", m[id].w->name,
				       strerror(-ret));
	}
	return 0;
}

void ldr_hf_prefetch(const struct ldr_hf_src *c, uint64_t i)
{
	const struct ldr_hf_mat *m = &c->mats[i * 3];
	int id;

	for (id = 0; id < 3; id++) {
		uintptr_t a = (uintptr_t)m[id].w->data & ~(uintptr_t)4095;

		if (c->cfg.gpt_oss && id == KERN_MAT_UP)
			continue;	/* gate's view of gate_up */
		madvise((void *)a, (uintptr_t)m[id].w->data + m[id].w->len - a,
			MADV_WILLNEED);
		if (m[id].mx) {
			a = (uintptr_t)m[id].mx->data & ~(uintptr_t)4095;
			madvise((void *)a, (uintptr_t)m[id].mx->data +
				m[id].mx->len - a, MADV_WILLNEED);
		}
	}
}

void ldr_hf_done(const struct ldr_hf_src *c, uint64_t i)
{
	const struct ldr_hf_mat *m = &c->mats[i * 3];
	int id;

	for (id = 0; id < 3; id++) {
		if (c->cfg.gpt_oss && id == KERN_MAT_UP)
			continue;	/* gate's view of gate_up */
		ldr_st_tensor_done(m[id].w);
		if (m[id].scale_inv)
			ldr_st_tensor_done(m[id].scale_inv);
		if (m[id].scale)
			ldr_st_tensor_done(m[id].scale);
		if (m[id].mx)
			ldr_st_tensor_done(m[id].mx);
	}
}
