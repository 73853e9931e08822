// SPDX-License-Identifier: MIT
/*
 * cmd-inspect.c - `kt inspect FILE.ktw`: geometry, layers and sizes of a
 * .ktw, after validating its header and table; of a checkpoint folder,
 * what kt_model_open() packs it to.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include <kt/kt.h>
#include "tools/cmd.h"
#include "tools/opts.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kt inspect FILE.ktw | FILE.gguf | DIR [--method M [--group-size N]]\n"
		"       kt inspect --load [--block BYTES] [--depth N] [--no-verify]\n"
		"                  [--no-uring] [--no-hugepage] FILE.ktw\n\n"
		"--load opens the model as a server would (kt_model_open) and reports\n"
		"how: bytes, time, throughput, io_uring or pread, O_DIRECT, page size.\n"
		"DIR, a Hugging Face checkpoint folder, is packed as kt_model_open() packs it\n"
		"(--method: int8, int4, bf16, fp8, mxfp4; default its own numbers) and\n"
		"described; a GGUF file is repacked as it is.\n");
}

static bool is_gguf(const char *path);

/*
 * "q4_k (layers 0, 2-3), q6_k (layers 1, 4)": the checkpoint layers of
 * each down type, in the order the types first appear; false when every
 * layer has one type.
 */
static bool print_down_by_layer(struct kt_model *m, uint32_t n_layers,
				const int32_t *ids)
{
	uint32_t i, j, n;
	int q0 = kt_model_layer_down_quant(m, 0), q;
	bool varies = false, seen;

	for (i = 1; i < n_layers; i++)
		varies |= kt_model_layer_down_quant(m, i) != q0;
	if (!varies)
		return false;
	printf("down:          ");
	for (i = 0; i < n_layers; i++) {
		q = kt_model_layer_down_quant(m, i);
		for (j = 0, seen = false; j < i && !seen; j++)
			seen = kt_model_layer_down_quant(m, j) == q;
		if (seen)
			continue;
		for (j = i, n = 0; j < n_layers; j++)
			n += kt_model_layer_down_quant(m, j) == q;
		printf("%s%s (layer%s", i ? ", " : "",
		       kt_quant_name((enum kt_quant)q), n > 1 ? "s" : "");
		/* runs of consecutive layers of this type: "0, 2-3" */
		for (j = i, seen = false; j < n_layers; j++) {
			uint32_t e = j;

			if (kt_model_layer_down_quant(m, j) != q)
				continue;
			while (e + 1 < n_layers &&
			       kt_model_layer_down_quant(m, e + 1) == q &&
			       ids[e + 1] == ids[e] + 1)
				e++;
			printf("%s %d", seen ? "," : "", ids[j]);
			if (e > j)
				printf("-%d", ids[e]);
			seen = true;
			j = e;
		}
		printf(")");
	}
	printf("\n");
	return true;
}

/* A checkpoint folder or a GGUF file, packed at load: what it becomes. */
static void describe_packed(const char *path, const struct kt_model_info *mi,
			    struct kt_model *m, double s)
{
	int32_t l, first = -1, last = -1, *ids;
	bool varies;
	int i;

	ids = calloc(mi->n_layers ? mi->n_layers : 1, sizeof(*ids));
	if (!ids)
		return;
	for (l = 0; l < 1 << 16; l++) {
		i = kt_model_layer_index(m, l);
		if (i >= 0) {
			ids[i] = l;
			if (first < 0)
				first = l;
			last = l;
		}
	}
	printf("%-15s%s (packed at load, nothing written)\n",
	       is_gguf(path) ? "gguf:" : "folder:", path);
	printf("quantization:  %s", kt_quant_name(mi->quant));
	if (mi->group_size)
		printf(" (group %u)", mi->group_size);
	/* a GGUF Q4_K_M file: gate/up one block type, down another, which
	 * may vary by layer (llama.cpp's recipes) */
	varies = false;
	for (i = 1; i < (int)mi->n_layers; i++)
		varies |= kt_model_layer_down_quant(m, (uint32_t)i) !=
			  (int)mi->down_quant;
	if (varies)
		printf(", down by layer");
	else if (mi->down_quant && mi->down_quant != (uint32_t)mi->quant)
		printf(", down %s",
		       kt_quant_name((enum kt_quant)mi->down_quant));
	printf("\n");
	print_down_by_layer(m, mi->n_layers, ids);
	free(ids);
	printf("hidden:        %u\n", mi->hidden);
	printf("intermediate:  %u per expert\n", mi->inter);
	printf("experts:       %u per layer\n", mi->n_experts);
	printf("expert size:   %llu bytes\n", (unsigned long long)mi->expert_bytes);
	printf("layers:        %u MoE layers, %d..%d\n", mi->n_layers, first, last);
	if (mi->act == KT_ACT_SWIGLU_OAI)
		printf("activation:    swiglu_oai (alpha %g, limit %g)\n",
		       mi->act_alpha, mi->act_limit);
	else
		printf("activation:    silu\n");
	printf("biases:        %s\n", mi->bias ? "yes" : "no");
	printf("load: packed %.1f MiB in %.3f s\n",
	       mi->resident_bytes / 1048576.0, s);
}

/* Open the model like a server does and say how the load went. */
static int load(const char *path, struct kt_model_opts *mo, bool folder)
{
	struct kt_ctx_opts co = { .sz = sizeof(co) };
	struct kt_load_stats st;
	struct kt_model_info mi;
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	struct timespec t0, t1;
	double s;
	int ret;

	ret = kt_ctx_create(&co, &ctx);
	if (ret) {
		fprintf(stderr, "kt inspect: context: %s\n", strerror(-ret));
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = kt_model_open(ctx, path, mo, &m);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	kt_load_stats_get(&st);
	if (ret) {
		fprintf(stderr, "kt inspect: %s\n", kt_last_error());
		kt_ctx_destroy(ctx);
		return 1;
	}
	kt_model_get_info(m, &mi);
	s = st.ns / 1e9;
	if (folder)
		describe_packed(path, &mi, m, (double)(t1.tv_sec - t0.tv_sec) +
				(t1.tv_nsec - t0.tv_nsec) / 1e9);
	else if (st.mapped)
		printf("load: mapped from hugetlbfs, %.1f MiB resident, %s checksums in %.3f s\n",
		       mi.resident_bytes / 1048576.0,
		       st.verified ? "verified" : "skipped", s);
	else
		printf("load: %.1f MiB in %.3f s = %.2f GB/s (%s%s, block %u KiB, depth %u, %s, %llu KiB pages)\n",
		       st.bytes / 1048576.0, s, s > 0 ? st.bytes / s / 1e9 : 0.0,
		       st.io_uring ? "io_uring" : "pread",
		       st.direct ? " O_DIRECT" : "", st.block >> 10, st.depth,
		       st.verified ? "CRC32C verified" : "not verified",
		       (unsigned long long)st.page_kb);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	return 0;
}

/* A GGUF file (its magic), which kt_model_open() reads as it is. */
static bool is_gguf(const char *path)
{
	char magic[4];
	FILE *f = fopen(path, "rb");
	bool yes = f && fread(magic, 1, 4, f) == 4 &&
		   !memcmp(magic, "GGUF", 4);

	if (f)
		fclose(f);
	return yes;
}

static int cmd_inspect(int argc, char **argv)
{
	struct kt_model_opts mo = { .sz = sizeof(mo) };
	struct kt_ktw_info in;
	const char *path = NULL;
	bool do_load = false;
	struct stat sb;
	int32_t *ids;
	uint32_t i;
	int a, ret;

	for (a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[a], "--load")) {
			do_load = true;
		} else if (!strcmp(argv[a], "--no-verify")) {
			mo.flags |= KT_MODEL_F_NO_VERIFY;
		} else if (!strcmp(argv[a], "--no-uring")) {
			mo.flags |= KT_MODEL_F_NO_URING;
		} else if (!strcmp(argv[a], "--no-hugepage")) {
			mo.flags |= KT_MODEL_F_NO_HUGEPAGE;
		} else if (!strcmp(argv[a], "--block") && a + 1 < argc) {
			mo.io_block = (uint32_t)strtoul(argv[++a], NULL, 0);
		} else if (!strcmp(argv[a], "--depth") && a + 1 < argc) {
			mo.io_depth = (uint32_t)strtoul(argv[++a], NULL, 0);
		} else if (!strcmp(argv[a], "--method") && a + 1 < argc) {
			enum kt_quant q;

			if (opt_quant(argv[++a], &q)) {
				fprintf(stderr, "kt inspect: unknown --method '%s'\n", argv[a]);
				return 2;
			}
			mo.quant = (int)q;
		} else if (!strcmp(argv[a], "--group-size") && a + 1 < argc) {
			mo.group_size = (uint32_t)strtoul(argv[++a], NULL, 0);
		} else if (argv[a][0] != '-' && !path) {
			path = argv[a];
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (!path) {
		usage(stderr);
		return 2;
	}
	if ((!stat(path, &sb) && S_ISDIR(sb.st_mode)) || is_gguf(path))
		return load(path, &mo, true);
	if (do_load)
		return load(path, &mo, false);
	argv[1] = (char *)path;
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
	if (in.down_quant && in.down_quant != in.quant)
		printf(", down %s", kt_quant_name((enum kt_quant)in.down_quant));
	printf("\nhidden:        %u", in.hidden);
	if (in.hidden_packed && in.hidden_packed != in.hidden)
		printf(" (packed %u)", in.hidden_packed);
	printf("\nintermediate:  %u per expert", in.inter);
	if (in.inter_packed && in.inter_packed != in.inter)
		printf(" (packed %u)", in.inter_packed);
	printf("\n");
	if (in.act == KT_ACT_SWIGLU_OAI)
		printf("activation:    swiglu_oai (alpha %g, limit %g)\n",
		       (double)in.act_alpha, (double)in.act_limit);
	else
		printf("activation:    silu\n");
	printf("biases:        %s\n", in.bias ? "yes" : "no");
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
