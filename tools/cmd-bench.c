// SPDX-License-Identifier: MIT
/*
 * cmd-bench.c - `kt bench`: time the MoE op on synthetic weights for model
 * presets or custom dimensions, against the machine's measured roofline;
 * or measure the limits alone (--limits), or the ring's round trip
 * (--op nop). Documentation/bench.md explains the method.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kt/kt.h>

#include "tools/bench.h"
#include "tools/cmd.h"
#include "tools/opts.h"
#include "tools/stats.h"
#include "tools/sys.h"

const struct bench_preset bench_presets[] = {
	{ "qwen3-30b-a3b", 2048, 768, 128, 8, KT_ACT_SILU, false },
	{ "qwen3-235b-a22b", 4096, 1536, 128, 8, KT_ACT_SILU, false },
	{ "deepseek-v3", 7168, 2048, 256, 8, KT_ACT_SILU, false },
	{ "mixtral-8x7b", 4096, 14336, 8, 2, KT_ACT_SILU, false },
	/* H = I = 2880 pack as 2944 (zero padded), clamped SwiGLU, biases */
	{ "gpt-oss-20b", 2880, 2880, 32, 4, KT_ACT_SWIGLU_OAI, true },
	{ "gpt-oss-120b", 2880, 2880, 128, 4, KT_ACT_SWIGLU_OAI, true },
};
const unsigned int bench_n_presets =
	sizeof(bench_presets) / sizeof(bench_presets[0]);

static const uint32_t default_tokens[] = { 1, 4, 32, 512 };

static void usage(FILE *f)
{
	unsigned int i;

	fprintf(f,
"usage: kt bench [options]\n"
"  Time the MoE op on synthetic weights against the measured roofline.\n"
"  kt bench --gpu: the GPU's limits, GPU-only and mixed ops (--gpu --help).\n"
"\n"
"model:\n"
"  -p, --preset NAME     model dimensions (default qwen3-30b-a3b)\n"
"      --hidden H        hidden size, a multiple of 32 (kt pads to 128)\n"
"      --inter I         expert intermediate size, a multiple of 32\n"
"      --experts E       routed experts per layer\n"
"      --topk K          experts per token (1..16)\n"
"  -m, --method LIST     int8, int4, bf16, fp8, q8_0, q4_k, q5_k, q6_k, mxfp4, comma\n"
"                        separated (default int8); q4_k_m, q5_k_m: gate/up\n"
"                        Q4_K or Q5_K with down Q6_K, as GGUF files mix them\n"
"  -g, --group-size G    INT4 group along K: 32, 64, 128 (default 128)\n"
"      --src DTYPE       synthetic weights handed to kt: bf16 or f32 (bf16)\n"
"run:\n"
"      --isa LIST        kernel variants, KT_ISA spellings (default auto)\n"
"  -t, --threads N       workers (default: one per physical core)\n"
"  -T, --tokens LIST     tokens per call (default 1,4,32,512)\n"
"      --layers N        layers rotated (default: >= %dx L3, >= %d)\n"
"      --iters N         timed calls per case (default: >= 20 and >= 1 s)\n"
"      --warmup N        untimed calls first (default 2)\n"
"      --min-time MS     least time per case (default 1000)\n"
"      --max-time MS     a slow case stops after this, >= 3 calls (10000)\n"
"      --io DTYPE        x and y: bf16 or f32 (default bf16)\n"
"      --submit HOW      ring (default) or forward (kt_moe_forward)\n"
"      --wait HOW        poll, sleep, or auto: sleep when the workers take\n"
"                        every CPU (default auto)\n"
"      --seed N          weights and routing (default 1)\n"
"      --mem-limit SIZE  memory the weights may take (default: available)\n"
"limits:\n"
"      --limits          only measure read bandwidth and compute peaks\n"
"      --bw-size SIZE    read-bandwidth buffer (default max(512M, 8x L3))\n"
"      --limit-ms MS     time of each of the 5 runs per limit (200/100)\n"
"other:\n"
"      --op moe|nop      nop: submit -> completion round trip\n"
"      --json            one JSON object per line\n"
"  -h, --help\n"
"\npresets:\n", BENCH_ROTATE_L3, BENCH_MIN_LAYERS);
	for (i = 0; i < bench_n_presets; i++)
		fprintf(f, "  %-16s H %5u  I %5u  E %3u  k %u\n",
			bench_presets[i].name, bench_presets[i].hidden,
			bench_presets[i].inter, bench_presets[i].experts,
			bench_presets[i].top_k);
}

enum {
	OPT_HIDDEN = 256, OPT_INTER, OPT_EXPERTS, OPT_TOPK, OPT_SRC, OPT_ISA,
	OPT_LAYERS, OPT_ITERS, OPT_WARMUP, OPT_MIN_TIME, OPT_MAX_TIME, OPT_IO,
	OPT_SUBMIT, OPT_SEED, OPT_MEM_LIMIT, OPT_LIMITS, OPT_BW_SIZE,
	OPT_LIMIT_MS, OPT_OP, OPT_JSON, OPT_WAIT,
};

static const struct option lopts[] = {
	{ "preset", required_argument, NULL, 'p' },
	{ "hidden", required_argument, NULL, OPT_HIDDEN },
	{ "inter", required_argument, NULL, OPT_INTER },
	{ "experts", required_argument, NULL, OPT_EXPERTS },
	{ "topk", required_argument, NULL, OPT_TOPK },
	{ "top-k", required_argument, NULL, OPT_TOPK },
	{ "method", required_argument, NULL, 'm' },
	{ "group-size", required_argument, NULL, 'g' },
	{ "src", required_argument, NULL, OPT_SRC },
	{ "isa", required_argument, NULL, OPT_ISA },
	{ "threads", required_argument, NULL, 't' },
	{ "tokens", required_argument, NULL, 'T' },
	{ "layers", required_argument, NULL, OPT_LAYERS },
	{ "iters", required_argument, NULL, OPT_ITERS },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "min-time", required_argument, NULL, OPT_MIN_TIME },
	{ "max-time", required_argument, NULL, OPT_MAX_TIME },
	{ "io", required_argument, NULL, OPT_IO },
	{ "submit", required_argument, NULL, OPT_SUBMIT },
	{ "wait", required_argument, NULL, OPT_WAIT },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "mem-limit", required_argument, NULL, OPT_MEM_LIMIT },
	{ "limits", no_argument, NULL, OPT_LIMITS },
	{ "bw-size", required_argument, NULL, OPT_BW_SIZE },
	{ "limit-ms", required_argument, NULL, OPT_LIMIT_MS },
	{ "op", required_argument, NULL, OPT_OP },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int bad(const char *opt, const char *val, const char *want)
{
	fprintf(stderr, "kt bench: bad %s '%s': %s\n", opt, val, want);
	return -EINVAL;
}

static int parse_dtype(const char *s, enum kt_dtype *d)
{
	if (!strcmp(s, "bf16"))
		*d = KT_DTYPE_BF16;
	else if (!strcmp(s, "f32"))
		*d = KT_DTYPE_F32;
	else
		return -EINVAL;
	return 0;
}

/* Comma lists of names, each parsed by @one into @out. */
static int parse_names(const char *s, void *out, size_t esize,
		       unsigned int cap, int (*one)(const char *, void *))
{
	char buf[256], *tok, *save = NULL;
	unsigned int n = 0;

	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (n == cap || one(tok, (char *)out + n * esize))
			return -EINVAL;
		n++;
	}
	return n ? (int)n : -EINVAL;
}

static int one_quant(const char *s, void *out)
{
	return bench_method_parse(s, out);
}

static int one_isa(const char *s, void *out)
{
	return opt_isa(s, out);
}

static int parse_args(int argc, char **argv, struct bench_cfg *c)
{
	const char *preset = "qwen3-30b-a3b";
	bool custom = false;
	uint32_t dims[4] = { 0 };	/* hidden, inter, experts, top_k */
	unsigned int i;
	int opt, n;

	memset(c, 0, sizeof(*c));
	c->warmup = 2;
	c->min_iters = 20;
	c->min_ms = 1000;
	c->max_ms = 10000;
	c->seed = 1;
	c->src_dtype = KT_DTYPE_BF16;
	c->io_dtype = KT_DTYPE_BF16;

	while ((opt = getopt_long(argc, argv, "p:m:g:t:T:h", lopts,
				  NULL)) != -1) {
		switch (opt) {
		case 'p':
			preset = optarg;
			break;
		case OPT_HIDDEN:
		case OPT_INTER:
			if (opt_u32(optarg, 32, 1u << 20, &dims[opt - OPT_HIDDEN]) ||
			    dims[opt - OPT_HIDDEN] % 32)
				return bad(opt == OPT_HIDDEN ? "--hidden" :
					   "--inter", optarg,
					   "a multiple of 32");
			custom = true;
			break;
		case OPT_EXPERTS:
			if (opt_u32(optarg, 1, 1u << 16, &dims[2]))
				return bad("--experts", optarg, "1 .. 65536");
			custom = true;
			break;
		case OPT_TOPK:
			if (opt_u32(optarg, 1, KT_MOE_MAX_TOPK, &dims[3]))
				return bad("--topk", optarg, "1 .. 16");
			custom = true;
			break;
		case 'm':
			n = parse_names(optarg, c->methods, sizeof(c->methods[0]),
					BENCH_MAX_METHODS, one_quant);
			if (n < 0)
				return bad("--method", optarg,
					   "int8, int4, bf16, fp8, q8_0, q4_k, q5_k, q6_k, mxfp4, q4_k_m or q5_k_m (comma list, at most 11)");
			c->n_methods = (unsigned int)n;
			break;
		case 'g':
			if (opt_u32(optarg, 32, 128, &c->group_size) ||
			    (c->group_size != 32 && c->group_size != 64 &&
			     c->group_size != 128))
				return bad("--group-size", optarg,
					   "32, 64 or 128");
			break;
		case OPT_SRC:
			if (parse_dtype(optarg, &c->src_dtype))
				return bad("--src", optarg, "bf16 or f32");
			break;
		case OPT_IO:
			if (parse_dtype(optarg, &c->io_dtype))
				return bad("--io", optarg, "bf16 or f32");
			break;
		case OPT_ISA:
			n = parse_names(optarg, c->isas, sizeof(c->isas[0]),
					KT_ISA_COUNT, one_isa);
			if (n < 0)
				return bad("--isa", optarg,
					   "auto, scalar, avx2, avxvnni, avx512, amx (as kt_isa_name spells them)");
			c->n_isas = (unsigned int)n;
			break;
		case 't':
			if (opt_u32(optarg, 1, 4096, &c->threads))
				return bad("--threads", optarg, "1 .. 4096");
			break;
		case 'T':
			n = opt_u32_list(optarg, 1, KT_MOE_MAX_TOKENS, c->tokens,
					 BENCH_MAX_TOKENS_LIST);
			if (n < 0)
				return bad("--tokens", optarg,
					   "a comma list of 1 .. 65536, at most 32");
			c->n_tokens = (unsigned int)n;
			break;
		case OPT_LAYERS:
			if (opt_u32(optarg, 1, BENCH_MAX_LAYERS, &c->layers))
				return bad("--layers", optarg, "1 .. 4096");
			break;
		case OPT_ITERS:
			if (opt_u32(optarg, 1, 100000, &c->iters))
				return bad("--iters", optarg, "1 .. 100000");
			break;
		case OPT_WARMUP:
			if (opt_u32(optarg, 0, 1000, &c->warmup))
				return bad("--warmup", optarg, "0 .. 1000");
			break;
		case OPT_MIN_TIME:
			if (opt_u32(optarg, 0, 3600000, &c->min_ms))
				return bad("--min-time", optarg, "milliseconds");
			break;
		case OPT_MAX_TIME:
			if (opt_u32(optarg, 0, 3600000, &c->max_ms))
				return bad("--max-time", optarg, "milliseconds");
			break;
		case OPT_SUBMIT:
			if (!strcmp(optarg, "forward"))
				c->use_forward = true;
			else if (strcmp(optarg, "ring"))
				return bad("--submit", optarg, "ring or forward");
			break;
		case OPT_WAIT:
			if (!strcmp(optarg, "poll"))
				c->wait = BENCH_WAIT_POLL;
			else if (!strcmp(optarg, "sleep"))
				c->wait = BENCH_WAIT_SLEEP;
			else if (!strcmp(optarg, "auto"))
				c->wait = BENCH_WAIT_AUTO;
			else
				return bad("--wait", optarg,
					   "poll, sleep or auto");
			break;
		case OPT_SEED:
			if (opt_u64(optarg, &c->seed))
				return bad("--seed", optarg, "a number");
			break;
		case OPT_MEM_LIMIT:
			if (opt_size(optarg, &c->mem_limit) || !c->mem_limit)
				return bad("--mem-limit", optarg,
					   "a size such as 8G or 512M");
			break;
		case OPT_LIMITS:
			c->limits_only = true;
			break;
		case OPT_BW_SIZE:
			if (opt_size(optarg, &c->bw_bytes) ||
			    c->bw_bytes < (1u << 20))
				return bad("--bw-size", optarg,
					   "a size of at least 1M");
			break;
		case OPT_LIMIT_MS:
			if (opt_u32(optarg, 1, 60000, &c->limit_ms))
				return bad("--limit-ms", optarg, "1 .. 60000");
			break;
		case OPT_OP:
			if (!strcmp(optarg, "nop"))
				c->nop = true;
			else if (strcmp(optarg, "moe"))
				return bad("--op", optarg, "moe or nop");
			break;
		case OPT_JSON:
			c->json = true;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kt bench: unexpected argument '%s'\n",
			argv[optind]);
		return -EINVAL;
	}

	for (i = 0; i < bench_n_presets; i++)
		if (!strcmp(preset, bench_presets[i].name))
			break;
	if (i == bench_n_presets)
		return bad("--preset", preset, "see kt bench --help");
	c->preset = custom ? "custom" : bench_presets[i].name;
	c->hidden = dims[0] ? dims[0] : bench_presets[i].hidden;
	c->inter = dims[1] ? dims[1] : bench_presets[i].inter;
	c->experts = dims[2] ? dims[2] : bench_presets[i].experts;
	c->top_k = dims[3] ? dims[3] : bench_presets[i].top_k;
	c->act = bench_presets[i].act;
	c->bias = bench_presets[i].bias;
	if (c->top_k > c->experts) {
		fprintf(stderr, "kt bench: bad --topk %u: more than the %u experts\n",
			c->top_k, c->experts);
		return -EINVAL;
	}

	if (!c->n_methods) {
		c->methods[0] = KT_QUANT_INT8;
		c->n_methods = 1;
	}
	if (!c->n_isas) {
		c->isas[0] = KT_ISA_AUTO;
		c->n_isas = 1;
	}
	if (!c->n_tokens) {
		memcpy(c->tokens, default_tokens, sizeof(default_tokens));
		c->n_tokens = sizeof(default_tokens) / sizeof(default_tokens[0]);
	}
	return 0;
}

static int make_ctx(const struct bench_cfg *c, enum kt_isa isa,
		    struct kt_ctx **ctx)
{
	struct kt_ctx_opts o = { .sz = sizeof(o) };
	int ret;

	o.threads = c->threads;
	o.isa = isa;
	ret = kt_ctx_create(&o, ctx);
	if (ret == -EOPNOTSUPP)
		fprintf(stderr, "kt bench: this CPU cannot run the %s kernels\n",
			kt_isa_name(isa));
	else if (ret)
		fprintf(stderr, "kt bench: cannot create a context (isa %s, %u threads): %s\n",
			kt_isa_name(isa), c->threads, strerror(-ret));
	return ret;
}

/* The synthetic experts with one set of biases for all (GPT-OSS). */
struct biased {
	struct synth *s;
	float *bias;	/* gate [I], up [I], down [H] */
	uint32_t inter;
};

static int biased_get_expert(void *arg, uint32_t layer, uint32_t e,
			     struct kt_expert_src *src)
{
	const struct biased *b = arg;
	int ret = synth_get_expert(b->s, layer, e, src);

	src->gate_bias = b->bias;
	src->up_bias = b->bias + b->inter;
	src->down_bias = b->bias + 2 * (size_t)b->inter;
	return ret;
}

static float *make_bias(const struct bench_cfg *c)
{
	size_t n = 2 * (size_t)c->inter + c->hidden, i;
	float *b = malloc(n * sizeof(*b));
	uint64_t r = c->seed | 1;

	for (i = 0; b && i < n; i++) {
		r ^= r << 13;
		r ^= r >> 7;
		r ^= r << 17;
		b[i] = (float)(r % 2001) / 1000.0f - 1.0f;
	}
	return b;
}

static int make_model(struct kt_ctx *ctx, const struct bench_cfg *c,
		      enum kt_quant q, uint32_t layers, struct kt_model **m)
{
	struct synth_cfg sc = {
		.hidden = c->hidden, .inter = c->inter, .n_experts = c->experts,
		.n_layers = layers, .dtype = c->src_dtype, .seed = c->seed,
		.progress = sys_stderr_tty(),
	};
	struct kt_model_desc d = { .sz = sizeof(d) };
	struct biased bs = { 0 };
	struct synth *s;
	int ret;

	ret = synth_create(&sc, &s);
	if (ret)
		return ret;
	d.hidden = c->hidden;
	d.inter = c->inter;
	d.n_experts = c->experts;
	d.n_layers = layers;
	d.src_dtype = c->src_dtype;
	d.quant = bench_method_quant(q);
	d.down_quant = bench_method_down(q);
	d.group_size = q == KT_QUANT_INT4 ? c->group_size : 0;
	/* FP8: 0 is its 128x128 scale blocks */
	d.get_expert = synth_get_expert;
	d.arg = s;
	d.act = c->act;
	if (c->bias) {
		bs.s = s;
		bs.inter = c->inter;
		bs.bias = make_bias(c);
		if (!bs.bias) {
			synth_destroy(s);
			return -ENOMEM;
		}
		d.desc_flags = KT_DESC_F_BIAS;
		d.get_expert = biased_get_expert;
		d.arg = &bs;
	}
	ret = kt_model_create(ctx, &d, m);
	free(bs.bias);
	synth_destroy(s);
	if (ret)
		fprintf(stderr, "kt bench: building the %s model failed: %s\n",
			bench_method_name(q), strerror(-ret));
	return ret;
}

/* Every token count of one method on one context. */
static int run_method(struct kt_ctx *ctx, const struct bench_cfg *c,
		      enum kt_quant q, uint32_t layers,
		      const struct bench_limits *l)
{
	struct bench_setup s = { .cfg = c, .quant = q };
	struct kt_model_info info;
	struct kt_model *m = NULL;
	struct bench_moe *b = NULL;
	uint64_t t0;
	unsigned int i;
	int ret;

	s.layers = layers;
	t0 = stats_now_ns();
	ret = make_model(ctx, c, q, s.layers, &m);
	if (ret)
		return ret;
	s.gen_s = (double)(stats_now_ns() - t0) * 1e-9;
	kt_model_get_info(m, &info);
	s.expert_bytes = info.expert_bytes;
	s.model_bytes = info.resident_bytes;
	s.isa = kt_ctx_isa(ctx);
	s.threads = kt_ctx_threads(ctx);

	ret = bench_moe_create(ctx, m, c, &b);
	if (ret) {
		fprintf(stderr, "kt bench: cannot set up the ring: %s\n",
			strerror(-ret));
		goto destroy_model;
	}
	s.sleeps = bench_moe_sleeps(b);
	report_setup(&s);
	for (i = 0; i < c->n_tokens; i++) {
		struct bench_case r;

		ret = bench_moe_run(b, c->tokens[i], l, &r);
		if (ret) {
			fprintf(stderr, "kt bench: %s, %u tokens: the op failed: %s\n",
				bench_method_name(q), c->tokens[i], strerror(-ret));
			break;
		}
		report_case(&s, &r);
	}
	bench_moe_destroy(b);
destroy_model:
	kt_model_destroy(m);
	return ret;
}

/* One context (one ISA): its limits, then every method or the NOP probe. */
static int run_isa(const struct bench_cfg *c, enum kt_isa isa,
		   const uint32_t *layers)
{
	struct bench_limits l;
	struct kt_ctx *ctx;
	unsigned int i;
	int ret;

	ret = make_ctx(c, isa, &ctx);
	if (ret)
		return ret;
	if (c->nop) {
		struct bench_nop n;

		ret = bench_nop_run(ctx, c, &n);
		if (ret)
			fprintf(stderr, "kt bench: nop: %s\n", strerror(-ret));
		else
			report_nop(c, kt_ctx_isa(ctx), kt_ctx_threads(ctx), &n);
		goto destroy_ctx;
	}
	ret = bench_limits_measure(ctx, c, &l);
	if (ret) {
		fprintf(stderr, "kt bench: measuring the limits failed: %s\n",
			strerror(-ret));
		goto destroy_ctx;
	}
	report_limits(c, &l);
	if (c->limits_only)
		goto destroy_ctx;
	for (i = 0; i < c->n_methods && !ret; i++)
		ret = run_method(ctx, c, c->methods[i], layers[i], &l);
destroy_ctx:
	kt_ctx_destroy(ctx);
	return ret;
}

static int cmd_bench(int argc, char **argv)
{
	uint32_t layers[BENCH_MAX_METHODS] = { 0 };
	struct bench_cfg c;
	unsigned int i;
	int ret, failed = 0;

	if (bench_cache_wanted(argc, argv))
		return bench_cache_main(argc, argv);
	if (bench_gpu_wanted(argc, argv))
		return bench_gpu_main(argc, argv);
	ret = parse_args(argc, argv, &c);
	if (ret > 0)
		return 0;	/* --help */
	if (ret) {
		fprintf(stderr, "'kt bench --help' lists the options\n");
		return 2;
	}
	/* refuse what cannot fit before spending minutes on anything */
	for (i = 0; i < c.n_methods && !c.nop && !c.limits_only; i++) {
		uint64_t eb = bench_expert_bytes(c.hidden, c.inter, c.methods[i],
						 c.group_size);

		if (bench_plan_layers(&c, c.methods[i], eb, &layers[i]))
			return 1;
	}
	for (i = 0; i < c.n_isas; i++) {
		ret = run_isa(&c, c.isas[i], layers);
		if (ret)
			failed = 1;
	}
	return failed;
}

KT_COMMAND("bench", cmd_bench, "time the MoE op against the machine's roofline");
