// SPDX-License-Identifier: MIT
/*
 * dlopen.c - the CUDA driver layer without a GPU: a missing library, an
 * old one that lacks an entry point, the stand-in's device, the CUresult
 * table, and context options that name devices.
 */
#include <errno.h>

#include <kt/kt.h>

#include "kt_test.h"
#include "gpu/cu.h"
#include "gpu/gpu.h"
#include "stub.h"

static int ctx_gpu(uint64_t mask, struct kt_ctx **ctx)
{
	struct kt_ctx_opts o = {
		.sz = sizeof(o), .threads = 1, .gpu_mask = mask,
		.log_fn = stub_quiet,
	};

	return kt_ctx_create(&o, ctx);
}

TEST(missing_library)
{
	struct kt_sysinfo si;
	struct kt_ctx *ctx = NULL;
	struct gpu_cu cu;
	char why[160];

	setenv("KT_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
	ASSERT_EQ(kt_sysinfo_get(&si), 0);
	EXPECT_FALSE(si.cuda_driver);
	EXPECT_EQ(si.cuda_devices, 0);
	EXPECT_NE(strstr(si.cuda_why, "no CUDA driver"), NULL);
	ASSERT_EQ(gpu_cu_load(&cu, why, sizeof(why)), -ENODEV);
	EXPECT_NE(strstr(why, "/nonexistent/libcuda.so.1"), NULL);
	/* a GPU asked for is an error; none asked for is a CPU context */
	EXPECT_EQ(ctx_gpu(1, &ctx), -ENODEV);
	EXPECT_TRUE(ctx == NULL);
	ASSERT_EQ(ctx_gpu(0, &ctx), 0);
	EXPECT_EQ(kt_ctx_gpu_info(ctx, &(struct kt_gpu_info){ 0 }), -ENODEV);
	kt_ctx_destroy(ctx);
}

TEST(old_driver)
{
	struct kt_sysinfo si;
	struct kt_ctx *ctx = NULL;
	struct gpu_cu cu;
	struct stub s;
	char why[160];

	if (stub_use(&s, "libcuda-stub-old.so"))
		SKIP(return, "stand-in libcuda-stub-old.so not built");
	ASSERT_EQ(gpu_cu_load(&cu, why, sizeof(why)), -EOPNOTSUPP);
	EXPECT_NE(strstr(why, "cuLaunchHostFunc"), NULL);
	ASSERT_EQ(kt_sysinfo_get(&si), 0);
	EXPECT_FALSE(si.cuda_driver);
	EXPECT_NE(strstr(si.cuda_why, "too old"), NULL);
	EXPECT_EQ(ctx_gpu(1, &ctx), -EOPNOTSUPP);
	EXPECT_EQ(s.live(), 0);
}

TEST(stub_device)
{
	struct kt_gpu_info gi;
	struct kt_sysinfo si;
	struct kt_ctx *ctx = NULL;
	struct stub s;
	size_t fb;

	if (stub_use(&s, "libcuda-stub.so"))
		SKIP(return, "stand-in libcuda-stub.so not built");
	ASSERT_EQ(kt_sysinfo_get(&si), 0);
	EXPECT_TRUE(si.cuda_driver);
	EXPECT_EQ(si.cuda_devices, 1);
	EXPECT_EQ(si.cuda_version, 12080);
	EXPECT_EQ(si.cuda_kernels, gpu_fatbin(&fb) != NULL);
	ASSERT_EQ(ctx_gpu(1, &ctx), 0);
	ASSERT_EQ(kt_ctx_gpu_info(ctx, &gi), 0);
	EXPECT_EQ(gi.ordinal, 0);
	EXPECT_EQ(gi.cc_major, 9);
	EXPECT_EQ(strcmp(gi.name, "kt stub GPU"), 0);
	EXPECT_EQ(gi.kernels, gpu_fatbin(&fb) != NULL);
	if (!gi.kernels)
		EXPECT_NE(strstr(gi.why, "nvcc"), NULL);
	EXPECT_GT(s.live(), 0);
	kt_ctx_destroy(ctx);
	EXPECT_EQ(s.live(), 0);
	/* device 1 does not exist; two devices are not supported yet */
	EXPECT_EQ(ctx_gpu(2, &ctx), -ENODEV);
	EXPECT_EQ(ctx_gpu(3, &ctx), -EOPNOTSUPP);
	EXPECT_EQ(s.live(), 0);
}

TEST(cuda_init_fails)
{
	struct kt_sysinfo si;
	struct kt_ctx *ctx = NULL;
	struct stub s;

	if (stub_use(&s, "libcuda-stub.so"))
		SKIP(return, "stand-in libcuda-stub.so not built");
	s.set_fail_at(1);	/* cuInit: CUDA_ERROR_NO_DEVICE */
	ASSERT_EQ(kt_sysinfo_get(&si), 0);
	EXPECT_FALSE(si.cuda_driver);
	EXPECT_NE(strstr(si.cuda_why, "CUDA_ERROR_NO_DEVICE"), NULL);
	s.set_fail_at(1);
	EXPECT_EQ(ctx_gpu(1, &ctx), -ENODEV);
}

TEST(error_table)
{
	EXPECT_EQ(gpu_cu_errno(CUDA_SUCCESS), 0);
	EXPECT_EQ(gpu_cu_errno(CUDA_ERROR_INVALID_VALUE), -EINVAL);
	EXPECT_EQ(gpu_cu_errno(CUDA_ERROR_OUT_OF_MEMORY), -ENOMEM);
	EXPECT_EQ(gpu_cu_errno(CUDA_ERROR_NO_DEVICE), -ENODEV);
	EXPECT_EQ(gpu_cu_errno(CUDA_ERROR_NOT_READY), -EAGAIN);
	EXPECT_EQ(gpu_cu_errno(CUDA_ERROR_NOT_SUPPORTED), -EOPNOTSUPP);
	EXPECT_EQ(gpu_cu_errno(CUDA_ERROR_LAUNCH_FAILED), -EIO);
	EXPECT_EQ(gpu_cu_errno(209), -EOPNOTSUPP);	/* NO_BINARY_FOR_GPU */
	/* an unknown code is still a failure, with a name */
	EXPECT_EQ(gpu_cu_errno(12345), -EIO);
	EXPECT_NE(gpu_cu_name(NULL, 12345), NULL);
	EXPECT_EQ(strcmp(gpu_cu_name(NULL, CUDA_ERROR_NOT_FOUND),
			 "CUDA_ERROR_NOT_FOUND"), 0);
}

TEST(bad_options)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 1 };
	struct kt_ctx *ctx = NULL;

	/* the fields after gpu_mask are still reserved */
	o.reserved[0] = 1;
	EXPECT_EQ(kt_ctx_create(&o, &ctx), -EINVAL);
	EXPECT_TRUE(ctx == NULL);
}

TEST_HARNESS_MAIN
