// SPDX-License-Identifier: MIT
/*
 * hf-src.c - the routed experts of a Hugging Face checkpoint: every tensor
 * found and checked before anything is packed, then one expert at a time
 * packed by the kernels' packer straight from the mapped shards. Shared by
 * kt_convert() and kt_model_open() on a folder.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/fp.h"
#include "kernels/fp8.h"
#include "kernels/pack.h"
#include "ktcore/core.h"
#include "loader/error.h"
#include "loader/fault.h"
#include "loader/fp8.h"
#include "loader/hf-src.h"

enum { STYLE_MLP, STYLE_MIXTRAL };

/* Matrix names per naming style, in enum kern_mat_id order. */
static const char *const style_mat[2][3] = {
	[STYLE_MLP] = { "gate_proj", "up_proj", "down_proj" },
	[STYLE_MIXTRAL] = { "w1", "w3", "w2" },
};
static const char *const style_block[2] = {
	[STYLE_MLP] = "mlp", [STYLE_MIXTRAL] = "block_sparse_moe",
};

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
			for (s = 0; s < 2; s++) {
				snprintf(want, sizeof(want), ".%s.experts.",
					 style_block[s]);
				if (q > p + 7 && !strncmp(q, want, strlen(want)) &&
				    (size_t)(p - name) < sizeof(c->prefix)) {
					memcpy(c->prefix, name, (size_t)(p - name));
					c->prefix[p - name] = '\0';
					c->style = s;
					return 0;
				}
			}
			p++;
		}
	}
	return ldr_err(-EINVAL, "%s: no routed expert tensors (looked for *layers.L.mlp.experts.E.gate_proj.weight and *layers.L.block_sparse_moe.experts.E.w1.weight)",
		       c->ck->source);
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
	const struct ldr_st_tensor *w = first_gate(c, name, sizeof(name));

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

/* The packed layout: @quant with its group, from the checkpoint's shape. */
static int plan_layout(struct ldr_hf_src *c, int quant, uint32_t group_size)
{
	uint32_t group = (quant == KT_QUANT_INT4 || quant == KT_QUANT_FP8) &&
			 !group_size ? 128 : group_size;
	int ret;

	if (c->cfg.int4_group && quant == KT_QUANT_INT4) {
		/* kept as they are: the checkpoint's group */
		if (group_size && group_size != c->cfg.int4_group)
			return ldr_err(-EINVAL, "%s/config.json: the checkpoint's INT4 has group size %u; --method int4 keeps it as it is (leave out --group-size or give %u)",
				       c->dir, c->cfg.int4_group,
				       c->cfg.int4_group);
		group = c->cfg.int4_group;
	}
	c->fp8_chan = is_fp8_chan(c);
	/* --method fp8 keeps per-row scales as they are */
	if (c->fp8_chan && quant == KT_QUANT_FP8)
		group = KT_GROUP_CHANNEL;
	ret = ldr_geom_init(&c->geom, quant, c->cfg.hidden, c->cfg.inter,
			    group);
	if (ret) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", kt_last_error());
		return ldr_err(ret, "%s/config.json: %s", c->dir, msg);
	}
	kern_pack_layout((enum kt_quant)quant, c->cfg.hidden, c->cfg.inter,
			 group, &c->lay);
	return 0;
}

int ldr_hf_src_open(const char *dir, int quant, uint32_t group_size,
		    int32_t first, int32_t last, struct ldr_hf_src **out)
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
				    (quant == KT_QUANT_INT4 ||
				     quant == KT_QUANT_FP8) && !group_size ?
				    128 : group_size);
		if (ret)
			goto err;
	}
	ret = ldr_hfconfig_load(dir, &c->cfg);
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
		ret = plan_mats(c);
	if (ret)
		goto err;
	*out = c;
	return 0;
err:
	ldr_hf_src_close(c);
	return ret;
}

void ldr_hf_src_close(struct ldr_hf_src *c)
{
	if (!c)
		return;
	free(c->mats);
	free(c->layer_ids);
	ldr_ckpt_close(c->ck);
	ldr_hfconfig_free(&c->cfg);
	free(c->dir);
	free(c);
}

int ldr_hf_scratch_init(const struct ldr_hf_src *s, struct ldr_hf_scratch *sc)
{
	size_t n = (size_t)s->cfg.hidden * s->cfg.inter;

	/* untouched pages cost nothing: only the paths that need a
	 * matrix-sized buffer (FP8 dequant, unaligned rows) touch it */
	sc->f32 = malloc(n * sizeof(float));
	/* values (one byte each), then [K/G][N] f32 scales */
	sc->q4 = s->cfg.int4_group ? malloc(n + 64 + n / s->cfg.int4_group * 4) :
		 NULL;
	if (!sc->f32 || (s->cfg.int4_group && !sc->q4)) {
		ldr_hf_scratch_free(sc);
		return ldr_err(-ENOMEM, "out of memory for packing buffers");
	}
	return 0;
}

void ldr_hf_scratch_free(struct ldr_hf_scratch *sc)
{
	free(sc->f32);
	free(sc->q4);
	sc->f32 = NULL;
	sc->q4 = NULL;
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

int ldr_hf_pack_expert(const struct ldr_hf_src *c, struct ldr_hf_scratch *s,
		       uint64_t i, uint8_t *dst)
{
	const struct ldr_hf_mat *m = &c->mats[i * 3];
	int id, ret;

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

		madvise((void *)a, (uintptr_t)m[id].w->data + m[id].w->len - a,
			MADV_WILLNEED);
	}
}

void ldr_hf_done(const struct ldr_hf_src *c, uint64_t i)
{
	const struct ldr_hf_mat *m = &c->mats[i * 3];
	int id;

	for (id = 0; id < 3; id++) {
		ldr_st_tensor_done(m[id].w);
		if (m[id].scale_inv)
			ldr_st_tensor_done(m[id].scale_inv);
		if (m[id].scale)
			ldr_st_tensor_done(m[id].scale);
	}
}
