// SPDX-License-Identifier: MIT
/*
 * log.c - kt's only way to speak: a caller's callback, or stderr, filtered
 * by the context's level (kt_ctx_opts.log_level, by default the KT_LOG
 * level: error, warn, info, debug; default warn).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ktcore/core.h"
#include "ktcore/ctx.h"

static int log_level_from_env(void)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	const char *s = getenv("KT_LOG");
	unsigned int i;

	if (!s || !*s)
		return KT_LOG_WARN;
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcasecmp(s, names[i]))
			return (int)i;
	if (s[0] >= '0' && s[0] <= '3' && !s[1])
		return s[0] - '0';
	return KT_LOG_WARN;
}

int core_log_level(void)
{
	static int level = -1;

	if (level < 0)
		level = log_level_from_env();
	return level;
}

static void log_emit(const struct kt_ctx *ctx, enum kt_log_level level,
		     const char *fmt, va_list ap)
{
	static const char *const tags[] = { "error", "warning", "info",
					    "debug" };
	int max = ctx ? ctx->log_level : core_log_level();
	char msg[512];

	if ((int)level > max)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (ctx && ctx->log_fn) {
		ctx->log_fn(ctx->log_arg, level, msg);
		return;
	}
	fprintf(stderr, "kt: %s: %s\n", tags[level], msg);
}

void core_log(const struct kt_ctx *ctx, enum kt_log_level level,
	      const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(ctx, level, fmt, ap);
	va_end(ap);
}

void core_misuse(const struct kt_ctx *ctx, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
#ifdef KT_DEBUG
	{	/* one write: the message is not torn by other threads */
		char msg[512];

		(void)ctx;
		vsnprintf(msg, sizeof(msg), fmt, ap);
		fprintf(stderr, "kt: misuse: %s\n", msg);
		abort();
	}
#else
	log_emit(ctx, KT_LOG_ERROR, fmt, ap);
#endif
	va_end(ap);
}

void core_logv_global(enum kt_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(NULL, level, fmt, ap);
	va_end(ap);
}
