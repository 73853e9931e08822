/* SPDX-License-Identifier: MIT */
/*
 * error.h - the thread-local message behind kt_last_error(): loader code
 * records why it failed next to returning the -errno.
 */
#ifndef KT_LOADER_ERROR_H
#define KT_LOADER_ERROR_H

/* Record a message; returns @err so that callers can `return ldr_err(...)`. */
int ldr_err(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ldr_err_clear(void);
/*
 * At the end of a public call that began with ldr_err_clear(): a failure
 * that recorded no message (an allocation, typically) gets
 * "@what: strerror(-@err)". Returns @err.
 */
int ldr_err_ensure(int err, const char *what);

#endif /* KT_LOADER_ERROR_H */
