// SPDX-License-Identifier: MIT
/*
 * bench.c - `kt bench` on tiny dimensions: every JSON line parses, carries
 * the documented keys, and its derived numbers (bytes, ops, GB/s, TOPS,
 * roofline) agree with an independent computation from the packed layout
 * and the limits line; routing is seeded; bad options and models that do
 * not fit are refused with a message. Timings are never asserted.
 */
#include <jansson.h>

#include <kt/kt.h>

#include "kt_test.h"
#include "run.h"

/* A run that must succeed; on failure its stderr explains why. */
#define ASSERT_RAN(r)							\
	do {								\
		if ((r)->status)					\
			TH_LOG("kt exited %d: %s", (r)->status, (r)->err); \
		ASSERT_EQ((r)->status, 0);				\
	} while (0)

/* Small and fast: limits on a 16 MiB buffer, 20 ms each. */
#define H 128
#define I 256
#define E 8
#define K 2
#define QUICK "--hidden", "128", "--inter", "256", "--experts", "8", \
	"--topk", "2", "--layers", "2", "--warmup", "1", "--bw-size", "16M", \
	"--limit-ms", "20"

/* The packed size by Documentation/packed-layout.md, computed here anew. */
static uint64_t packed_bytes(const char *method, uint64_t g)
{
	uint64_t nk = (uint64_t)H * I;

	if (!strcmp(method, "int8"))
		return 3 * nk + 4 * (I + I + H);
	if (!strcmp(method, "bf16"))
		return 3 * nk * 2;
	if (!strcmp(method, "int4"))
		return 3 * nk / 2 + 4 * (I * (H / g) * 2 + H * (I / g));
	return 0;
}

/* Split output into lines and parse each as one JSON object. */
static size_t parse_lines(struct kt_test_meta *_metadata, char *out,
			  json_t **objs, size_t cap)
{
	size_t n = 0;
	char *save = NULL, *line;

	for (line = strtok_r(out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		json_error_t jerr;

		if (n == cap)
			break;
		objs[n] = json_loads(line, 0, &jerr);
		if (!objs[n])
			TH_LOG("not JSON: '%s' (%s)", line, jerr.text);
		EXPECT_TRUE(json_is_object(objs[n]));
		if (objs[n])
			n++;
	}
	return n;
}

static double num(json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static double rel_err(double a, double b)
{
	double d = fabs(a - b), m = fmax(fabs(a), fabs(b));

	return m ? d / m : d;
}

TEST(bench_json_cases_are_consistent)
{
	static const uint32_t tokens[] = { 1, 3, 16 };
	static const char *const methods[] = { "int8", "bf16", "int4" };
	static const char *const keys[] = {
		"preset", "method", "isa", "threads", "tokens", "median_us",
		"p90_us", "bytes", "ops", "gbps", "tops", "roofline",
	};
	json_t *objs[16], *lim;
	double read_gbps, peak;
	struct kt_run r;
	size_t n, i, j;

	RUN_KT(&r, "bench", "--json", QUICK, "--tokens", "1,3,16",
	       "--iters", "3", "--method", "int8,bf16,int4");
	ASSERT_RAN(&r);
	n = parse_lines(_metadata, r.out, objs, 16);
	ASSERT_EQ(n, 1 + 3 * 3);

	lim = json_object_get(objs[0], "limits");
	ASSERT_TRUE(json_is_object(lim));
	read_gbps = num(lim, "read_gbps");
	EXPECT_GT(read_gbps, 0);
	EXPECT_GT(num(lim, "peak_int8_tops"), 0);
	EXPECT_GT(num(lim, "peak_bf16_tops"), 0);

	for (i = 1; i < n; i++) {
		json_t *o = objs[i];
		const char *method = methods[(i - 1) / 3];
		uint32_t t = tokens[(i - 1) % 3];
		double touched = num(o, "experts_touched");
		uint64_t g = 128, eb;
		double med = num(o, "median_us"), bytes, ops, want;

		for (j = 0; j < sizeof(keys) / sizeof(keys[0]); j++) {
			if (!json_object_get(o, keys[j]))
				TH_LOG("line %zu lacks '%s'", i, keys[j]);
			EXPECT_TRUE(json_object_get(o, keys[j]) != NULL);
		}
		EXPECT_EQ(strcmp(json_string_value(json_object_get(o, "method")),
				 method), 0);
		EXPECT_EQ(strcmp(json_string_value(json_object_get(o, "preset")),
				 "custom"), 0);
		EXPECT_EQ(json_integer_value(json_object_get(o, "tokens")), t);
		EXPECT_EQ(json_integer_value(json_object_get(o, "iters")), 3);
		EXPECT_EQ(strcmp(json_string_value(json_object_get(o, "isa")),
				 json_string_value(json_object_get(lim, "isa"))),
			  0);
		if (!strcmp(method, "int4"))
			g = (uint64_t)json_integer_value(
				json_object_get(o, "group_size"));
		EXPECT_EQ(g, 128);
		eb = packed_bytes(method, g);
		EXPECT_EQ(json_integer_value(json_object_get(o,
				"expert_bytes")), (json_int_t)eb);

		/* k distinct experts per token; never more than E */
		EXPECT_GE(touched, t == 1 ? K : 1);
		EXPECT_LE(touched, (double)(t * K < E ? t * K : E));
		bytes = (double)json_integer_value(json_object_get(o, "bytes"));
		EXPECT_LE(fabs(bytes - touched * (double)eb), 1.0);
		ops = (double)json_integer_value(json_object_get(o, "ops"));
		EXPECT_EQ(ops, 2.0 * 3 * H * I * t * K);

		EXPECT_GT(med, 0);
		EXPECT_LE(num(o, "min_us"), med);
		EXPECT_LE(med, num(o, "p90_us"));
		EXPECT_LE(num(o, "p90_us"), num(o, "p99_us"));
		/* printed with 6 significant digits: compare to 1e-4 */
		EXPECT_LT(rel_err(num(o, "gbps"), bytes / med * 1e-3), 1e-4);
		EXPECT_LT(rel_err(num(o, "tops"), ops / med * 1e-6), 1e-4);
		peak = num(lim, !strcmp(method, "bf16") ? "peak_bf16_tops" :
			   "peak_int8_tops");
		want = fmax(bytes / (read_gbps * 1e3), ops / (peak * 1e6)) /
		       med;
		EXPECT_LT(rel_err(num(o, "roofline"), want), 1e-4);
		EXPECT_EQ(strcmp(json_string_value(json_object_get(o, "bound")),
				 bytes / read_gbps > ops / peak * 1e-3 ?
				 "memory" : "compute"), 0);
	}
	for (i = 0; i < n; i++)
		json_decref(objs[i]);
	kt_run_free(&r);
}

/* experts_touched of the cases T = 2..5 of a bench run with @seed. */
static void touched(struct kt_test_meta *_metadata, const char *seed,
		    double out[4])
{
	struct kt_run r;
	json_t *objs[8];
	size_t n, i;

	RUN_KT(&r, "bench", "--json", QUICK, "--tokens", "2,3,4,5",
	       "--iters", "4", "--seed", seed);
	ASSERT_RAN(&r);
	n = parse_lines(_metadata, r.out, objs, 8);
	ASSERT_EQ(n, 5);
	for (i = 0; i < 4; i++)
		out[i] = num(objs[i + 1], "experts_touched");
	for (i = 0; i < n; i++)
		json_decref(objs[i]);
	kt_run_free(&r);
}

/* Same seed, same routing: the distinct experts of each case repeat. */
TEST(bench_routing_is_seeded)
{
	double a[4], b[4], c[4];
	int differ = 0;
	size_t i;

	touched(_metadata, "7", a);
	touched(_metadata, "7", b);
	touched(_metadata, "8", c);
	for (i = 0; i < 4; i++) {
		EXPECT_EQ(a[i], b[i]);
		differ |= a[i] != c[i];
	}
	/* 16 routings of 2..5 tokens over 8 experts: some count differs */
	EXPECT_TRUE(differ);
}

TEST(bench_text_table)
{
	struct kt_run r;

	RUN_KT(&r, "bench", QUICK, "--tokens", "1,2", "--iters", "2",
	       "--wait", "poll");
	ASSERT_RAN(&r);
	EXPECT_TRUE(strstr(r.out, "submit ring (poll)") != NULL);
	EXPECT_TRUE(strstr(r.out, "limits: read ") != NULL);
	EXPECT_TRUE(strstr(r.out, "custom (H 128, I 256, E 8, k 2), int8") !=
		    NULL);
	EXPECT_TRUE(strstr(r.out, "median_us") != NULL);
	EXPECT_TRUE(strstr(r.out, "roofline") != NULL);
	/* header lines, then one row per token count */
	EXPECT_TRUE(strstr(r.out, "\n      1 ") != NULL);
	EXPECT_TRUE(strstr(r.out, "\n      2 ") != NULL);
	/* stderr is not a TTY here: no progress line */
	EXPECT_TRUE(strstr(r.err, "generating") == NULL);
	kt_run_free(&r);
}

TEST(bench_limits_only)
{
	json_t *objs[4], *lim;
	struct kt_run r;
	size_t n;

	RUN_KT(&r, "bench", "--limits", "--json", "--bw-size", "16M",
	       "--limit-ms", "20");
	ASSERT_RAN(&r);
	n = parse_lines(_metadata, r.out, objs, 4);
	ASSERT_EQ(n, 1);
	lim = json_object_get(objs[0], "limits");
	ASSERT_TRUE(json_is_object(lim));
	EXPECT_GT(num(lim, "read_gbps"), 0);
	EXPECT_GT(num(lim, "peak_int8_tops"), 0);
	EXPECT_GT(num(lim, "peak_bf16_tops"), 0);
	EXPECT_EQ(json_integer_value(json_object_get(lim, "bw_bytes")),
		  16 << 20);
	json_decref(objs[0]);
	kt_run_free(&r);
}

TEST(bench_nop_round_trip)
{
	json_t *objs[4];
	struct kt_run r;
	size_t n;

	RUN_KT(&r, "bench", "--op", "nop", "--json", "--iters", "500");
	ASSERT_RAN(&r);
	n = parse_lines(_metadata, r.out, objs, 4);
	ASSERT_EQ(n, 1);
	EXPECT_EQ(strcmp(json_string_value(json_object_get(objs[0], "op")),
			 "nop"), 0);
	EXPECT_EQ(json_integer_value(json_object_get(objs[0], "iters")), 500);
	EXPECT_GT(num(objs[0], "median_us"), 0);
	EXPECT_LE(num(objs[0], "min_us"), num(objs[0], "median_us"));
	EXPECT_LE(num(objs[0], "median_us"), num(objs[0], "p99_us"));
	EXPECT_GT(num(objs[0], "batch_mops"), 0);
	json_decref(objs[0]);
	kt_run_free(&r);
}

TEST(bench_forced_scalar_and_forward)
{
	json_t *objs[4];
	struct kt_run r;
	size_t n;

	RUN_KT(&r, "bench", "--json", QUICK, "--tokens", "4", "--iters", "2",
	       "--isa", "scalar", "--submit", "forward", "--io", "f32",
	       "--src", "f32", "--threads", "1");
	ASSERT_RAN(&r);
	n = parse_lines(_metadata, r.out, objs, 4);
	ASSERT_EQ(n, 2);
	EXPECT_EQ(strcmp(json_string_value(json_object_get(objs[1], "isa")),
			 "scalar"), 0);
	EXPECT_EQ(strcmp(json_string_value(json_object_get(objs[1],
			 "submit")), "forward"), 0);
	EXPECT_EQ(json_integer_value(json_object_get(objs[1], "threads")), 1);
	json_decref(objs[0]);
	json_decref(objs[1]);
	kt_run_free(&r);
}

/*
 * -m q4_k_m: gate/up Q4_K, down Q6_K, its blob sized by packed-layout.md
 * (per 256 x 256 matrix: Q4_K 32768 + 2048 + 4096, Q6_K 49152 + 1024 +
 * 4096 bytes) and its roofline against those bytes.
 */
TEST(bench_gguf_mix_method)
{
	json_t *objs[4];
	struct kt_run r;
	size_t n;

	RUN_KT(&r, "bench", "--json", "--hidden", "256", "--inter", "256",
	       "--experts", "4", "--topk", "2", "--layers", "2", "--warmup",
	       "1", "--bw-size", "16M", "--limit-ms", "20", "--tokens", "1",
	       "--iters", "2", "--method", "q4_k_m", "--threads", "1");
	ASSERT_RAN(&r);
	n = parse_lines(_metadata, r.out, objs, 4);
	ASSERT_EQ(n, 2);
	EXPECT_EQ(strcmp(json_string_value(json_object_get(objs[1], "method")),
			 "q4_k_m"), 0);
	EXPECT_EQ(json_integer_value(json_object_get(objs[1], "expert_bytes")),
		  2 * (32768 + 2048 + 4096) + 49152 + 1024 + 4096);
	EXPECT_GT(num(objs[1], "roofline"), 0);
	json_decref(objs[0]);
	json_decref(objs[1]);
	kt_run_free(&r);
}

TEST(bench_rejects_bad_options)
{
	static const char *const bad[][3] = {
		{ "--method", "int3", "--method" },
		{ "--hidden", "100", "--hidden" },
		{ "--tokens", "0", "--tokens" },
		{ "--tokens", "1,,2", "--tokens" },
		{ "--preset", "nope", "--preset" },
		{ "--isa", "bogus", "--isa" },
		{ "--group-size", "48", "--group-size" },
		{ "--topk", "17", "--topk" },
		{ "--mem-limit", "12X", "--mem-limit" },
		{ "--op", "fma", "--op" },
	};
	struct kt_run r;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		RUN_KT(&r, "bench", bad[i][0], bad[i][1]);
		EXPECT_EQ(r.status, 2);
		if (!strstr(r.err, bad[i][2]))
			TH_LOG("no mention of %s in: %s", bad[i][2], r.err);
		EXPECT_TRUE(strstr(r.err, bad[i][2]) != NULL);
		EXPECT_EQ(r.out[0], '\0');
		kt_run_free(&r);
	}
	RUN_KT(&r, "bench", "--experts", "4", "--topk", "8");
	EXPECT_EQ(r.status, 2);
	kt_run_free(&r);
}

/* deepseek-v3 at int8 is ~11 GiB a layer: refused up front, not crashed. */
TEST(bench_refuses_what_does_not_fit)
{
	struct kt_run r;

	RUN_KT(&r, "bench", "--preset", "deepseek-v3", "--mem-limit", "2G");
	EXPECT_EQ(r.status, 1);
	EXPECT_TRUE(strstr(r.err, "deepseek-v3 int8 needs") != NULL);
	EXPECT_TRUE(strstr(r.err, "GiB") != NULL);
	EXPECT_EQ(r.out[0], '\0');
	kt_run_free(&r);

	RUN_KT(&r, "bench", QUICK, "--layers", "4000", "--mem-limit", "600M");
	EXPECT_EQ(r.status, 1);
	EXPECT_TRUE(strstr(r.err, "fit") != NULL);
	kt_run_free(&r);
}

TEST(bench_refuses_isa_the_cpu_lacks)
{
	struct kt_sysinfo si;
	struct kt_run r;

	ASSERT_EQ(kt_sysinfo_get(&si), 0);
	if (si.cpu_flags & KT_CPU_AMX_TILE)
		SKIP(return, "this CPU has AMX: nothing to refuse");
	RUN_KT(&r, "bench", QUICK, "--isa", "amx", "--tokens", "1");
	EXPECT_EQ(r.status, 1);
	EXPECT_TRUE(strstr(r.err, "amx") != NULL);
	kt_run_free(&r);
}

TEST_HARNESS_MAIN
