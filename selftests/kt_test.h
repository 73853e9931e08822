/* SPDX-License-Identifier: MIT */
/*
 * kt_test.h - kselftest-style harness for kt: TEST/TEST_F/FIXTURE, ASSERT_*
 * and EXPECT_*, SKIP; each test runs in a forked child with a timeout and
 * the run prints TAP 13. Exit status: 0 pass, 1 fail, 4 all skipped.
 */
#ifndef KT_TEST_H
#define KT_TEST_H

#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define KT_TEST_PASS 0
#define KT_TEST_FAIL 1
#define KT_TEST_SKIP 4
#define KT_TEST_TIMEOUT_S 300

struct kt_test_meta {
	const char *name;
	void (*fn)(struct kt_test_meta *m);
	unsigned int timeout;
	/* set in the child, read by the parent through a shared page */
	int failed;
	int skipped;
	char skip_reason[256];
	sigjmp_buf env;
	struct kt_test_meta *next;
};

struct kt_test_shared {
	int failed;
	int skipped;
	char skip_reason[256];
};

static struct kt_test_meta *kt_test_list, **kt_test_tail = &kt_test_list;
static struct kt_test_shared *kt_test_sh;

static inline void kt_test_register(struct kt_test_meta *m)
{
	*kt_test_tail = m;
	kt_test_tail = &m->next;
}

#define KT__TEST(tname, tmo)						\
	static void kt_test_fn_##tname(struct kt_test_meta *_metadata); \
	static struct kt_test_meta kt_test_meta_##tname = {		\
		.name = #tname, .fn = kt_test_fn_##tname,		\
		.timeout = (tmo) };					\
	__attribute__((constructor)) static void kt_test_reg_##tname(void) \
	{ kt_test_register(&kt_test_meta_##tname); }			\
	static void kt_test_fn_##tname(struct kt_test_meta *_metadata)

#define TEST(name) KT__TEST(name, KT_TEST_TIMEOUT_S)
#define TEST_TIMEOUT(name, secs) KT__TEST(name, secs)

#define FIXTURE_DATA(fname) struct kt_fixture_##fname
#define FIXTURE(fname) FIXTURE_DATA(fname)
#define FIXTURE_SETUP(fname)						\
	static void kt_fixture_setup_##fname(				\
		struct kt_test_meta *_metadata, FIXTURE_DATA(fname) *self)
#define FIXTURE_TEARDOWN(fname)						\
	static void kt_fixture_teardown_##fname(			\
		struct kt_test_meta *_metadata, FIXTURE_DATA(fname) *self)

/* Setup, body, and teardown even when the body fails an ASSERT. */
#define KT__TEST_F(fname, tname, tmo)					\
	static void kt_test_body_##fname##_##tname(			\
		struct kt_test_meta *_metadata, FIXTURE_DATA(fname) *self); \
	KT__TEST(fname##_##tname, tmo)					\
	{								\
		FIXTURE_DATA(fname) self_;				\
		memset(&self_, 0, sizeof(self_));			\
		if (sigsetjmp(_metadata->env, 0) == 0) {		\
			kt_fixture_setup_##fname(_metadata, &self_);	\
			if (!_metadata->skipped && !_metadata->failed)	\
				kt_test_body_##fname##_##tname(_metadata, \
							       &self_);	\
		}							\
		if (sigsetjmp(_metadata->env, 0) == 0)			\
			kt_fixture_teardown_##fname(_metadata, &self_);	\
	}								\
	static void kt_test_body_##fname##_##tname(			\
		struct kt_test_meta *_metadata, FIXTURE_DATA(fname) *self)

#define TEST_F(fname, tname) KT__TEST_F(fname, tname, KT_TEST_TIMEOUT_S)
#define TEST_F_TIMEOUT(fname, tname, secs) KT__TEST_F(fname, tname, secs)

#define TH_LOG(fmt, ...)						\
	fprintf(stderr, "# %s:%d: " fmt "\n", __FILE__, __LINE__, ##__VA_ARGS__)

#define SKIP(statement, fmt, ...)					\
	do {								\
		snprintf(_metadata->skip_reason,			\
			 sizeof(_metadata->skip_reason), fmt, ##__VA_ARGS__); \
		_metadata->skipped = 1;					\
		statement;						\
	} while (0)

/* Print a value of any scalar type without casting between kinds. */
static inline void kt_test_fmt(char *buf, size_t n, const void *p,
			       size_t size, int kind)
{
	if (kind == 1) {
		long double v = size == sizeof(float) ? *(const float *)p :
				size == sizeof(double) ? *(const double *)p :
				*(const long double *)p;
		snprintf(buf, n, "%Lg", v);
	} else if (kind == 2) {
		snprintf(buf, n, "%p", *(void *const *)p);
	} else {
		int64_t v = 0;

		switch (size) {
		case 1: v = *(const int8_t *)p; break;
		case 2: v = *(const int16_t *)p; break;
		case 4: v = *(const int32_t *)p; break;
		default: memcpy(&v, p, sizeof(v)); break;
		}
		snprintf(buf, n, "%lld", (long long)v);
	}
}

#define KT__KIND(x) _Generic((x), float: 1, double: 1, long double: 1,	\
	default: (__builtin_classify_type(x) == 5 ? 2 : 0))

#define KT__CMP(a, b, op, fatal)					\
	do {								\
		__typeof__(a) _a = (a);					\
		__typeof__(b) _b = (b);					\
		_Pragma("GCC diagnostic push")				\
		_Pragma("GCC diagnostic ignored \"-Wsign-compare\"")	\
		int _ok = (_a op _b);					\
		_Pragma("GCC diagnostic pop")				\
		if (!_ok) {						\
			char _sa[64], _sb[64];				\
			kt_test_fmt(_sa, sizeof(_sa), &_a, sizeof(_a),	\
				    KT__KIND(_a));			\
			kt_test_fmt(_sb, sizeof(_sb), &_b, sizeof(_b),	\
				    KT__KIND(_b));			\
			fprintf(stderr, "# %s:%d: expected %s (%s) %s %s (%s)\n", \
				__FILE__, __LINE__, #a, _sa, #op, #b, _sb); \
			_metadata->failed = 1;				\
			if (fatal)					\
				siglongjmp(_metadata->env, 1);		\
		}							\
	} while (0)

#define ASSERT_EQ(a, b) KT__CMP(a, b, ==, 1)
#define ASSERT_NE(a, b) KT__CMP(a, b, !=, 1)
#define ASSERT_LT(a, b) KT__CMP(a, b, <, 1)
#define ASSERT_LE(a, b) KT__CMP(a, b, <=, 1)
#define ASSERT_GT(a, b) KT__CMP(a, b, >, 1)
#define ASSERT_GE(a, b) KT__CMP(a, b, >=, 1)
#define ASSERT_TRUE(x) KT__CMP(!!(x), 1, ==, 1)
#define ASSERT_FALSE(x) KT__CMP(!!(x), 0, ==, 1)
#define ASSERT_NULL(x) KT__CMP((const void *)(x), NULL, ==, 1)
#define EXPECT_EQ(a, b) KT__CMP(a, b, ==, 0)
#define EXPECT_NE(a, b) KT__CMP(a, b, !=, 0)
#define EXPECT_LT(a, b) KT__CMP(a, b, <, 0)
#define EXPECT_LE(a, b) KT__CMP(a, b, <=, 0)
#define EXPECT_GT(a, b) KT__CMP(a, b, >, 0)
#define EXPECT_GE(a, b) KT__CMP(a, b, >=, 0)
#define EXPECT_TRUE(x) KT__CMP(!!(x), 1, ==, 0)
#define EXPECT_FALSE(x) KT__CMP(!!(x), 0, ==, 0)

#define KT__NEAR(a, b, tol, fatal)					\
	do {								\
		double _a = (a), _b = (b), _t = (tol);			\
		if (!(fabs(_a - _b) <= _t)) {				\
			fprintf(stderr, "# %s:%d: expected %s (%g) within %g of %s (%g)\n", \
				__FILE__, __LINE__, #a, _a, _t, #b, _b); \
			_metadata->failed = 1;				\
			if (fatal)					\
				siglongjmp(_metadata->env, 1);		\
		}							\
	} while (0)
#define ASSERT_NEAR(a, b, tol) KT__NEAR(a, b, tol, 1)
#define EXPECT_NEAR(a, b, tol) KT__NEAR(a, b, tol, 0)

static inline int kt_test_run_child(struct kt_test_meta *m)
{
	alarm(m->timeout);
	if (sigsetjmp(m->env, 0) == 0)
		m->fn(m);
	kt_test_sh->failed = m->failed;
	kt_test_sh->skipped = m->skipped;
	memcpy(kt_test_sh->skip_reason, m->skip_reason,
	       sizeof(m->skip_reason));
	fflush(stdout);
	fflush(stderr);
	if (m->failed)
		return KT_TEST_FAIL;
	return m->skipped ? KT_TEST_SKIP : KT_TEST_PASS;
}

static inline int kt_test_main(int argc, char **argv)
{
	const char *only = NULL;
	struct kt_test_meta *m;
	unsigned int n = 0, i = 0, pass = 0, fail = 0, skip = 0;
	int opt;

	while ((opt = getopt(argc, argv, "lt:")) != -1) {
		if (opt == 'l') {
			for (m = kt_test_list; m; m = m->next)
				printf("%s\n", m->name);
			return 0;
		}
		if (opt == 't')
			only = optarg;
		else
			return 2;
	}
	kt_test_sh = mmap(NULL, sizeof(*kt_test_sh), PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (kt_test_sh == MAP_FAILED)
		return 1;
	for (m = kt_test_list; m; m = m->next)
		n += !only || !strcmp(only, m->name);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("TAP version 13\n1..%u\n", n);
	for (m = kt_test_list; m; m = m->next) {
		int status = 0;
		pid_t pid;

		if (only && strcmp(only, m->name))
			continue;
		i++;
		memset(kt_test_sh, 0, sizeof(*kt_test_sh));
		printf("# RUN %s\n", m->name);
		fflush(stdout);
		pid = fork();
		if (pid == 0)
			_exit(kt_test_run_child(m));
		if (pid < 0 || waitpid(pid, &status, 0) < 0) {
			printf("not ok %u %s # fork failed\n", i, m->name);
			fail++;
			continue;
		}
		if (WIFEXITED(status) && WEXITSTATUS(status) == KT_TEST_SKIP) {
			printf("ok %u %s # SKIP %s\n", i, m->name,
			       kt_test_sh->skip_reason);
			skip++;
		} else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
			printf("ok %u %s\n", i, m->name);
			pass++;
		} else {
			if (WIFSIGNALED(status))
				printf("# %s: killed by signal %d%s\n", m->name,
				       WTERMSIG(status),
				       WTERMSIG(status) == SIGALRM ?
				       " (timeout)" : "");
			printf("not ok %u %s\n", i, m->name);
			fail++;
		}
	}
	printf("# Totals: pass:%u fail:%u skip:%u\n", pass, fail, skip);
	if (fail)
		return KT_TEST_FAIL;
	return (skip && !pass) ? KT_TEST_SKIP : KT_TEST_PASS;
}

#define TEST_HARNESS_MAIN						\
	int main(int argc, char **argv) { return kt_test_main(argc, argv); }

#endif /* KT_TEST_H */
