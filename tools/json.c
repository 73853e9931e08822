// SPDX-License-Identifier: MIT
/*
 * json.c - the JSON writer: keys are given inside objects and NULL inside
 * arrays; the writer places the commas. One jw_begin()..jw_end() is one
 * line of output.
 */
#include <math.h>

#include "tools/json.h"

static void jw_quote(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	fputc('"', f);
	for (; *p; p++) {
		switch (*p) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		case '\r':
			fputs("\\r", f);
			break;
		default:
			/* other control bytes and DEL have no short escape */
			if (*p < 0x20 || *p == 0x7f)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

/* The comma and key before a value at the current level. */
static void jw_key(struct jw *j, const char *key)
{
	if (j->count[j->depth]++)
		fputc(',', j->f);
	if (key) {
		jw_quote(j->f, key);
		fputc(':', j->f);
	}
}

/* Nesting deeper than JW_MAX_DEPTH is a caller bug; the tools use 3. */
static void jw_open(struct jw *j, const char *key, char open, char close)
{
	jw_key(j, key);
	fputc(open, j->f);
	if (j->depth + 1 < JW_MAX_DEPTH)
		j->depth++;
	j->count[j->depth] = 0;
	j->close[j->depth] = close;
}

/**
 * jw_begin() - start a top-level object on a new line.
 * @j: writer state, set up here.
 * @f: stream.
 */
void jw_begin(struct jw *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->count[0] = 0;
	jw_open(j, NULL, '{', '}');
}

/**
 * jw_end() - close every open level and end the line.
 * @j: writer.
 */
void jw_end(struct jw *j)
{
	while (j->depth > 0)
		jw_close(j);
	fputc('\n', j->f);
	fflush(j->f);
}

/* jw_obj() / jw_arr() open a nested object / array; jw_close() ends it. */
void jw_obj(struct jw *j, const char *key)
{
	jw_open(j, key, '{', '}');
}

void jw_arr(struct jw *j, const char *key)
{
	jw_open(j, key, '[', ']');
}

void jw_close(struct jw *j)
{
	if (!j->depth)
		return;
	fputc(j->close[j->depth], j->f);
	j->depth--;
}

void jw_str(struct jw *j, const char *key, const char *v)
{
	jw_key(j, key);
	if (v)
		jw_quote(j->f, v);
	else
		fputs("null", j->f);
}

void jw_u64(struct jw *j, const char *key, uint64_t v)
{
	jw_key(j, key);
	fprintf(j->f, "%llu", (unsigned long long)v);
}

void jw_i64(struct jw *j, const char *key, int64_t v)
{
	jw_key(j, key);
	fprintf(j->f, "%lld", (long long)v);
}

/* JSON has no NaN or infinity: they become null. */
void jw_dbl(struct jw *j, const char *key, double v)
{
	jw_key(j, key);
	if (isfinite(v))
		fprintf(j->f, "%.6g", v);
	else
		fputs("null", j->f);
}

void jw_bool(struct jw *j, const char *key, bool v)
{
	jw_key(j, key);
	fputs(v ? "true" : "false", j->f);
}

void jw_null(struct jw *j, const char *key)
{
	jw_key(j, key);
	fputs("null", j->f);
}
