// SPDX-License-Identifier: MIT
/*
 * cmd-info.c - `kt info`: what kt sees on this machine (ISA variant and CPU
 * flags, NUMA nodes, hugepages, io_uring, CUDA), as text or one JSON line.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kt/kt.h>

#include "tools/cmd.h"
#include "tools/json.h"
#include "tools/sys.h"

static const struct {
	uint32_t bit;
	const char *name;
} cpu_flag_names[] = {
	{ KT_CPU_AVX2, "avx2" },
	{ KT_CPU_FMA, "fma" },
	{ KT_CPU_F16C, "f16c" },
	{ KT_CPU_AVX_VNNI, "avx_vnni" },
	{ KT_CPU_AVX512F, "avx512f" },
	{ KT_CPU_AVX512BW, "avx512bw" },
	{ KT_CPU_AVX512VL, "avx512vl" },
	{ KT_CPU_AVX512DQ, "avx512dq" },
	{ KT_CPU_AVX512VNNI, "avx512_vnni" },
	{ KT_CPU_AVX512VBMI, "avx512_vbmi" },
	{ KT_CPU_AVX512BF16, "avx512_bf16" },
	{ KT_CPU_AVX512FP16, "avx512_fp16" },
	{ KT_CPU_AMX_TILE, "amx_tile" },
	{ KT_CPU_AMX_INT8, "amx_int8" },
	{ KT_CPU_AMX_BF16, "amx_bf16" },
};

#define N_CPU_FLAGS (sizeof(cpu_flag_names) / sizeof(cpu_flag_names[0]))

/* What a context would run: KT_ISA may force a variant or be refused. */
struct info_isa {
	const char *env;	/* KT_ISA, or NULL */
	int ctx_err;		/* kt_ctx_create() result */
	enum kt_isa chosen;
	unsigned int threads;
};

static void probe_ctx(struct info_isa *ii)
{
	struct kt_ctx_opts o = { .sz = sizeof(o) };
	struct kt_ctx *ctx;

	ii->env = getenv("KT_ISA");
	/* a default context: the same choice kt bench and users get */
	o.flags = KT_CTX_F_NO_PIN;
	o.spin_us = KT_CTX_SPIN_NONE;
	ii->ctx_err = kt_ctx_create(&o, &ctx);
	if (ii->ctx_err)
		return;
	ii->chosen = kt_ctx_isa(ctx);
	ii->threads = kt_ctx_threads(ctx);
	kt_ctx_destroy(ctx);
}

static void cuda_version(int32_t v, char *buf, size_t n)
{
	snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
}

static void hpage_name(uint64_t kb, char *buf, size_t n)
{
	if (kb >= (1u << 20) && !(kb % (1u << 20)))
		snprintf(buf, n, "%lluG", (unsigned long long)(kb >> 20));
	else if (kb >= 1024 && !(kb % 1024))
		snprintf(buf, n, "%lluM", (unsigned long long)(kb >> 10));
	else
		snprintf(buf, n, "%lluK", (unsigned long long)kb);
}

static void print_text(const struct kt_sysinfo *si, const struct info_isa *ii)
{
	unsigned int i, cores = 0;
	char buf[32];

	printf("kt %d.%d\n", KT_VERSION_MAJOR, KT_VERSION_MINOR);
	printf("cpu:       %s\n", si->cpu_model[0] ? si->cpu_model : "?");
	printf("flags:    ");
	for (i = 0; i < N_CPU_FLAGS; i++)
		if (si->cpu_flags & cpu_flag_names[i].bit)
			printf(" %s", cpu_flag_names[i].name);
	printf("%s\n", si->cpu_flags ? "" : " (none of kt's)");
	printf("isa:       best %s", kt_isa_name(si->best_isa));
	if (ii->env)
		printf(", KT_ISA=%s", ii->env);
	if (ii->ctx_err)
		printf(", context refused: %s\n", strerror(-ii->ctx_err));
	else
		printf(", chosen %s (%u workers)\n", kt_isa_name(ii->chosen),
		       ii->threads);
	for (i = 0; i < si->n_nodes && i < KT_MAX_NODES; i++)
		cores += si->node_cores[i];
	printf("numa:      %u node%s, %u cores\n", si->n_nodes,
	       si->n_nodes == 1 ? "" : "s", cores);
	for (i = 0; i < si->n_nodes && i < KT_MAX_NODES; i++)
		printf("  node %-3d %3u cores  %8llu MiB\n", si->node_ids[i],
		       si->node_cores[i],
		       (unsigned long long)si->node_mem_mb[i]);
	printf("l3:        %llu KiB (cpu0)\n",
	       (unsigned long long)(sys_l3_bytes() >> 10));
	printf("memory:    %llu MiB available of %llu MiB\n",
	       (unsigned long long)(sys_mem_available() >> 20),
	       (unsigned long long)(sys_mem_total() >> 20));
	printf("hugepages:");
	if (!si->n_hpage_sizes)
		printf(" none offered");
	for (i = 0; i < si->n_hpage_sizes && i < 4; i++) {
		hpage_name(si->hpage_kb[i], buf, sizeof(buf));
		printf(" %s: %llu free%s", buf,
		       (unsigned long long)si->hpage_free[i],
		       i + 1 < si->n_hpage_sizes ? "," : "");
	}
	printf("\n");
	printf("io_uring:  %s\n", si->io_uring ? "available" :
	       "unavailable (pread fallback)");
	if (si->cuda_driver) {
		cuda_version(si->cuda_version, buf, sizeof(buf));
		printf("cuda:      driver %s, %d GPU%s, kernels %s\n", buf,
		       si->cuda_devices, si->cuda_devices == 1 ? "" : "s",
		       si->cuda_kernels ? "built in" : "absent");
	} else {
		printf("cuda:      no driver (CPU only)\n");
	}
	if (si->cuda_why[0])
		printf("gpu:       not usable: %s\n", si->cuda_why);
}

static void print_json(const struct kt_sysinfo *si, const struct info_isa *ii)
{
	struct jw j;
	unsigned int i;
	char buf[32];

	jw_begin(&j, stdout);
	snprintf(buf, sizeof(buf), "%d.%d", KT_VERSION_MAJOR,
		 KT_VERSION_MINOR);
	jw_str(&j, "version", buf);
	jw_obj(&j, "cpu");
	jw_str(&j, "model", si->cpu_model);
	jw_arr(&j, "flags");
	for (i = 0; i < N_CPU_FLAGS; i++)
		if (si->cpu_flags & cpu_flag_names[i].bit)
			jw_str(&j, NULL, cpu_flag_names[i].name);
	jw_close(&j);
	jw_close(&j);
	jw_obj(&j, "isa");
	jw_str(&j, "best", kt_isa_name(si->best_isa));
	jw_str(&j, "env", ii->env);
	if (ii->ctx_err) {
		jw_null(&j, "chosen");
		jw_str(&j, "error", strerror(-ii->ctx_err));
	} else {
		jw_str(&j, "chosen", kt_isa_name(ii->chosen));
		jw_u64(&j, "threads", ii->threads);
	}
	jw_close(&j);
	jw_arr(&j, "numa");
	for (i = 0; i < si->n_nodes && i < KT_MAX_NODES; i++) {
		jw_obj(&j, NULL);
		jw_i64(&j, "node", si->node_ids[i]);
		jw_u64(&j, "cores", si->node_cores[i]);
		jw_u64(&j, "mem_mb", si->node_mem_mb[i]);
		jw_close(&j);
	}
	jw_close(&j);
	jw_u64(&j, "l3_bytes", sys_l3_bytes());
	jw_u64(&j, "mem_available", sys_mem_available());
	jw_arr(&j, "hugepages");
	for (i = 0; i < si->n_hpage_sizes && i < 4; i++) {
		jw_obj(&j, NULL);
		jw_u64(&j, "kb", si->hpage_kb[i]);
		jw_u64(&j, "free", si->hpage_free[i]);
		jw_close(&j);
	}
	jw_close(&j);
	jw_bool(&j, "io_uring", si->io_uring);
	jw_obj(&j, "cuda");
	jw_bool(&j, "driver", si->cuda_driver);
	if (si->cuda_driver) {
		cuda_version(si->cuda_version, buf, sizeof(buf));
		jw_str(&j, "version", buf);
	} else {
		jw_null(&j, "version");
	}
	jw_i64(&j, "devices", si->cuda_driver ? si->cuda_devices : 0);
	jw_bool(&j, "kernels", si->cuda_kernels);
	if (si->cuda_why[0])
		jw_str(&j, "why", si->cuda_why);
	else
		jw_null(&j, "why");
	jw_close(&j);
	jw_end(&j);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kt info [--json]\n"
		"  what kt sees: ISA variant and CPU flags, NUMA nodes and cores,\n"
		"  hugepages free per size, io_uring, CUDA driver and GPUs.\n"
		"  --json   one JSON object on one line\n");
}

static int cmd_info(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct kt_sysinfo si;
	struct info_isa ii = { 0 };
	bool json = false;
	int c, ret;

	while ((c = getopt_long(argc, argv, "jh", lopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kt info: unexpected argument '%s'\n",
			argv[optind]);
		usage(stderr);
		return 2;
	}
	memset(&si, 0, sizeof(si));
	ret = kt_sysinfo_get(&si);
	if (ret) {
		fprintf(stderr, "kt info: probing the machine failed: %s\n",
			strerror(-ret));
		return 1;
	}
	probe_ctx(&ii);
	if (json)
		print_json(&si, &ii);
	else
		print_text(&si, &ii);
	return 0;
}

KT_COMMAND("info", cmd_info, "what kt sees: ISA, NUMA, hugepages, io_uring, CUDA");
