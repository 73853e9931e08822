/* SPDX-License-Identifier: MIT */
/*
 * no-tsan.h - KT_TEST_NO_TSAN marks a test's reference arithmetic: one
 * thread on its own buffers, where TSan has nothing to look for. Left
 * instrumented, such loops took most of the TSan suites' time. gcc inlines
 * nothing across the attribute, so the helpers a marked loop calls in its
 * body carry it too.
 */
#ifndef KT_SELFTESTS_NO_TSAN_H
#define KT_SELFTESTS_NO_TSAN_H

#define KT_TEST_NO_TSAN __attribute__((no_sanitize_thread))

#endif /* KT_SELFTESTS_NO_TSAN_H */
