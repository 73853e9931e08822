/* SPDX-License-Identifier: MIT */
/*
 * kt-bin.h - the kt command in the loader tests: found as $KT_BIN (make
 * check sets it), else build/kt beside the test (build/selftests/loader/X),
 * and run with its output in a file or the test's own.
 */
#ifndef KT_SELFTESTS_LOADER_KT_BIN_H
#define KT_SELFTESTS_LOADER_KT_BIN_H

#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>

static inline void kt_bin(char *buf, size_t n)
{
	const char *env = getenv("KT_BIN");
	char self[PATH_MAX];
	ssize_t l;

	if (env) {
		snprintf(buf, n, "%s", env);
		return;
	}
	l = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[l > 0 ? l : 0] = '\0';
	snprintf(buf, n, "%s/../../kt", dirname(self));
}

/*
 * Run @argv (argv[0] a path) with stdout and stderr in @out (NULL: the
 * test's). Return: the exit status, 128 when killed, -1 when not run.
 */
static inline int kt_exec(char *const argv[], const char *out)
{
	int status;
	pid_t pid = fork();

	if (!pid) {
		if (out) {
			int fd = open(out, O_CREAT | O_TRUNC | O_WRONLY, 0644);

			dup2(fd, 2);
			dup2(fd, 1);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

#endif /* KT_SELFTESTS_LOADER_KT_BIN_H */
