// SPDX-License-Identifier: MIT
/*
 * cmd-place.c - `kt place`: print the GPU placement plan kt_place_plan()
 * makes for a model (a .ktw, or a bare geometry), and the host memory the
 * plan's per-layer masks save.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kt/kt.h>
#include "tools/cmd.h"
#include "tools/opts.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kt place (FILE.ktw | --layers L --experts E)\n"
		"                [--strategy uniform|frequency|front-loading|random]\n"
		"                [--per-layer N | --ratio R | --total N]\n"
		"                [--stats FILE] [--seed S]\n\n"
		"Prints, per layer, the experts the strategy puts on the GPU (the\n"
		"per-layer masks kt_model_opts.layer_masks takes) and, for a .ktw, the\n"
		"host memory they no longer take. frequency needs --stats, a routing\n"
		"statistics file (kt_model_route_save); --total with frequency takes\n"
		"the hottest experts of the whole model, with front-loading the budget\n"
		"filled from layer 0. Documentation/placement.md.\n");
}

/* Experts of one layer as runs "0-3,7". */
static void print_layer(const uint64_t *m, uint32_t E)
{
	uint32_t e = 0, j;
	bool first = true;

	while (e < E) {
		if (!(m[e / 64] >> (e % 64) & 1)) {
			e++;
			continue;
		}
		for (j = e; j + 1 < E && (m[(j + 1) / 64] >> ((j + 1) % 64) & 1);
		     j++)
			;
		printf("%s%u", first ? " " : ",", e);
		if (j > e)
			printf("-%u", j);
		first = false;
		e = j + 1;
	}
	printf("%s\n", first ? " -" : "");
}

static int cmd_place(int argc, char **argv)
{
	struct kt_place_opts o = { .sz = sizeof(o) };
	struct kt_ktw_info in = { 0 };
	const char *path = NULL, *stats = NULL;
	uint64_t *masks = NULL, *counts = NULL, W;
	uint32_t l;
	int a, n, ret = 1;
	char *end;

	for (a = 1; a < argc; a++) {
		const char *v = a + 1 < argc ? argv[a + 1] : NULL;

		if (!strcmp(argv[a], "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[a], "--strategy") && v) {
			n = kt_place_strategy_parse(v);
			if (n < 0)
				goto bad;
			o.strategy = (uint32_t)n;
			a++;
		} else if (!strcmp(argv[a], "--per-layer") && v) {
			if (opt_u32(v, 0, UINT32_MAX, &o.per_layer))
				goto bad;
			a++;
		} else if (!strcmp(argv[a], "--ratio") && v) {
			o.ratio = strtof(v, &end);
			if (*end || !(o.ratio >= 0.0f && o.ratio <= 1.0f))
				goto bad;
			a++;
		} else if (!strcmp(argv[a], "--total") && v) {
			if (opt_u64(v, &o.total))
				goto bad;
			a++;
		} else if (!strcmp(argv[a], "--seed") && v) {
			if (opt_u64(v, &o.seed))
				goto bad;
			a++;
		} else if (!strcmp(argv[a], "--layers") && v) {
			if (opt_u32(v, 1, 1u << 16, &o.n_layers))
				goto bad;
			a++;
		} else if (!strcmp(argv[a], "--experts") && v) {
			if (opt_u32(v, 1, 1u << 16, &o.n_experts))
				goto bad;
			a++;
		} else if (!strcmp(argv[a], "--stats") && v) {
			stats = v;
			a++;
		} else if (argv[a][0] != '-' && !path) {
			path = argv[a];
		} else {
			goto bad;
		}
	}
	if (path) {
		if (kt_ktw_inspect(path, &in, NULL, 0)) {
			fprintf(stderr, "kt place: %s\n", kt_last_error());
			return 1;
		}
		o.n_layers = in.n_layers;
		o.n_experts = in.n_experts;
	}
	if (!o.n_layers || !o.n_experts)
		goto bad;
	W = KT_PLACE_WORDS(o.n_experts);
	masks = calloc((size_t)(W * o.n_layers), 8);
	counts = calloc((size_t)o.n_layers * o.n_experts, 8);
	if (!masks || !counts) {
		fprintf(stderr, "kt place: out of memory\n");
		goto out;
	}
	if (stats) {
		if (kt_route_file_read(stats, o.n_layers, o.n_experts, counts)) {
			fprintf(stderr, "kt place: %s\n", kt_last_error());
			goto out;
		}
		o.counts = counts;
	}
	n = kt_place_plan(&o, masks);
	if (n < 0) {
		fprintf(stderr, "kt place: bad options for %s (%s)\n",
			kt_place_strategy_name((enum kt_place_strategy)o.strategy),
			o.strategy == KT_PLACE_FREQUENCY && !stats ?
			"frequency needs --stats" : strerror(-n));
		goto out;
	}
	printf("strategy: %s, %d of %llu experts on the GPU\n",
	       kt_place_strategy_name((enum kt_place_strategy)o.strategy), n,
	       (unsigned long long)o.n_layers * o.n_experts);
	for (l = 0; l < o.n_layers; l++) {
		uint64_t c = 0, i;

		for (i = 0; i < W; i++)
			c += (uint64_t)__builtin_popcountll(masks[l * W + i]);
		printf("layer %3u: %3llu:", l, (unsigned long long)c);
		print_layer(masks + l * W, o.n_experts);
	}
	if (path)
		printf("host memory: %.1f MiB of %.1f MiB (per-layer masks leave %.1f MiB to the GPU)\n",
		       ((double)o.n_layers * o.n_experts - n) *
		       (double)in.expert_bytes / 1048576.0,
		       (double)o.n_layers * o.n_experts *
		       (double)in.expert_bytes / 1048576.0,
		       (double)n * (double)in.expert_bytes / 1048576.0);
	ret = 0;
out:
	free(masks);
	free(counts);
	return ret;
bad:
	usage(stderr);
	return 2;
}

KT_COMMAND("place", cmd_place, "print a per-layer GPU placement plan");
