/* SPDX-License-Identifier: MIT */
/*
 * hf-model.h - a model packed at load time from a Hugging Face checkpoint
 * folder, for kt_model_open() (Documentation/loading.md).
 */
#ifndef KT_LOADER_HF_MODEL_H
#define KT_LOADER_HF_MODEL_H

#include <kt/kt.h>

/*
 * ldr_hf_model_open() - find and check every expert tensor of the folder
 *	@path, then pack them layer by layer on all of @ctx's workers into
 *	node-placed memory, as a .ktw load places them.
 * @o: complete options (sz checked by the caller): quant and group_size
 *	choose the packing (0: the checkpoint's own, ldr_hf_default_quant()),
 *	expert_mask, layer_masks, KT_MODEL_F_NO_HUGEPAGE, progress and
 *	KT_MODEL_F_GPU_UPLOAD (the masked experts packed one at a time and
 *	uploaded, loader/gpu-upload.h) apply;
 *	budget and KT_MODEL_F_MMAP are refused (they need a .ktw). GPT-OSS
 *	folders come with biases, KT_ACT_SWIGLU_OAI and H and I padded.
 * Return: 0; -EINVAL a missing, misshapen or mistyped tensor or a bad
 *	option; -ENOENT a missing file; -EOPNOTSUPP; -ENOMEM; with the flag,
 *	-ENODEV no GPU and the driver's -errno. Nothing is left
 *	allocated on failure; kt_last_error() names the file and tensor.
 */
int ldr_hf_model_open(struct kt_ctx *ctx, const char *path,
		      const struct kt_model_opts *o, struct kt_model **out);

#endif /* KT_LOADER_HF_MODEL_H */
