// SPDX-License-Identifier: MIT
/*
 * cxx-api.cc - the public headers as a C++17 program sees them (built with
 * g++ -std=c++17 -Wall -Wextra -Werror): include <kt/kt.h>, create a
 * context, run NOPs and a rejected op through a ring. TAP output.
 */
#include <kt/kt.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

static int n_test, n_fail;

static void check(bool ok, const std::string &what)
{
	++n_test;
	if (!ok)
		++n_fail;
	std::printf("%sok %d %s\n", ok ? "" : "not ", n_test, what.c_str());
}

int main()
{
	static_assert(sizeof(kt_sqe) == 128, "an sqe is two cache lines");
	kt_ctx_opts o;
	std::memset(&o, 0, sizeof(o));
	o.sz = sizeof(o);
	o.threads = 1;
	o.log_level = KT_CTX_LOG_LEVEL(KT_LOG_ERROR);
	kt_ctx *ctx = nullptr;
	kt_ring ring;
	kt_cqe *cqe = nullptr;

	std::printf("TAP version 13\n1..6\n");
	check(kt_version() == KT_VERSION_CODE, "kt_version matches the header");
	if (kt_ctx_create(&o, &ctx)) {
		std::printf("not ok 2 kt_ctx_create\n");
		return 1;
	}
	check(kt_ring_init(ctx, 4, &ring) == 0, "kt_ring_init");
	kt_sqe *sqe = kt_get_sqe(&ring);
	check(sqe != nullptr, "kt_get_sqe");
	kt_prep_nop(sqe, 7);
	sqe = kt_get_sqe(&ring);
	kt_prep_nop(sqe, 8);
	sqe->reserved[1] = 1;	// refused by the consumer
	kt_submit(&ring);
	int res[2] = { 1, 1 };
	for (int i = 0; i < 2; i++) {
		if (kt_wait_cqe(&ring, &cqe))
			break;
		res[cqe->user_data - 7] = cqe->res;
		kt_cqe_seen(&ring);
	}
	check(res[0] == 0, "a NOP completes with 0");
	check(res[1] == -EINVAL, "non-zero reserved completes with -EINVAL");
	check(kt_wait_cqe_timeout(&ring, &cqe, 1000) == -ETIME,
	      "kt_wait_cqe_timeout on an empty CQ is -ETIME");
	kt_ring_exit(&ring);
	kt_ctx_destroy(ctx);
	std::printf("%d passed, %d failed\n", n_test - n_fail, n_fail);
	return n_fail ? 1 : 0;
}
