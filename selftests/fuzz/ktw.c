// SPDX-License-Identifier: MIT
/*
 * ktw.c - fuzz the .ktw validator: the input is a whole file image, run
 * through the header, table and padding checks and the blob checks that
 * kt_model_open()/kt verify apply. An input of odd length gets its CRCs
 * recomputed first, so mutations reach the checks behind the checksums.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/crc32c.h"
#include "loader/ktw.h"

#define FUZZ_NAME "ktw"
#include "fuzz.h"

/* Recompute meta_crc (when the regions lie in the image), then header_crc. */
static void reseal(uint8_t *page, const uint8_t *img, size_t size)
{
	struct ktw_header *h = (struct ktw_header *)page;
	uint64_t n = (uint64_t)h->n_layers * h->n_experts;
	uint32_t crc;

	if (h->layers_off <= size && 4ull * h->n_layers <= size - h->layers_off &&
	    h->table_off <= size && n <= (size - h->table_off) / 32) {
		crc = kern_crc32c(0, img + h->layers_off, 4ull * h->n_layers);
		h->meta_crc = kern_crc32c(crc, img + h->table_off, n * 32);
	}
	if (h->header_size >= KTW_HEADER_2_2_BYTES &&
	    h->header_size <= KTW_HEADER_BYTES) {
		h->header_crc = 0;
		crc = kern_crc32c(0, page, h->header_size);
		h->header_crc = crc;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static _Alignas(64) uint8_t page[KTW_HEADER_BYTES];
	const struct ktw_header *h = (const struct ktw_header *)page;
	struct ldr_geom geom;
	uint8_t *img;
	uint64_t i, n;

	/* the header page as the reader has it: a 4 KiB read, zero filled */
	memset(page, 0, sizeof(page));
	memcpy(page, data, size < sizeof(page) ? size : sizeof(page));
	/* an aligned copy, as the reader's buffers are */
	img = malloc(size ? size : 1);
	if (!img)
		return 0;
	memcpy(img, data, size);
	if (size & 1)
		reseal(page, img, size);
	if (ldr_ktw_check_header(h, size, &geom))
		goto out;
	if (ldr_ktw_check_meta(h, (const int32_t *)(img + h->layers_off),
			       (const struct ktw_entry *)(img + h->table_off)))
		goto out;
	if (ldr_ktw_check_pad(h, img + h->layers_off))
		goto out;
	/* the bias section of a 2.3 file: the last region, in the image */
	if ((h->flags & KTW_F_BIAS) && h->file_size <= size)
		ldr_ktw_check_bias(h, img + h->bias_off);
	n = (uint64_t)h->n_layers * h->n_experts;
	for (i = 0; i < n && i < 64; i++) {
		const struct ktw_entry *e =
			(const struct ktw_entry *)(img + h->table_off) + i;
		const uint8_t *blob = img + e->offset;

		if (kern_crc32c(0, blob, h->expert_bytes) != e->crc ||
		    !ldr_ktw_tail_zero(h, blob))
			break;
	}
out:
	free(img);
	return 0;
}
