// SPDX-License-Identifier: MIT
/*
 * error.c - kt_last_error(): one message per thread, written where a loader
 * function fails, read by the caller that prints it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ktcore/core.h"
#include "loader/error.h"

static __thread char last_error[512];

int ldr_err(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return err;
}

void ldr_err_clear(void)
{
	last_error[0] = '\0';
}

int ldr_err_ensure(int err, const char *what)
{
	if (err < 0 && !last_error[0])
		snprintf(last_error, sizeof(last_error), "%s: %s", what,
			 strerror(-err));
	return err;
}

KT_EXPORT const char *kt_last_error(void)
{
	return last_error;
}
