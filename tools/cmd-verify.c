// SPDX-License-Identifier: MIT
/*
 * cmd-verify.c - `kt verify FILE.ktw`: read every blob and check its CRC32C.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <kt/kt.h>
#include "tools/cmd.h"

static int cmd_verify(int argc, char **argv)
{
	struct kt_ktw_info in;
	struct timespec a, b;
	uint64_t bad = 0;
	double s;
	int ret;

	if (argc != 2 || !strcmp(argv[1], "--help")) {
		fprintf(argc == 2 ? stdout : stderr, "usage: kt verify FILE.ktw\n");
		return argc == 2 ? 0 : 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	ret = kt_ktw_verify(argv[1], &bad);
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (ret) {
		fprintf(stderr, "kt verify: %s\n", kt_last_error());
		if (bad)
			fprintf(stderr, "kt verify: %llu blobs with a bad checksum\n",
				(unsigned long long)bad);
		return 1;
	}
	s = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
	if (!kt_ktw_inspect(argv[1], &in, NULL, 0))
		printf("%s: %llu blobs OK, %.1f MiB in %.2f s (%.2f GB/s)\n", argv[1],
		       (unsigned long long)in.n_layers * in.n_experts,
		       in.data_bytes / 1048576.0, s, in.data_bytes / s / 1e9);
	return 0;
}

KT_COMMAND("verify", cmd_verify, "check the checksum of every blob of a .ktw");
