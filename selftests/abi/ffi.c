// SPDX-License-Identifier: MIT
/*
 * ffi.c - the ring API as ctypes, cffi, Go or Rust see it: dlopen the
 * libkt.so built next to this test and reach every helper, the exported
 * twins of the inline ones included, through dlsym alone.
 */
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>

#include "kt_test.h"
#include <kt/kt.h>

/* build/selftests/abi/ffi -> build/libkt.so, or $KT_LIBKT */
static void *open_libkt(char *path, size_t n)
{
	const char *env = getenv("KT_LIBKT");
	char exe[PATH_MAX];
	ssize_t len;

	if (env && *env) {
		snprintf(path, n, "%s", env);
	} else {
		len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (len <= 0)
			return NULL;
		exe[len] = 0;
		snprintf(path, n, "%s/../../libkt.so", dirname(exe));
	}
	return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

TEST(twins_through_dlsym)
{
	typedef int ctx_create_fn(const struct kt_ctx_opts *, struct kt_ctx **);
	typedef int ring_init_fn(struct kt_ctx *, unsigned int, struct kt_ring *);
	typedef struct kt_sqe *get_sqe_fn(struct kt_ring *);
	typedef void prep_nop_fn(struct kt_sqe *, uint64_t);
	typedef void prep_moe_fn(struct kt_sqe *, struct kt_model *, uint32_t,
				 const struct kt_moe_args *, uint64_t);
	typedef int submit_fn(struct kt_ring *);
	typedef int wait_fn(struct kt_ring *, struct kt_cqe **);
	typedef int wait_to_fn(struct kt_ring *, struct kt_cqe **, uint64_t);
	typedef int peek_fn(struct kt_ring *, struct kt_cqe **);
	typedef void seen_fn(struct kt_ring *);
	typedef void set_spin_fn(struct kt_ring *, uint32_t);
	typedef void ring_exit_fn(struct kt_ring *);
	typedef void ctx_destroy_fn(struct kt_ctx *);
	typedef unsigned int version_fn(void);
	char path[PATH_MAX + 32];
	void *h = open_libkt(path, sizeof(path));
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 1 };
	struct kt_moe_args a = { 0 };
	struct kt_ctx *ctx = NULL;
	struct kt_ring ring;
	struct kt_cqe *cqe;
	struct kt_sqe *sqe;
	int seen[3] = { 0 }, i;

	if (!h)
		TH_LOG("dlopen %s: %s", path, dlerror());
	ASSERT_NE(h, NULL);	/* the Makefile builds it before this test */
	version_fn *version = (version_fn *)dlvsym(h, "kt_version", "KT_0");
	ctx_create_fn *ctx_create = (ctx_create_fn *)dlvsym(h, "kt_ctx_create", "KT_0");
	ring_init_fn *ring_init = (ring_init_fn *)dlvsym(h, "kt_ring_init", "KT_0");
	get_sqe_fn *get_sqe = (get_sqe_fn *)dlvsym(h, "kt_get_sqe", "KT_0");
	prep_nop_fn *prep_nop = (prep_nop_fn *)dlvsym(h, "kt_prep_nop", "KT_0");
	prep_moe_fn *prep_moe = (prep_moe_fn *)dlvsym(h, "kt_prep_moe", "KT_0");
	submit_fn *submit = (submit_fn *)dlvsym(h, "kt_submit", "KT_0");
	wait_fn *wait = (wait_fn *)dlvsym(h, "kt_wait_cqe", "KT_0");
	wait_to_fn *wait_to = (wait_to_fn *)dlvsym(h, "kt_wait_cqe_timeout", "KT_0");
	peek_fn *peek = (peek_fn *)dlvsym(h, "kt_peek_cqe", "KT_0");
	seen_fn *cqe_seen = (seen_fn *)dlvsym(h, "kt_cqe_seen", "KT_0");
	set_spin_fn *set_spin = (set_spin_fn *)dlvsym(h, "kt_ring_set_spin", "KT_0");
	ring_exit_fn *ring_exit = (ring_exit_fn *)dlvsym(h, "kt_ring_exit", "KT_0");
	ctx_destroy_fn *ctx_destroy = (ctx_destroy_fn *)dlvsym(h, "kt_ctx_destroy", "KT_0");
	void *fns[] = { version, ctx_create, ring_init, get_sqe, prep_nop,
			prep_moe, submit, wait, wait_to, peek, cqe_seen,
			set_spin, ring_exit, ctx_destroy };

	for (i = 0; i < (int)(sizeof(fns) / sizeof(fns[0])); i++) {
		if (!fns[i])
			TH_LOG("symbol %d of the list is missing", i);
		ASSERT_NE(fns[i], NULL);
	}
	EXPECT_EQ(version(), KT_VERSION_CODE);
	ASSERT_EQ(ctx_create(&o, &ctx), 0);
	ASSERT_EQ(ring_init(ctx, 4, &ring), 0);
	set_spin(&ring, 0);
	EXPECT_EQ(ring.spin, 0u);
	EXPECT_EQ(peek(&ring, &cqe), -EAGAIN);
	EXPECT_EQ(wait_to(&ring, &cqe, 1000), -ETIME);
	sqe = get_sqe(&ring);
	ASSERT_NE(sqe, NULL);
	prep_nop(sqe, 0);
	sqe = get_sqe(&ring);
	ASSERT_NE(sqe, NULL);
	prep_moe(sqe, NULL, 0, &a, 1);	/* no model: -EINVAL */
	sqe = get_sqe(&ring);
	ASSERT_NE(sqe, NULL);
	prep_nop(sqe, 2);
	sqe->opcode = 0xff;		/* refused */
	EXPECT_EQ(submit(&ring), 3);
	for (i = 0; i < 3; i++) {
		ASSERT_EQ(wait(&ring, &cqe), 0);
		ASSERT_LT(cqe->user_data, 3u);
		seen[cqe->user_data] = cqe->res ? cqe->res : 1;
		cqe_seen(&ring);
	}
	EXPECT_EQ(seen[0], 1);
	EXPECT_EQ(seen[1], -EINVAL);
	EXPECT_EQ(seen[2], -EINVAL);
	ring_exit(&ring);
	EXPECT_EQ(wait(&ring, &cqe), -EINVAL);
	ctx_destroy(ctx);
	dlclose(h);
}

/* Every inline helper is a real function in the library, not only in the
 * header (the liburing-ffi contract); check-abi proves the whole list. */
TEST(every_twin_is_exported)
{
	static const char *const twins[] = {
		"kt_ring_set_spin", "kt_get_sqe", "kt_prep_nop", "kt_prep_moe",
		"kt_submit", "kt_peek_cqe", "kt_cqe_seen", "kt_wait_cqe",
	};
	char path[PATH_MAX + 32];
	void *h = open_libkt(path, sizeof(path));
	unsigned int i;

	if (!h)
		TH_LOG("dlopen %s: %s", path, dlerror());
	ASSERT_NE(h, NULL);	/* the Makefile builds it before this test */
	for (i = 0; i < sizeof(twins) / sizeof(twins[0]); i++) {
		void *f = dlvsym(h, twins[i], "KT_0");

		if (!f)
			TH_LOG("%s@KT_0 missing", twins[i]);
		EXPECT_NE(f, NULL);
	}
	/* internal names stay out of the way of callers */
	EXPECT_NE(dlsym(h, "__kt_ring_wait_cq"), NULL);
	EXPECT_EQ(dlsym(h, "core_ctx_exec"), NULL);
	dlclose(h);
}

TEST_HARNESS_MAIN
