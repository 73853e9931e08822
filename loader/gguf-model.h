/* SPDX-License-Identifier: MIT */
/*
 * gguf-model.h - a model from the expert tensors of a GGUF file, for
 * kt_model_open() (Documentation/formats.md).
 */
#ifndef KT_LOADER_GGUF_MODEL_H
#define KT_LOADER_GGUF_MODEL_H

#include <kt/kt.h>

/*
 * ldr_gguf_model_open() - validate @path, find its MoE layers and repack
 *	their expert blocks into node-placed memory.
 * @o: complete options (sz checked by the caller); expert_mask and
 *	KT_MODEL_F_NO_HUGEPAGE are honoured, the rest of .ktw's options
 *	(io, budget, cache) do not apply.
 * Return: 0; -EINVAL bad file; -EOPNOTSUPP a type, architecture or
 *	geometry kt does not run; -ENOMEM. kt_last_error() says why.
 */
int ldr_gguf_model_open(struct kt_ctx *ctx, const char *path,
			const struct kt_model_opts *o, struct kt_model **out);

#endif /* KT_LOADER_GGUF_MODEL_H */
