// SPDX-License-Identifier: MIT
/*
 * cmd-stage.c - `kt stage FILE.ktw DIR`: copy a model onto a hugetlbfs
 * mount so that opening it maps memory instead of reading the disk.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kt/kt.h>
#include "tools/cmd.h"

static void progress(void *arg, uint64_t done, uint64_t total)
{
	static int last = -1;
	int pct = total ? (int)(done * 100 / total) : 100;

	if (pct == last)
		return;
	last = pct;
	fprintf(stderr, "\r  staging: %3d%%", pct);
	if (done == total)
		fputc('\n', stderr);
}

static int cmd_stage(int argc, char **argv)
{
	char out[4096];
	struct timespec a, b;
	int ret;

	if (argc != 3) {
		fprintf(argc == 2 && !strcmp(argv[1], "--help") ? stdout : stderr,
			"usage: kt stage FILE.ktw DIR\n\n"
			"DIR must be on a hugetlbfs mount (scripts/setup-hugepages.sh).\n");
		return argc == 2 && !strcmp(argv[1], "--help") ? 0 : 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	ret = kt_ktw_stage(argv[1], argv[2], out, sizeof(out),
			   isatty(STDERR_FILENO) ? progress : NULL, NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (ret) {
		fprintf(stderr, "kt stage: %s\n", kt_last_error());
		return 1;
	}
	printf("staged %s in %.2f s\n", out,
	       (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9);
	return 0;
}

KT_COMMAND("stage", cmd_stage, "copy a .ktw onto hugetlbfs for instant opens");
