/* SPDX-License-Identifier: MIT */
/*
 * hfconfig.h - what the converter needs from a Hugging Face config.json:
 * MoE geometry, which decoder layers carry routed experts, and GPT-OSS's
 * activation and MXFP4 quantization.
 */
#ifndef KT_LOADER_HFCONFIG_H
#define KT_LOADER_HFCONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ldr_hfconfig {
	char arch[32];		/* model_type */
	uint32_t hidden;
	uint32_t inter;		/* per routed expert */
	uint32_t n_experts;
	uint32_t top_k;		/* 0 when not given */
	uint32_t n_layers;	/* num_hidden_layers */
	uint32_t fp8_block[2];	/* weight_block_size, [128, 128] default */
	/* compressed-tensors pack-quantized symmetric INT4: its group; else 0 */
	uint32_t int4_group;
	/*
	 * GPT-OSS (model_type "gpt_oss"): experts stacked per layer with
	 * biases and the clamped SwiGLU (alpha 1.702, swiglu_limit); H and I
	 * multiples of 32 that kt pads to its tiles.
	 */
	bool gpt_oss;
	float swiglu_limit;
	bool mxfp4;		/* quantization_config.quant_method "mxfp4" */
	bool *is_moe;		/* [n_layers] */
};

/* Parse @dir/config.json; -EINVAL with kt_last_error() naming the key. */
int ldr_hfconfig_load(const char *dir, struct ldr_hfconfig *cfg);
/* The same from @len bytes of JSON in memory; @path names it in errors. */
int ldr_hfconfig_parse(const char *path, const char *json, size_t len,
		       struct ldr_hfconfig *cfg);
void ldr_hfconfig_free(struct ldr_hfconfig *cfg);

#endif /* KT_LOADER_HFCONFIG_H */
