/* SPDX-License-Identifier: MIT */
/*
 * route-format.h - the routing statistics file (layout: Documentation/
 * cache.md) and its check on bytes in memory, which the reader and the
 * fuzzer share.
 */
#ifndef KT_LOADER_ROUTE_FORMAT_H
#define KT_LOADER_ROUTE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define LDR_ROUTE_MAGIC	"KTROUTE\n"
#define LDR_ROUTE_MAJOR	1
#define LDR_ROUTE_HDR	32u

struct ldr_route_hdr {
	char magic[8];
	uint16_t major;
	uint16_t minor;
	uint32_t header_size;	/* LDR_ROUTE_HDR */
	uint32_t n_layers;
	uint32_t n_experts;
	uint64_t reserved;	/* 0 */
};

_Static_assert(sizeof(struct ldr_route_hdr) == LDR_ROUTE_HDR,
	       "route header size");

/* Bytes of a file of @n counters: header, counters, CRC32C, padding. */
static inline uint64_t ldr_route_file_size(uint64_t n)
{
	return LDR_ROUTE_HDR + 8 * n + 8;
}

/*
 * Check a file of @file_size bytes, whose first @len bytes (at least the
 * header, all of them when the size is right) are at @buf, against the
 * caller's geometry @nl x @ne; then copy its counters into @counts (nl x
 * ne words, untouched on failure). @name prefixes the messages.
 * Return: 0; -EINVAL naming the field that is wrong.
 */
int ldr_route_parse(const char *name, const void *buf, size_t len,
		    uint64_t file_size, uint32_t nl, uint32_t ne,
		    uint64_t *counts);

#endif /* KT_LOADER_ROUTE_FORMAT_H */
