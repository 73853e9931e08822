// SPDX-License-Identifier: MIT
/*
 * gguf-model.c - kt_model_open() on a GGUF file: the stacked expert tensors
 * (blk.L.ffn_{gate,up,down}_exps.weight) of a MoE architecture, repacked
 * into kt's tiles with their blocks' values and scales kept as they are
 * (Documentation/formats.md). Never a second quantization.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp.h"
#include "kernels/mxfp4.h"
#include "kernels/pack.h"
#include "ktcore/cache.h"
#include "ktcore/core.h"
#include "ktcore/live.h"
#include "ktcore/mem.h"
#include "ktcore/model.h"
#include "ktcore/moe.h"
#include "loader/error.h"
#include "loader/fault.h"
#include "loader/gguf.h"
#include "loader/gguf-model.h"
#include "loader/gpu-upload.h"
#include "loader/mask.h"
#include "loader/placement.h"

#define BLOB_ALIGN	4096ul
#define MAX_DIM		(1u << 20)	/* as .ktw: H, I */
#define MAX_EXPERTS	65536u
#define MAX_LAYERS	4096u

static const char *const archs[] = {
	"qwen3moe", "qwen2moe", "deepseek2", "llama", "gpt-oss",
};

static const char *const mat_names[3] = { "gate", "up", "down" };

struct gguf_model {
	struct kt_model m;
	struct core_mem mem;
};

static void release(struct kt_model *m)
{
	struct gguf_model *gm = (struct gguf_model *)m;

	core_mem_free(&gm->mem);
	ldr_pack_src_free(m->priv);
	free(m->bias);
	free(m->layer_down_quant);
	free(m->experts);
	free(m->layer_ids);
	free(gm);
}

static int arch_key(const struct ldr_gguf *g, const char *arch,
		    const char *key, uint64_t max, uint64_t *v, bool need)
{
	char k[128];
	int ret;

	snprintf(k, sizeof(k), "%s.%s", arch, key);
	ret = ldr_gguf_get_uint(g, k, max, v);
	if (ret == -ENOENT && need)
		return ldr_err(-EINVAL, "%s: metadata key %s is missing",
			       g->path, k);
	return ret;
}

/* kt's quantization of a ggml type, with its group (0 when none) */
static int quant_of(uint32_t type, enum kt_quant *q, unsigned int *group)
{
	*group = 0;
	switch (type) {
	case LDR_GGML_Q8_0:
		*q = KT_QUANT_Q8_0;
		*group = 32;
		return 0;
	case LDR_GGML_Q4_K:
		*q = KT_QUANT_Q4_K;
		*group = 32;
		return 0;
	case LDR_GGML_Q5_K:
		*q = KT_QUANT_Q5_K;
		*group = 32;
		return 0;
	case LDR_GGML_Q6_K:
		*q = KT_QUANT_Q6_K;
		*group = 32;
		return 0;
	case LDR_GGML_Q4_0:
		/* d * (nibble - 8): exactly kt's INT4 with group 32 */
		*q = KT_QUANT_INT4;
		*group = 32;
		return 0;
	case LDR_GGML_MXFP4:
		*q = KT_QUANT_MXFP4;
		*group = 32;
		return 0;
	case LDR_GGML_BF16:
	case LDR_GGML_F16:
	case LDR_GGML_F32:
		*q = KT_QUANT_BF16;
		return 0;
	default:
		return -EOPNOTSUPP;
	}
}


/* Q8_0 and the K-quants share the group (32) and the down chunk: their
 * gate/up and down may differ (kern_pack_layout_mix()) */
static bool mixable(uint32_t type)
{
	return type == LDR_GGML_Q8_0 || type == LDR_GGML_Q4_K ||
	       type == LDR_GGML_Q5_K || type == LDR_GGML_Q6_K;
}

/*
 * @first[0] is the first gate/up tensor seen, @first[1] the first down:
 * gate and up must have one type in every layer, down one type (which may
 * be another block type) in every layer.
 */
static int check_tensor(struct ldr_gguf_src *p, const struct ldr_gguf_tensor *t,
			int id, const struct ldr_gguf_tensor **first)
{
	int role = id == KERN_MAT_DOWN;
	uint32_t *type = role ? &p->type_down : &p->type;
	uint64_t K = id == KERN_MAT_DOWN ? p->I : p->H;
	uint64_t N = id == KERN_MAT_DOWN ? p->H : p->I;
	enum kt_quant q;
	unsigned int group;

	if (t->n_dims != 3 || t->ne[0] != K || t->ne[1] != N ||
	    t->ne[2] != p->E)
		return ldr_err(-EINVAL, "%s: %.*s has shape [%llu, %llu, %llu] (%u dims), expected [%llu, %llu, %llu] from the metadata",
			       p->g->path, (int)t->name.len, t->name.p,
			       (unsigned long long)t->ne[0],
			       (unsigned long long)t->ne[1],
			       (unsigned long long)t->ne[2], t->n_dims,
			       (unsigned long long)K, (unsigned long long)N,
			       (unsigned long long)p->E);
	if (quant_of(t->type, &q, &group))
		return ldr_err(-EOPNOTSUPP, "%s: %.*s is %s: kt reads Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4, BF16, F16 and F32 expert tensors",
			       p->g->path, (int)t->name.len, t->name.p,
			       ldr_gguf_type_name(t->type));
	if (!first[role]) {
		first[role] = t;
		*type = t->type;
		if (role) {
			p->quant_down = q;
		} else {
			p->quant = q;
			p->group = group;
		}
	} else if (t->type != *type && role && mixable(p->type) &&
		   mixable(*type) && mixable(t->type)) {
		/* down's type varies by layer among the block types that
		 * mix: each layer gets its own layout (plan_layouts()) */
		p->down_varies = true;
	} else if (t->type != *type) {
		return ldr_err(-EOPNOTSUPP, "%s: %.*s is %s but %.*s is %s: kt holds one type for gate and up in every layer, and down's may vary by layer only among Q8_0, Q4_K, Q5_K and Q6_K",
			       p->g->path, (int)t->name.len, t->name.p,
			       ldr_gguf_type_name(t->type),
			       (int)first[role]->name.len, first[role]->name.p,
			       ldr_gguf_type_name(*type));
	}
	if (role && t->type != p->type &&
	    (!mixable(p->type) || !mixable(t->type)))
		return ldr_err(-EOPNOTSUPP, "%s: %.*s is %s but %.*s is %s: kt mixes types between gate/up and down only among Q8_0, Q4_K, Q5_K and Q6_K",
			       p->g->path, (int)t->name.len, t->name.p,
			       ldr_gguf_type_name(t->type),
			       (int)first[0]->name.len, first[0]->name.p,
			       ldr_gguf_type_name(p->type));
	return 0;
}

static int plan_geometry(struct ldr_gguf_src *p)
{
	const struct ldr_gguf *g = p->g;
	unsigned int i;
	int ret;

	ret = ldr_gguf_get_str(g, "general.architecture", p->arch,
			       sizeof(p->arch));
	if (ret == -ENOENT)
		return ldr_err(-EINVAL, "%s: metadata key general.architecture is missing",
			       g->path);
	if (ret)
		return ret;
	for (i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
		if (!strcmp(p->arch, archs[i]))
			break;
	if (i == sizeof(archs) / sizeof(archs[0]))
		return ldr_err(-EOPNOTSUPP, "%s: architecture '%s' is not a MoE kt reads (qwen3moe, qwen2moe, deepseek2, llama, gpt-oss)",
			       g->path, p->arch);
	ret = arch_key(g, p->arch, "embedding_length", MAX_DIM, &p->H, true);
	if (!ret)
		ret = arch_key(g, p->arch, "expert_count", MAX_EXPERTS, &p->E,
			       true);
	if (!ret)
		ret = arch_key(g, p->arch, "block_count", MAX_LAYERS,
			       &p->n_blocks, true);
	if (ret)
		return ret;
	ret = arch_key(g, p->arch, "expert_feed_forward_length", MAX_DIM,
		       &p->I, false);
	/* Mixtral (llama): the experts are the feed-forward */
	if (ret == -ENOENT)
		ret = arch_key(g, p->arch, "feed_forward_length", MAX_DIM,
			       &p->I, true);
	if (ret)
		return ret;
	ret = arch_key(g, p->arch, "expert_used_count", MAX_EXPERTS,
		       &p->top_k, false);
	if (ret && ret != -ENOENT)
		return ret;
	ret = arch_key(g, p->arch, "leading_dense_block_count", MAX_LAYERS,
		       &p->dense, false);
	if (ret && ret != -ENOENT)
		return ret;
	if (!p->E || !p->H || !p->I || !p->n_blocks)
		return ldr_err(-EINVAL, "%s: %s: embedding_length, expert_feed_forward_length, expert_count and block_count must be nonzero",
			       g->path, p->arch);
	if (p->top_k > p->E)
		return ldr_err(-EINVAL, "%s: %s.expert_used_count %llu exceeds expert_count %llu",
			       g->path, p->arch, (unsigned long long)p->top_k,
			       (unsigned long long)p->E);
	/* the blocks of 32 along K; kt pads to its tiles beyond that */
	if (p->H % 32)
		return ldr_err(-EOPNOTSUPP, "%s: hidden size %s.embedding_length = %llu is not a multiple of 32, which kt's packed layout needs",
			       g->path, p->arch, (unsigned long long)p->H);
	if (p->I % 32)
		return ldr_err(-EOPNOTSUPP, "%s: expert intermediate size %s.expert_feed_forward_length = %llu is not a multiple of 32, which kt's packed layout needs",
			       g->path, p->arch, (unsigned long long)p->I);
	/* llama.cpp's gpt-oss: ggml_swiglu_oai with alpha 1.702, limit 7 */
	p->act = strcmp(p->arch, "gpt-oss") ? KT_ACT_SILU : KT_ACT_SWIGLU_OAI;
	return 0;
}

/* The padded H or I of the tiles (K-quants: their super-block of 256). */
static uint64_t pad_dim(const struct ldr_gguf_src *p, uint64_t v)
{
	unsigned int u = kern_quant_is_k(p->quant) ||
			 kern_quant_is_k(p->quant_down) ? KERN_Q4_K_SUPER :
			 KERN_DOWN_CHUNK;

	return (v + u - 1) / u * u;
}

/* blk.@l.ffn_*_exps.bias: all three or none, f32/f16/bf16 [N, E]. */
static int plan_bias(struct ldr_gguf_src *p, uint32_t l, uint32_t li)
{
	const struct ldr_gguf_tensor *t[3];
	char name[96];
	int id, found = 0;

	for (id = 0; id < 3; id++) {
		snprintf(name, sizeof(name), "blk.%u.ffn_%s_exps.bias", l,
			 mat_names[id]);
		t[id] = ldr_gguf_tensor(p->g, name);
		found += !!t[id];
	}
	if (found != 3 && (found || (li && p->bias)))
		return ldr_err(-EINVAL, "%s: layer %u has %d of the three expert bias tensors (blk.%u.ffn_{gate,up,down}_exps.bias); kt needs all or none, in every layer",
			       p->g->path, l, found, l);
	if (!found)
		return 0;
	if (li && !p->bias)
		return ldr_err(-EINVAL, "%s: layer %u has expert biases but layer %d has none",
			       p->g->path, l, p->layer_ids[0]);
	if (!p->bias) {
		p->bias = calloc(p->n_blocks, sizeof(*p->bias));
		if (!p->bias)
			return -ENOMEM;
	}
	for (id = 0; id < 3; id++) {
		uint64_t N = id == KERN_MAT_DOWN ? p->H : p->I;

		if (t[id]->n_dims != 2 || t[id]->ne[0] != N ||
		    t[id]->ne[1] != p->E)
			return ldr_err(-EINVAL, "%s: %.*s has shape [%llu, %llu] (%u dims), expected [%llu, %llu]",
				       p->g->path, (int)t[id]->name.len,
				       t[id]->name.p,
				       (unsigned long long)t[id]->ne[0],
				       (unsigned long long)t[id]->ne[1],
				       t[id]->n_dims, (unsigned long long)N,
				       (unsigned long long)p->E);
		if (t[id]->type != LDR_GGML_F32 && t[id]->type != LDR_GGML_F16 &&
		    t[id]->type != LDR_GGML_BF16)
			return ldr_err(-EOPNOTSUPP, "%s: %.*s is %s: kt reads F32, F16 and BF16 biases",
				       p->g->path, (int)t[id]->name.len,
				       t[id]->name.p,
				       ldr_gguf_type_name(t[id]->type));
		p->bias[li][id] = t[id];
	}
	return 0;
}

static float elem_f32(uint32_t type, const uint8_t *data, size_t i)
{
	uint16_t h;
	float f;

	if (type == LDR_GGML_F32) {
		memcpy(&f, data + i * 4, 4);
		return f;
	}
	memcpy(&h, data + i * 2, 2);
	return type == LDR_GGML_BF16 ? kern_bf16_to_f32(h) :
				       kern_f16_to_f32(h);
}

void ldr_gguf_src_bias(const struct ldr_gguf_src *p, uint32_t layer,
		       uint32_t e, float *dst)
{
	size_t off[3] = { 0, p->lay.inter, 2 * (size_t)p->lay.inter };
	unsigned int id;
	uint64_t n;

	memset(dst, 0, (2 * (size_t)p->lay.inter + p->lay.hidden) * 4);
	for (id = 0; id < 3; id++) {
		const struct ldr_gguf_tensor *t = p->bias[layer][id];
		uint64_t N = t->ne[0];

		for (n = 0; n < N; n++)
			dst[off[id] + n] = elem_f32(t->type, t->data,
						    (size_t)e * N + n);
	}
}

static int plan_layers(struct ldr_gguf_src *p)
{
	const struct ldr_gguf_tensor *first[2] = { NULL, NULL };
	uint32_t l;
	int id, ret;

	p->layer_ids = calloc(p->n_blocks, sizeof(*p->layer_ids));
	p->t = calloc(p->n_blocks, sizeof(*p->t));
	p->down_types = calloc(p->n_blocks, sizeof(*p->down_types));
	if (!p->layer_ids || !p->t || !p->down_types)
		return -ENOMEM;
	for (l = 0; l < p->n_blocks; l++) {
		const struct ldr_gguf_tensor *t[3];
		char name[96];
		int found = 0;

		for (id = 0; id < 3; id++) {
			snprintf(name, sizeof(name), "blk.%u.ffn_%s_exps.weight",
				 l, mat_names[id]);
			t[id] = ldr_gguf_tensor(p->g, name);
			found += !!t[id];
		}
		/* a dense layer (deepseek2's leading ones, or any without
		 * experts) is not kt's */
		if (!found)
			continue;
		if (l < p->dense)
			return ldr_err(-EINVAL, "%s: layer %u has expert tensors but leading_dense_block_count is %llu",
				       p->g->path, l,
				       (unsigned long long)p->dense);
		for (id = 0; id < 3; id++) {
			if (!t[id])
				return ldr_err(-EINVAL, "%s: blk.%u.ffn_%s_exps.weight is missing (the layer has the other expert tensors)",
					       p->g->path, l, mat_names[id]);
			ret = check_tensor(p, t[id], id, first);
			if (ret)
				return ret;
			p->t[p->n_layers][id] = t[id];
		}
		ret = plan_bias(p, l, p->n_layers);
		if (ret)
			return ret;
		p->down_types[p->n_layers] = t[KERN_MAT_DOWN]->type;
		p->layer_ids[p->n_layers++] = (int32_t)l;
	}
	if (!p->n_layers)
		return ldr_err(-EINVAL, "%s: no stacked expert tensors (blk.L.ffn_gate_exps.weight): not a MoE file, or per-expert tensors of an old conversion",
			       p->g->path);
	return 0;
}

/*
 * Matrix @id of one expert: @src the expert's [N][K] slice of the stacked
 * tensor. Q8_0 and Q4_0 blocks become int8 values and f32 scales (the f16
 * scale exactly), packed 16 rows at a time; float types go through the
 * packer's bf16 rounding.
 */
/* the 6-bit scale and min of sub-block @j of a Q4_K super-block's 12 bytes */
static void q4k_scale_min(const uint8_t *s, unsigned int j, uint8_t *sc,
			  uint8_t *mn)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*mn = s[j + 4] & 63;
	} else {
		*sc = (uint8_t)((s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4);
		*mn = (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
	}
}


static float f16le(const uint8_t *p)
{
	return kern_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/*
 * One super-block of 256 of a K-quant row into @q (values), @d, @dmin (f32)
 * and @sc, @mn (per sub-block) by the published block definitions:
 * Q4_K (144 bytes): f16 d, f16 dmin, 12 bytes of 6-bit scales and mins,
 *	qs[128]: value 64c + l (l < 32) the low nibble of qs[32c + l], value
 *	64c + 32 + l its high nibble.
 * Q5_K (176 bytes): f16 d, f16 dmin, the same 12 bytes, qh[32], qs[128] as
 *	Q4_K's; bit 2c of qh[l] is bit 4 of value 64c + l, bit 2c + 1 that
 *	of value 64c + 32 + l.
 * Q6_K (210 bytes): ql[128], qh[64], int8 scales[16] (one per 16), f16 d;
 *	per half h of 128 values, l < 32: value 128h + 32i + l (i < 4) takes
 *	the low (i < 2) or high nibble of ql[64h + 32(i % 2) + l] and bits
 *	2i, 2i + 1 of qh[32h + l] as its bits 4 and 5; w = d * sc * (q - 32).
 * Return: false when a scale is not finite.
 */
static bool unpack_qk(uint32_t type, const uint8_t *blk, int8_t *q, float *d,
		      float *dmin, uint8_t *sc, uint8_t *mn)
{
	unsigned int c, j, i, h;

	if (type == LDR_GGML_Q6_K) {
		const uint8_t *ql = blk, *qh = blk + 128;

		*d = f16le(blk + 208);
		memcpy(sc, blk + 192, 16);
		for (h = 0; h < 2; h++)
			for (i = 0; i < 4; i++)
				for (j = 0; j < 32; j++) {
					uint8_t b = ql[64 * h + 32 * (i % 2) + j];
					uint8_t lo = i < 2 ? (b & 0xf) : (b >> 4);

					q[128 * h + 32 * i + j] = (int8_t)(lo |
						((qh[32 * h + j] >> (2 * i)) & 3)
						<< 4);
				}
		return isfinite(*d);
	}
	*d = f16le(blk);
	*dmin = f16le(blk + 2);
	for (j = 0; j < 8; j++)
		q4k_scale_min(blk + 4, j, &sc[j], &mn[j]);
	for (c = 0; c < 4; c++)
		for (j = 0; j < 32; j++) {
			const uint8_t *qs = blk + (type == LDR_GGML_Q5_K ? 48 : 16);
			uint8_t v = qs[32 * c + j];
			int h0 = 0, h1 = 0;

			if (type == LDR_GGML_Q5_K) {
				h0 = (blk[16 + j] >> (2 * c)) & 1;
				h1 = (blk[16 + j] >> (2 * c + 1)) & 1;
			}
			q[64 * c + j] = (int8_t)((v & 0xf) | h0 << 4);
			q[64 * c + 32 + j] = (int8_t)((v >> 4) | h1 << 4);
		}
	return isfinite(*d) && isfinite(*dmin);
}

/* a K-quant matrix, 16 rows at a time */
static int pack_qk(const struct ldr_gguf_src *p, const struct kern_pack_layout *l,
		   int id, uint32_t type, const uint8_t *src,
		   struct ldr_gguf_bufs *bf, uint8_t *blob, uint32_t layer,
		   uint32_t e)
{
	unsigned int N = id == KERN_MAT_DOWN ? l->hidden : l->inter;
	unsigned int K = id == KERN_MAT_DOWN ? l->inter : l->hidden;
	unsigned int nb, r, b, ns = K / 256, nsub = 256 / kern_qk_sub(l->quant);
	uint32_t bb;

	ldr_gguf_type_info(type, NULL, &bb, NULL);
	for (nb = 0; nb < N / KERN_TILE_ROWS; nb++) {
		for (r = 0; r < KERN_TILE_ROWS; r++) {
			const uint8_t *row = src + ((size_t)nb *
				KERN_TILE_ROWS + r) * ns * bb;

			for (b = 0; b < ns; b++) {
				unsigned int at = r * ns + b;

				if (!unpack_qk(type, row + (size_t)b * bb,
					       bf->q + (size_t)r * K + b * 256,
					       &bf->d[at], &bf->dmin[at],
					       &bf->s6[at * nsub],
					       &bf->m6[at * nsub]))
					return ldr_err(-EINVAL, "%s: layer %d expert %u %s: super-block %u of row %u has a scale that is not finite",
						       p->g->path,
						       p->layer_ids[layer], e,
						       mat_names[id], b,
						       nb * KERN_TILE_ROWS + r);
			}
		}
		kern_pack_rows_qk(l, id, nb, bf->q, bf->d, bf->dmin, bf->s6,
				  bf->m6, blob);
	}
	return 0;
}

/* A float matrix through the packer's bf16 rounding, padded if need be. */
static int pack_float(const struct ldr_gguf_src *p,
		      const struct kern_pack_layout *l, int id, uint32_t type,
		      const uint8_t *src, uint8_t *blob)
{
	enum kt_dtype dt = type == LDR_GGML_BF16 ? KT_DTYPE_BF16 :
			   type == LDR_GGML_F16 ? KT_DTYPE_F16 : KT_DTYPE_F32;
	size_t esz = dt == KT_DTYPE_F32 ? 4 : 2;
	unsigned int N = id == KERN_MAT_DOWN ? l->hidden : l->inter;
	unsigned int K = id == KERN_MAT_DOWN ? l->inter : l->hidden;
	unsigned int Nt = (unsigned int)(id == KERN_MAT_DOWN ? p->H : p->I);
	unsigned int Kt = (unsigned int)(id == KERN_MAT_DOWN ? p->I : p->H);
	unsigned int r;

	if (N == Nt && K == Kt)
		return kern_pack_matrix(l, id, src, dt, K, blob);
	memset(p->pad, 0, (size_t)N * K * esz);
	for (r = 0; r < Nt; r++)
		memcpy((uint8_t *)p->pad + (size_t)r * K * esz,
		       src + (size_t)r * Kt * esz, (size_t)Kt * esz);
	return kern_pack_matrix(l, id, p->pad, dt, K, blob);
}

/*
 * An MXFP4 matrix, 16 rows at a time: ggml's block_mxfp4 (17 bytes: the
 * E8M0 byte, then 16 bytes of codes, element j the low nibble of byte j
 * and j + 16 its high one) into codes and scales; padding is code 0.
 */
static int pack_mxfp4(const struct ldr_gguf_src *p,
		      const struct kern_pack_layout *l, int id,
		      const uint8_t *src, struct ldr_gguf_bufs *bf,
		      uint8_t *blob, uint32_t layer, uint32_t e)
{
	unsigned int N = id == KERN_MAT_DOWN ? l->hidden : l->inter;
	unsigned int K = id == KERN_MAT_DOWN ? l->inter : l->hidden;
	unsigned int Nt = (unsigned int)(id == KERN_MAT_DOWN ? p->H : p->I);
	unsigned int Kt = (unsigned int)(id == KERN_MAT_DOWN ? p->I : p->H);
	uint8_t *codes = (uint8_t *)bf->q, *e8 = bf->s6;
	unsigned int nb, r, b;

	for (nb = 0; nb < N / KERN_TILE_ROWS; nb++) {
		memset(codes, 0, (size_t)KERN_TILE_ROWS * K);
		memset(e8, 127, (size_t)KERN_TILE_ROWS * (K / 32));
		for (r = 0; r < KERN_TILE_ROWS &&
			    nb * KERN_TILE_ROWS + r < Nt; r++) {
			const uint8_t *row = src + ((size_t)nb *
				KERN_TILE_ROWS + r) * (Kt / 32) * 17;

			for (b = 0; b < Kt / 32; b++) {
				const uint8_t *blk = row + (size_t)b * 17;

				if (blk[0] == KERN_E8M0_NAN)
					return ldr_err(-EINVAL, "%s: layer %d expert %u %s: block %u of row %u has the E8M0 scale 255 (NaN)",
						       p->g->path,
						       p->layer_ids[layer], e,
						       mat_names[id], b,
						       nb * KERN_TILE_ROWS + r);
				e8[(size_t)r * (K / 32) + b] = blk[0];
				kern_mxfp4_unpack_ggml(blk + 1, codes +
						       (size_t)r * K + b * 32);
			}
		}
		if (kern_pack_rows_mxfp4(l, id, nb, codes, e8, blob))
			return ldr_err(-EINVAL, "%s: layer %d expert %u %s: cannot pack rows %u..%u",
				       p->g->path, p->layer_ids[layer], e,
				       mat_names[id], nb * KERN_TILE_ROWS,
				       nb * KERN_TILE_ROWS + 15);
	}
	return 0;
}

static int pack_matrix(const struct ldr_gguf_src *p,
		       const struct kern_pack_layout *l0, int id,
		       const uint8_t *src, struct ldr_gguf_bufs *bf,
		       uint8_t *blob, uint32_t layer, uint32_t e)
{
	struct kern_pack_layout ml;
	const struct kern_pack_layout *l = kern_pack_for(l0, id, &ml);
	uint32_t type = id == KERN_MAT_DOWN ? p->down_types[layer] : p->type;
	int8_t *q = bf->q;
	float *sc = bf->sc;
	unsigned int N = id == KERN_MAT_DOWN ? l->hidden : l->inter;
	unsigned int K = id == KERN_MAT_DOWN ? l->inter : l->hidden;
	/* the file's rows and blocks; the rest of the packed matrix is zero */
	unsigned int Nt = (unsigned int)(id == KERN_MAT_DOWN ? p->H : p->I);
	unsigned int Kt = (unsigned int)(id == KERN_MAT_DOWN ? p->I : p->H);
	unsigned int nb, r, b, j, nbk = Kt / 32;
	size_t bb = type == LDR_GGML_Q8_0 ? 34 : 18;

	switch (type) {
	case LDR_GGML_BF16:
	case LDR_GGML_F16:
	case LDR_GGML_F32:
		return pack_float(p, l, id, type, src, blob);
	case LDR_GGML_Q4_K:
	case LDR_GGML_Q5_K:
	case LDR_GGML_Q6_K:
		/* multiples of 256 in the file: never padded */
		return pack_qk(p, l, id, type, src, bf, blob, layer, e);
	case LDR_GGML_MXFP4:
		return pack_mxfp4(p, l, id, src, bf, blob, layer, e);
	}
	for (nb = 0; nb < N / KERN_TILE_ROWS; nb++) {
		memset(q, 0, (size_t)KERN_TILE_ROWS * K);
		memset(sc, 0, (size_t)KERN_TILE_ROWS * (K / 32) * 4);
		for (r = 0; r < KERN_TILE_ROWS &&
			    nb * KERN_TILE_ROWS + r < Nt; r++) {
			const uint8_t *row = src + ((size_t)nb *
				KERN_TILE_ROWS + r) * nbk * bb;
			int8_t *qr = q + (size_t)r * K;

			for (b = 0; b < nbk; b++) {
				const uint8_t *blk = row + b * bb;
				float d = kern_f16_to_f32((uint16_t)(blk[0] |
							  blk[1] << 8));

				if (!isfinite(d))
					return ldr_err(-EINVAL, "%s: layer %d expert %u %s: block %u of row %u has a scale that is not finite",
						       p->g->path,
						       p->layer_ids[layer], e,
						       mat_names[id], b,
						       nb * KERN_TILE_ROWS + r);
				sc[(size_t)r * (K / 32) + b] = d;
				if (type == LDR_GGML_Q8_0) {
					memcpy(qr + b * 32, blk + 2, 32);
					continue;
				}
				/* Q4_0: element j low nibble, j + 16 high */
				for (j = 0; j < 16; j++) {
					qr[b * 32 + j] = (int8_t)((blk[2 + j] &
								   0xf) - 8);
					qr[b * 32 + j + 16] =
						(int8_t)((blk[2 + j] >> 4) - 8);
				}
			}
		}
		kern_pack_rows_q(l, id, nb, q, sc, blob);
	}
	return 0;
}

int ldr_gguf_src_pack(struct ldr_gguf_src *p, uint32_t layer, uint32_t e,
		      uint8_t *blob)
{
	int id, ret = 0;

	for (id = 0; id < 3 && !ret; id++) {
		const struct ldr_gguf_tensor *t = p->t[layer][id];

		ret = pack_matrix(p, ldr_gguf_src_lay(p, layer), id,
				  t->data + t->nbytes / p->E * e,
				  &p->bf, blob, layer, e);
	}
	return ret;
}

void ldr_gguf_src_close(struct ldr_gguf_src *p)
{
	if (!p)
		return;
	free(p->bf.q);
	free(p->bf.sc);
	free(p->bf.d);
	free(p->bf.dmin);
	free(p->bf.s6);
	free(p->bf.m6);
	free(p->pad);
	free(p->bias);
	free(p->lays);
	free(p->down_types);
	free(p->layer_ids);
	free(p->t);
	ldr_gguf_close((struct ldr_gguf *)p->g);
	free(p);
}

/* One layout per layer where down's type varies by layer. */
static int plan_layouts(struct ldr_gguf_src *p)
{
	unsigned int group;
	enum kt_quant qd;
	uint32_t l;

	p->lays = calloc(p->n_layers, sizeof(*p->lays));
	if (!p->lays)
		return -ENOMEM;
	for (l = 0; l < p->n_layers; l++) {
		quant_of(p->down_types[l], &qd, &group);
		if (kern_pack_layout_mix(p->quant, qd, p->lay.hidden,
					 p->lay.inter, p->group, &p->lays[l]))
			return ldr_err(-EINVAL, "%s: layer %d: %s", p->g->path,
				       p->layer_ids[l], p->lays[l].err);
	}
	return 0;
}

int ldr_gguf_src_open(const char *path, struct ldr_gguf_src **out)
{
	struct ldr_gguf_src *p = calloc(1, sizeof(*p));
	struct ldr_gguf *g = NULL;
	size_t kmax;
	int ret;

	*out = NULL;
	if (!p)
		return -ENOMEM;
	ret = ldr_gguf_open(path, &g);
	if (ret) {
		free(p);
		return ret;
	}
	p->g = g;
	ret = plan_geometry(p);
	if (!ret)
		ret = plan_layers(p);
	if (!ret) {
		ret = kern_pack_layout_mix(p->quant, p->quant_down,
					   (unsigned int)pad_dim(p, p->H),
					   (unsigned int)pad_dim(p, p->I),
					   p->group, &p->lay);
		if (ret)
			ldr_err(ret, "%s: %s", path, p->lay.err);
	}
	if (!ret && p->down_varies)
		ret = plan_layouts(p);
	if (ret)
		goto err;
	/* 16 rows of the largest matrix: K <= 2^20 */
	kmax = p->lay.hidden > p->lay.inter ? p->lay.hidden : p->lay.inter;
	if (!ldr_gguf_src_is_plain(p)) {
		p->pad = malloc((size_t)p->lay.hidden * p->lay.inter * 4);
		if (!p->pad) {
			ret = -ENOMEM;
			goto err;
		}
	}
	p->bf.q = malloc(KERN_TILE_ROWS * kmax);
	p->bf.sc = malloc(KERN_TILE_ROWS * kmax / 32 * sizeof(float));
	p->bf.d = malloc(KERN_TILE_ROWS * kmax / 256 * sizeof(float) + 4);
	p->bf.dmin = malloc(KERN_TILE_ROWS * kmax / 256 * sizeof(float) + 4);
	/* per 32 (Q4_K, Q5_K), per 16 (Q6_K's scales) */
	p->bf.s6 = malloc(KERN_TILE_ROWS * kmax / 16);
	p->bf.m6 = malloc(KERN_TILE_ROWS * kmax / 16);
	if (!p->bf.q || !p->bf.sc || !p->bf.d || !p->bf.dmin || !p->bf.s6 ||
	    !p->bf.m6) {
		ret = -ENOMEM;
		goto err;
	}
	*out = p;
	return 0;
err:
	ldr_gguf_src_close(p);
	return ret;
}

/* left out by kt_model_opts' expert_mask or layer_masks */
static bool masked(const struct ldr_gguf_src *p, const struct kt_model_opts *o,
		   uint32_t layer, uint32_t e)
{
	return ldr_masked(o->expert_mask, o->layer_masks, (uint32_t)p->E,
			  layer, e);
}

static int build(struct kt_ctx *ctx, struct ldr_gguf_src *p,
		 const struct kt_model_opts *o, struct gguf_model *gm)
{
	const struct kern_pack_layout *l = &p->lay;
	struct kt_model *m = &gm->m;
	struct ldr_placement place;
	struct ldr_placement_set places = { 0 };
	const struct core_mem_layout *lay;
	size_t stride, n_blobs = 0, b = 0;
	uint32_t layer, e;
	int ret;

	m->ctx = ctx;
	m->hidden = l->hidden;
	m->inter = l->inter;
	m->hidden_io = (uint32_t)p->H;
	m->inter_io = (uint32_t)p->I;
	m->act = p->act;
	if (m->act == KT_ACT_SWIGLU_OAI) {
		m->act_alpha = KT_SWIGLU_OAI_ALPHA;
		m->act_limit = KT_SWIGLU_OAI_LIMIT;
	}
	m->n_experts = (uint32_t)p->E;
	m->n_layers = p->n_layers;
	m->quant = p->quant;
	m->down_quant = p->quant_down;
	m->group_size = l->group;
	m->down_chunk = l->kc;
	/* blobs of every layer in one stride: the largest layout */
	m->expert_bytes = l->total;
	for (layer = 0; layer < p->n_layers; layer++)
		if (ldr_gguf_src_lay(p, layer)->total > m->expert_bytes)
			m->expert_bytes = ldr_gguf_src_lay(p, layer)->total;
	m->release = release;
	m->layer_ids = calloc(p->n_layers, sizeof(*m->layer_ids));
	m->experts = calloc((size_t)p->n_layers * p->E, sizeof(*m->experts));
	if (!m->layer_ids || !m->experts)
		return -ENOMEM;
	if (p->lays) {
		m->layer_down_quant = malloc(p->n_layers);
		if (!m->layer_down_quant)
			return -ENOMEM;
		for (layer = 0; layer < p->n_layers; layer++)
			m->layer_down_quant[layer] =
				(uint8_t)p->lays[layer].quant_down;
	}
	if (p->bias) {
		m->bias = calloc((size_t)p->n_layers * p->E,
				 core_model_bias_stride(m) * sizeof(float));
		if (!m->bias)
			return -ENOMEM;
	}
	memcpy(m->layer_ids, p->layer_ids, p->n_layers * sizeof(int32_t));
	/* before any expert is packed: the GPU may not take them */
	if (o->flags & KT_MODEL_F_GPU_UPLOAD) {
		ret = ldr_gpu_upload_check(m, p->g->path);
		if (ret)
			return ret;
	}
	for (layer = 0; layer < p->n_layers; layer++)
		for (e = 0; e < p->E; e++)
			n_blobs += !masked(p, o, layer, e);
	stride = (m->expert_bytes + BLOB_ALIGN - 1) & ~(BLOB_ALIGN - 1);
	/* each layer's pages by its own layout where down's type varies:
	 * its down slices (and scales) sit elsewhere in the blob */
	if (p->lays) {
		uint64_t *per = calloc(p->n_layers, sizeof(*per));

		if (!per)
			return -ENOMEM;
		for (layer = 0; layer < p->n_layers; layer++)
			for (e = 0; e < p->E; e++)
				per[layer] += !masked(p, o, layer, e);
		ret = ldr_placement_layers(&places, p->lays, p->n_layers,
					   core_ctx_nodes(ctx), per, stride);
		free(per);
		if (ret)
			return ret;
		lay = &places.groups[0].lay;
	} else {
		ldr_placement_init(&place, l, core_ctx_nodes(ctx), 0, n_blobs,
				   stride);
		lay = &place.lay;
	}
	ret = core_mem_alloc_spread(ctx, n_blobs * stride,
				    o->flags & KT_MODEL_F_NO_HUGEPAGE ?
				    CORE_MEM_F_SMALL : CORE_MEM_F_1G,
				    lay, &gm->mem);
	ldr_placement_set_free(&places);
	if (ret)
		return ldr_err(ret, "%s: not enough memory for %.1f MiB of experts",
			       p->g->path, n_blobs * stride / 1048576.0);
	for (layer = 0; layer < p->n_layers; layer++) {
		for (e = 0; e < p->E; e++) {
			struct core_expert *ex = core_model_expert(m, layer, e);
			const struct kern_pack_layout *ll =
				ldr_gguf_src_lay(p, layer);
			uint8_t *blob;

			if (masked(p, o, layer, e))
				continue;
			blob = gm->mem.base + b++ * stride;
			ret = ldr_gguf_src_pack(p, layer, e, blob);
			if (ret)
				return ret;
			if (m->bias)
				ldr_gguf_src_bias(p, layer, e,
						  core_model_bias(m, layer, e));
			kern_pack_mat(ll, KERN_MAT_GATE, blob, &ex->gate);
			kern_pack_mat(ll, KERN_MAT_UP, blob, &ex->up);
			kern_pack_mat(ll, KERN_MAT_DOWN, blob, &ex->down);
			ex->present = true;
			m->resident_bytes += ll->total;
		}
	}
	return 0;
}

/* A masked expert for the GPU upload at open (gpu-upload.h). */
static int pack_masked(void *arg, uint32_t layer, uint32_t e, uint8_t *dst)
{
	return ldr_gguf_src_pack(arg, layer, e, dst);
}

int ldr_gguf_model_open(struct kt_ctx *ctx, const char *path,
			const struct kt_model_opts *o, struct kt_model **out)
{
	struct gguf_model *gm = NULL;
	struct ldr_gguf_src *p = NULL;
	int ret;

	ret = ldr_gguf_src_open(path, &p);
	if (ret)
		return ret;
	gm = calloc(1, sizeof(*gm));
	if (!gm) {
		ret = -ENOMEM;
		goto out;
	}
	ret = build(ctx, p, o, gm);
	if (!ret) {
		ret = core_moe_reserve(ctx, &gm->m);
		if (ret)
			ldr_err(ret, "%s: no kernels for %s on this context",
				path, kt_quant_name(gm->m.quant));
	}
	if (!ret)
		ret = ldr_pack_src_attach(&gm->m, path, "GGUF file", o->flags,
					  pack_masked, p);
	if (!ret)
		ret = core_live_add(ctx, &gm->m);	/* ops may name it */
	if (ret)
		goto out;
	core_log(ctx, KT_LOG_INFO, "%s: GGUF %s, %u MoE layers x %u experts of %s, down %s (kt %s, %s), %llu MiB resident",
		 path, p->arch, gm->m.n_layers, gm->m.n_experts,
		 ldr_gguf_type_name(p->type), ldr_gguf_type_name(p->type_down),
		 kt_quant_name(gm->m.quant), kt_quant_name(gm->m.down_quant),
		 (unsigned long long)(gm->m.resident_bytes >> 20));
	*out = &gm->m;
	gm = NULL;
out:
	if (gm) {
		core_model_extras_free(&gm->m);
		release(&gm->m);
	}
	ldr_gguf_src_close(p);
	return ret;
}
