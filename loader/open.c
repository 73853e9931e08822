// SPDX-License-Identifier: MIT
/*
 * open.c - kt_model_open(): a validated .ktw read through io_uring into
 * node-bound hugepage memory with every blob's CRC32C checked, or a staged
 * copy on hugetlbfs mapped in place. Documentation/loading.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "ktcore/live.h"
#include "ktcore/moe.h"
#include "kernels/pack.h"
#include "ktcore/core.h"
#include "ktcore/mem.h"
#include "ktcore/model.h"
#include "ktcore/cache.h"
#include "loader/blob-src.h"
#include "loader/cache-open.h"
#include "loader/error.h"
#include "loader/fault.h"
#include "loader/gpu-upload.h"
#include "loader/gguf.h"
#include "loader/gguf-model.h"
#include "loader/hf-model.h"
#include "loader/ktw.h"
#include "loader/mask.h"
#include "loader/placement.h"
#include "kernels/crc32c.h"
#include "uring/reader.h"

static __thread struct kt_load_stats last_stats;

KT_EXPORT void kt_load_stats_get(struct kt_load_stats *st)
{
	*st = last_stats;
}

struct ldr_model_priv {
	struct core_mem mem;	/* read into */
	uint8_t *map;		/* or a staged file mapped */
	size_t map_len;
	struct ldr_blob_src *src;	/* experts without a host copy */
};

/* kt_model_destroy() calls this: everything of the model goes. */
static void model_release(struct kt_model *m)
{
	struct ldr_model_priv *p = m->priv;

	if (p) {
		core_mem_free(&p->mem);
		if (p->map)
			munmap(p->map, p->map_len);
		ldr_blob_src_close(p->src);
		free(p);
	}
	free(m->bias);
	free(m->experts);
	free(m->layer_ids);
	free(m);
}

static int blob_read(const struct kt_model *m, uint32_t layer,
		     uint32_t expert, uint8_t *dst)
{
	const struct ldr_model_priv *p = m->priv;

	return ldr_blob_src_read(p->src, m->ctx, layer, expert, dst);
}

#define KNOWN_FLAGS (KT_MODEL_F_NO_VERIFY | KT_MODEL_F_NO_URING | \
		     KT_MODEL_F_NO_HUGEPAGE | KT_MODEL_F_MMAP | \
		     KT_MODEL_F_GPU_UPLOAD)

/* Entry @i of @k is left out by @o's masks. */
static bool masked(const struct ldr_ktw *k, const struct kt_model_opts *o,
		   uint64_t i)
{
	return o && ldr_masked(o->expert_mask, o->layer_masks,
			       k->hdr.n_experts, k->table[i].layer,
			       k->table[i].expert);
}

struct verify_ctx {
	const struct ldr_ktw *k;
	const uint64_t *entry_of;	/* span index -> table index */
	bool verify;
	bool bad;			/* the reader stops at the first */
	uint64_t bad_entry;
	uint32_t bad_crc;
};

static int blob_error(const struct ldr_ktw *k, uint64_t i, uint32_t crc)
{
	const struct ktw_entry *e = &k->table[i];

	/* a matching checksum failed on the padding after the blob */
	if (crc == e->crc)
		return ldr_err(-EIO, "%s: layer %d (index %u), expert %u: nonzero padding after the blob",
			       k->path, k->layer_ids[e->layer], e->layer,
			       e->expert);
	return ldr_err(-EIO, "%s: layer %d (index %u), expert %u: checksum %08x, expected %08x",
		       k->path, k->layer_ids[e->layer], e->layer, e->expert,
		       crc, e->crc);
}

static int span_done(void *arg, size_t idx, const struct ur_span *s)
{
	struct verify_ctx *v = arg;
	uint64_t i = v->entry_of[idx];
	uint32_t crc;

	if (!v->verify)
		return 0;
	crc = kern_crc32c(0, s->dst, v->k->hdr.expert_bytes);
	if (crc != v->k->table[i].crc ||
	    !ldr_ktw_tail_zero(&v->k->hdr, s->dst)) {
		/* may run on the reader's helper thread: the message (thread
		 * local) is written by the caller */
		v->bad_entry = i;
		v->bad_crc = crc;
		v->bad = true;
		return -EIO;
	}
	return 0;
}

/* Read the present blobs into node-bound memory. */
static int load_read(struct kt_ctx *ctx, struct ldr_ktw *k,
		     const struct kt_model_opts *o, struct ldr_model_priv *p,
		     uint8_t **blob_of)
{
	uint32_t flags = o ? o->flags : 0;
	uint64_t stride = k->hdr.blob_stride, i, n = 0, *entry_of = NULL;
	struct ur_read_opts ro = { 0 };
	struct ur_read_stats rs;
	struct ur_span *spans = NULL;
	struct verify_ctx v;
	struct ldr_placement place;
	struct kern_pack_layout lay;
	unsigned int nodes = core_ctx_nodes(ctx);
	int fd = -1, ret;
	uint64_t t0;

	for (i = 0; i < k->n_entries; i++)
		if (!masked(k, o, i))
			n++;
	kern_pack_layout_mix((enum kt_quant)k->hdr.quant,
			     (enum kt_quant)ldr_ktw_down_quant(&k->hdr),
			     k->hdr.hidden, k->hdr.inter, k->hdr.group_size,
			     &lay);
	spans = calloc(n ? n : 1, sizeof(*spans));
	entry_of = calloc(n ? n : 1, sizeof(*entry_of));
	if (!spans || !entry_of) {
		ret = -ENOMEM;
		goto out;
	}
	/* bound before first touch, so the reads fault each page in on
	 * the node that computes on most of it */
	ldr_placement_init(&place, &lay, nodes, 0, n, stride);
	ret = core_mem_alloc_spread(ctx, n * stride,
				    flags & KT_MODEL_F_NO_HUGEPAGE ?
				    CORE_MEM_F_SMALL : CORE_MEM_F_1G,
				    &place.lay, &p->mem);
	if (ret) {
		ldr_err(ret, "%s: not enough memory for %.1f MiB of experts (see MemAvailable; mask GPU experts or stage on hugetlbfs)",
			k->path, n * stride / 1048576.0);
		goto out;
	}
	for (i = 0, n = 0; i < k->n_entries; i++) {
		if (masked(k, o, i))
			continue;
		spans[n] = (struct ur_span){ k->table[i].offset, stride,
					     p->mem.base + n * stride };
		blob_of[i] = spans[n].dst;
		entry_of[n++] = i;
	}
	fd = open(k->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	last_stats.direct = fd >= 0;
	if (fd < 0)
		fd = open(k->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		ldr_err(ret, "%s: %s", k->path, strerror(errno));
		goto out;
	}
	ro.block = o && o->io_block ? o->io_block : 0;
	ro.depth = o && o->io_depth ? o->io_depth : 0;
	ro.no_uring = flags & KT_MODEL_F_NO_URING;
	ro.fault = LDR_FAULT_HOOK;
	ro.region = p->mem.base;
	ro.region_len = p->mem.len;
	v = (struct verify_ctx){ .k = k, .entry_of = entry_of,
				 .verify = !(flags & KT_MODEL_F_NO_VERIFY) };
	t0 = core_now_ns();
	ret = ur_read_spans(fd, spans, n, &ro, span_done, &v, &rs);
	if (ret == -EINVAL && last_stats.direct) {
		/* the file system took O_DIRECT at open but not on reads */
		close(fd);
		fd = open(k->path, O_RDONLY | O_CLOEXEC);
		last_stats.direct = 0;
		if (fd < 0) {
			ret = -errno;
			goto out;
		}
		ret = ur_read_spans(fd, spans, n, &ro, span_done, &v, &rs);
	}
	last_stats.ns = core_now_ns() - t0;
	last_stats.bytes = rs.bytes;
	last_stats.io_uring = rs.io_uring;
	last_stats.verified = v.verify;
	last_stats.block = ro.block ? ro.block : 4u << 20;
	last_stats.depth = ro.depth ? ro.depth : 32;
	last_stats.page_kb = p->mem.page >> 10;
	if (ret && v.bad)
		blob_error(k, v.bad_entry, v.bad_crc);
	else if (ret)
		ldr_err(ret, "%s: read failed: %s", k->path, strerror(-ret));
	if (nodes > 1)
		core_log(ctx, KT_LOG_DEBUG, "%s: placed on %u nodes", k->path,
			 nodes);
out:
	if (fd >= 0)
		close(fd);
	free(spans);
	free(entry_of);
	return ret;
}

struct crc_job {
	const struct ldr_ktw *k;
	const uint8_t *base;
	uint64_t next;
	uint64_t bad;		/* first failing entry + 1 */
	uint32_t bad_crc;
};

static void *crc_thread(void *arg)
{
	struct crc_job *j = arg;
	uint64_t i;

	while ((i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) <
	       j->k->n_entries) {
		uint32_t crc = kern_crc32c(0, j->base + j->k->table[i].offset,
					 j->k->hdr.expert_bytes);

		if (crc != j->k->table[i].crc ||
		    !ldr_ktw_tail_zero(&j->k->hdr, j->base + j->k->table[i].offset)) {
			uint64_t expect = 0;

			if (__atomic_compare_exchange_n(&j->bad, &expect, i + 1,
							false, __ATOMIC_RELAXED,
							__ATOMIC_RELAXED))
				j->bad_crc = crc;
		}
	}
	return NULL;
}

/*
 * Check every blob of a mapped copy on all CPUs: own threads, not the
 * context's workers, which may be busy serving another model's ops.
 */
static void crc_parallel(struct crc_job *j)
{
	pthread_t th[16];
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int n = ncpu > 16 ? 16 : ncpu > 0 ? (int)ncpu : 1, i, started = 0;

	for (i = 1; i < n; i++) {
		if (pthread_create(&th[started], NULL, crc_thread, j))
			break;
		started++;
	}
	crc_thread(j);
	for (i = 0; i < started; i++)
		pthread_join(th[i], NULL);
}

/* A staged copy: map it read-only; checksums on every CPU. */
static int load_map(struct kt_ctx *ctx, struct ldr_ktw *k,
		    const struct kt_model_opts *o, struct ldr_model_priv *p,
		    uint8_t **blob_of)
{
	uint32_t flags = o ? o->flags : 0;
	struct crc_job job = { .k = k };
	uint64_t i, t0 = core_now_ns();

	p->map_len = k->st_size;
	/* KT_MODEL_F_MMAP on an ordinary file: faults read, nothing up front */
	if (!k->hugetlbfs)
		flags |= KT_MODEL_F_NO_VERIFY;
	p->map = mmap(NULL, p->map_len, PROT_READ,
		      MAP_SHARED | (k->hugetlbfs ? MAP_POPULATE : 0), k->fd, 0);
	if (p->map == MAP_FAILED) {
		p->map = NULL;
		return ldr_err(-errno, "%s: mmap: %s", k->path, strerror(errno));
	}
	if (!(flags & KT_MODEL_F_NO_VERIFY)) {
		job.base = p->map;
		crc_parallel(&job);
		if (job.bad)
			return blob_error(k, (uint64_t)job.bad - 1, job.bad_crc);
	}
	for (i = 0; i < k->n_entries; i++)
		if (!masked(k, o, i))
			blob_of[i] = p->map + k->table[i].offset;
	last_stats.ns = core_now_ns() - t0;
	last_stats.mapped = 1;
	last_stats.verified = !(flags & KT_MODEL_F_NO_VERIFY);
	last_stats.page_kb = k->hugetlbfs ? 2048 : 4;
	return 0;
}

static int model_open(struct kt_ctx *ctx, const char *path,
		      const struct kt_model_opts *opts, struct kt_model **out)
{
	struct kern_pack_layout lay;
	struct kt_model_opts o;
	struct ldr_model_priv *p = NULL;
	struct kt_model *m = NULL;
	struct ldr_ktw *k = NULL;
	uint8_t **blob_of = NULL;
	bool cached = false, mapped, dir, absent = false;
	struct stat st;
	uint64_t i;
	int ret;

	memset(&last_stats, 0, sizeof(last_stats));
	if (!ctx || !path || !out)
		return ldr_err(-EINVAL, "kt_model_open: ctx, path and out are required");
	/* an older caller's missing fields read as 0 (the defaults) */
	if (CORE_OPTS_GET(&o, opts, expert_mask))
		return ldr_err(-EINVAL, "kt_model_open: opts->sz too small, or fields this library does not know are set");
	opts = &o;
	if (opts->pad0 || opts->reserved2[0] || opts->reserved2[1] ||
	    opts->reserved2[2] || opts->reserved2[3])
		return ldr_err(-EINVAL, "kt_model_open: opts->pad0 and reserved2 must be zero");
	if (opts->flags & ~KNOWN_FLAGS)
		return ldr_err(-EINVAL, "kt_model_open: unknown flags %#x",
			       opts->flags & ~KNOWN_FLAGS);
	dir = !stat(path, &st) && S_ISDIR(st.st_mode);
	/* a checkpoint folder is packed at load (loader/hf-model.c) */
	if (dir)
		return ldr_hf_model_open(ctx, path, opts, out);
	/* a GGUF file is repacked into memory, not read as blobs */
	if (ldr_gguf_is_gguf(path)) {
		ret = ldr_gguf_model_open(ctx, path, opts, out);
		if (!ret && opts->quant && (int)(*out)->quant != opts->quant) {
			ret = ldr_err(-EINVAL, "%s holds %s, not %s: a GGUF file keeps its blocks",
				      path, kt_quant_name((*out)->quant),
				      kt_quant_name((enum kt_quant)opts->quant));
			kt_model_destroy(*out);
			*out = NULL;
		}
		return ret;
	}
	if (opts->io_block % 4096)
		return ldr_err(-EINVAL, "kt_model_open: io_block %u is not a multiple of 4096",
			       opts->io_block);
	ret = ldr_ktw_open(path, 0, &k);
	if (ret)
		goto err;
	if (opts->quant && (int)k->hdr.quant != opts->quant) {
		ret = ldr_err(-EINVAL, "%s holds %s, not %s (convert again with that --method)",
			      path, kt_quant_name((enum kt_quant)k->hdr.quant),
			      kt_quant_name((enum kt_quant)opts->quant));
		goto err;
	}
	/* the GPU kernels are plain silu(g) * u (core_model_is_plain()) */
	if ((opts->flags & KT_MODEL_F_GPU_UPLOAD) &&
	    (k->hdr.flags & KTW_F_2_3)) {
		ret = ldr_err(-EOPNOTSUPP, "%s: KT_MODEL_F_GPU_UPLOAD: the GPU has no kernels for experts with biases, another activation than silu or padded sizes (open it without the flag: they run on the CPU)",
			      path);
		goto err;
	}
	kern_pack_layout_mix((enum kt_quant)k->hdr.quant,
			     (enum kt_quant)ldr_ktw_down_quant(&k->hdr),
			     k->hdr.hidden, k->hdr.inter, k->hdr.group_size,
			     &lay);
	p = calloc(1, sizeof(*p));
	m = calloc(1, sizeof(*m));
	blob_of = calloc(k->n_entries, sizeof(*blob_of));
	if (m) {
		m->layer_ids = calloc(k->hdr.n_layers, sizeof(*m->layer_ids));
		m->experts = calloc(k->n_entries, sizeof(*m->experts));
	}
	if (!p || !m || !blob_of || !m->layer_ids || !m->experts) {
		ret = -ENOMEM;
		goto err;
	}
	/* biases stay resident whatever the budget: slots hold blobs only */
	ret = ldr_ktw_read_bias(k, &m->bias);
	if (ret)
		goto err;
	mapped = k->hugetlbfs || (opts && (opts->flags & KT_MODEL_F_MMAP));
	cached = !mapped && ldr_cache_wanted(k, opts);	/* read on demand */
	if (mapped)
		ret = load_map(ctx, k, opts, p, blob_of);
	else if (!cached)
		ret = load_read(ctx, k, opts, p, blob_of);
	if (ret)
		goto err;
	m->ctx = ctx;
	m->hidden = k->hdr.hidden;
	m->inter = k->hdr.inter;
	m->hidden_io = k->hdr.hidden_io;	/* 0 unless KTW_F_PADDED */
	m->inter_io = k->hdr.inter_io;
	m->act = (enum kt_act)k->hdr.act;	/* silu unless KTW_F_ACT */
	m->act_alpha = k->hdr.act_alpha;
	m->act_limit = k->hdr.act_limit;
	m->n_experts = k->hdr.n_experts;
	m->n_layers = k->hdr.n_layers;
	m->quant = (enum kt_quant)k->hdr.quant;
	m->down_quant = (enum kt_quant)ldr_ktw_down_quant(&k->hdr);
	m->group_size = k->hdr.group_size;
	m->down_chunk = k->hdr.down_chunk;
	m->expert_bytes = k->hdr.expert_bytes;
	memcpy(m->layer_ids, k->layer_ids, 4ull * k->hdr.n_layers);
	for (i = 0; i < k->n_entries; i++) {
		struct core_expert *e = &m->experts[i];

		if (!blob_of[i])
			continue;
		kern_pack_mat(&lay, KERN_MAT_GATE, blob_of[i], &e->gate);
		kern_pack_mat(&lay, KERN_MAT_UP, blob_of[i], &e->up);
		kern_pack_mat(&lay, KERN_MAT_DOWN, blob_of[i], &e->down);
		e->present = true;
		m->resident_bytes += k->hdr.expert_bytes;
	}
	for (i = 0; i < k->n_entries; i++)
		absent |= masked(k, opts, i);
	/* experts the host will not hold stay readable for the GPU upload */
	if (absent || cached) {
		ret = ldr_blob_src_open(k, p->map,
					!(opts->flags & KT_MODEL_F_NO_VERIFY),
					&p->src);
		if (ret)
			goto err;
		m->blob_read = blob_read;
		m->blob_stride = k->hdr.blob_stride;
	}
	m->priv = p;
	m->release = model_release;
	p = NULL;
	if (cached) {
		ret = ldr_cache_attach(ctx, k, opts, m);
		if (ret)
			goto err;
	}
	ret = core_moe_reserve(ctx, m);
	if (ret) {
		ldr_err(ret, "%s: no kernels for %s on this context", path,
			kt_quant_name(m->quant));
		goto err;
	}
	if (opts->flags & KT_MODEL_F_GPU_UPLOAD) {
		ret = ldr_gpu_upload_open(m, path);
		if (ret)
			goto err;
	}
	ret = core_live_add(ctx, m);
	if (ret)
		goto err;
	core_log(ctx, KT_LOG_INFO, "%s: %u layers x %u experts, %llu MiB resident, %s",
		 path, m->n_layers, m->n_experts,
		 (unsigned long long)(m->resident_bytes >> 20),
		 last_stats.mapped ? "mapped from hugetlbfs" :
		 cached ? "cached (read on demand)" : "read");
	free(blob_of);
	ldr_ktw_close(k);
	*out = m;
	return 0;
err:
	if (m && m->release) {
		core_model_extras_free(m);
		m->release(m);
	} else if (m) {
		free(m->bias);
		free(m->layer_ids);
		free(m->experts);
		free(m);
	}
	if (p) {
		core_mem_free(&p->mem);
		if (p->map)
			munmap(p->map, p->map_len);
		free(p);
	}
	free(blob_of);
	if (ctx)
		core_log(ctx, KT_LOG_DEBUG, "%s", kt_last_error());
	ldr_ktw_close(k);
	return ret;
}

KT_EXPORT int kt_model_open(struct kt_ctx *ctx, const char *path,
			    const struct kt_model_opts *opts,
			    struct kt_model **out)
{
	ldr_err_clear();
	return ldr_err_ensure(model_open(ctx, path, opts, out),
			      path ? path : "kt_model_open");
}
