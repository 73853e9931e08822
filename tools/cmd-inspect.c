// SPDX-License-Identifier: MIT
/*
 * cmd-inspect.c - `kt inspect FILE.ktw`: geometry, layers and sizes of a
 * .ktw, after validating its header and table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kt/kt.h>
#include "tools/cmd.h"

static int cmd_inspect(int argc, char **argv)
{
	struct kt_ktw_info in;
	int32_t *ids;
	uint32_t i;
	int ret;

	if (argc != 2 || !strcmp(argv[1], "--help")) {
		fprintf(argc == 2 ? stdout : stderr, "usage: kt inspect FILE.ktw\n");
		return argc == 2 ? 0 : 2;
	}
	ret = kt_ktw_inspect(argv[1], &in, NULL, 0);
	if (ret) {
		fprintf(stderr, "kt inspect: %s\n", kt_last_error());
		return 1;
	}
	ids = calloc(in.n_layers, sizeof(*ids));
	if (!ids || kt_ktw_inspect(argv[1], &in, ids, in.n_layers)) {
		fprintf(stderr, "kt inspect: %s\n", kt_last_error());
		free(ids);
		return 1;
	}
	printf("file:          %s%s\n", argv[1], in.hugetlbfs ? " (staged on hugetlbfs)" : "");
	printf("format:        ktw %u.%u\n", in.version_major, in.version_minor);
	printf("source:        %s\n", in.arch[0] ? in.arch : "?");
	printf("quantization:  %s", kt_quant_name((enum kt_quant)in.quant));
	if (in.group_size)
		printf(" (group %u)", in.group_size);
	printf("\nhidden:        %u\n", in.hidden);
	printf("intermediate:  %u per expert\n", in.inter);
	printf("experts:       %u per layer%s", in.n_experts, in.top_k ? "" : "\n");
	if (in.top_k)
		printf(", top-%u\n", in.top_k);
	printf("expert size:   %llu bytes\n", (unsigned long long)in.expert_bytes);
	printf("data:          %.1f MiB in %llu blobs\n", in.data_bytes / 1048576.0,
	       (unsigned long long)in.n_layers * in.n_experts);
	printf("file size:     %llu bytes\n", (unsigned long long)in.file_size);
	printf("layers:        %u:", in.n_layers);
	for (i = 0; i < in.n_layers; i++) {
		/* print runs as A-B */
		uint32_t j = i;

		while (j + 1 < in.n_layers && ids[j + 1] == ids[j] + 1)
			j++;
		if (j > i)
			printf(" %d-%d", ids[i], ids[j]);
		else
			printf(" %d", ids[i]);
		i = j;
	}
	printf("\n");
	free(ids);
	return 0;
}

KT_COMMAND("inspect", cmd_inspect, "show the geometry, layers and sizes of a .ktw");
