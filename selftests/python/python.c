// SPDX-License-Identifier: MIT
/*
 * python.c - runs the Python selftests (test_kt.py) with /usr/bin/python3
 * against the libkt.so and kt command of this build; their TAP output is
 * this binary's. Skips where python3 is absent or the build is sanitized.
 */
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"
#define SCRIPT "selftests/python/test_kt.py"

static int skip(const char *why)
{
	printf("TAP version 13\n1..1\nok 1 python # SKIP %s\n", why);
	return 4;
}

/* The source tree: $KT_SRCDIR, the working directory, or above the build. */
static int find_src(const char *bindir, char *out, size_t n)
{
	const char *env = getenv("KT_SRCDIR");
	char p[2 * PATH_MAX];

	if (env) {
		snprintf(out, n, "%s", env);
		return 0;
	}
	if (!access(SCRIPT, R_OK) && getcwd(out, n))
		return 0;
	for (const char *up = "/../../.."; *up; up += 3) {
		snprintf(p, sizeof(p), "%s%s/" SCRIPT, bindir, up);
		if (!access(p, R_OK)) {
			snprintf(p, sizeof(p), "%s%s", bindir, up);
			return realpath(p, out) ? 0 : -1;
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	char exe[PATH_MAX], bindir[PATH_MAX], src[PATH_MAX], p[2 * PATH_MAX];
	ssize_t len;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* an instrumented libkt.so cannot be loaded into python3 */
	return skip("python tests run in the plain build, not under sanitizers");
#endif
	if (access(PYTHON, X_OK))
		return skip(PYTHON " not found");
	len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (len < 0)
		return skip("cannot read /proc/self/exe");
	exe[len] = 0;
	snprintf(bindir, sizeof(bindir), "%s", dirname(exe));
	if (find_src(bindir, src, sizeof(src)))
		return skip("source tree not found (set KT_SRCDIR)");
	/* build/selftests/python/python -> build/libkt.so, build/kt */
	snprintf(p, sizeof(p), "%s/../../libkt.so", bindir);
	if (!getenv("KT_LIBRARY")) {
		if (access(p, R_OK))
			return skip("no libkt.so next to the selftests (make all)");
		setenv("KT_LIBRARY", p, 1);
	}
	snprintf(p, sizeof(p), "%s/../../kt", bindir);
	if (!getenv("KT_BIN"))
		setenv("KT_BIN", p, 1);
	snprintf(p, sizeof(p), "%s/" SCRIPT, src);
	fflush(stdout);
	argv[0] = p;
	{
		char **args = calloc((size_t)argc + 2, sizeof(*args));

		if (!args)
			return 1;
		args[0] = PYTHON;
		memcpy(args + 1, argv, sizeof(char *) * (size_t)argc);
		execv(PYTHON, args);
	}
	perror("execv " PYTHON);
	return 1;
}
