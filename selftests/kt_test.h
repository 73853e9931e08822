/* SPDX-License-Identifier: MIT */
/*
 * kt_test.h - kselftest-style harness for kt: TEST/TEST_F/FIXTURE, ASSERT_*
 * and EXPECT_*, SKIP, FIXTURE_VARIANT; each test runs in a forked child
 * with a timeout and the run prints TAP 13. What a test changes on the host
 * (a sysctl, a mount) is undone by the parent, even after a timeout.
 * Exit status: 0 pass, 1 fail, 4 all skipped.
 */
#ifndef KT_TEST_H
#define KT_TEST_H

#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#define KT_TEST_PASS 0
#define KT_TEST_FAIL 1
#define KT_TEST_SKIP 4
/* Seconds a test may run; KT_TEST_TIMEOUT_SCALE multiplies (sanitizers). */
#define KT_TEST_TIMEOUT_S 60
#define KT_TEST_MAX_RESTORE 8

struct kt_test_variant {
	const char *name;
	const void *data;
	struct kt_test_variant *next;
};

/* A fixture's variants; a TEST_F runs once per variant (once if none). */
struct kt_test_fixture {
	struct kt_test_variant *variants, **tail;
};

struct kt_test_meta {
	const char *name;
	void (*fn)(struct kt_test_meta *m);
	unsigned int timeout;
	struct kt_test_fixture *fixture;	/* TEST_F only */
	const struct kt_test_variant *variant;	/* the one running */
	/* set in the child, read by the parent through a shared page */
	int failed;
	int skipped;
	char skip_reason[256];
	sigjmp_buf env;
	struct kt_test_meta *next;
};

/* Host state to put back after the test: a file's old contents, a mount. */
struct kt_test_restore {
	char path[256];
	char value[64];		/* "" for a mount point */
};

struct kt_test_shared {
	int failed;
	int skipped;
	char skip_reason[256];
	unsigned int n_restore;
	struct kt_test_restore restore[KT_TEST_MAX_RESTORE];
};

static struct kt_test_meta *kt_test_list, **kt_test_tail = &kt_test_list;
static struct kt_test_shared *kt_test_sh;

static inline void kt_test_register(struct kt_test_meta *m)
{
	*kt_test_tail = m;
	kt_test_tail = &m->next;
}

#define KT__TEST(tname, tmo) KT__TEST_FIX(tname, tmo, NULL)
#define KT__TEST_FIX(tname, tmo, fix)					\
	static void kt_test_fn_##tname(struct kt_test_meta *_metadata); \
	static struct kt_test_meta kt_test_meta_##tname = {		\
		.name = #tname, .fn = kt_test_fn_##tname,		\
		.timeout = (tmo), .fixture = (fix) };			\
	__attribute__((constructor)) static void kt_test_reg_##tname(void) \
	{ kt_test_register(&kt_test_meta_##tname); }			\
	static void kt_test_fn_##tname(struct kt_test_meta *_metadata)

#define TEST(name) KT__TEST(name, KT_TEST_TIMEOUT_S)
#define TEST_TIMEOUT(name, secs) KT__TEST(name, secs)

#define FIXTURE_DATA(fname) struct kt_fixture_##fname
#define FIXTURE_VARIANT(fname) struct kt_fixture_variant_##fname
#define FIXTURE(fname)							\
	FIXTURE_VARIANT(fname);						\
	static struct kt_test_fixture kt_fixture_##fname##_object = {	\
		.tail = &kt_fixture_##fname##_object.variants };	\
	FIXTURE_DATA(fname)
#define FIXTURE_SETUP(fname)						\
	static void kt_fixture_setup_##fname(				\
		struct kt_test_meta *_metadata, FIXTURE_DATA(fname) *self, \
		const FIXTURE_VARIANT(fname) *variant)
#define FIXTURE_TEARDOWN(fname)						\
	static void kt_fixture_teardown_##fname(			\
		struct kt_test_meta *_metadata, FIXTURE_DATA(fname) *self, \
		const FIXTURE_VARIANT(fname) *variant)

/*
 * FIXTURE_VARIANT_ADD(f, name) { .field = ... }; adds a variant: every
 * TEST_F of f runs once per variant, as f.name.test, with the values in
 * `variant`.
 */
#define FIXTURE_VARIANT_ADD(fname, vname)				\
	extern const FIXTURE_VARIANT(fname) kt_variant_##fname##_##vname; \
	static struct kt_test_variant kt_variant_obj_##fname##_##vname = { \
		.name = #vname, .data = &kt_variant_##fname##_##vname };	\
	__attribute__((constructor)) static void			\
	kt_variant_reg_##fname##_##vname(void)				\
	{								\
		*kt_fixture_##fname##_object.tail =			\
			&kt_variant_obj_##fname##_##vname;		\
		kt_fixture_##fname##_object.tail =			\
			&kt_variant_obj_##fname##_##vname.next;		\
	}								\
	const FIXTURE_VARIANT(fname) kt_variant_##fname##_##vname =

/* Setup, body, and teardown even when the body fails an ASSERT. */
#define KT__TEST_F(fname, tname, tmo)					\
	static void kt_test_body_##fname##_##tname(			\
		struct kt_test_meta *_metadata, FIXTURE_DATA(fname) *self, \
		const FIXTURE_VARIANT(fname) *variant);			\
	KT__TEST_FIX(fname##_##tname, tmo, &kt_fixture_##fname##_object) \
	{								\
		FIXTURE_DATA(fname) self_;				\
		const FIXTURE_VARIANT(fname) *v_ = _metadata->variant ?	\
			_metadata->variant->data : NULL;		\
		memset(&self_, 0, sizeof(self_));			\
		if (sigsetjmp(_metadata->env, 0) == 0) {		\
			kt_fixture_setup_##fname(_metadata, &self_, v_); \
			if (!_metadata->skipped && !_metadata->failed)	\
				kt_test_body_##fname##_##tname(_metadata, \
							       &self_, v_); \
		}							\
		if (sigsetjmp(_metadata->env, 0) == 0)			\
			kt_fixture_teardown_##fname(_metadata, &self_, v_); \
	}								\
	static void kt_test_body_##fname##_##tname(			\
		struct kt_test_meta *_metadata, FIXTURE_DATA(fname) *self, \
		const FIXTURE_VARIANT(fname) *variant)

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

/*
 * kt_test_restore_file() - put @path's present contents (a sysctl such as
 * /proc/sys/vm/nr_hugepages) back after the test, however it ends.
 * kt_test_restore_mount() - unmount @dir and remove it after the test.
 * Call before making the change. Return: 0, or -1 when full or unreadable.
 */
static inline int kt_test_restore_file(const char *path)
{
	struct kt_test_restore *r;
	FILE *f;

	if (kt_test_sh->n_restore >= KT_TEST_MAX_RESTORE)
		return -1;
	r = &kt_test_sh->restore[kt_test_sh->n_restore];
	f = fopen(path, "r");
	if (!f || !fgets(r->value, sizeof(r->value), f) || !r->value[0]) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	snprintf(r->path, sizeof(r->path), "%s", path);
	kt_test_sh->n_restore++;
	return 0;
}

static inline int kt_test_restore_mount(const char *dir)
{
	struct kt_test_restore *r;

	if (kt_test_sh->n_restore >= KT_TEST_MAX_RESTORE)
		return -1;
	r = &kt_test_sh->restore[kt_test_sh->n_restore++];
	snprintf(r->path, sizeof(r->path), "%s", dir);
	r->value[0] = 0;
	return 0;
}

/* In the parent: mounts first (they hold hugepages), then files, newest
 * first; a teardown that already undid a change makes this a no-op. */
static inline void kt_test_restore_all(void)
{
	unsigned int i, pass;

	for (pass = 0; pass < 2; pass++)
		for (i = kt_test_sh->n_restore; i-- > 0;) {
			struct kt_test_restore *r = &kt_test_sh->restore[i];
			FILE *f;

			if (!r->value[0] && pass == 0) {
				umount2(r->path, MNT_DETACH);
				rmdir(r->path);
			} else if (r->value[0] && pass == 1) {
				f = fopen(r->path, "w");
				if (f) {
					fputs(r->value, f);
					fclose(f);
				}
			}
		}
	kt_test_sh->n_restore = 0;
}

static inline unsigned int kt_test_timeout(const struct kt_test_meta *m)
{
	const char *e = getenv("KT_TEST_TIMEOUT_SCALE");
	unsigned long k = e ? strtoul(e, NULL, 10) : 1;

	return m->timeout * (unsigned int)(k ? k : 1);
}

static inline int kt_test_run_child(struct kt_test_meta *m)
{
	alarm(kt_test_timeout(m));
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

/* "test" or "test.variant". */
static inline void kt_test_name(char *buf, size_t n,
				const struct kt_test_meta *m,
				const struct kt_test_variant *v)
{
	if (v)
		snprintf(buf, n, "%s.%s", m->name, v->name);
	else
		snprintf(buf, n, "%s", m->name);
}

/* Fork one test (variant @v or none), wait, undo its host changes. */
static inline int kt_test_run_one(struct kt_test_meta *m,
				  const struct kt_test_variant *v,
				  const char *name, unsigned int i)
{
	int status = 0;
	pid_t pid;

	m->variant = v;
	memset(kt_test_sh, 0, sizeof(*kt_test_sh));
	printf("# RUN %s\n", name);
	fflush(stdout);
	pid = fork();
	if (pid == 0)
		_exit(kt_test_run_child(m));
	if (pid < 0 || waitpid(pid, &status, 0) < 0) {
		printf("not ok %u %s # fork failed\n", i, name);
		return KT_TEST_FAIL;
	}
	kt_test_restore_all();
	if (WIFEXITED(status) && WEXITSTATUS(status) == KT_TEST_SKIP) {
		printf("ok %u %s # SKIP %s\n", i, name,
		       kt_test_sh->skip_reason);
		return KT_TEST_SKIP;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		printf("ok %u %s\n", i, name);
		return KT_TEST_PASS;
	}
	if (WIFSIGNALED(status))
		printf("# %s: killed by signal %d%s\n", name, WTERMSIG(status),
		       WTERMSIG(status) == SIGALRM ? " (timeout)" : "");
	printf("not ok %u %s\n", i, name);
	return KT_TEST_FAIL;
}

/*
 * -l lists the tests, -t NAME runs one ("test", "test.variant", or a
 * TEST_F's name for all its variants).
 */
static inline int kt_test_main(int argc, char **argv)
{
	const char *only = NULL;
	bool list = false;
	struct kt_test_meta *m;
	unsigned int n = 0, i = 0, pass = 0, fail = 0, skip = 0;
	int opt, run;

	while ((opt = getopt(argc, argv, "lt:")) != -1) {
		if (opt == 'l')
			list = true;
		else if (opt == 't')
			only = optarg;
		else
			return 2;
	}
	kt_test_sh = mmap(NULL, sizeof(*kt_test_sh), PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (kt_test_sh == MAP_FAILED)
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* pass 0 counts (or lists), pass 1 runs */
	for (run = 0; run < 2 && !(run && list); run++) {
		if (run)
			printf("TAP version 13\n1..%u\n", n);
		for (m = kt_test_list; m; m = m->next) {
			const struct kt_test_variant *v = m->fixture ?
				m->fixture->variants : NULL;

			do {
				char name[256];

				kt_test_name(name, sizeof(name), m, v);
				if (list && !run)
					printf("%s\n", name);
				if (list || (only && strcmp(only, name) &&
					     strcmp(only, m->name)))
					continue;
				if (!run) {
					n++;
					continue;
				}
				switch (kt_test_run_one(m, v, name, ++i)) {
				case KT_TEST_PASS:
					pass++;
					break;
				case KT_TEST_SKIP:
					skip++;
					break;
				default:
					fail++;
				}
			} while (v && (v = v->next));
		}
	}
	if (list)
		return 0;
	printf("# Totals: pass:%u fail:%u skip:%u\n", pass, fail, skip);
	if (fail)
		return KT_TEST_FAIL;
	return (skip && !pass) ? KT_TEST_SKIP : KT_TEST_PASS;
}

#define TEST_HARNESS_MAIN						\
	int main(int argc, char **argv) { return kt_test_main(argc, argv); }

#endif /* KT_TEST_H */
