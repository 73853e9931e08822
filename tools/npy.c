// SPDX-License-Identifier: MIT
/*
 * npy.c - the .npy reader of kt forward. The header is text from outside:
 * it is parsed from a NUL-terminated copy with every bound checked, and a
 * NUL inside it is an error (the text parser would stop there).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/npy.h"

size_t npy_prefix_len(const uint8_t *pre, size_t n)
{
	uint32_t hlen;

	if (n < 10 || memcmp(pre, "\x93NUMPY", 6))
		return 0;
	if (pre[6] == 1)
		return 10 + (pre[8] | (size_t)pre[9] << 8);
	if ((pre[6] != 2 && pre[6] != 3) || n < 12)
		return 0;
	hlen = pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 |
	       (uint32_t)pre[11] << 24;
	if (hlen > NPY_MAX_HEADER)
		return 0;
	return 12 + (size_t)hlen;
}

static int fail(char *msg, size_t n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* Value text after 'key' or "key" and a colon in the header dict. */
static const char *npy_key(const char *h, const char *key)
{
	char pat[32];
	const char *p;

	snprintf(pat, sizeof(pat), "'%s'", key);
	p = strstr(h, pat);
	if (!p) {
		snprintf(pat, sizeof(pat), "\"%s\"", key);
		p = strstr(h, pat);
	}
	if (!p)
		return NULL;
	p += strlen(pat);
	while (*p == ' ')
		p++;
	if (*p++ != ':')
		return NULL;
	while (*p == ' ')
		p++;
	return p;
}

static int parse_dict(const char *h, struct npy *a, char *msg, size_t n)
{
	const char *p, *q;
	char *end;

	p = npy_key(h, "descr");
	if (!p || (*p != '\'' && *p != '"'))
		return fail(msg, n, "malformed .npy header: no 'descr' string");
	q = strchr(p + 1, *p);
	if (!q || q - p - 1 >= (long)sizeof(a->descr))
		return fail(msg, n, "malformed .npy header: bad 'descr'");
	memcpy(a->descr, p + 1, (size_t)(q - p - 1));
	a->descr[q - p - 1] = '\0';
	p = npy_key(h, "fortran_order");
	if (p && !strncmp(p, "True", 4))
		return fail(msg, n, "only C-order arrays (fortran_order False)");
	if (!p || strncmp(p, "False", 5))
		return fail(msg, n, "malformed .npy header: no 'fortran_order' False or True");
	p = npy_key(h, "shape");
	if (!p || *p++ != '(')
		return fail(msg, n, "malformed .npy header: no 'shape' tuple");
	a->ndim = 0;
	for (;;) {
		unsigned long long v;

		while (*p == ' ' || *p == ',')
			p++;
		if (*p == ')')
			break;
		if (a->ndim == 4)
			return fail(msg, n, "more than 4 dimensions");
		if (*p < '0' || *p > '9')	/* strtoull takes signs, spaces */
			return fail(msg, n, "malformed .npy header: bad 'shape'");
		errno = 0;
		v = strtoull(p, &end, 10);
		if (errno)
			return fail(msg, n, "malformed .npy header: a dimension overflows");
		if (*end == 'L')	/* Python 2 longs */
			end++;
		a->shape[a->ndim++] = v;
		p = end;
	}
	return 0;
}

int npy_parse(const uint8_t *buf, size_t len, struct npy *a, char *msg,
	      size_t msg_len)
{
	size_t pre = npy_prefix_len(buf, len), hoff, hlen;
	uint64_t elems = 1;
	char *h, *nul;
	uint32_t i;
	int ret;

	memset(a, 0, sizeof(*a));
	if (!pre || pre > len)
		return fail(msg, msg_len, "not a .npy file (magic, version or header length)");
	hoff = buf[6] == 1 ? 10 : 12;
	hlen = pre - hoff;
	h = malloc(hlen + 1);
	if (!h)
		return fail(msg, msg_len, "out of memory");
	memcpy(h, buf + hoff, hlen);
	h[hlen] = '\0';
	nul = memchr(h, '\0', hlen);
	if (nul) {
		ret = fail(msg, msg_len, "malformed .npy header: a NUL byte at offset %zu",
			   hoff + (size_t)(nul - h));
		goto out;
	}
	ret = parse_dict(h, a, msg, msg_len);
	if (ret)
		goto out;
	if (!strcmp(a->descr, "<f4") || !strcmp(a->descr, "<i4"))
		a->esz = 4;
	else if (!strcmp(a->descr, "<i8"))
		a->esz = 8;
	else if (!strcmp(a->descr, "<u2") || !strcmp(a->descr, "<i2"))
		a->esz = 2;
	else {
		ret = fail(msg, msg_len, "unsupported dtype '%s' (<f4, <u2 for bf16, <i4, <i8)",
			   a->descr);
		goto out;
	}
	for (i = 0; i < a->ndim; i++)
		if (__builtin_mul_overflow(elems, a->shape[i], &elems))
			break;
	if (i < a->ndim || __builtin_mul_overflow(elems, a->esz, &elems) ||
	    elems > SIZE_MAX - pre) {
		ret = fail(msg, msg_len, "the shape's size overflows");
		goto out;
	}
	a->bytes = (size_t)elems;
	ret = (int)pre;
out:
	free(h);
	return ret;
}

int npy_read(const char *path, struct npy *a)
{
	uint8_t pre[12], *hdr = NULL;
	size_t n, plen;
	char msg[256];
	long fsize;
	int ret;
	FILE *f;

	memset(a, 0, sizeof(*a));
	f = fopen(path, "rb");
	if (!f) {
		ret = -errno;
		fprintf(stderr, "kt forward: %s: %s\n", path, strerror(errno));
		return ret;
	}
	n = fread(pre, 1, sizeof(pre), f);
	plen = npy_prefix_len(pre, n);
	if (!plen) {
		fprintf(stderr, "kt forward: %s: not a .npy file (magic, version or header length)\n",
			path);
		goto err;
	}
	hdr = malloc(plen);
	if (!hdr || fseek(f, 0, SEEK_SET) || fread(hdr, 1, plen, f) != plen) {
		fprintf(stderr, "kt forward: %s: shorter than its header length says\n",
			path);
		goto err;
	}
	ret = npy_parse(hdr, plen, a, msg, sizeof(msg));
	if (ret < 0) {
		fprintf(stderr, "kt forward: %s: %s\n", path, msg);
		goto err;
	}
	if (fseek(f, 0, SEEK_END) || (fsize = ftell(f)) < 0 ||
	    (uint64_t)fsize < plen + a->bytes) {
		fprintf(stderr, "kt forward: %s: shorter than its shape says\n", path);
		goto err;
	}
	a->data = malloc(a->bytes ? a->bytes : 1);
	if (!a->data || fseek(f, (long)plen, SEEK_SET) ||
	    fread(a->data, 1, a->bytes, f) != a->bytes) {
		fprintf(stderr, "kt forward: %s: %s\n", path,
			a->data ? "read failed" : "out of memory");
		goto err;
	}
	free(hdr);
	fclose(f);
	return 0;
err:
	free(hdr);
	npy_free(a);
	fclose(f);
	return -EINVAL;
}

void npy_free(struct npy *a)
{
	free(a->data);
	a->data = NULL;
}
