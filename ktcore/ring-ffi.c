// SPDX-License-Identifier: MIT
/*
 * ring-ffi.c - exported twins of the inline ring helpers, under the same
 * names (as liburing-ffi does), for callers that cannot use static inline
 * functions: ctypes, cffi, Go, Rust. The header is the only definition.
 */
#define KT_RING_INLINE __attribute__((visibility("default")))

/* the definitions below are their own prototypes */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

#include <kt/kt.h>
