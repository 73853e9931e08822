// SPDX-License-Identifier: MIT
/*
 * convert.c - kt_convert(): the routed experts of a Hugging Face checkpoint
 * into a .ktw. Every tensor is found and checked before a byte is written;
 * blobs are packed by the kernels' packer straight from the mapped shards.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "kernels/pack.h"
#include "ktcore/core.h"
#include "loader/error.h"
#include "loader/gguf.h"
#include "loader/gguf-model.h"
#include "loader/fault.h"
#include "loader/fp8.h"
#include "loader/hfconfig.h"
#include "loader/io.h"
#include "loader/ktw.h"
#include "loader/safetensors.h"
#include "kernels/crc32c.h"
#include "kernels/fp.h"
#include "kernels/fp8.h"

enum { STYLE_MLP, STYLE_MIXTRAL };

/* Matrix names per naming style, in enum kern_mat_id order. */
static const char *const style_mat[2][3] = {
	[STYLE_MLP] = { "gate_proj", "up_proj", "down_proj" },
	[STYLE_MIXTRAL] = { "w1", "w3", "w2" },
};
static const char *const style_block[2] = {
	[STYLE_MLP] = "mlp", [STYLE_MIXTRAL] = "block_sparse_moe",
};

struct conv_mat {
	const struct ldr_st_tensor *w;
	const struct ldr_st_tensor *scale_inv;	/* FP8 sources only */
	/* compressed-tensors INT4: w is weight_packed, these its scales and
	 * weight_shape */
	const struct ldr_st_tensor *scale, *shape;
	bool chan;	/* FP8: scale_inv is a per-row weight_scale */
};

struct conv {
	const struct kt_convert_opts *o;
	struct ldr_hfconfig cfg;
	struct ldr_ckpt *ck;
	struct ldr_geom geom;
	struct kern_pack_layout lay;
	bool fp8_chan;		/* F8_E4M3 weights with per-row weight_scale */
	char prefix[256];
	int style;
	uint32_t n_layers;
	int32_t *layer_ids;
	struct conv_mat *mats;		/* [n_layers * E * 3] */
	struct ktw_header hdr;
	struct ktw_entry *table;
	int fd;
	char *tmp_path;			/* named temporary, or NULL */
	bool anon_tmp;			/* O_TMPFILE: linked at the end */

	pthread_mutex_t lock;
	uint32_t n_threads;
	uint64_t next;			/* next entry to convert */
	uint64_t done;
	int err;
	char err_msg[512];
};

/* Find the name prefix and naming style from any expert tensor. */
static int find_style(struct conv *c)
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
static int find_packed(struct conv *c, const char *base, uint64_t n,
		       uint64_t k, struct conv_mat *m)
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
static int find_mat(struct conv *c, int32_t layer, uint32_t e, int id,
		    struct conv_mat *m)
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
			       c->o->input, (unsigned long long)b0,
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

/*
 * An F8_E4M3 checkpoint scales per 128x128 block (weight_scale_inv) or per
 * output row (weight_scale, "FP8 per-channel"); the first expert's gate
 * tells, and every matrix must then follow it. --method fp8 keeps the
 * kind: its layout is switched to per-row scales here.
 */
static int detect_fp8_chan(struct conv *c)
{
	char name[512];
	int ret;

	snprintf(name, sizeof(name), "%slayers.%d.%s.experts.0.%s.weight",
		 c->prefix, c->layer_ids[0], style_block[c->style],
		 style_mat[c->style][KERN_MAT_GATE]);
	{
		const struct ldr_st_tensor *w = ldr_ckpt_find(c->ck, name);
		size_t len = strlen(name);

		if (!w || w->dtype != LDR_ST_F8_E4M3)
			return 0;
		snprintf(name + len, sizeof(name) - len, "_scale_inv");
		if (ldr_ckpt_find(c->ck, name))
			return 0;
		snprintf(name + len, sizeof(name) - len, "_scale");
		if (!ldr_ckpt_find(c->ck, name))
			return 0;	/* find_mat names what is missing */
	}
	c->fp8_chan = true;
	if (c->lay.quant != KT_QUANT_FP8)
		return 0;
	ret = ldr_geom_init(&c->geom, KT_QUANT_FP8, c->cfg.hidden,
			    c->cfg.inter, KT_GROUP_CHANNEL);
	if (ret)
		return ret;
	return kern_pack_layout(KT_QUANT_FP8, c->cfg.hidden, c->cfg.inter,
				KT_GROUP_CHANNEL, &c->lay);
}

static int plan(struct conv *c)
{
	const struct kt_convert_opts *o = c->o;
	int32_t first = 0, last = INT32_MAX;
	uint32_t l, e, n = 0;
	int id, ret;

	if (o->layer_first || o->layer_last >= 0) {
		first = o->layer_first;
		last = o->layer_last < 0 ? INT32_MAX : o->layer_last;
	}
	c->layer_ids = calloc(c->cfg.n_layers, sizeof(*c->layer_ids));
	if (!c->layer_ids)
		return -ENOMEM;
	for (l = 0; l < c->cfg.n_layers; l++)
		if (c->cfg.is_moe[l] && (int32_t)l >= first && (int32_t)l <= last)
			c->layer_ids[n++] = (int32_t)l;
	if (!n)
		return ldr_err(-EINVAL, "%s/config.json: no MoE layer in %d-%d",
			       o->input, first, last);
	c->n_layers = n;
	/* the reader's limit, checked before the tables are sized by it */
	if ((uint64_t)n * c->cfg.n_experts > KTW_MAX_ENTRIES)
		return ldr_err(-EINVAL, "%s/config.json: %u MoE layers x %u experts = %llu blobs exceed the .ktw limit of %u (convert fewer with --layers)",
			       o->input, n, c->cfg.n_experts,
			       (unsigned long long)n * c->cfg.n_experts,
			       KTW_MAX_ENTRIES);
	c->mats = calloc((size_t)n * c->cfg.n_experts * 3, sizeof(*c->mats));
	if (!c->mats)
		return -ENOMEM;
	ret = detect_fp8_chan(c);
	if (ret)
		return ret;
	for (l = 0; l < n; l++)
		for (e = 0; e < c->cfg.n_experts; e++)
			for (id = 0; id < 3; id++) {
				ret = find_mat(c, c->layer_ids[l], e, id,
					       &c->mats[((size_t)l * c->cfg.n_experts + e) * 3 + id]);
				if (ret)
					return ret;
			}
	return 0;
}

/* Create the output: an unnamed O_TMPFILE, else a unique temporary name. */
static int out_create(struct conv *c)
{
	const char *out = c->o->output, *slash = strrchr(out, '/');
	char dir[PATH_MAX], prefix[NAME_MAX + 8];
	int ret;

	if (slash)
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - out + (slash == out)), out);
	else
		snprintf(dir, sizeof(dir), ".");
	if (asprintf(&c->tmp_path, "%s.tmp.%d", out, (int)getpid()) < 0) {
		c->tmp_path = NULL;
		return -ENOMEM;
	}
	/* named temporaries of killed conversions (no O_TMPFILE there) */
	snprintf(prefix, sizeof(prefix), "%s.tmp.", slash ? slash + 1 : out);
	ldr_remove_stale_temps(dir, prefix);
	c->fd = LDR_FAULT_CALL("open") ? -1 :
		open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
	if (c->fd >= 0) {
		c->anon_tmp = true;
		return 0;
	}
	c->fd = LDR_FAULT_CALL("open") ? -1 :
		open(c->tmp_path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
	if (c->fd < 0) {
		ret = -errno;
		return ldr_err(ret, "%s: %s", c->tmp_path, strerror(errno));
	}
	return 0;
}

static void out_abandon(struct conv *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	if (!c->anon_tmp && c->tmp_path)
		unlink(c->tmp_path);
}

/* fsync, give the file its name atomically, fsync the folder. */
static int out_commit(struct conv *c)
{
	const char *out = c->o->output, *slash = strrchr(out, '/');
	char proc[64], dir[PATH_MAX];
	int dfd, ret;

	if (LDR_FAULT_CALL("fsync") || fsync(c->fd))
		return ldr_err(-EIO, "%s: fsync: %s", out, strerror(errno));
	if (c->anon_tmp) {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", c->fd);
		unlink(c->tmp_path);	/* a stale one of a dead pid */
		/* without /proc, AT_EMPTY_PATH (needs CAP_DAC_READ_SEARCH) */
		if (LDR_FAULT_CALL("link") ||
		    (linkat(AT_FDCWD, proc, AT_FDCWD, c->tmp_path,
			    AT_SYMLINK_FOLLOW) &&
		     linkat(c->fd, "", AT_FDCWD, c->tmp_path, AT_EMPTY_PATH))) {
			ret = -errno;
			return ldr_err(ret, "%s: link: %s", c->tmp_path,
				       strerror(errno));
		}
		c->anon_tmp = false;	/* named now: unlink on failure */
	}
	if (LDR_FAULT_CALL("rename") || rename(c->tmp_path, out)) {
		ret = -errno;
		return ldr_err(ret, "%s: rename: %s", out, strerror(errno));
	}
	if (slash)
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - out + (slash == out)), out);
	else
		snprintf(dir, sizeof(dir), ".");
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	close(c->fd);
	c->fd = -1;
	return 0;
}

struct conv_scratch {
	uint8_t *blob;
	float *f32;	/* one dequantized or realigned matrix */
	size_t f32_len;
	int8_t *q4;	/* INT4 sources: one matrix's values, then scales */
};

static void conv_fail(struct conv *c, int err)
{
	pthread_mutex_lock(&c->lock);
	if (!c->err) {
		c->err = err;
		snprintf(c->err_msg, sizeof(c->err_msg), "%s", kt_last_error());
	}
	pthread_mutex_unlock(&c->lock);
}

/*
 * Unpack a compressed-tensors INT4 matrix [N][K] into @q (q in [-8, 7]:
 * nibble i of each little-endian int32 is column 8j + i, stored as q + 8)
 * and @sc [K/G][N] f32 (the checkpoint's [N][K/G], transposed).
 */
static void unpack_int4(const struct conv_mat *m, uint32_t G, int8_t *q,
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

static int pack_mat(struct conv *c, struct conv_scratch *s,
		    const struct conv_mat *m, enum kern_mat_id id)
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
			kern_pack_int4_raw(&c->lay, id, s->q4, sc, s->blob);
			return 0;
		}
		for (i = 0; i < N * K; i++)
			s->f32[i] = (float)s->q4[i] * sc[(i % K) / G * N +
							 i / K];
		return kern_pack_matrix(&c->lay, id, s->f32, KT_DTYPE_F32, K,
					s->blob);
	}

	if (t->dtype == LDR_ST_F8_E4M3 && c->lay.quant == KT_QUANT_FP8) {
		/* the bytes and scales as they are: no second rounding */
		ldr_fp8_scales_f32(m->scale_inv->data,
				   m->scale_inv->dtype == LDR_ST_BF16,
				   m->scale_inv->len /
				   ldr_st_dtype_size(m->scale_inv->dtype),
				   s->f32);
		kern_pack_fp8_raw(&c->lay, id, t->data, t->shape[1], s->f32,
				  s->blob);
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
					t->shape[1], s->blob);
	}
	dt = t->dtype == LDR_ST_F32 ? KT_DTYPE_F32 :
	     t->dtype == LDR_ST_F16 ? KT_DTYPE_F16 : KT_DTYPE_BF16;
	if ((uintptr_t)t->data % esz) {
		/* safetensors does not promise element alignment */
		memcpy(s->f32, t->data, elems * esz);
		return kern_pack_matrix(&c->lay, id, s->f32, dt, t->shape[1],
					s->blob);
	}
	return kern_pack_matrix(&c->lay, id, t->data, dt, t->shape[1], s->blob);
}

/* Start reading an expert's tensors in the background (readahead). */
static void prefetch(const struct conv *c, uint64_t i)
{
	const struct conv_mat *m = &c->mats[i * 3];
	int id;

	for (id = 0; id < 3; id++) {
		uintptr_t a = (uintptr_t)m[id].w->data & ~(uintptr_t)4095;

		madvise((void *)a, (uintptr_t)m[id].w->data + m[id].w->len - a,
			MADV_WILLNEED);
	}
}

static int conv_one(struct conv *c, struct conv_scratch *s, uint64_t i)
{
	const struct conv_mat *m = &c->mats[i * 3];
	struct ktw_entry *ent = &c->table[i];
	uint64_t ahead = i + c->n_threads;
	int id, ret;

	/* the disk fetches the next round while this one packs */
	if (ahead < (uint64_t)c->n_layers * c->cfg.n_experts)
		prefetch(c, ahead);

	for (id = 0; id < 3; id++) {
		ret = pack_mat(c, s, &m[id], (enum kern_mat_id)id);
		if (ret)
			return ldr_err(ret, "packing %s failed: %s", m[id].w->name,
				       strerror(-ret));
	}
	ent->crc = kern_crc32c(0, s->blob, c->hdr.expert_bytes);
	ret = ldr_pwrite_full(c->fd, s->blob, c->hdr.blob_stride, ent->offset);
	if (ret)
		return ldr_err(ret, "%s: write: %s", c->o->output, strerror(-ret));
	for (id = 0; id < 3; id++) {
		ldr_st_tensor_done(m[id].w);
		if (m[id].scale_inv)
			ldr_st_tensor_done(m[id].scale_inv);
		if (m[id].scale)
			ldr_st_tensor_done(m[id].scale);
	}
	return 0;
}

static void *conv_thread(void *arg)
{
	struct conv *c = arg;
	uint64_t total = (uint64_t)c->n_layers * c->cfg.n_experts, i;
	struct conv_scratch s;
	int ret;

	s.f32_len = (size_t)c->cfg.hidden * c->cfg.inter;
	s.f32 = malloc(s.f32_len * sizeof(float));
	s.blob = ldr_io_buf_alloc(c->hdr.blob_stride);
	/* values (one byte each), then [K/G][N] f32 scales */
	s.q4 = c->cfg.int4_group ? malloc(s.f32_len + 64 + s.f32_len /
					  c->cfg.int4_group * 4) : NULL;
	if (!s.f32 || !s.blob || (c->cfg.int4_group && !s.q4)) {
		ldr_err(-ENOMEM, "out of memory for conversion buffers");
		conv_fail(c, -ENOMEM);
		goto out;
	}
	/* padding after the blob stays zero: parts are rewritten, it is not */
	memset(s.blob, 0, c->hdr.blob_stride);
	for (;;) {
		pthread_mutex_lock(&c->lock);
		i = c->next++;
		ret = c->err;
		pthread_mutex_unlock(&c->lock);
		if (ret || i >= total)
			break;
		if (c->o->cancel && *c->o->cancel) {
			ldr_err(-EINTR, "conversion interrupted");
			conv_fail(c, -EINTR);
			break;
		}
		ret = conv_one(c, &s, i);
		if (ret) {
			conv_fail(c, ret);
			break;
		}
		pthread_mutex_lock(&c->lock);
		c->done++;
		if (c->o->progress)
			c->o->progress(c->o->progress_arg, c->done, total);
		pthread_mutex_unlock(&c->lock);
	}
out:
	free(s.f32);
	free(s.q4);
	free(s.blob);
	return NULL;
}

static int run_threads(struct conv *c)
{
	uint32_t n = c->o->threads, i, started = 0;
	pthread_t *th;
	long ncpu;

	if (!n) {
		ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		n = ncpu > 0 ? (uint32_t)ncpu : 1;
	}
	if (n > 256)
		n = 256;
	th = calloc(n, sizeof(*th));
	if (!th)
		return -ENOMEM;
	c->n_threads = n;
	prefetch(c, 0);
	for (i = 1; i < n; i++) {
		if (pthread_create(&th[i], NULL, conv_thread, c))
			break;
		started++;
	}
	conv_thread(c);
	for (i = 1; i <= started; i++)
		pthread_join(th[i], NULL);
	free(th);
	if (c->err)
		ldr_err(c->err, "%s", c->err_msg);
	return c->err;
}

static int write_meta(struct conv *c)
{
	uint64_t meta_len = c->hdr.data_off - c->hdr.layers_off;
	uint8_t *buf;
	int ret;

	memcpy(c->hdr.arch, c->cfg.arch, sizeof(c->hdr.arch) - 1);
	c->hdr.top_k = c->cfg.top_k;
	ldr_ktw_seal(&c->hdr, c->layer_ids, c->table);
	buf = calloc(1, KTW_HEADER_BYTES + meta_len);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, &c->hdr, sizeof(c->hdr));
	memcpy(buf + c->hdr.layers_off, c->layer_ids, 4ull * c->n_layers);
	memcpy(buf + c->hdr.table_off, c->table,
	       (uint64_t)c->n_layers * c->cfg.n_experts * sizeof(*c->table));
	ret = ldr_pwrite_full(c->fd, buf, KTW_HEADER_BYTES + meta_len, 0);
	free(buf);
	if (ret)
		return ldr_err(ret, "%s: write: %s", c->o->output, strerror(-ret));
	return 0;
}

KT_EXPORT int kt_convert(const struct kt_convert_opts *o)
{
	struct kt_convert_opts oo;
	struct conv c;
	int ret;

	ldr_err_clear();
	if (!o || CORE_OPTS_GET(&oo, o, cancel))
		return ldr_err(-EINVAL, "kt_convert: opts->sz too small, or fields this library does not know are set");
	o = &oo;
	if (!o->input || !o->output)
		return ldr_err(-EINVAL, "kt_convert: input and output are required");
	/* a GGUF file keeps its own quantization (Documentation/formats.md) */
	if (ldr_gguf_is_gguf(o->input))
		return ldr_gguf_convert(o);
	if (!o->quant)
		return ldr_err(-EINVAL, "kt_convert: a quantization (--method) is required for a checkpoint folder");
	memset(&c, 0, sizeof(c));
	c.o = o;
	c.fd = -1;
	pthread_mutex_init(&c.lock, NULL);
	ret = ldr_geom_init(&c.geom, o->quant, 128, 128,
			    (o->quant == KT_QUANT_INT4 ||
			     o->quant == KT_QUANT_FP8) && !o->group_size ? 128 :
			    o->group_size);
	if (ret)
		goto out;
	ret = ldr_hfconfig_load(o->input, &c.cfg);
	if (ret)
		goto out;
	if (c.cfg.int4_group && o->quant == KT_QUANT_INT4) {
		/* kept as they are: the checkpoint's group */
		if (o->group_size && o->group_size != c.cfg.int4_group) {
			ret = ldr_err(-EINVAL, "%s/config.json: the checkpoint's INT4 has group size %u; --method int4 keeps it as it is (leave out --group-size or give %u)",
				      o->input, c.cfg.int4_group,
				      c.cfg.int4_group);
			goto out;
		}
		c.geom.group_size = c.cfg.int4_group;
	}
	ret = ldr_geom_init(&c.geom, o->quant, c.cfg.hidden, c.cfg.inter,
			    c.geom.group_size);
	if (ret) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", kt_last_error());
		ldr_err(ret, "%s/config.json: %s", o->input, msg);
		goto out;
	}
	kern_pack_layout((enum kt_quant)o->quant, c.cfg.hidden, c.cfg.inter,
			 c.geom.group_size, &c.lay);
	ret = ldr_ckpt_open(o->input, &c.ck);
	if (ret)
		goto out;
	ret = find_style(&c);
	if (ret)
		goto out;
	ret = plan(&c);
	if (ret)
		goto out;
	c.table = calloc((size_t)c.n_layers * c.cfg.n_experts, sizeof(*c.table));
	if (!c.table) {
		ret = -ENOMEM;
		goto out;
	}
	ldr_ktw_layout(&c.hdr, &c.geom, c.n_layers, c.cfg.n_experts, c.table);
	ret = out_create(&c);
	if (ret)
		goto out;
	/* fail now, not after an hour, when the disk is too small */
	if ((LDR_FAULT_CALL("fallocate") ||
	     fallocate(c.fd, 0, 0, (off_t)c.hdr.file_size)) && errno == ENOSPC) {
		ret = ldr_err(-ENOSPC, "%s: no space for %llu bytes", o->output,
			      (unsigned long long)c.hdr.file_size);
		goto out;
	}
	if (ftruncate(c.fd, (off_t)c.hdr.file_size)) {
		ret = -errno;
		ldr_err(ret, "%s: %s", o->output, strerror(errno));
		goto out;
	}
	ret = run_threads(&c);
	if (ret)
		goto out;
	if (o->cancel && *o->cancel) {
		ret = ldr_err(-EINTR, "conversion interrupted");
		goto out;
	}
	ret = write_meta(&c);
	if (ret)
		goto out;
	ret = out_commit(&c);
out:
	if (ret)
		out_abandon(&c);
	if (ret && !*kt_last_error())	/* a bare ENOMEM, say */
		ldr_err(ret, "kt_convert %s: %s", o->input, strerror(-ret));
	free(c.tmp_path);
	free(c.table);
	free(c.mats);
	free(c.layer_ids);
	ldr_ckpt_close(c.ck);
	ldr_hfconfig_free(&c.cfg);
	pthread_mutex_destroy(&c.lock);
	return ret;
}
