/* SPDX-License-Identifier: MIT */
/*
 * gguf.h - read-only access to GGUF (v2, v3) files: a validating parser
 * of the header, metadata and tensor table over a mapped file image.
 */
#ifndef KT_LOADER_GGUF_H
#define KT_LOADER_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LDR_GGUF_MAX_DIMS	4
#define LDR_GGUF_MAX_TENSORS	(1u << 20)	/* ggml's own files: < 10^4 */
#define LDR_GGUF_MAX_KV		(1u << 20)
#define LDR_GGUF_MAX_KEY	65535		/* the spec's limit */
#define LDR_GGUF_MAX_NAME	256		/* ggml: 64 */

/* Metadata value types of the spec. */
enum ldr_gguf_vtype {
	LDR_GGUF_U8 = 0, LDR_GGUF_I8, LDR_GGUF_U16, LDR_GGUF_I16,
	LDR_GGUF_U32, LDR_GGUF_I32, LDR_GGUF_F32, LDR_GGUF_BOOL,
	LDR_GGUF_STRING, LDR_GGUF_ARRAY, LDR_GGUF_U64, LDR_GGUF_I64,
	LDR_GGUF_F64,
	LDR_GGUF_VTYPE_COUNT,
};

/* The ggml tensor types kt reads (the table in gguf.c knows them all). */
enum ldr_gguf_ttype {
	LDR_GGML_F32 = 0,
	LDR_GGML_F16 = 1,
	LDR_GGML_Q4_0 = 2,
	LDR_GGML_Q8_0 = 8,
	LDR_GGML_Q4_K = 12,
	LDR_GGML_Q5_K = 13,
	LDR_GGML_Q6_K = 14,
	LDR_GGML_BF16 = 30,
	LDR_GGML_MXFP4 = 39,
};

/* A string of the file: not NUL-terminated. */
struct ldr_gguf_str {
	const char *p;
	uint64_t len;
};

struct ldr_gguf_kv {
	struct ldr_gguf_str key;
	uint32_t type;		/* enum ldr_gguf_vtype */
	uint32_t arr_type;	/* arrays: element type */
	uint64_t arr_n;		/* arrays: element count */
	const uint8_t *val;	/* the value (arrays: the first element) */
};

struct ldr_gguf_tensor {
	struct ldr_gguf_str name;
	uint32_t n_dims;
	uint64_t ne[LDR_GGUF_MAX_DIMS];	/* ne[0] innermost; unused = 1 */
	uint32_t type;			/* enum ldr_gguf_ttype (ggml_type) */
	uint64_t offset;		/* from the start of the data region */
	uint64_t nbytes;
	const uint8_t *data;		/* in the image */
};

struct ldr_gguf {
	const char *path;		/* for messages */
	const uint8_t *base;		/* the image */
	uint64_t size;
	uint32_t version;
	uint32_t alignment;
	uint64_t data_off;		/* start of the tensor data */
	uint64_t n_kv, n_tensors;
	struct ldr_gguf_kv *kv;
	struct ldr_gguf_tensor *t;
	/* ldr_gguf_open() only */
	int fd;
	void *map;
};

/*
 * ldr_gguf_parse() - validate the image @g->base of @g->size bytes
 *	(@g->path names it) and fill the kv and tensor tables: magic,
 *	version 2 or 3, counts, every string and array length, value type,
 *	general.alignment, tensor dims, types and sizes (no overflow), data
 *	offsets aligned, inside the image and not overlapping.
 * Return: 0; -EINVAL with kt_last_error() naming the field; -ENOMEM.
 *	ldr_gguf_release() frees the tables either way.
 */
int ldr_gguf_parse(struct ldr_gguf *g);
void ldr_gguf_release(struct ldr_gguf *g);

/* mmap @path read-only and parse it; ldr_gguf_close() undoes both. */
int ldr_gguf_open(const char *path, struct ldr_gguf **out);
void ldr_gguf_close(struct ldr_gguf *g);

/* True when the first bytes of @path are the GGUF magic. */
bool ldr_gguf_is_gguf(const char *path);

const struct ldr_gguf_kv *ldr_gguf_find(const struct ldr_gguf *g,
					const char *key);
/*
 * An integer value of @key (any integer type) in [0, @max]: 0; -ENOENT
 * when absent (no message); -EINVAL wrong type or range (message).
 */
int ldr_gguf_get_uint(const struct ldr_gguf *g, const char *key,
		      uint64_t max, uint64_t *v);
/* A string value into @buf (NUL-terminated): 0, -ENOENT, -EINVAL. */
int ldr_gguf_get_str(const struct ldr_gguf *g, const char *key, char *buf,
		     size_t n);
const struct ldr_gguf_tensor *ldr_gguf_tensor(const struct ldr_gguf *g,
					      const char *name);

/*
 * ggml type @type: elements per block, bytes per block and name; false for
 * an id that is not (or no longer) a ggml type.
 */
bool ldr_gguf_type_info(uint32_t type, uint32_t *blck, uint32_t *bytes,
			const char **name);
const char *ldr_gguf_type_name(uint32_t type);

#endif /* KT_LOADER_GGUF_H */
