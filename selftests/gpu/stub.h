/* SPDX-License-Identifier: MIT */
/*
 * stub.h - the gpu selftests' view of the stand-in libcuda built next to
 * them (stub/cuda-stub.c): point KT_CUDA_LIB at it, reach its controls.
 */
#ifndef KT_SELFTESTS_GPU_STUB_H
#define KT_SELFTESTS_GPU_STUB_H

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct stub {
	void *dl;
	void (*set_fail_at)(long n);
	long (*calls)(void);
	long (*live)(void);
	long (*launches)(void);
};

/* @name next to this test binary, as an absolute path. */
static inline void stub_path(const char *name, char *buf, size_t n)
{
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	exe[len > 0 ? len : 0] = 0;
	snprintf(buf, n, "%s/%s", dirname(exe), name);
}

/*
 * Make kt load the stub @name ("libcuda-stub.so") and hold it open, so its
 * counters outlive kt's dlclose. 0, or -1 when it is missing.
 */
static inline int stub_use(struct stub *s, const char *name)
{
	char path[PATH_MAX];

	stub_path(name, path, sizeof(path));
	setenv("KT_CUDA_LIB", path, 1);
	memset(s, 0, sizeof(*s));
	s->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!s->dl)
		return -1;
	s->set_fail_at = (void (*)(long))dlsym(s->dl, "cuStubSetFailAt");
	s->calls = (long (*)(void))dlsym(s->dl, "cuStubCalls");
	s->live = (long (*)(void))dlsym(s->dl, "cuStubLive");
	s->launches = (long (*)(void))dlsym(s->dl, "cuStubLaunches");
	return s->set_fail_at && s->calls && s->live && s->launches ? 0 : -1;
}

/* A quiet context log: the failure walk logs on purpose. */
static inline void stub_quiet(void *arg, enum kt_log_level l, const char *m)
{
	(void)arg;
	(void)l;
	(void)m;
}

#endif /* KT_SELFTESTS_GPU_STUB_H */
