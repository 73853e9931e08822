/* SPDX-License-Identifier: MIT */
/*
 * blob-src.h - where a model opened from a .ktw reads an expert it holds
 * no host copy of (masked at load, or a cached model's): the file, kept
 * open, or its mapping; for the GPU upload (ktcore/model.h blob_read).
 */
#ifndef KT_LOADER_BLOB_SRC_H
#define KT_LOADER_BLOB_SRC_H

#include <stdbool.h>
#include <stdint.h>
#include <kt/kt.h>

#include "loader/ktw.h"

struct ldr_blob_src;

/*
 * Keep what reading @k's blobs later needs: its path, offsets and
 * checksums, and an fd (O_DIRECT where the file system takes it), or
 * @map when the file is mapped (a staged copy, KT_MODEL_F_MMAP). @verify:
 * check each blob's CRC32C and zero padding when read.
 * 0; -ENOMEM; -errno of open (kt_last_error() says which file).
 */
int ldr_blob_src_open(const struct ldr_ktw *k, const uint8_t *map,
		      bool verify, struct ldr_blob_src **out);
void ldr_blob_src_close(struct ldr_blob_src *s);

/*
 * Expert (@layer, @expert) of @s into @dst (4 KiB aligned, blob_stride
 * bytes), checked. 0; -EIO a short or failed read, or a checksum that
 * does not match (naming the layer and expert). Logged on @ctx at error
 * level and in kt_last_error().
 */
int ldr_blob_src_read(struct ldr_blob_src *s, const struct kt_ctx *ctx,
		      uint32_t layer, uint32_t expert, uint8_t *dst);

#endif /* KT_LOADER_BLOB_SRC_H */
