// SPDX-License-Identifier: MIT
/*
 * gguf.c - the GGUF parser: every count, length, type, dimension and offset
 * of a file is checked against the image before it is used or multiplied
 * (Documentation/formats.md). A downloaded GGUF file is hostile input.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "loader/error.h"
#include "loader/fault.h"
#include "loader/gguf.h"

#define GGUF_MAGIC		0x46554747u	/* "GGUF" read little-endian */
#define GGUF_DEFAULT_ALIGN	32u
#define GGUF_MAX_ALIGN		(1u << 20)

/* block elements, block bytes, name; removed ids have no entry */
static const struct {
	uint32_t blck, bytes;
	const char *name;
} ttypes[] = {
	[0] = { 1, 4, "F32" },		[1] = { 1, 2, "F16" },
	[2] = { 32, 18, "Q4_0" },	[3] = { 32, 20, "Q4_1" },
	[6] = { 32, 22, "Q5_0" },	[7] = { 32, 24, "Q5_1" },
	[8] = { 32, 34, "Q8_0" },	[9] = { 32, 36, "Q8_1" },
	[10] = { 256, 84, "Q2_K" },	[11] = { 256, 110, "Q3_K" },
	[12] = { 256, 144, "Q4_K" },	[13] = { 256, 176, "Q5_K" },
	[14] = { 256, 210, "Q6_K" },	[15] = { 256, 292, "Q8_K" },
	[16] = { 256, 66, "IQ2_XXS" },	[17] = { 256, 74, "IQ2_XS" },
	[18] = { 256, 98, "IQ3_XXS" },	[19] = { 256, 50, "IQ1_S" },
	[20] = { 32, 18, "IQ4_NL" },	[21] = { 256, 110, "IQ3_S" },
	[22] = { 256, 82, "IQ2_S" },	[23] = { 256, 136, "IQ4_XS" },
	[24] = { 1, 1, "I8" },		[25] = { 1, 2, "I16" },
	[26] = { 1, 4, "I32" },		[27] = { 1, 8, "I64" },
	[28] = { 1, 8, "F64" },		[29] = { 256, 56, "IQ1_M" },
	[30] = { 1, 2, "BF16" },	[34] = { 256, 54, "TQ1_0" },
	[35] = { 256, 66, "TQ2_0" },	[39] = { 32, 17, "MXFP4" },
};

/* bytes of one value of a scalar type (0: string, array, unknown) */
static const uint8_t vsize[LDR_GGUF_VTYPE_COUNT] = {
	[LDR_GGUF_U8] = 1, [LDR_GGUF_I8] = 1, [LDR_GGUF_U16] = 2,
	[LDR_GGUF_I16] = 2, [LDR_GGUF_U32] = 4, [LDR_GGUF_I32] = 4,
	[LDR_GGUF_F32] = 4, [LDR_GGUF_BOOL] = 1, [LDR_GGUF_U64] = 8,
	[LDR_GGUF_I64] = 8, [LDR_GGUF_F64] = 8,
};

bool ldr_gguf_type_info(uint32_t type, uint32_t *blck, uint32_t *bytes,
			const char **name)
{
	if (type >= sizeof(ttypes) / sizeof(ttypes[0]) || !ttypes[type].blck)
		return false;
	if (blck)
		*blck = ttypes[type].blck;
	if (bytes)
		*bytes = ttypes[type].bytes;
	if (name)
		*name = ttypes[type].name;
	return true;
}

const char *ldr_gguf_type_name(uint32_t type)
{
	const char *n = "unknown";

	ldr_gguf_type_info(type, NULL, NULL, &n);
	return n;
}

/* A read position in the image; every read checks what is left. */
struct cur {
	const struct ldr_gguf *g;
	uint64_t off;
};

static uint64_t left(const struct cur *c)
{
	return c->g->size - c->off;
}

static int need(struct cur *c, uint64_t n, const char *what)
{
	if (n > left(c))
		return ldr_err(-EINVAL, "%s: truncated in %s at offset %llu (%llu bytes needed, %llu left)",
			       c->g->path, what, (unsigned long long)c->off,
			       (unsigned long long)n,
			       (unsigned long long)left(c));
	return 0;
}

static uint64_t le(const uint8_t *p, unsigned int n)
{
	uint64_t v = 0;

	while (n--)
		v = v << 8 | p[n];
	return v;
}

static int rd(struct cur *c, unsigned int n, uint64_t *v, const char *what)
{
	int ret = need(c, n, what);

	if (ret)
		return ret;
	*v = le(c->g->base + c->off, n);
	c->off += n;
	return 0;
}

static int rd_str(struct cur *c, struct ldr_gguf_str *s, uint64_t max,
		  const char *what)
{
	uint64_t n;
	int ret = rd(c, 8, &n, what);

	if (ret)
		return ret;
	if (n > max)
		return ldr_err(-EINVAL, "%s: %s: string length %llu at offset %llu exceeds %llu",
			       c->g->path, what, (unsigned long long)n,
			       (unsigned long long)(c->off - 8),
			       (unsigned long long)max);
	ret = need(c, n, what);
	if (ret)
		return ret;
	s->p = (const char *)c->g->base + c->off;
	s->len = n;
	c->off += n;
	return 0;
}

/* "%.*s" arguments of a file string, cut for messages */
#define STR_ARG(s) (int)((s).len > 80 ? 80 : (s).len), (s).p

static int skip_value(struct cur *c, uint32_t type, const struct ldr_gguf_kv *kv)
{
	struct ldr_gguf_str s;
	uint64_t v;
	int ret;

	if (type == LDR_GGUF_STRING)
		return rd_str(c, &s, left(c), "a string value");
	if (type >= LDR_GGUF_VTYPE_COUNT || !vsize[type])
		return ldr_err(-EINVAL, "%s: key '%.*s': value type %u is not a GGUF type",
			       c->g->path, STR_ARG(kv->key), type);
	ret = need(c, vsize[type], "a value");
	if (ret)
		return ret;
	if (type == LDR_GGUF_BOOL) {
		v = c->g->base[c->off];
		if (v > 1)
			return ldr_err(-EINVAL, "%s: key '%.*s': bool value %llu is not 0 or 1",
				       c->g->path, STR_ARG(kv->key),
				       (unsigned long long)v);
	}
	c->off += vsize[type];
	return 0;
}

static int parse_kv(struct cur *c, struct ldr_gguf_kv *kv)
{
	uint64_t v, i;
	int ret;

	ret = rd_str(c, &kv->key, LDR_GGUF_MAX_KEY, "a metadata key");
	if (ret)
		return ret;
	if (!kv->key.len)
		return ldr_err(-EINVAL, "%s: empty metadata key at offset %llu",
			       c->g->path, (unsigned long long)(c->off - 8));
	if (memchr(kv->key.p, 0, kv->key.len))
		return ldr_err(-EINVAL, "%s: metadata key with a NUL byte at offset %llu",
			       c->g->path, (unsigned long long)c->off);
	ret = rd(c, 4, &v, "a value type");
	if (ret)
		return ret;
	kv->type = (uint32_t)v;
	if (kv->type >= LDR_GGUF_VTYPE_COUNT)
		return ldr_err(-EINVAL, "%s: key '%.*s': value type %u is not a GGUF type",
			       c->g->path, STR_ARG(kv->key), kv->type);
	if (kv->type != LDR_GGUF_ARRAY) {
		kv->val = c->g->base + c->off;
		return skip_value(c, kv->type, kv);
	}
	ret = rd(c, 4, &v, "an array type");
	if (!ret)
		kv->arr_type = (uint32_t)v;
	if (!ret)
		ret = rd(c, 8, &kv->arr_n, "an array length");
	if (ret)
		return ret;
	if (kv->arr_type == LDR_GGUF_ARRAY)
		return ldr_err(-EINVAL, "%s: key '%.*s': arrays of arrays are not supported",
			       c->g->path, STR_ARG(kv->key));
	if (kv->arr_type >= LDR_GGUF_VTYPE_COUNT)
		return ldr_err(-EINVAL, "%s: key '%.*s': array element type %u is not a GGUF type",
			       c->g->path, STR_ARG(kv->key), kv->arr_type);
	/* every element takes at least its size (a string its 8-byte
	 * length): the count is bounded by the bytes left, no overflow */
	v = kv->arr_type == LDR_GGUF_STRING ? 8 : vsize[kv->arr_type];
	if (kv->arr_n > left(c) / v)
		return ldr_err(-EINVAL, "%s: key '%.*s': array length %llu does not fit in the file",
			       c->g->path, STR_ARG(kv->key),
			       (unsigned long long)kv->arr_n);
	kv->val = c->g->base + c->off;
	if (kv->arr_type != LDR_GGUF_STRING && kv->arr_type != LDR_GGUF_BOOL) {
		c->off += kv->arr_n * v;
		return 0;
	}
	for (i = 0; i < kv->arr_n; i++) {
		ret = skip_value(c, kv->arr_type, kv);
		if (ret)
			return ret;
	}
	return 0;
}

static bool str_eq(struct ldr_gguf_str a, struct ldr_gguf_str b)
{
	return a.len == b.len && !memcmp(a.p, b.p, a.len);
}

static bool str_is(struct ldr_gguf_str a, const char *s)
{
	size_t n = strlen(s);

	return a.len == n && !memcmp(a.p, s, n);
}

/* orderings of tensor and key indices, for the overlap and duplicate checks */
static int by_offset(const void *a, const void *b, void *arg)
{
	const struct ldr_gguf_tensor *t = arg;
	const struct ldr_gguf_tensor *x = &t[*(const uint64_t *)a];
	const struct ldr_gguf_tensor *y = &t[*(const uint64_t *)b];

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int str_cmp(struct ldr_gguf_str a, struct ldr_gguf_str b)
{
	int r = memcmp(a.p, b.p, a.len < b.len ? a.len : b.len);

	return r ? r : a.len < b.len ? -1 : a.len > b.len;
}

static int by_name(const void *a, const void *b, void *arg)
{
	const struct ldr_gguf_tensor *t = arg;

	return str_cmp(t[*(const uint64_t *)a].name, t[*(const uint64_t *)b].name);
}

static int by_key(const void *a, const void *b, void *arg)
{
	const struct ldr_gguf_kv *kv = arg;

	return str_cmp(kv[*(const uint64_t *)a].key, kv[*(const uint64_t *)b].key);
}

static uint64_t *iota(uint64_t n)
{
	uint64_t *o = malloc((n ? n : 1) * sizeof(*o)), i;

	for (i = 0; o && i < n; i++)
		o[i] = i;
	return o;
}

static int parse_tensor(struct cur *c, struct ldr_gguf_tensor *t, uint64_t idx)
{
	uint32_t blck, bytes, d;
	uint64_t v, n = 1;
	const char *tn;
	int ret;

	ret = rd_str(c, &t->name, LDR_GGUF_MAX_NAME, "a tensor name");
	if (ret)
		return ret;
	if (!t->name.len || memchr(t->name.p, 0, t->name.len))
		return ldr_err(-EINVAL, "%s: tensor %llu: empty name or a NUL byte in it",
			       c->g->path, (unsigned long long)idx);
	ret = rd(c, 4, &v, "a tensor's n_dims");
	if (ret)
		return ret;
	if (v < 1 || v > LDR_GGUF_MAX_DIMS)
		return ldr_err(-EINVAL, "%s: tensor '%.*s': n_dims %llu is not 1..%d",
			       c->g->path, STR_ARG(t->name),
			       (unsigned long long)v, LDR_GGUF_MAX_DIMS);
	t->n_dims = (uint32_t)v;
	for (d = 0; d < LDR_GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;
	for (d = 0; d < t->n_dims; d++) {
		ret = rd(c, 8, &t->ne[d], "a tensor dimension");
		if (ret)
			return ret;
		/* ggml's element counts are int64: the product stays in it */
		if (!t->ne[d] || t->ne[d] > (uint64_t)INT64_MAX / n)
			return ldr_err(-EINVAL, "%s: tensor '%.*s': dimension %u is %llu (zero, or the element count overflows)",
				       c->g->path, STR_ARG(t->name), d,
				       (unsigned long long)t->ne[d]);
		n *= t->ne[d];
	}
	ret = rd(c, 4, &v, "a tensor type");
	if (ret)
		return ret;
	t->type = (uint32_t)v;
	if (v > UINT32_MAX || !ldr_gguf_type_info(t->type, &blck, &bytes, &tn))
		return ldr_err(-EINVAL, "%s: tensor '%.*s': type %llu is not a ggml type",
			       c->g->path, STR_ARG(t->name),
			       (unsigned long long)v);
	if (t->ne[0] % blck)
		return ldr_err(-EINVAL, "%s: tensor '%.*s': dimension 0 (%llu) is not a multiple of the %s block (%u)",
			       c->g->path, STR_ARG(t->name),
			       (unsigned long long)t->ne[0], tn, blck);
	/* n / blck * bytes: bytes <= 292, n < 2^63 */
	if (n / blck > UINT64_MAX / bytes)
		return ldr_err(-EINVAL, "%s: tensor '%.*s': byte size overflows",
			       c->g->path, STR_ARG(t->name));
	t->nbytes = n / blck * bytes;
	return rd(c, 8, &t->offset, "a tensor offset");
}

static int find_alignment(struct ldr_gguf *g)
{
	const struct ldr_gguf_kv *kv = ldr_gguf_find(g, "general.alignment");
	uint32_t a;

	g->alignment = GGUF_DEFAULT_ALIGN;
	if (!kv)
		return 0;
	if (kv->type != LDR_GGUF_U32)
		return ldr_err(-EINVAL, "%s: general.alignment has value type %u, not uint32",
			       g->path, kv->type);
	a = (uint32_t)le(kv->val, 4);
	if (!a || (a & (a - 1)) || a > GGUF_MAX_ALIGN)
		return ldr_err(-EINVAL, "%s: general.alignment %u is not a power of two up to %u",
			       g->path, a, GGUF_MAX_ALIGN);
	g->alignment = a;
	return 0;
}

/* tensor data: aligned, inside the image, no two overlapping */
static int check_data(struct ldr_gguf *g)
{
	uint64_t room = g->size - g->data_off, i, *ord;
	int ret = 0;

	for (i = 0; i < g->n_tensors; i++) {
		struct ldr_gguf_tensor *t = &g->t[i];

		if (t->offset % g->alignment)
			return ldr_err(-EINVAL, "%s: tensor '%.*s': offset %llu is not a multiple of general.alignment %u",
				       g->path, STR_ARG(t->name),
				       (unsigned long long)t->offset,
				       g->alignment);
		if (t->offset > room || t->nbytes > room - t->offset)
			return ldr_err(-EINVAL, "%s: tensor '%.*s': data [%llu, +%llu) lies past the end of the file (truncated?)",
				       g->path, STR_ARG(t->name),
				       (unsigned long long)t->offset,
				       (unsigned long long)t->nbytes);
		t->data = g->base + g->data_off + t->offset;
	}
	if (g->n_tensors < 2)
		return 0;
	ord = iota(g->n_tensors);
	if (!ord)
		return -ENOMEM;
	qsort_r(ord, g->n_tensors, sizeof(*ord), by_offset, g->t);
	for (i = 1; i < g->n_tensors && !ret; i++) {
		const struct ldr_gguf_tensor *a = &g->t[ord[i - 1]];
		const struct ldr_gguf_tensor *b = &g->t[ord[i]];

		if (b->offset < a->offset + a->nbytes)
			ret = ldr_err(-EINVAL, "%s: tensors '%.*s' and '%.*s' overlap",
				      g->path, STR_ARG(a->name),
				      STR_ARG(b->name));
	}
	free(ord);
	return ret;
}

/* sorted, so that a file of a million names costs n log n, not n^2 */
static int check_unique(struct ldr_gguf *g)
{
	uint64_t *ok = iota(g->n_kv), *ot = iota(g->n_tensors), i;
	int ret = 0;

	if (!ok || !ot) {
		ret = -ENOMEM;
		goto out;
	}
	qsort_r(ok, g->n_kv, sizeof(*ok), by_key, g->kv);
	for (i = 1; i < g->n_kv && !ret; i++)
		if (str_eq(g->kv[ok[i]].key, g->kv[ok[i - 1]].key))
			ret = ldr_err(-EINVAL, "%s: metadata key '%.*s' appears twice",
				      g->path, STR_ARG(g->kv[ok[i]].key));
	qsort_r(ot, g->n_tensors, sizeof(*ot), by_name, g->t);
	for (i = 1; i < g->n_tensors && !ret; i++)
		if (str_eq(g->t[ot[i]].name, g->t[ot[i - 1]].name))
			ret = ldr_err(-EINVAL, "%s: tensor '%.*s' appears twice",
				      g->path, STR_ARG(g->t[ot[i]].name));
out:
	free(ok);
	free(ot);
	return ret;
}

int ldr_gguf_parse(struct ldr_gguf *g)
{
	struct cur c = { g, 0 };
	uint64_t v, i;
	int ret;

	g->kv = NULL;
	g->t = NULL;
	if (!g->path)
		g->path = "gguf";
	ret = rd(&c, 4, &v, "the magic");
	if (ret)
		return ret;
	if (v != GGUF_MAGIC)
		return ldr_err(-EINVAL, "%s: magic %08llx is not GGUF",
			       g->path, (unsigned long long)v);
	ret = rd(&c, 4, &v, "the version");
	if (ret)
		return ret;
	g->version = (uint32_t)v;
	if (v != 2 && v != 3)
		return ldr_err(-EINVAL, "%s: GGUF version %u is not supported (2 or 3; a byte-swapped version is a big-endian file)",
			       g->path, g->version);
	ret = rd(&c, 8, &g->n_tensors, "the tensor count");
	if (!ret)
		ret = rd(&c, 8, &g->n_kv, "the metadata count");
	if (ret)
		return ret;
	/* each kv takes >= 13 bytes, each tensor info >= 29 */
	if (g->n_tensors > LDR_GGUF_MAX_TENSORS ||
	    g->n_tensors > left(&c) / 29)
		return ldr_err(-EINVAL, "%s: tensor count %llu is too large for the file (limit %u)",
			       g->path, (unsigned long long)g->n_tensors,
			       LDR_GGUF_MAX_TENSORS);
	if (g->n_kv > LDR_GGUF_MAX_KV || g->n_kv > left(&c) / 13)
		return ldr_err(-EINVAL, "%s: metadata count %llu is too large for the file (limit %u)",
			       g->path, (unsigned long long)g->n_kv,
			       LDR_GGUF_MAX_KV);
	g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kv));
	g->t = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->t));
	if (!g->kv || !g->t)
		return -ENOMEM;
	for (i = 0; i < g->n_kv; i++) {
		ret = parse_kv(&c, &g->kv[i]);
		if (ret)
			return ret;
	}
	ret = find_alignment(g);
	for (i = 0; !ret && i < g->n_tensors; i++)
		ret = parse_tensor(&c, &g->t[i], i);
	if (ret)
		return ret;
	v = (c.off + g->alignment - 1) / g->alignment * g->alignment;
	if (v > g->size && g->n_tensors)
		return ldr_err(-EINVAL, "%s: truncated before the tensor data (offset %llu)",
			       g->path, (unsigned long long)v);
	g->data_off = v > g->size ? g->size : v;
	ret = check_unique(g);
	if (!ret)
		ret = check_data(g);
	return ret;
}

void ldr_gguf_release(struct ldr_gguf *g)
{
	free(g->kv);
	free(g->t);
	g->kv = NULL;
	g->t = NULL;
}

int ldr_gguf_open(const char *path, struct ldr_gguf **out)
{
	struct ldr_gguf *g;
	struct stat st;
	int ret;

	*out = NULL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->path = strdup(path);
	g->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (!g->path || g->fd < 0) {
		ret = g->path ? -errno : -ENOMEM;
		ldr_err(ret, "%s: %s", path, strerror(-ret));
		goto err;
	}
	if (fstat(g->fd, &st) || !S_ISREG(st.st_mode) || st.st_size < 24) {
		ret = ldr_err(-EINVAL, "%s: not a regular file of at least 24 bytes",
			      path);
		goto err;
	}
	g->size = (uint64_t)st.st_size;
	g->map = mmap(NULL, g->size, PROT_READ, MAP_SHARED, g->fd, 0);
	if (g->map == MAP_FAILED) {
		g->map = NULL;
		ret = ldr_err(-errno, "%s: mmap: %s", path, strerror(errno));
		goto err;
	}
	g->base = g->map;
	ret = ldr_gguf_parse(g);
	if (ret)
		goto err;
	*out = g;
	return 0;
err:
	ldr_gguf_close(g);
	return ret;
}

void ldr_gguf_close(struct ldr_gguf *g)
{
	if (!g)
		return;
	ldr_gguf_release(g);
	if (g->map)
		munmap(g->map, g->size);
	if (g->fd > 0)
		close(g->fd);
	free((char *)g->path);
	free(g);
}

bool ldr_gguf_is_gguf(const char *path)
{
	uint8_t b[4];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool yes;

	if (fd < 0)
		return false;
	yes = pread(fd, b, 4, 0) == 4 && le(b, 4) == GGUF_MAGIC;
	close(fd);
	return yes;
}

const struct ldr_gguf_kv *ldr_gguf_find(const struct ldr_gguf *g,
					const char *key)
{
	uint64_t i;

	for (i = 0; i < g->n_kv; i++)
		if (str_is(g->kv[i].key, key))
			return &g->kv[i];
	return NULL;
}

int ldr_gguf_get_uint(const struct ldr_gguf *g, const char *key,
		      uint64_t max, uint64_t *v)
{
	const struct ldr_gguf_kv *kv = ldr_gguf_find(g, key);
	uint64_t x;
	int64_t s;

	if (!kv)
		return -ENOENT;
	switch (kv->type) {
	case LDR_GGUF_U8: case LDR_GGUF_U16: case LDR_GGUF_U32:
	case LDR_GGUF_U64:
		x = le(kv->val, vsize[kv->type]);
		break;
	case LDR_GGUF_I8: case LDR_GGUF_I16: case LDR_GGUF_I32:
	case LDR_GGUF_I64: {
		unsigned int n = vsize[kv->type];

		x = le(kv->val, n);
		/* sign-extend from n bytes */
		s = n == 8 ? (int64_t)x :
			(int64_t)(x << (64 - 8 * n)) >> (64 - 8 * n);
		if (s < 0)
			return ldr_err(-EINVAL, "%s: %s is negative (%lld)",
				       g->path, key, (long long)s);
		x = (uint64_t)s;
		break;
	}
	default:
		return ldr_err(-EINVAL, "%s: %s has value type %u, not an integer",
			       g->path, key, kv->type);
	}
	if (x > max)
		return ldr_err(-EINVAL, "%s: %s is %llu, more than %llu",
			       g->path, key, (unsigned long long)x,
			       (unsigned long long)max);
	*v = x;
	return 0;
}

int ldr_gguf_get_str(const struct ldr_gguf *g, const char *key, char *buf,
		     size_t n)
{
	const struct ldr_gguf_kv *kv = ldr_gguf_find(g, key);
	uint64_t len;

	if (!kv)
		return -ENOENT;
	if (kv->type != LDR_GGUF_STRING)
		return ldr_err(-EINVAL, "%s: %s has value type %u, not a string",
			       g->path, key, kv->type);
	len = le(kv->val, 8);
	if (len >= n || memchr(kv->val + 8, 0, len))
		return ldr_err(-EINVAL, "%s: %s: string of %llu bytes is too long or holds a NUL byte",
			       g->path, key, (unsigned long long)len);
	memcpy(buf, kv->val + 8, len);
	buf[len] = '\0';
	return 0;
}

const struct ldr_gguf_tensor *ldr_gguf_tensor(const struct ldr_gguf *g,
					      const char *name)
{
	uint64_t i;

	for (i = 0; i < g->n_tensors; i++)
		if (str_is(g->t[i].name, name))
			return &g->t[i];
	return NULL;
}
