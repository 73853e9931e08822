/* SPDX-License-Identifier: MIT */
/*
 * kt_logged.h - a kt call's result, with kt_last_error() printed as a TAP
 * comment when it failed, so that a failed ASSERT_EQ(kt_logged(call), 0)
 * says why without calling twice.
 */
#ifndef KT_SELFTESTS_KT_LOGGED_H
#define KT_SELFTESTS_KT_LOGGED_H

#include <stdio.h>

#include <kt/kt.h>

static inline int kt_logged(int ret)
{
	if (ret)
		fprintf(stderr, "# %s\n", kt_last_error());
	return ret;
}

#endif /* KT_SELFTESTS_KT_LOGGED_H */
