// SPDX-License-Identifier: MIT
/*
 * hfconfig.c - config.json of Qwen2/3-MoE, DeepSeek-V2/V3, Kimi-K2,
 * Mixtral and GPT-OSS, read with jansson. Multimodal wrappers keep the language model's
 * keys under "text_config"; that object is used when the top level lacks them.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/error.h"
#include "loader/fault.h"
#include "loader/hfconfig.h"
#include "loader/ktw-format.h"

/* First of @keys present in @o as a positive integer; 0 when none is. */
static int get_uint(const char *path, json_t *o, const char *const *keys,
		    uint32_t *out, const char **which)
{
	for (; *keys; keys++) {
		json_t *v = json_object_get(o, *keys);

		if (!v || json_is_null(v))
			continue;
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > UINT32_MAX)
			return ldr_err(-EINVAL, "%s: %s is not a non-negative integer",
				       path, *keys);
		*out = (uint32_t)json_integer_value(v);
		if (which)
			*which = *keys;
		return 1;
	}
	return 0;
}

/*
 * quantization_config.weight_block_size: absent or null means [128, 128];
 * anything else must be two integers in 1..KTW_MAX_DIM (a larger block is
 * one block per matrix anyway, and 2^32 would wrap to 0 as a uint32).
 */
static int get_fp8_block(const char *path, json_t *root, json_t *o,
			 uint32_t block[2])
{
	json_t *q = json_object_get(o, "quantization_config"), *v;
	int i;

	block[0] = block[1] = 128;
	if (!q)
		q = json_object_get(root, "quantization_config");
	v = json_object_get(q, "weight_block_size");
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v) || json_array_size(v) != 2)
		goto bad;
	for (i = 0; i < 2; i++) {
		json_t *x = json_array_get(v, (size_t)i);

		if (!json_is_integer(x) || json_integer_value(x) < 1 ||
		    json_integer_value(x) > KTW_MAX_DIM)
			goto bad;
		block[i] = (uint32_t)json_integer_value(x);
	}
	return 0;
bad:
	return ldr_err(-EINVAL, "%s: quantization_config.weight_block_size must be two integers in 1..%u",
		       path, KTW_MAX_DIM);
}

static const char *str_of(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

/*
 * compressed-tensors "pack-quantized" INT4 (as Kimi-K2-Thinking ships):
 * every config group's weights must be symmetric 4-bit integers in groups
 * of 32, 64 or 128 along K, the INT4 layouts kt keeps as they are.
 * @group: that group size; 0 when the checkpoint is not compressed-tensors.
 */
static int get_ct_int4(const char *path, json_t *root, json_t *o,
		       uint32_t *group)
{
	json_t *q = json_object_get(o, "quantization_config"), *groups, *g;
	const char *key;

	*group = 0;
	if (!q)
		q = json_object_get(root, "quantization_config");
	if (strcmp(str_of(q, "quant_method"), "compressed-tensors"))
		return 0;
	if (strcmp(str_of(q, "format"), "pack-quantized"))
		return ldr_err(-EINVAL, "%s: quantization_config.format \"%s\": of compressed-tensors checkpoints kt reads pack-quantized only",
			       path, str_of(q, "format"));
	groups = json_object_get(q, "config_groups");
	if (!json_is_object(groups) || !json_object_size(groups))
		return ldr_err(-EINVAL, "%s: quantization_config.config_groups is missing or empty",
			       path);
	json_object_foreach(groups, key, g) {
		json_t *w = json_object_get(g, "weights");
		json_t *nb = json_object_get(w, "num_bits");
		json_t *gs = json_object_get(w, "group_size");
		json_int_t v;

		if (!json_is_object(w) || !json_is_integer(nb) ||
		    json_integer_value(nb) != 4 ||
		    strcmp(str_of(w, "type"), "int") ||
		    !json_is_true(json_object_get(w, "symmetric")) ||
		    strcmp(str_of(w, "strategy"), "group"))
			return ldr_err(-EINVAL, "%s: quantization_config.config_groups.%s.weights: kt reads symmetric 4-bit integer weights with group strategy only",
				       path, key);
		v = json_is_integer(gs) ? json_integer_value(gs) : 0;
		if (v != 32 && v != 64 && v != 128)
			return ldr_err(-EINVAL, "%s: quantization_config.config_groups.%s.weights.group_size must be 32, 64 or 128",
				       path, key);
		if (*group && *group != (uint32_t)v)
			return ldr_err(-EINVAL, "%s: quantization_config.config_groups disagree on group_size (%u and %u)",
				       path, *group, (unsigned int)v);
		*group = (uint32_t)v;
	}
	return 0;
}

/*
 * GPT-OSS: swiglu_limit (transformers' default 7.0 when absent) must be a
 * finite positive number; alpha is 1.702 in every GPT-OSS. H and I are
 * padded by kt from multiples of 32 (MXFP4's blocks) to its tiles.
 * quant_method "mxfp4" is read for gpt_oss only (its tensor names).
 */
static int get_gpt_oss(const char *path, json_t *root, json_t *o,
		       struct ldr_hfconfig *cfg)
{
	json_t *q = json_object_get(o, "quantization_config"), *v;
	const char *qm;

	if (!q)
		q = json_object_get(root, "quantization_config");
	qm = str_of(q, "quant_method");
	cfg->gpt_oss = !strcmp(cfg->arch, "gpt_oss");
	cfg->mxfp4 = !strcmp(qm, "mxfp4");
	if (!cfg->gpt_oss) {
		if (cfg->mxfp4)
			return ldr_err(-EOPNOTSUPP, "%s: quantization_config.quant_method \"mxfp4\": kt reads MXFP4 checkpoints of model_type gpt_oss only (this is \"%s\")",
				       path, cfg->arch);
		return 0;
	}
	if (*qm && !cfg->mxfp4)
		return ldr_err(-EOPNOTSUPP, "%s: quantization_config.quant_method \"%s\": of gpt_oss checkpoints kt reads the MXFP4 and the unquantized (BF16) releases",
			       path, qm);
	cfg->swiglu_limit = 7.0f;
	v = json_object_get(o, "swiglu_limit");
	if (v && !json_is_null(v)) {
		double d = json_number_value(v);

		/* jansson reads no NaN or Infinity; 1e30 is create.c's bound */
		if (!json_is_number(v) || !(d > 0) || d > 1e30)
			return ldr_err(-EOPNOTSUPP, "%s: swiglu_limit must be a finite positive number (kt's clamped SwiGLU needs one)",
				       path);
		cfg->swiglu_limit = (float)d;
	}
	if (cfg->hidden % 32 || cfg->inter % 32)
		return ldr_err(-EOPNOTSUPP, "%s: gpt_oss hidden_size %u and intermediate_size %u must be multiples of 32, which kt's packed layout needs (it pads them to its tiles)",
			       path, cfg->hidden, cfg->inter);
	return 0;
}

/* Takes @root's reference. */
static int parse_root(const char *path, json_t *root, struct ldr_hfconfig *cfg)
{
	static const char *const k_hidden[] = { "hidden_size", NULL };
	static const char *const k_layers[] = { "num_hidden_layers", NULL };
	static const char *const k_experts[] = {
		"num_experts", "n_routed_experts", "num_local_experts", NULL };
	static const char *const k_inter[] = {
		"moe_intermediate_size", "intermediate_size", NULL };
	static const char *const k_topk[] = { "num_experts_per_tok", NULL };
	static const char *const k_dense[] = { "first_k_dense_replace", NULL };
	static const char *const k_step[] = { "decoder_sparse_step", NULL };
	static const char *const k_freq[] = { "moe_layer_freq", NULL };
	uint32_t first_dense = 0, step = 1, freq = 1, l;
	const char *experts_key = NULL;
	json_t *o, *v, *x;
	size_t i;
	int ret;

	o = root;
	if (!json_is_object(o)) {
		ret = ldr_err(-EINVAL, "%s: not a JSON object", path);
		goto out;
	}
	if (!json_object_get(o, "hidden_size") &&
	    json_is_object(json_object_get(o, "text_config")))
		o = json_object_get(o, "text_config");
	v = json_object_get(o, "model_type");
	if (!json_is_string(v))
		v = json_object_get(root, "model_type");
	snprintf(cfg->arch, sizeof(cfg->arch), "%s",
		 json_is_string(v) ? json_string_value(v) : "unknown");

	if ((ret = get_uint(path, o, k_hidden, &cfg->hidden, NULL)) <= 0 ||
	    (ret = get_uint(path, o, k_layers, &cfg->n_layers, NULL)) <= 0 ||
	    (ret = get_uint(path, o, k_experts, &cfg->n_experts, &experts_key)) <= 0 ||
	    (ret = get_uint(path, o, k_inter, &cfg->inter, NULL)) <= 0) {
		if (!ret)
			ret = ldr_err(-EINVAL, "%s: needs hidden_size, num_hidden_layers, an expert count (num_experts, n_routed_experts or num_local_experts) and moe_intermediate_size or intermediate_size",
				      path);
		goto out;
	}
	if (cfg->n_layers > KTW_MAX_LAYERS) {
		ret = ldr_err(-EINVAL, "%s: num_hidden_layers = %u exceeds the .ktw limit of %u",
			      path, cfg->n_layers, KTW_MAX_LAYERS);
		goto out;
	}
	if (!cfg->n_experts || !cfg->n_layers || !cfg->hidden || !cfg->inter) {
		ret = ldr_err(-EINVAL, "%s: not a MoE model (experts %u, layers %u, hidden %u, inter %u)",
			      path, cfg->n_experts, cfg->n_layers, cfg->hidden,
			      cfg->inter);
		goto out;
	}
	/* the .ktw format's own limits, before anything is sized by them */
	if (cfg->n_experts > KTW_MAX_EXPERTS) {
		ret = ldr_err(-EINVAL, "%s: %s = %u exceeds the .ktw limit of %u experts per layer",
			      path, experts_key, cfg->n_experts, KTW_MAX_EXPERTS);
		goto out;
	}
	if (cfg->hidden > KTW_MAX_DIM || cfg->inter > KTW_MAX_DIM) {
		ret = ldr_err(-EINVAL, "%s: hidden_size %u or the intermediate size %u exceeds the .ktw limit of %u",
			      path, cfg->hidden, cfg->inter, KTW_MAX_DIM);
		goto out;
	}
	if (get_uint(path, o, k_topk, &cfg->top_k, NULL) < 0 ||
	    get_uint(path, o, k_dense, &first_dense, NULL) < 0 ||
	    get_uint(path, o, k_step, &step, NULL) < 0 ||
	    get_uint(path, o, k_freq, &freq, NULL) < 0) {
		ret = -EINVAL;
		goto out;
	}
	if (!step)
		step = 1;
	if (!freq)
		freq = 1;
	ret = get_fp8_block(path, root, o, cfg->fp8_block);
	if (ret)
		goto out;
	ret = get_ct_int4(path, root, o, &cfg->int4_group);
	if (ret)
		goto out;
	ret = get_gpt_oss(path, root, o, cfg);
	if (ret)
		goto out;
	cfg->is_moe = calloc(cfg->n_layers, sizeof(*cfg->is_moe));
	if (!cfg->is_moe) {
		ret = -ENOMEM;
		goto out;
	}
	/* DeepSeek: dense until first_k_dense_replace, then every freq-th;
	 * Qwen-MoE: every decoder_sparse_step-th unless in mlp_only_layers */
	for (l = 0; l < cfg->n_layers; l++)
		cfg->is_moe[l] = l >= first_dense && l % freq == 0 &&
				 (l + 1) % step == 0;
	v = json_object_get(o, "mlp_only_layers");
	if (json_is_array(v)) {
		json_array_foreach(v, i, x) {
			if (!json_is_integer(x)) {
				ret = ldr_err(-EINVAL, "%s: mlp_only_layers holds a non-integer",
					      path);
				goto out;
			}
			if (json_integer_value(x) >= 0 &&
			    json_integer_value(x) < cfg->n_layers)
				cfg->is_moe[json_integer_value(x)] = false;
		}
	}
	ret = 0;
out:
	json_decref(root);
	if (ret < 0)
		ldr_hfconfig_free(cfg);
	return ret < 0 ? ret : 0;
}

int ldr_hfconfig_load(const char *dir, struct ldr_hfconfig *cfg)
{
	json_error_t jerr;
	char path[4096];
	json_t *root;

	memset(cfg, 0, sizeof(*cfg));
	snprintf(path, sizeof(path), "%s/config.json", dir);
	if (LDR_FAULT_CALL("open"))
		return ldr_err(-EIO, "%s: %s", path, strerror(EIO));
	root = json_load_file(path, 0, &jerr);
	if (!root) {
		if (strstr(jerr.text, "unable to open"))
			return ldr_err(-ENOENT, "%s: %s", path, jerr.text);
		return ldr_err(-EINVAL, "%s: malformed JSON: %s (line %d)", path,
			       jerr.text, jerr.line);
	}
	return parse_root(path, root, cfg);
}

int ldr_hfconfig_parse(const char *path, const char *json, size_t len,
		       struct ldr_hfconfig *cfg)
{
	json_error_t jerr;
	json_t *root;

	memset(cfg, 0, sizeof(*cfg));
	root = json_loadb(json, len, 0, &jerr);
	if (!root)
		return ldr_err(-EINVAL, "%s: malformed JSON: %s (line %d)", path,
			       jerr.text, jerr.line);
	return parse_root(path, root, cfg);
}

void ldr_hfconfig_free(struct ldr_hfconfig *cfg)
{
	free(cfg->is_moe);
	cfg->is_moe = NULL;
}
