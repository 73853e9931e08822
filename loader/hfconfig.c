// SPDX-License-Identifier: MIT
/*
 * hfconfig.c - config.json of Qwen2/3-MoE, DeepSeek-V2/V3, Kimi-K2 and
 * Mixtral, read with jansson. Multimodal wrappers keep the language model's
 * keys under "text_config"; that object is used when the top level lacks them.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/error.h"
#include "loader/hfconfig.h"

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

int ldr_hfconfig_load(const char *dir, struct ldr_hfconfig *cfg)
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
	json_t *root, *o, *v, *x;
	json_error_t jerr;
	char path[4096];
	size_t i;
	int ret;

	memset(cfg, 0, sizeof(*cfg));
	snprintf(path, sizeof(path), "%s/config.json", dir);
	root = json_load_file(path, 0, &jerr);
	if (!root) {
		if (strstr(jerr.text, "unable to open"))
			return ldr_err(-ENOENT, "%s: %s", path, jerr.text);
		return ldr_err(-EINVAL, "%s: malformed JSON: %s (line %d)", path,
			       jerr.text, jerr.line);
	}
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
	    (ret = get_uint(path, o, k_experts, &cfg->n_experts, NULL)) <= 0 ||
	    (ret = get_uint(path, o, k_inter, &cfg->inter, NULL)) <= 0) {
		if (!ret)
			ret = ldr_err(-EINVAL, "%s: needs hidden_size, num_hidden_layers, an expert count (num_experts, n_routed_experts or num_local_experts) and moe_intermediate_size or intermediate_size",
				      path);
		goto out;
	}
	if (!cfg->n_experts || !cfg->n_layers || !cfg->hidden || !cfg->inter ||
	    cfg->n_layers > 4096) {
		ret = ldr_err(-EINVAL, "%s: not a MoE model (experts %u, layers %u, hidden %u, inter %u)",
			      path, cfg->n_experts, cfg->n_layers, cfg->hidden,
			      cfg->inter);
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
	cfg->fp8_block[0] = cfg->fp8_block[1] = 128;
	v = json_object_get(o, "quantization_config");
	if (!v)
		v = json_object_get(root, "quantization_config");
	v = json_object_get(v, "weight_block_size");
	if (json_is_array(v) && json_array_size(v) == 2 &&
	    json_is_integer(json_array_get(v, 0)) &&
	    json_is_integer(json_array_get(v, 1)) &&
	    json_integer_value(json_array_get(v, 0)) > 0 &&
	    json_integer_value(json_array_get(v, 1)) > 0) {
		cfg->fp8_block[0] = (uint32_t)json_integer_value(json_array_get(v, 0));
		cfg->fp8_block[1] = (uint32_t)json_integer_value(json_array_get(v, 1));
	}
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

void ldr_hfconfig_free(struct ldr_hfconfig *cfg)
{
	free(cfg->is_moe);
	cfg->is_moe = NULL;
}
