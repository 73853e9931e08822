// SPDX-License-Identifier: MIT
/*
 * doctor.c - `kt doctor`: the JSON report parses, its exit status agrees
 * with its checks, a narrowed CPU affinity is reported as a slowdown, and
 * bad options and models are refused.
 */
#include <sched.h>

#include <jansson.h>

#include "kt_test.h"
#include "run.h"

static const char *const names[] = { "isa", "hugepages", "thp", "governor",
	"cores", "numa_balancing", "memlock", "io_uring", "gpu" };

/* Parse the report; return its check named @name (borrowed) or NULL. */
static json_t *check_of(json_t *root, const char *name)
{
	json_t *arr = json_object_get(root, "checks"), *c;
	size_t i;

	json_array_foreach(arr, i, c)
		if (!strcmp(json_string_value(json_object_get(c, "name")), name))
			return c;
	return NULL;
}

TEST(doctor_json_agrees_with_status)
{
	json_error_t jerr;
	json_t *root, *c;
	struct kt_run r;
	size_t i, slow = 0;

	RUN_KT(&r, "doctor", "--json");
	ASSERT_TRUE(r.status == 0 || r.status == 1);
	root = json_loads(r.out, 0, &jerr);
	ASSERT_TRUE(root != NULL);
	json_array_foreach(json_object_get(root, "checks"), i, c) {
		const char *st = json_string_value(json_object_get(c, "status"));

		ASSERT_TRUE(st != NULL);
		EXPECT_TRUE(!strcmp(st, "ok") || !strcmp(st, "info") ||
			    !strcmp(st, "slow"));
		EXPECT_TRUE(json_is_string(json_object_get(c, "detail")));
		if (!strcmp(st, "slow")) {
			slow++;
			/* every slowdown names its fix */
			EXPECT_TRUE(json_is_string(json_object_get(c, "fix")));
		}
	}
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		EXPECT_TRUE(check_of(root, names[i]) != NULL);
	EXPECT_EQ(json_integer_value(json_object_get(root, "slow")),
		  (json_int_t)slow);
	EXPECT_EQ(json_is_true(json_object_get(root, "ok")), slow == 0);
	EXPECT_EQ(r.status, slow ? 1 : 0);
	json_decref(root);
	kt_run_free(&r);
}

TEST(doctor_text)
{
	struct kt_run r;

	RUN_KT(&r, "doctor");
	ASSERT_TRUE(r.status == 0 || r.status == 1);
	EXPECT_TRUE(strstr(r.out, " io_uring ") != NULL);
	EXPECT_TRUE(strstr(r.out, r.status ? "some settings slow kt down" :
			   "nothing slows kt down") != NULL);
	kt_run_free(&r);
}

TEST(doctor_narrow_affinity_is_slow)
{
	json_error_t jerr;
	json_t *root, *c;
	struct kt_run r;
	cpu_set_t one;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		SKIP(return, "one online CPU: no narrower affinity to set");
	CPU_ZERO(&one);
	CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
	/* this test runs in its own forked child; kt inherits the mask */
	ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
	RUN_KT(&r, "doctor", "--json");
	EXPECT_EQ(r.status, 1);
	root = json_loads(r.out, 0, &jerr);
	ASSERT_TRUE(root != NULL);
	c = check_of(root, "cores");
	ASSERT_TRUE(c != NULL);
	EXPECT_EQ(strcmp(json_string_value(json_object_get(c, "status")),
			 "slow"), 0);
	EXPECT_TRUE(json_is_string(json_object_get(c, "fix")));
	json_decref(root);
	kt_run_free(&r);
}

TEST(doctor_refuses_bad_input)
{
	struct kt_run r;

	RUN_KT(&r, "doctor", "--bogus");
	EXPECT_EQ(r.status, 2);
	kt_run_free(&r);
	RUN_KT(&r, "doctor", "--model", "/nonexistent/m.ktw");
	EXPECT_EQ(r.status, 1);
	EXPECT_TRUE(strstr(r.err, "--model") != NULL);
	kt_run_free(&r);
}

TEST_HARNESS_MAIN
