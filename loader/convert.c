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
#include "loader/hf-src.h"
#include "loader/io.h"
#include "loader/ktw.h"
#include "kernels/crc32c.h"

struct conv {
	const struct kt_convert_opts *o;
	struct ldr_hf_src *src;
	uint64_t n_blobs;
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
	struct ldr_hf_scratch hf;
	uint8_t *blob;
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

static int conv_one(struct conv *c, struct conv_scratch *s, uint64_t i)
{
	struct ktw_entry *ent = &c->table[i];
	uint64_t ahead = i + c->n_threads;
	int ret;

	/* the disk fetches the next round while this one packs */
	if (ahead < c->n_blobs)
		ldr_hf_prefetch(c->src, ahead);
	ret = ldr_hf_pack_expert(c->src, &s->hf, i, s->blob);
	if (ret)
		return ret;
	ent->crc = kern_crc32c(0, s->blob, c->hdr.expert_bytes);
	ret = ldr_pwrite_full(c->fd, s->blob, c->hdr.blob_stride, ent->offset);
	if (ret)
		return ldr_err(ret, "%s: write: %s", c->o->output, strerror(-ret));
	ldr_hf_done(c->src, i);
	return 0;
}

static void *conv_thread(void *arg)
{
	struct conv *c = arg;
	uint64_t total = c->n_blobs, i;
	struct conv_scratch s;
	int ret;

	memset(&s, 0, sizeof(s));
	s.blob = ldr_io_buf_alloc(c->hdr.blob_stride);
	if (!s.blob || ldr_hf_scratch_init(c->src, &s.hf)) {
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
	ldr_hf_scratch_free(&s.hf);
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
	ldr_hf_prefetch(c->src, 0);
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

	memcpy(c->hdr.arch, c->src->cfg.arch, sizeof(c->hdr.arch) - 1);
	c->hdr.top_k = c->src->cfg.top_k;
	ldr_ktw_seal(&c->hdr, c->src->layer_ids, c->table);
	buf = calloc(1, KTW_HEADER_BYTES + meta_len);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, &c->hdr, sizeof(c->hdr));
	memcpy(buf + c->hdr.layers_off, c->src->layer_ids,
	       4ull * c->src->n_layers);
	memcpy(buf + c->hdr.table_off, c->table,
	       c->n_blobs * sizeof(*c->table));
	ret = ldr_pwrite_full(c->fd, buf, KTW_HEADER_BYTES + meta_len, 0);
	free(buf);
	if (ret)
		return ldr_err(ret, "%s: write: %s", c->o->output, strerror(-ret));
	return 0;
}

/*
 * What a source's experts compute beyond silu(g) * u on their own sizes
 * (GPT-OSS: the clamped SwiGLU, H and I padded to the tiles, expert
 * biases): src->geom has the packed sizes, @x the model's own, and
 * kt_convert() writes the 2.3 header (ldr_ktw_set_epi()) and, with
 * @x->bias, the bias section after the blobs (hf_write_bias()).
 */
static void hf_epi(const struct ldr_hf_src *src, struct ldr_ktw_epi *x)
{
	memset(x, 0, sizeof(*x));
	if (ldr_hf_src_is_plain(src))
		return;
	x->act = KT_ACT_SWIGLU_OAI;
	x->act_alpha = KT_SWIGLU_OAI_ALPHA;
	x->act_limit = src->cfg.swiglu_limit;
	x->hidden_io = src->cfg.hidden;
	x->inter_io = src->cfg.inter;
	x->bias = true;
}

/* One expert's biases for the bias section: the file's layers are the
 * source's. */
static void hf_bias(void *arg, uint32_t layer, uint32_t expert, float *dst)
{
	const struct ldr_hf_src *s = arg;

	ldr_hf_expert_bias(s, (uint64_t)layer * s->cfg.n_experts + expert,
			   dst);
}

static int hf_write_bias(struct conv *c)
{
	int ret = ldr_ktw_write_bias(c->fd, &c->hdr, hf_bias,
				     (void *)c->src);

	if (ret)
		return ldr_err(ret, "%s: writing the expert biases: %s",
			       c->o->output, strerror(-ret));
	return 0;
}

KT_EXPORT int kt_convert(const struct kt_convert_opts *o)
{
	struct ldr_ktw_epi x;
	struct kt_convert_opts oo;
	struct conv c;
	int32_t first = 0, last = -1;
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
	memset(&c, 0, sizeof(c));
	c.o = o;
	c.fd = -1;
	pthread_mutex_init(&c.lock, NULL);
	if (o->layer_first || o->layer_last >= 0) {
		first = o->layer_first;
		last = o->layer_last;
	}
	/* quant 0: the checkpoint's own numbers (ldr_hf_default_quant) */
	ret = ldr_hf_src_open_flags(o->input, o->quant, o->group_size, first,
				    last, LDR_HF_F_ANY, &c.src);
	if (ret)
		goto out;
	/* within the .ktw limit (ldr_hf_src_open() checked) */
	c.n_blobs = (uint64_t)c.src->n_layers * c.src->cfg.n_experts;
	c.table = calloc(c.n_blobs, sizeof(*c.table));
	if (!c.table) {
		ret = -ENOMEM;
		goto out;
	}
	ldr_ktw_layout(&c.hdr, &c.src->geom, c.src->n_layers,
		       c.src->cfg.n_experts, c.table);
	hf_epi(c.src, &x);
	ret = ldr_ktw_set_epi(&c.hdr, &x);	/* file_size grows by the biases */
	if (ret)
		goto out;
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
	if (x.bias) {
		ret = hf_write_bias(&c);	/* sets hdr.bias_crc */
		if (ret)
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
	ldr_hf_src_close(c.src);
	pthread_mutex_destroy(&c.lock);
	return ret;
}
