// SPDX-License-Identifier: MIT
/*
 * gguf-convert.c - kt_convert() of a GGUF file: the experts repacked with
 * their blocks kept (as kt_model_open() on the file would hold them)
 * written as a .ktw, so that later starts only read. Written under a
 * temporary name, synced and renamed, as every .ktw (ktw-format.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/crc32c.h"
#include "loader/error.h"
#include "loader/gguf-model.h"
#include "loader/io.h"
#include "loader/ktw.h"

/* whether MoE layer number @id is inside the options' range */
static int in_range(const struct kt_convert_opts *o, int32_t id)
{
	if (!o->layer_first && o->layer_last < 0)
		return 1;
	return id >= o->layer_first && (o->layer_last < 0 ||
					id <= o->layer_last);
}

struct bias_src {
	const struct ldr_gguf_src *s;
	const uint32_t *layer_of;	/* the file's layer -> the source's */
};

static void src_bias(void *arg, uint32_t layer, uint32_t expert, float *dst)
{
	const struct bias_src *b = arg;

	ldr_gguf_src_bias(b->s, b->layer_of[layer], expert, dst);
}

/* What the experts compute beyond silu(g) * u, as ldr_gguf_model_open()
 * builds it: gpt-oss's clamped SwiGLU, the padding, the biases. */
static void src_epi(const struct ldr_gguf_src *s, struct ldr_ktw_epi *x)
{
	memset(x, 0, sizeof(*x));
	x->act = s->act;
	if (s->act == KT_ACT_SWIGLU_OAI) {
		x->act_alpha = KT_SWIGLU_OAI_ALPHA;
		x->act_limit = KT_SWIGLU_OAI_LIMIT;
	}
	x->hidden_io = (uint32_t)s->H;
	x->inter_io = (uint32_t)s->I;
	x->bias = s->bias != NULL;
}

int ldr_gguf_convert(const struct kt_convert_opts *o)
{
	struct ldr_gguf_src *s = NULL;
	struct ktw_entry *table = NULL;
	struct ldr_ktw_epi x;
	struct ktw_header h;
	struct ldr_geom g;
	int32_t *ids = NULL;
	uint32_t *layer_of = NULL, n_layers = 0, l, e;
	uint8_t *blob = NULL, *meta = NULL;
	char *tmp = NULL;
	uint64_t n, i;
	int fd = -1, ret;

	ret = ldr_gguf_src_open(o->input, &s);
	if (ret)
		return ret;
	/* a mixed file (gate/up Q4_K, down Q6_K) is named by its gate/up */
	if (o->quant && (o->quant != (int)s->quant ||
			 (o->group_size && o->group_size != s->lay.group))) {
		ret = ldr_err(-EINVAL, "%s: a GGUF file keeps its blocks (%s here, kt %s): leave --method out",
			      o->input, ldr_gguf_type_name(s->type),
			      kt_quant_name(s->quant));
		goto out;
	}
	if (s->lays) {
		ret = ldr_err(-EOPNOTSUPP, "%s: down's type varies by layer (%s in layer %d): a .ktw holds one down type; open the GGUF file itself",
			      o->input, ldr_gguf_type_name(s->type_down),
			      s->layer_ids[0]);
		goto out;
	}
	/* the packed (padded) sizes; the file's own go in the 2.3 fields */
	ret = ldr_geom_init_mix(&g, s->quant, s->quant_down, s->lay.hidden,
				s->lay.inter, s->lay.group);
	if (ret)
		goto out;
	src_epi(s, &x);
	ids = calloc(s->n_layers, sizeof(*ids));
	layer_of = calloc(s->n_layers, sizeof(*layer_of));
	if (!ids || !layer_of) {
		ret = -ENOMEM;
		goto out;
	}
	for (l = 0; l < s->n_layers; l++)
		if (in_range(o, s->layer_ids[l])) {
			ids[n_layers] = s->layer_ids[l];
			layer_of[n_layers++] = l;
		}
	if (!n_layers) {
		ret = ldr_err(-EINVAL, "%s: no MoE layer in the range %d-%d",
			      o->input, o->layer_first, o->layer_last);
		goto out;
	}
	n = (uint64_t)n_layers * s->E;
	if (n > (1u << 22)) {
		ret = ldr_err(-EINVAL, "%s: %u layers x %llu experts exceed the .ktw limit",
			      o->input, n_layers, (unsigned long long)s->E);
		goto out;
	}
	table = calloc(n, sizeof(*table));
	if (asprintf(&tmp, "%s.tmp.%d", o->output, (int)getpid()) < 0)
		tmp = NULL;
	if (!table || !tmp) {
		ret = -ENOMEM;
		goto out;
	}
	ret = ldr_ktw_layout(&h, &g, n_layers, (uint32_t)s->E, table);
	if (!ret)
		ret = ldr_ktw_set_epi(&h, &x);
	if (ret) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", kt_last_error());
		ldr_err(ret, "%s: %s", o->input, msg);
		goto out;
	}
	h.top_k = (uint32_t)s->top_k;
	memcpy(h.arch, s->arch, strnlen(s->arch, sizeof(h.arch)));
	blob = aligned_alloc(4096, h.blob_stride);
	meta = calloc(1, h.data_off);
	if (!blob || !meta) {
		ret = -ENOMEM;
		goto out;
	}
	fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = ldr_err(-errno, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	if (fallocate(fd, 0, 0, (off_t)h.file_size) && errno == ENOSPC) {
		ret = ldr_err(-ENOSPC, "%s: no space for %llu bytes", tmp,
			      (unsigned long long)h.file_size);
		goto out;
	}
	if (ftruncate(fd, (off_t)h.file_size)) {
		ret = ldr_err(-errno, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	for (i = 0; i < n; i++) {
		l = (uint32_t)(i / s->E);
		e = (uint32_t)(i % s->E);
		if (o->cancel && *o->cancel) {
			ret = ldr_err(-EINTR, "kt_convert: cancelled");
			goto out;
		}
		memset(blob, 0, h.blob_stride);
		ret = ldr_gguf_src_pack(s, layer_of[l], e, blob);
		if (ret)
			goto out;
		table[i].crc = kern_crc32c(0, blob, h.expert_bytes);
		ret = ldr_pwrite_full(fd, blob, h.blob_stride, table[i].offset);
		if (ret) {
			ldr_err(ret, "%s: write: %s", tmp, strerror(-ret));
			goto out;
		}
		if (o->progress)
			o->progress(o->progress_arg, (i + 1) * h.blob_stride,
				    n * h.blob_stride);
	}
	if (x.bias) {
		struct bias_src bs = { s, layer_of };

		ret = ldr_ktw_write_bias(fd, &h, src_bias, &bs);
		if (ret) {
			ldr_err(ret, "%s: writing the biases: %s", tmp,
				strerror(-ret));
			goto out;
		}
	}
	ldr_ktw_seal(&h, ids, table);
	memcpy(meta, &h, sizeof(h));
	memcpy(meta + h.layers_off, ids, 4ull * n_layers);
	memcpy(meta + h.table_off, table, n * sizeof(*table));
	ret = ldr_pwrite_full(fd, meta, h.data_off, 0);
	if (!ret && fsync(fd))
		ret = -errno;
	if (ret) {
		ldr_err(ret, "%s: %s", tmp, strerror(-ret));
		goto out;
	}
	close(fd);
	fd = -1;
	if (rename(tmp, o->output))
		ret = ldr_err(-errno, "%s: rename: %s", o->output,
			      strerror(errno));
out:
	if (fd >= 0)
		close(fd);
	if (ret && tmp)
		unlink(tmp);
	free(tmp);
	free(meta);
	free(blob);
	free(table);
	free(layer_of);
	free(ids);
	ldr_gguf_src_close(s);
	return ret;
}
