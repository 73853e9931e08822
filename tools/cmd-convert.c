// SPDX-License-Identifier: MIT
/*
 * cmd-convert.c - `kt convert`: a Hugging Face MoE checkpoint to a .ktw,
 * with a progress bar on a terminal; Ctrl-C leaves no output behind.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kt/kt.h>
#include "tools/cmd.h"

static volatile sig_atomic_t convert_cancel;

static void on_signal(int sig)
{
	(void)sig;
	convert_cancel = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct bar {
	double t0;
	double last;
};

static void progress(void *arg, uint64_t done, uint64_t total)
{
	struct bar *b = arg;
	double t = now_s();
	int i, w = 40, fill = total ? (int)(done * (uint64_t)w / total) : w;

	if (done != total && t - b->last < 0.1)
		return;
	b->last = t;
	fprintf(stderr, "\r  [");
	for (i = 0; i < w; i++)
		fputc(i < fill ? '#' : '.', stderr);
	fprintf(stderr, "] %llu/%llu experts  %.0fs", (unsigned long long)done,
		(unsigned long long)total, t - b->t0);
	if (done == total)
		fputc('\n', stderr);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kt convert --input DIR --output FILE.ktw [--method int8|int4|bf16|fp8|mxfp4]\n"
		"                  [--group-size N] [--layers A-B] [--threads N]\n"
		"       kt convert --input FILE.gguf --output FILE.ktw [--layers A-B]\n\n"
		"Converts the routed experts of a Hugging Face checkpoint (config.json and\n"
		"*.safetensors; BF16, F16, F32 or FP8 E4M3 with block scales), or of a\n"
		"GGUF file, whose blocks are kept (no --method). Without --method a folder\n"
		"keeps its own numbers: FP8 -> fp8, compressed-tensors INT4 -> int4, else bf16.\n"
		"  --group-size N   INT4 group along K: 32, 64 or 128 (default 128)\n"
		"  --layers A-B     checkpoint layers A to B inclusive (A, A-, -B work too)\n"
		"  --threads N      packing threads (default: online CPUs)\n");
}

static int parse_layers(const char *s, int32_t *a, int32_t *b)
{
	char *end;
	long v;

	*a = 0;
	*b = -1;
	if (*s != '-') {
		errno = 0;
		v = strtol(s, &end, 10);
		if (errno || end == s || v < 0 || v > INT32_MAX)
			return -1;
		*a = (int32_t)v;
		s = end;
		if (!*s) {
			*b = *a;
			return 0;
		}
	}
	if (*s++ != '-')
		return -1;
	if (!*s)
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < *a || v > INT32_MAX)
		return -1;
	*b = (int32_t)v;
	return 0;
}

static int cmd_convert(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "input", required_argument, NULL, 'i' },
		{ "output", required_argument, NULL, 'o' },
		{ "method", required_argument, NULL, 'm' },
		{ "group-size", required_argument, NULL, 'g' },
		{ "layers", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct kt_convert_opts o = { .sz = sizeof(o), .layer_last = -1 };
	struct sigaction sa = { .sa_handler = on_signal };
	struct bar bar = { now_s(), 0 };
	const char *method = NULL;
	int c, ret;

	while ((c = getopt_long(argc, argv, "i:o:m:g:l:t:h", lo, NULL)) != -1) {
		switch (c) {
		case 'i': o.input = optarg; break;
		case 'o': o.output = optarg; break;
		case 'm': method = optarg; break;
		case 'g': o.group_size = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 't': o.threads = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'l':
			if (parse_layers(optarg, &o.layer_first, &o.layer_last)) {
				fprintf(stderr, "kt convert: bad --layers '%s' (A-B)\n",
					optarg);
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!o.input || !o.output || optind != argc) {
		usage(stderr);
		return 2;
	}
	/* none: a GGUF input keeps its blocks; a folder its own numbers */
	if (!method)
		o.quant = 0;
	else if (!strcmp(method, "int8"))
		o.quant = KT_QUANT_INT8;
	else if (!strcmp(method, "int4"))
		o.quant = KT_QUANT_INT4;
	else if (!strcmp(method, "bf16"))
		o.quant = KT_QUANT_BF16;
	else if (!strcmp(method, "fp8"))
		o.quant = KT_QUANT_FP8;
	else if (!strcmp(method, "mxfp4"))
		o.quant = KT_QUANT_MXFP4;
	else {
		fprintf(stderr, "kt convert: unknown --method '%s' (int8, int4, bf16, fp8 or mxfp4)\n",
			method);
		return 2;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	o.cancel = &convert_cancel;
	if (isatty(STDERR_FILENO)) {
		o.progress = progress;
		o.progress_arg = &bar;
	}
	ret = kt_convert(&o);
	if (ret) {
		if (o.progress)
			fputc('\n', stderr);
		fprintf(stderr, "kt convert: %s\n",
			*kt_last_error() ? kt_last_error() : strerror(-ret));
		return 1;
	}
	printf("wrote %s in %.1f s\n", o.output, now_s() - bar.t0);
	return 0;
}

KT_COMMAND("convert", cmd_convert,
	   "convert a Hugging Face MoE checkpoint to a .ktw file");
