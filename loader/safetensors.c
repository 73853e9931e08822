// SPDX-License-Identifier: MIT
/*
 * safetensors.c - safetensors files (8-byte LE header length, JSON header,
 * C-order data) mapped read-only and validated with jansson before use;
 * checkpoints made of one or many such files.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "loader/error.h"
#include "loader/fault.h"
#include "loader/safetensors.h"

static const struct {
	const char *name;
	enum ldr_st_dtype t;
	unsigned int size;
} st_dtypes[] = {
	{ "BOOL", LDR_ST_BOOL, 1 }, { "U8", LDR_ST_U8, 1 },
	{ "I8", LDR_ST_I8, 1 }, { "F8_E5M2", LDR_ST_F8_E5M2, 1 },
	{ "F8_E4M3", LDR_ST_F8_E4M3, 1 }, { "I16", LDR_ST_I16, 2 },
	{ "U16", LDR_ST_U16, 2 }, { "F16", LDR_ST_F16, 2 },
	{ "BF16", LDR_ST_BF16, 2 }, { "I32", LDR_ST_I32, 4 },
	{ "U32", LDR_ST_U32, 4 }, { "F32", LDR_ST_F32, 4 },
	{ "F64", LDR_ST_F64, 8 }, { "I64", LDR_ST_I64, 8 },
	{ "U64", LDR_ST_U64, 8 },
};

unsigned int ldr_st_dtype_size(enum ldr_st_dtype t)
{
	size_t i;

	for (i = 0; i < sizeof(st_dtypes) / sizeof(st_dtypes[0]); i++)
		if (st_dtypes[i].t == t)
			return st_dtypes[i].size;
	return 0;
}

static enum ldr_st_dtype dtype_parse(const char *s)
{
	size_t i;

	for (i = 0; i < sizeof(st_dtypes) / sizeof(st_dtypes[0]); i++)
		if (!strcmp(st_dtypes[i].name, s))
			return st_dtypes[i].t;
	return LDR_ST_UNKNOWN;
}

static int cmp_off(const void *a, const void *b)
{
	const struct ldr_st_tensor *x = *(const struct ldr_st_tensor *const *)a;
	const struct ldr_st_tensor *y = *(const struct ldr_st_tensor *const *)b;

	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return x->len < y->len ? -1 : x->len > y->len;
}

/* One header entry: {"dtype": s, "shape": [n...], "data_offsets": [b, e]}. */
static int parse_tensor(const char *path, const char *name, json_t *v,
			uint64_t data_start, uint64_t data_len,
			struct ldr_st_tensor *t)
{
	json_t *dt, *shape, *offs, *x;
	uint64_t elems = 1, b, e, bytes;
	size_t i;

	if (!json_is_object(v))
		return ldr_err(-EINVAL, "%s: tensor %s: header entry is not an object",
			       path, name);
	dt = json_object_get(v, "dtype");
	shape = json_object_get(v, "shape");
	offs = json_object_get(v, "data_offsets");
	if (!json_is_string(dt) || !json_is_array(shape) ||
	    !json_is_array(offs) || json_array_size(offs) != 2)
		return ldr_err(-EINVAL, "%s: tensor %s: needs dtype, shape and two data_offsets",
			       path, name);
	snprintf(t->dtype_name, sizeof(t->dtype_name), "%s", json_string_value(dt));
	t->dtype = dtype_parse(json_string_value(dt));
	if (json_array_size(shape) > LDR_ST_MAX_DIMS)
		return ldr_err(-EINVAL, "%s: tensor %s: %zu dimensions (at most %d)",
			       path, name, json_array_size(shape), LDR_ST_MAX_DIMS);
	t->ndim = (uint32_t)json_array_size(shape);
	json_array_foreach(shape, i, x) {
		if (!json_is_integer(x) || json_integer_value(x) < 0)
			return ldr_err(-EINVAL, "%s: tensor %s: bad shape", path, name);
		t->shape[i] = (uint64_t)json_integer_value(x);
		if (__builtin_mul_overflow(elems, t->shape[i], &elems))
			return ldr_err(-EINVAL, "%s: tensor %s: shape overflows",
				       path, name);
	}
	if (!json_is_integer(json_array_get(offs, 0)) ||
	    !json_is_integer(json_array_get(offs, 1)) ||
	    json_integer_value(json_array_get(offs, 0)) < 0 ||
	    json_integer_value(json_array_get(offs, 1)) < 0)
		return ldr_err(-EINVAL, "%s: tensor %s: bad data_offsets", path, name);
	b = (uint64_t)json_integer_value(json_array_get(offs, 0));
	e = (uint64_t)json_integer_value(json_array_get(offs, 1));
	if (b > e || e > data_len)
		return ldr_err(-EINVAL, "%s: tensor %s: data_offsets [%llu, %llu] outside the %llu data bytes",
			       path, name, (unsigned long long)b,
			       (unsigned long long)e, (unsigned long long)data_len);
	if (t->dtype != LDR_ST_UNKNOWN) {
		if (__builtin_mul_overflow(elems, ldr_st_dtype_size(t->dtype), &bytes) ||
		    bytes != e - b)
			return ldr_err(-EINVAL, "%s: tensor %s: %llu bytes of data for shape and dtype %s",
				       path, name, (unsigned long long)(e - b),
				       t->dtype_name);
	}
	t->off = data_start + b;
	t->len = e - b;
	return 0;
}

static int parse_header(struct ldr_st_file *f, const char *js, size_t len)
{
	struct ldr_st_tensor **sorted = NULL;
	json_error_t jerr;
	json_t *root, *v;
	const char *key;
	size_t n = 0, names_len = 0, pos = 0, i;
	uint64_t data_start = 8 + len, data_len = f->size - data_start;
	int ret = 0;

	root = json_loadb(js, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return ldr_err(-EINVAL, "%s: malformed JSON header: %s (line %d, column %d)",
			       f->path, jerr.text, jerr.line, jerr.column);
	if (!json_is_object(root)) {
		ret = ldr_err(-EINVAL, "%s: JSON header is not an object", f->path);
		goto out;
	}
	json_object_foreach(root, key, v) {
		if (!strcmp(key, "__metadata__")) {
			if (!json_is_object(v)) {
				ret = ldr_err(-EINVAL, "%s: __metadata__ is not an object",
					      f->path);
				goto out;
			}
			continue;
		}
		n++;
		names_len += strlen(key) + 1;
	}
	f->tensors = calloc(n ? n : 1, sizeof(*f->tensors));
	f->names = malloc(names_len ? names_len : 1);
	sorted = malloc((n ? n : 1) * sizeof(*sorted));
	if (!f->tensors || !f->names || !sorted) {
		ret = -ENOMEM;
		goto out;
	}
	json_object_foreach(root, key, v) {
		struct ldr_st_tensor *t;

		if (!strcmp(key, "__metadata__"))
			continue;
		t = &f->tensors[f->n_tensors];
		memcpy(f->names + pos, key, strlen(key) + 1);
		t->name = f->names + pos;
		pos += strlen(key) + 1;
		ret = parse_tensor(f->path, key, v, data_start, data_len, t);
		if (ret)
			goto out;
		t->data = f->map + t->off;
		t->file = f;
		sorted[f->n_tensors++] = t;
	}
	qsort(sorted, n, sizeof(*sorted), cmp_off);
	for (i = 1; i < n; i++) {
		if (sorted[i]->off < sorted[i - 1]->off + sorted[i - 1]->len) {
			ret = ldr_err(-EINVAL, "%s: tensors %s and %s overlap",
				      f->path, sorted[i - 1]->name, sorted[i]->name);
			goto out;
		}
	}
out:
	free(sorted);
	json_decref(root);
	return ret;
}

int ldr_st_parse(struct ldr_st_file *f)
{
	uint64_t hlen;

	if (f->size < 8)
		return ldr_err(-EINVAL, "%s: %llu bytes, too short for a safetensors header",
			       f->path, (unsigned long long)f->size);
	memcpy(&hlen, f->map, 8);	/* little-endian, as is the host */
	if (hlen < 2 || hlen > LDR_ST_MAX_HEADER || hlen > f->size - 8)
		return ldr_err(-EINVAL, "%s: header length %llu does not fit the %llu-byte file",
			       f->path, (unsigned long long)hlen,
			       (unsigned long long)f->size);
	return parse_header(f, (const char *)f->map + 8, hlen);
}

int ldr_st_open(const char *path, struct ldr_st_file **out)
{
	struct ldr_st_file *f;
	struct stat st;
	int ret;

	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = -1;
	f->path = strdup(path);
	if (!f->path) {
		ret = -ENOMEM;
		goto err;
	}
	f->fd = LDR_FAULT_CALL("open") ? -1 : open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0) {
		ret = -errno;
		ldr_err(ret, "%s: %s", path, strerror(errno));
		goto err;
	}
	if (fstat(f->fd, &st) || !S_ISREG(st.st_mode)) {
		ret = ldr_err(-EINVAL, "%s: not a regular file", path);
		goto err;
	}
	f->size = (uint64_t)st.st_size;
	if (f->size < 8) {
		ret = ldr_err(-EINVAL, "%s: %llu bytes, too short for a safetensors header",
			      path, (unsigned long long)f->size);
		goto err;
	}
	f->map = LDR_FAULT_CALL("mmap") ? MAP_FAILED :
		 mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->fd, 0);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		ret = -errno;
		ldr_err(ret, "%s: mmap: %s", path, strerror(errno));
		goto err;
	}
	ret = ldr_st_parse(f);
	if (ret)
		goto err;
	*out = f;
	return 0;
err:
	ldr_st_close(f);
	return ret;
}

void ldr_st_close(struct ldr_st_file *f)
{
	if (!f)
		return;
	if (f->map)
		munmap(f->map, f->size);
	if (f->fd >= 0)
		close(f->fd);
	free(f->tensors);
	free(f->names);
	free(f->path);
	free(f);
}

void ldr_st_tensor_done(const struct ldr_st_tensor *t)
{
	uintptr_t a = (uintptr_t)t->data & ~(uintptr_t)4095;
	uintptr_t b = ((uintptr_t)t->data + t->len + 4095) & ~(uintptr_t)4095;

	/*
	 * Converted once: unmap the pages (a neighbour sharing an edge page
	 * faults it back in) and drop them from the page cache, so that a
	 * 600 GB checkpoint neither grows our RSS nor fills the cache.
	 */
	madvise((void *)a, b - a, MADV_DONTNEED);
	posix_fadvise(t->file->fd, (off_t)t->off, (off_t)t->len,
		      POSIX_FADV_DONTNEED);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp((*(const struct ldr_st_tensor *const *)a)->name,
		      (*(const struct ldr_st_tensor *const *)b)->name);
}

static int ckpt_add_file(struct ldr_ckpt *c, const char *name)
{
	struct ldr_st_file **files, *f;
	char *path;
	size_t i;
	int ret;

	if (strchr(name, '/'))
		return ldr_err(-EINVAL, "%s: shard name %s leaves the folder",
			       c->source, name);
	if (asprintf(&path, "%s/%s", c->dir, name) < 0)
		return -ENOMEM;
	for (i = 0; i < c->n_files; i++) {
		if (!strcmp(c->files[i]->path, path)) {
			free(path);
			return 0;
		}
	}
	ret = ldr_st_open(path, &f);
	free(path);
	if (ret)
		return ret;
	files = realloc(c->files, (c->n_files + 1) * sizeof(*files));
	if (!files) {
		ldr_st_close(f);
		return -ENOMEM;
	}
	c->files = files;
	c->files[c->n_files++] = f;
	return 0;
}

static int ckpt_from_index(struct ldr_ckpt *c)
{
	json_error_t jerr;
	json_t *root, *map, *v;
	const char *key;
	int ret = 0;

	root = json_load_file(c->source, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return ldr_err(-EINVAL, "%s: malformed JSON: %s (line %d)",
			       c->source, jerr.text, jerr.line);
	map = json_object_get(root, "weight_map");
	if (!json_is_object(map)) {
		ret = ldr_err(-EINVAL, "%s: no weight_map object", c->source);
		goto out;
	}
	json_object_foreach(map, key, v) {
		if (!json_is_string(v)) {
			ret = ldr_err(-EINVAL, "%s: weight_map[%s] is not a file name",
				      c->source, key);
			goto out;
		}
		ret = ckpt_add_file(c, json_string_value(v));
		if (ret)
			goto out;
	}
out:
	json_decref(root);
	return ret;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ckpt_from_dir(struct ldr_ckpt *c)
{
	char **names = NULL, **tmp;
	size_t n = 0, i;
	struct dirent *de;
	DIR *d;
	int ret = 0;

	d = opendir(c->dir);
	if (!d)
		return ldr_err(-errno, "%s: %s", c->dir, strerror(errno));
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);

		if (l < 12 || strcmp(de->d_name + l - 12, ".safetensors"))
			continue;
		tmp = realloc(names, (n + 1) * sizeof(*names));
		if (!tmp || !(tmp[n] = strdup(de->d_name))) {
			names = tmp ? tmp : names;
			ret = -ENOMEM;
			goto out;
		}
		names = tmp;
		n++;
	}
	if (!n) {
		ret = ldr_err(-ENOENT, "%s: no *.safetensors files", c->dir);
		goto out;
	}
	qsort(names, n, sizeof(*names), cmp_str);
	for (i = 0; i < n && !ret; i++)
		ret = ckpt_add_file(c, names[i]);
out:
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
	return ret;
}

int ldr_ckpt_open(const char *dir, struct ldr_ckpt **out)
{
	struct ldr_ckpt *c;
	size_t i, j, k;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->dir = strdup(dir);
	if (!c->dir || asprintf(&c->source, "%s/model.safetensors.index.json",
				dir) < 0) {
		c->source = NULL;
		ret = -ENOMEM;
		goto err;
	}
	if (!access(c->source, F_OK)) {
		ret = ckpt_from_index(c);
	} else {
		free(c->source);
		if (asprintf(&c->source, "%s/model.safetensors", dir) < 0) {
			c->source = NULL;
			ret = -ENOMEM;
			goto err;
		}
		if (!access(c->source, F_OK)) {
			ret = ckpt_add_file(c, "model.safetensors");
		} else {
			free(c->source);
			c->source = strdup(dir);
			ret = c->source ? ckpt_from_dir(c) : -ENOMEM;
		}
	}
	if (ret)
		goto err;
	for (i = 0; i < c->n_files; i++)
		c->n_tensors += c->files[i]->n_tensors;
	c->by_name = malloc((c->n_tensors ? c->n_tensors : 1) * sizeof(*c->by_name));
	if (!c->by_name) {
		ret = -ENOMEM;
		goto err;
	}
	for (i = 0, k = 0; i < c->n_files; i++)
		for (j = 0; j < c->files[i]->n_tensors; j++)
			c->by_name[k++] = &c->files[i]->tensors[j];
	qsort(c->by_name, c->n_tensors, sizeof(*c->by_name), cmp_name);
	for (i = 1; i < c->n_tensors; i++) {
		if (!strcmp(c->by_name[i]->name, c->by_name[i - 1]->name)) {
			ret = ldr_err(-EINVAL, "tensor %s is in both %s and %s",
				      c->by_name[i]->name,
				      c->by_name[i - 1]->file->path,
				      c->by_name[i]->file->path);
			goto err;
		}
	}
	*out = c;
	return 0;
err:
	ldr_ckpt_close(c);
	return ret;
}

void ldr_ckpt_close(struct ldr_ckpt *c)
{
	size_t i;

	if (!c)
		return;
	for (i = 0; i < c->n_files; i++)
		ldr_st_close(c->files[i]);
	free(c->files);
	free(c->by_name);
	free(c->source);
	free(c->dir);
	free(c);
}

const struct ldr_st_tensor *ldr_ckpt_find(const struct ldr_ckpt *c,
					  const char *name)
{
	size_t lo = 0, hi = c->n_tensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int r = strcmp(c->by_name[mid]->name, name);

		if (!r)
			return c->by_name[mid];
		if (r < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}
