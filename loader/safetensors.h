/* SPDX-License-Identifier: MIT */
/*
 * safetensors.h - read-only access to Hugging Face safetensors files and
 * checkpoints (one file, or shards with model.safetensors.index.json).
 */
#ifndef KT_LOADER_SAFETENSORS_H
#define KT_LOADER_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define LDR_ST_MAX_DIMS		8
#define LDR_ST_MAX_HEADER	(100u << 20)	/* the format's own limit */

enum ldr_st_dtype {
	LDR_ST_UNKNOWN = 0,
	LDR_ST_BOOL, LDR_ST_U8, LDR_ST_I8, LDR_ST_F8_E5M2, LDR_ST_F8_E4M3,
	LDR_ST_I16, LDR_ST_U16, LDR_ST_F16, LDR_ST_BF16,
	LDR_ST_I32, LDR_ST_U32, LDR_ST_F32,
	LDR_ST_F64, LDR_ST_I64, LDR_ST_U64,
};

struct ldr_st_file;

struct ldr_st_tensor {
	const char *name;
	enum ldr_st_dtype dtype;
	char dtype_name[16];
	uint32_t ndim;
	uint64_t shape[LDR_ST_MAX_DIMS];
	uint64_t off;		/* from the start of the file */
	uint64_t len;
	const uint8_t *data;	/* in the file's mapping */
	const struct ldr_st_file *file;
};

struct ldr_st_file {
	char *path;
	int fd;
	uint64_t size;
	uint8_t *map;
	struct ldr_st_tensor *tensors;
	size_t n_tensors;
	char *names;		/* storage of the tensor names */
};

/* Bytes of one element, 0 for LDR_ST_UNKNOWN. */
unsigned int ldr_st_dtype_size(enum ldr_st_dtype t);

/*
 * Open and validate one file: header length, JSON, dtype, shape and
 * data_offsets of every tensor against the file size, no overlaps.
 */
int ldr_st_open(const char *path, struct ldr_st_file **out);
void ldr_st_close(struct ldr_st_file *f);
/*
 * The validation of ldr_st_open() on @f->map of @f->size bytes (@f->path
 * names it): fills tensors, n_tensors and names; ldr_st_close() frees them
 * (with fd -1 and map NULL it touches nothing else).
 */
int ldr_st_parse(struct ldr_st_file *f);

struct ldr_ckpt {
	char *dir;
	char *source;		/* index file or the single shard, for errors */
	struct ldr_st_file **files;
	size_t n_files;
	const struct ldr_st_tensor **by_name;	/* sorted */
	size_t n_tensors;
};

/*
 * Open a checkpoint folder: model.safetensors.index.json when present,
 * else model.safetensors, else every *.safetensors of the folder.
 */
int ldr_ckpt_open(const char *dir, struct ldr_ckpt **out);
void ldr_ckpt_close(struct ldr_ckpt *c);
const struct ldr_st_tensor *ldr_ckpt_find(const struct ldr_ckpt *c,
					  const char *name);
/* Drop the file pages of @t from the page cache (converted already). */
void ldr_st_tensor_done(const struct ldr_st_tensor *t);

#endif /* KT_LOADER_SAFETENSORS_H */
