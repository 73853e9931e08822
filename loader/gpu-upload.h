/* SPDX-License-Identifier: MIT */
/*
 * gpu-upload.h - KT_MODEL_F_GPU_UPLOAD at open: the masked experts go to
 * the GPU, not into host memory; for a model packed at load (GGUF file,
 * checkpoint folder) each is packed from the source while the open runs.
 */
#ifndef KT_LOADER_GPU_UPLOAD_H
#define KT_LOADER_GPU_UPLOAD_H

#include <stdint.h>
#include <kt/kt.h>

struct kt_model;

/*
 * ldr_gpu_upload_check() - before @m's experts are read: can its context's
 *	GPU hold them? 0; -ENODEV, -EOPNOTSUPP with kt_last_error() naming
 *	@path and why (core_gpu_upload_check()).
 */
int ldr_gpu_upload_check(const struct kt_model *m, const char *path);

/*
 * ldr_gpu_upload_open() - upload every expert of @m without a host copy
 *	through m->blob_read and start its residency table with them
 *	(core_gpu_upload_absent()). 0 or -errno, kt_last_error() naming @path
 *	(and the layer and expert where one failed); what was uploaded is
 *	freed with the model.
 */
int ldr_gpu_upload_open(struct kt_model *m, const char *path);

/*
 * Pack expert (@layer, @expert) of the source @arg into @dst (zeroed, the
 * model's blob_stride bytes). 0 or -errno with kt_last_error() set.
 */
typedef int (*ldr_pack_fn)(void *arg, uint32_t layer, uint32_t expert,
			   uint8_t *dst);

/*
 * ldr_pack_src_attach() - the m->blob_read of a model packed at load from
 *	@path (@kind: "GGUF file", "checkpoint folder"), kept in m->priv
 *	(its release calls ldr_pack_src_free(m->priv)). With
 *	KT_MODEL_F_GPU_UPLOAD in @flags, the masked experts are packed with
 *	@pack from @arg one at a time into the upload staging and uploaded
 *	(ldr_gpu_upload_open()); the source is forgotten before it returns.
 *	After the open, m->blob_read answers -EOPNOTSUPP naming the file,
 *	layer and expert: the source is not kept (Documentation/placement.md).
 * Return: 0; -ENOMEM; ldr_gpu_upload_open()'s -errno.
 */
int ldr_pack_src_attach(struct kt_model *m, const char *path,
			const char *kind, uint32_t flags, ldr_pack_fn pack,
			void *arg);
void ldr_pack_src_free(void *ps);

#endif /* KT_LOADER_GPU_UPLOAD_H */
