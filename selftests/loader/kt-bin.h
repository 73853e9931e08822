/* SPDX-License-Identifier: MIT */
/*
 * kt-bin.h - where the loader tests find the kt command: $KT_BIN (make
 * check sets it), else build/kt beside the test (build/selftests/loader/X).
 */
#ifndef KT_SELFTESTS_LOADER_KT_BIN_H
#define KT_SELFTESTS_LOADER_KT_BIN_H

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void kt_bin(char *buf, size_t n)
{
	const char *env = getenv("KT_BIN");
	char self[PATH_MAX];
	ssize_t l;

	if (env) {
		snprintf(buf, n, "%s", env);
		return;
	}
	l = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[l > 0 ? l : 0] = '\0';
	snprintf(buf, n, "%s/../../kt", dirname(self));
}

#endif /* KT_SELFTESTS_LOADER_KT_BIN_H */
