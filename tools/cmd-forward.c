// SPDX-License-Identifier: MIT
/*
 * cmd-forward.c - `kt forward`: replay one MoE layer of a .ktw from NumPy
 * files (.npy v1/v2/v3, C order) through the public API, write y as f32.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kt/kt.h>
#include "tools/cmd.h"
#include "tools/npy.h"
#include "tools/opts.h"

/* Version 1.0, '<f4', C order; header padded so data starts 64-aligned. */
static int npy_write_f32(const char *path, const float *y, uint64_t rows,
			 uint64_t cols)
{
	char hdr[128], tmp[4096];
	int n, pad, ret = 0;
	FILE *f;

	n = snprintf(hdr, sizeof(hdr),
		     "{'descr': '<f4', 'fortran_order': False, 'shape': (%llu, %llu), }",
		     (unsigned long long)rows, (unsigned long long)cols);
	pad = 64 - (10 + n + 1) % 64;
	if (pad == 64)
		pad = 0;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "wb");
	if (!f) {
		fprintf(stderr, "kt forward: %s: %s\n", tmp, strerror(errno));
		return -errno;
	}
	fwrite("\x93NUMPY\x01\x00", 1, 8, f);
	fputc((n + pad + 1) & 0xff, f);
	fputc((n + pad + 1) >> 8, f);
	fwrite(hdr, 1, (size_t)n, f);
	while (pad--)
		fputc(' ', f);
	fputc('\n', f);
	if (fwrite(y, sizeof(float), rows * cols, f) != rows * cols)
		ret = -EIO;
	if (fclose(f))
		ret = -EIO;
	if (!ret && rename(tmp, path))
		ret = -errno;
	if (ret) {
		fprintf(stderr, "kt forward: %s: write failed\n", path);
		unlink(tmp);
	}
	return ret;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kt forward --model FILE.ktw|FILE.gguf|DIR --layer L --input X.npy\n"
		"                  --ids IDS.npy --weights W.npy --output Y.npy [--threads N]\n"
		"                  [--no-verify] [--budget SIZE] [--method M [--group-size N]]\n\n"
		"Runs one MoE layer: x [T, H] f32 or bf16 (<u2); ids [T, k] int32/int64;\n"
		"w [T, k] f32; writes y [T, H] f32. L is the checkpoint's layer number.\n"
		"DIR is a Hugging Face checkpoint folder, packed at load to --method\n"
		"(int8, int4, bf16, fp8, mxfp4; default: the checkpoint's own numbers).\n");
}

static int cmd_forward(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "layer", required_argument, NULL, 'l' },
		{ "input", required_argument, NULL, 'x' },
		{ "ids", required_argument, NULL, 'i' },
		{ "weights", required_argument, NULL, 'w' },
		{ "output", required_argument, NULL, 'o' },
		{ "threads", required_argument, NULL, 't' },
		{ "no-verify", no_argument, NULL, 'n' },
		{ "budget", required_argument, NULL, 'b' },
		{ "method", required_argument, NULL, 'M' },
		{ "group-size", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *model = NULL, *xp = NULL, *idp = NULL, *wp = NULL, *yp = NULL;
	struct kt_ctx_opts co = { .sz = sizeof(co) };
	struct kt_model_opts mo = { .sz = sizeof(mo) };
	struct npy x = { 0 }, ids = { 0 }, w = { 0 };
	struct kt_model_info info;
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	long layer = -1;
	uint64_t T, H, K, t0;
	int idx, c, ret = 1;
	float *y = NULL;
	char *end;

	while ((c = getopt_long(argc, argv, "m:l:x:i:w:o:t:nb:M:g:h", lo, NULL)) != -1) {
		switch (c) {
		case 'm': model = optarg; break;
		case 'l':
			layer = strtol(optarg, &end, 10);
			if (*end || layer < 0) {
				fprintf(stderr, "kt forward: bad --layer '%s'\n", optarg);
				return 2;
			}
			break;
		case 'b':
			/* below the model's size: the expert cache */
			if (opt_size(optarg, &mo.budget)) {
				fprintf(stderr, "kt forward: bad --budget '%s'\n", optarg);
				return 2;
			}
			break;
		case 'x': xp = optarg; break;
		case 'i': idp = optarg; break;
		case 'w': wp = optarg; break;
		case 'o': yp = optarg; break;
		case 't': co.threads = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'n': mo.flags |= KT_MODEL_F_NO_VERIFY; break;
		case 'M': {
			enum kt_quant q;

			if (opt_quant(optarg, &q)) {
				fprintf(stderr, "kt forward: unknown --method '%s'\n", optarg);
				return 2;
			}
			mo.quant = (int)q;
			break;
		}
		case 'g':
			if (opt_u32(optarg, 1, 1u << 20, &mo.group_size)) {
				fprintf(stderr, "kt forward: bad --group-size '%s'\n", optarg);
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!model || layer < 0 || !xp || !idp || !wp || !yp || optind != argc) {
		usage(stderr);
		return 2;
	}
	/* each check names the file (and field) that is wrong: x against
	 * the model, then ids against x, then weights against ids */
	if (npy_read(xp, &x) || npy_read(idp, &ids) || npy_read(wp, &w))
		goto out;
	if (x.ndim != 2 || (strcmp(x.descr, "<f4") && strcmp(x.descr, "<u2"))) {
		fprintf(stderr, "kt forward: %s: x must be [T, H] <f4 or <u2 (bf16)\n", xp);
		goto out;
	}
	T = x.shape[0];
	H = x.shape[1];
	ret = kt_ctx_create(&co, &ctx);
	if (ret) {
		fprintf(stderr, "kt forward: context: %s\n", strerror(-ret));
		ret = 1;
		goto out;
	}
	ret = kt_model_open(ctx, model, &mo, &m);
	if (ret) {
		fprintf(stderr, "kt forward: %s\n", *kt_last_error() ?
			kt_last_error() : strerror(-ret));
		ret = 1;
		goto out;
	}
	ret = 1;
	kt_model_get_info(m, &info);
	if (H != info.hidden) {
		fprintf(stderr, "kt forward: %s: x has %llu columns, the hidden size of %s is %u\n",
			xp, (unsigned long long)H, model, info.hidden);
		goto out;
	}
	if (ids.ndim != 2 ||
	    (strcmp(ids.descr, "<i4") && strcmp(ids.descr, "<i8"))) {
		fprintf(stderr, "kt forward: %s: ids must be [T, k] <i4 or <i8\n",
			idp);
		goto out;
	}
	if (ids.shape[0] != T) {
		fprintf(stderr, "kt forward: %s: ids has %llu rows, x (%s) has %llu\n",
			idp, (unsigned long long)ids.shape[0], xp,
			(unsigned long long)T);
		goto out;
	}
	K = ids.shape[1];
	if (!K || K > KT_MOE_MAX_TOPK) {
		fprintf(stderr, "kt forward: %s: ids has %llu columns: top-k must be in 1..%d\n",
			idp, (unsigned long long)K, KT_MOE_MAX_TOPK);
		goto out;
	}
	if (w.ndim != 2 || w.shape[0] != T || w.shape[1] != K ||
	    strcmp(w.descr, "<f4")) {
		fprintf(stderr, "kt forward: %s: weights must be [%llu, %llu] <f4 (the shape of ids)\n",
			wp, (unsigned long long)T, (unsigned long long)K);
		goto out;
	}
	idx = kt_model_layer_index(m, (int32_t)layer);
	if (idx < 0) {
		fprintf(stderr, "kt forward: layer %ld is not a MoE layer of %s\n",
			layer, model);
		goto out;
	}
	y = calloc(T * H + 1, sizeof(float));
	if (!y) {
		fprintf(stderr, "kt forward: out of memory\n");
		goto out;
	}
	for (t0 = 0; t0 < T; t0 += KT_MOE_MAX_TOKENS) {
		uint64_t n = T - t0 < KT_MOE_MAX_TOKENS ? T - t0 : KT_MOE_MAX_TOKENS;
		size_t xsz = strcmp(x.descr, "<f4") ? 2 : 4;
		size_t isz = strcmp(ids.descr, "<i4") ? 8 : 4;
		struct kt_moe_args a = {
			.x = (const uint8_t *)x.data + t0 * H * xsz,
			.ids = (const uint8_t *)ids.data + t0 * K * isz,
			.w = (const float *)w.data + t0 * K,
			.y = y + t0 * H,
			.tokens = (uint32_t)n,
			.top_k = (uint32_t)K,
			.layer = (uint32_t)idx,
			.x_dtype = xsz == 2 ? KT_DTYPE_BF16 : KT_DTYPE_F32,
			.ids_dtype = isz == 8 ? KT_DTYPE_I64 : KT_DTYPE_I32,
			.y_dtype = KT_DTYPE_F32,
		};

		ret = kt_moe_forward(ctx, m, &a);
		if (ret) {
			fprintf(stderr, "kt forward: MoE op failed: %s\n",
				strerror(-ret));
			ret = 1;
			goto out;
		}
	}
	ret = npy_write_f32(yp, y, T, H) ? 1 : 0;
out:
	free(y);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	npy_free(&x);
	npy_free(&ids);
	npy_free(&w);
	return ret;
}

KT_COMMAND("forward", cmd_forward,
	   "replay one MoE layer of a .ktw from NumPy files");
