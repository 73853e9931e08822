/* SPDX-License-Identifier: MIT */
/*
 * run.h - run the kt command under test ($KT_BIN, which make check sets;
 * else build/kt) and capture its stdout, stderr and exit status.
 */
#ifndef KT_SELFTESTS_TOOLS_RUN_H
#define KT_SELFTESTS_TOOLS_RUN_H

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct kt_run {
	char *out;		/* stdout, NUL-terminated */
	char *err;		/* stderr, NUL-terminated */
	int status;		/* exit status, or 128 + signal */
};

static inline const char *kt_bin(void)
{
	const char *b = getenv("KT_BIN");

	if (b && *b)
		return b;
	return access("build/kt", X_OK) ? NULL : "build/kt";
}

struct kt_buf {
	char *p;
	size_t len, cap;
};

static inline int kt_buf_read(struct kt_buf *b, int fd)
{
	ssize_t n;

	if (b->cap - b->len < 4096) {
		size_t cap = b->cap ? b->cap * 2 : 65536;
		char *p = realloc(b->p, cap);

		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	n = read(fd, b->p + b->len, b->cap - b->len - 1);
	if (n > 0)
		b->len += (size_t)n;
	b->p[b->len] = '\0';
	return n > 0 ? 1 : 0;
}

/*
 * Run kt with @argv (NULL-terminated, without the program name). Both
 * pipes are drained together so a chatty child cannot block on either.
 */
static inline int kt_run(struct kt_run *r, const char *const *argv)
{
	const char *bin = kt_bin();
	int po[2], pe[2], status;
	struct kt_buf bo = { 0 }, be = { 0 };
	const char *args[64];
	struct pollfd fds[2];
	unsigned int n = 0;
	pid_t pid;

	memset(r, 0, sizeof(*r));
	if (!bin)
		return -ENOENT;
	args[n++] = bin;
	while (*argv && n < 63)
		args[n++] = *argv++;
	args[n] = NULL;
	if (pipe(po) || pipe(pe))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		dup2(po[1], 1);
		dup2(pe[1], 2);
		close(po[0]);
		close(pe[0]);
		close(po[1]);
		close(pe[1]);
		execv(bin, (char *const *)args);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	fds[0] = (struct pollfd){ .fd = po[0], .events = POLLIN };
	fds[1] = (struct pollfd){ .fd = pe[0], .events = POLLIN };
	while (fds[0].fd >= 0 || fds[1].fd >= 0) {
		int i;

		if (poll(fds, 2, -1) < 0 && errno != EINTR)
			break;
		for (i = 0; i < 2; i++) {
			if (fds[i].fd < 0 || !fds[i].revents)
				continue;
			if (kt_buf_read(i ? &be : &bo, fds[i].fd) <= 0) {
				close(fds[i].fd);
				fds[i].fd = -1;
			}
		}
	}
	if (!bo.p)
		kt_buf_read(&bo, -1);
	if (!be.p)
		kt_buf_read(&be, -1);
	waitpid(pid, &status, 0);
	r->out = bo.p;
	r->err = be.p;
	r->status = WIFEXITED(status) ? WEXITSTATUS(status) :
		    128 + WTERMSIG(status);
	return 0;
}

static inline void kt_run_free(struct kt_run *r)
{
	free(r->out);
	free(r->err);
}

/* Run the kt command with the given arguments into @r; skip without one. */
#define RUN_KT(r, ...)							\
	do {								\
		const char *argv_[] = { __VA_ARGS__, NULL };		\
		if (!kt_bin())						\
			SKIP(return, "no kt binary: KT_BIN unset, no build/kt"); \
		ASSERT_EQ(kt_run(r, argv_), 0);				\
	} while (0)

#endif /* KT_SELFTESTS_TOOLS_RUN_H */
