/* SPDX-License-Identifier: MIT */
/*
 * json.h - a minimal streaming JSON writer for the one-object-per-line
 * output of the kt subcommands (strings escaped, non-finite numbers null).
 */
#ifndef KT_TOOLS_JSON_H
#define KT_TOOLS_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JW_MAX_DEPTH 8

struct jw {
	FILE *f;
	unsigned int depth;
	unsigned int count[JW_MAX_DEPTH];	/* items written per level */
	char close[JW_MAX_DEPTH];		/* '}' or ']' per level */
};

void jw_begin(struct jw *j, FILE *f);
void jw_end(struct jw *j);
void jw_obj(struct jw *j, const char *key);
void jw_arr(struct jw *j, const char *key);
void jw_close(struct jw *j);
void jw_str(struct jw *j, const char *key, const char *v);
void jw_u64(struct jw *j, const char *key, uint64_t v);
void jw_i64(struct jw *j, const char *key, int64_t v);
void jw_dbl(struct jw *j, const char *key, double v);
void jw_bool(struct jw *j, const char *key, bool v);
void jw_null(struct jw *j, const char *key);

#endif /* KT_TOOLS_JSON_H */
