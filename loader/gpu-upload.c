// SPDX-License-Identifier: MIT
/*
 * gpu-upload.c - KT_MODEL_F_GPU_UPLOAD at open, for every model format: the
 * masked experts go through m->blob_read into the upload staging and on to
 * the GPU (ktcore/gpu-ctx.c). A GGUF file or a checkpoint folder has no
 * packed blob: its blob_read packs the expert from the source, while the
 * open runs. Documentation/placement.md.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ktcore/core.h"
#include "ktcore/model.h"
#include "ktcore/moe-gpu.h"
#include "loader/error.h"
#include "loader/fault.h"
#include "loader/gpu-upload.h"

#define BLOB_ALIGN	4096ul

struct ldr_pack_src {
	char *path;
	const char *kind;
	ldr_pack_fn pack;	/* NULL once the open is done */
	void *arg;
};

int ldr_gpu_upload_check(const struct kt_model *m, const char *path)
{
	const char *why;
	int ret = core_gpu_upload_check(m, &why);

	if (ret)
		ldr_err(ret, "%s: KT_MODEL_F_GPU_UPLOAD: %s experts: %s (open it without the flag: they stay in host memory)",
			path, kt_quant_name(m->quant), why);
	return ret;
}

int ldr_gpu_upload_open(struct kt_model *m, const char *path)
{
	int ret = ldr_gpu_upload_check(m, path);

	if (ret)
		return ret;
	ret = core_gpu_upload_absent(m);
	/* blob_read's failures name the layer and expert themselves; the
	 * driver's are in the context's log */
	if (ret && !*kt_last_error())
		ldr_err(ret, "%s: uploading the masked experts to the GPU failed: %s (see the context's log)",
			path, strerror(-ret));
	return ret;
}

static int pack_read(const struct kt_model *m, uint32_t layer,
		     uint32_t expert, uint8_t *dst)
{
	const struct ldr_pack_src *ps = m->priv;
	int ret;

	if (!ps->pack) {
		ldr_err(-EOPNOTSUPP, "%s: layer %d (index %u), expert %u has no host copy: a %s is packed at load and its masked experts go to the GPU only at open (KT_MODEL_F_GPU_UPLOAD); to upload them later convert it to .ktw (kt convert), or keep the expert in host memory",
			ps->path, m->layer_ids[layer], layer, expert,
			ps->kind);
		core_log(m->ctx, KT_LOG_ERROR, "gpu upload: %s",
			 kt_last_error());
		return -EOPNOTSUPP;
	}
	/* as the host copies: the model's memory starts zeroed */
	memset(dst, 0, m->blob_stride);
	ldr_err_clear();
	ret = ps->pack(ps->arg, layer, expert, dst);
	if (ret) {
		if (!*kt_last_error())
			ldr_err(ret, "%s: layer %d (index %u), expert %u: packing it for the GPU upload failed: %s",
				ps->path, m->layer_ids[layer], layer, expert,
				strerror(-ret));
		core_log(m->ctx, KT_LOG_ERROR, "gpu upload: %s",
			 kt_last_error());
	}
	return ret;
}

int ldr_pack_src_attach(struct kt_model *m, const char *path,
			const char *kind, uint32_t flags, ldr_pack_fn pack,
			void *arg)
{
	struct ldr_pack_src *ps = calloc(1, sizeof(*ps));
	int ret;

	if (ps)
		ps->path = strdup(path);
	if (!ps || !ps->path) {
		free(ps);
		return ldr_err(-ENOMEM, "%s: out of memory", path);
	}
	ps->kind = kind;
	m->priv = ps;
	m->blob_read = pack_read;
	m->blob_stride = (m->expert_bytes + BLOB_ALIGN - 1) & ~(BLOB_ALIGN - 1);
	if (!(flags & KT_MODEL_F_GPU_UPLOAD))
		return 0;
	/* the source is the open's: closed when the open returns */
	ps->pack = pack;
	ps->arg = arg;
	ret = ldr_gpu_upload_open(m, path);
	ps->pack = NULL;
	ps->arg = NULL;
	return ret;
}

void ldr_pack_src_free(void *p)
{
	struct ldr_pack_src *ps = p;

	if (!ps)
		return;
	free(ps->path);
	free(ps);
}
