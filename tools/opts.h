/* SPDX-License-Identifier: MIT */
/*
 * opts.h - parsing of the option values the kt subcommands share: counts,
 * comma lists, sizes with K/M/G suffixes, ISA and quantization names.
 */
#ifndef KT_TOOLS_OPTS_H
#define KT_TOOLS_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include <kt/kt.h>

int opt_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out);
int opt_u64(const char *s, uint64_t *out);
int opt_u32_list(const char *s, uint32_t min, uint32_t max, uint32_t *out,
		 unsigned int cap);
int opt_size(const char *s, uint64_t *out);
int opt_isa(const char *s, enum kt_isa *out);
int opt_quant(const char *s, enum kt_quant *out);

#endif /* KT_TOOLS_OPTS_H */
