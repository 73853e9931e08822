// SPDX-License-Identifier: MIT
/*
 * fault.c - walk every fault-injection site (loader/fault.h, ktcore/fault.h
 * and the io_uring reader's hook) of kt convert, of verifying, opening
 * and staging a .ktw, of opening a checkpoint folder, and of
 * kt_model_create(): fail the 1st, 2nd, ... call at each site
 * until the operation no longer reaches it. Each failure must give a
 * -errno with a message, leave no output and no temporary behind, and the
 * same operation must then succeed; a fault the code tolerates (a fallback)
 * must still give a complete file. Leaks are LeakSanitizer's to find: make
 * fault-check builds this with ASan and -DKT_FAULT_INJECT. Skips elsewhere.
 */
#include <dirent.h>
#include <sys/mount.h>

#include <kt/kt.h>
#include "kt_test.h"
#include "ckpt.h"
#include "hugetlb.h"
#include "../moe/model.h"
#include "loader/fault.h"

#ifdef KT_FAULT_INJECT
#define MAX_NTH 2000	/* calls per site walked, at most */

/* LeakSanitizer's check, now: the test child ends with _exit(), which
 * skips the one at exit. Absent without ASan. */
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

static unsigned int dir_entries(const char *dir)
{
	unsigned int n = 0;
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return 0;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.' || (de->d_name[1] &&
		     (de->d_name[1] != '.' || de->d_name[2]));
	closedir(d);
	return n;
}

/* @op with the nth call at every site failing in turn; see the top. */
static void walk(struct kt_test_meta *_metadata, const char *what,
		 int (*op)(void *), void *arg, const char *out,
		 const char *dir)
{
	char sites[] = LDR_FAULT_SITES, spec[64], *site, *save;
	unsigned int base = dir_entries(dir), total = 0;

	for (site = strtok_r(sites, " ", &save); site;
	     site = strtok_r(NULL, " ", &save)) {
		unsigned int nth, failed = 0, tolerated = 0;
		int ret;

		for (nth = 1; nth <= MAX_NTH; nth++) {
			snprintf(spec, sizeof(spec), "%s:%u", site, nth);
			ldr_fault_set(spec);
			ret = op(arg);
			if (ldr_fault_hits() < nth) {
				ASSERT_EQ(ret, 0);	/* not reached */
				if (out)
					unlink(out);
				break;
			}
			if (!ret) {
				/* tolerated: the result must still be whole */
				tolerated++;
				if (out)
					ASSERT_EQ(kt_ktw_verify(out, NULL), 0);
			} else {
				failed++;
				if (!*kt_last_error() || ret >= 0 ||
				    (out && !access(out, F_OK)) ||
				    dir_entries(dir) != base)
					TH_LOG("%s %s: %d (%s), output %s, %u files (%u before)",
					       what, spec, ret, kt_last_error(),
					       out && !access(out, F_OK) ? "left" : "absent",
					       dir_entries(dir), base);
				ASSERT_LT(ret, 0);
				ASSERT_NE(kt_last_error()[0], '\0');
				if (out)
					ASSERT_NE(access(out, F_OK), 0);
				/* no temporary left behind */
				ASSERT_EQ(dir_entries(dir), base);
				/* and it works again once the fault is gone */
				ldr_fault_set(NULL);
				ret = op(arg);
				if (ret)
					TH_LOG("%s after %s: %d (%s)", what,
					       spec, ret, kt_last_error());
				ASSERT_EQ(ret, 0);
			}
			if (out)
				unlink(out);
		}
		ASSERT_LE(nth, MAX_NTH);
		TH_LOG("%s: %-9s %3u calls: %u failed cleanly, %u tolerated",
		       what, site, nth - 1, failed, tolerated);
		total += nth - 1;
	}
	ldr_fault_set(NULL);
	TH_LOG("%s: %u injected faults in all", what, total);
	ASSERT_GT(total, 0u);
	if (__lsan_do_recoverable_leak_check)
		ASSERT_EQ(__lsan_do_recoverable_leak_check(), 0);
}

struct conv_arg {
	struct kt_convert_opts o;
};

static int do_convert(void *arg)
{
	return kt_convert(&((struct conv_arg *)arg)->o);
}

TEST_TIMEOUT(convert_every_site, 600)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 3, 2, 2, 1, 61);
	char d[256], out[300];
	struct conv_arg a = { { .sz = sizeof(a.o), .quant = KT_QUANT_INT8,
				.layer_last = -1, .threads = 2 } };

	snprintf(d, sizeof(d), "/tmp/kt-fault-conv-%d", (int)getpid());
	tck_rmdir(d);
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(out, sizeof(out), "%s/out.ktw", d);
	a.o.input = d;
	a.o.output = out;
	walk(_metadata, "convert", do_convert, &a, out, d);
	tck_free(&c);
	tck_rmdir(d);
}

static int do_verify(void *arg)
{
	struct kt_ktw_info info;
	int ret = kt_ktw_verify(arg, NULL);

	return ret ? ret : kt_ktw_inspect(arg, &info, NULL, 0);
}

TEST(verify_every_site)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 3, 2, 2, 1, 62);
	struct kt_convert_opts o = { .sz = sizeof(o), .quant = KT_QUANT_INT4,
				     .group_size = 32, .layer_last = -1,
				     .threads = 1 };
	char d[256], out[300];

	snprintf(d, sizeof(d), "/tmp/kt-fault-verify-%d", (int)getpid());
	tck_rmdir(d);
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(out, sizeof(out), "%s/out.ktw", d);
	o.input = d;
	o.output = out;
	ASSERT_EQ(kt_convert(&o), 0);
	walk(_metadata, "verify", do_verify, out, NULL, d);
	tck_free(&c);
	tck_rmdir(d);
}
struct open_arg {
	struct kt_ctx *ctx;
	const char *path;
	uint32_t flags;
};

static int do_open(void *arg)
{
	struct open_arg *a = arg;
	struct kt_model_opts o = { .sz = sizeof(o), .flags = a->flags };
	struct kt_model *m = NULL;
	int ret = kt_model_open(a->ctx, a->path, &o, &m);

	kt_model_destroy(m);
	return ret;
}

/* kt_model_open() through io_uring (reader sites) and through pread */
TEST_TIMEOUT(open_every_site, 600)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 3, 2, 2, 1, 63);
	struct kt_convert_opts o = { .sz = sizeof(o), .quant = KT_QUANT_INT8,
				     .layer_last = -1, .threads = 1 };
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 1 };
	struct open_arg a = { 0 };
	char d[256], out[300];

	snprintf(d, sizeof(d), "/tmp/kt-fault-open-%d", (int)getpid());
	tck_rmdir(d);
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(out, sizeof(out), "%s/m.ktw", d);
	o.input = d;
	o.output = out;
	ASSERT_EQ(kt_convert(&o), 0);
	ASSERT_EQ(kt_ctx_create(&co, &a.ctx), 0);
	a.path = out;
	walk(_metadata, "open", do_open, &a, NULL, d);
	a.flags = KT_MODEL_F_NO_URING | KT_MODEL_F_NO_HUGEPAGE;
	walk(_metadata, "open (pread)", do_open, &a, NULL, d);
	kt_ctx_destroy(a.ctx);
	tck_free(&c);
	tck_rmdir(d);
}

/* kt_model_open() of the checkpoint folder itself: packed at load */
TEST_TIMEOUT(open_folder_every_site, 600)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 3, 2, 2, 2, 64);
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 2,
				  .flags = KT_CTX_F_NO_PIN };
	struct open_arg a = { 0 };
	char d[256];

	snprintf(d, sizeof(d), "/tmp/kt-fault-open-dir-%d", (int)getpid());
	tck_rmdir(d);
	ASSERT_EQ(tck_write(&c, d), 0);
	ASSERT_EQ(kt_ctx_create(&co, &a.ctx), 0);
	a.path = d;
	walk(_metadata, "open folder", do_open, &a, NULL, d);
	kt_ctx_destroy(a.ctx);
	tck_free(&c);
	tck_rmdir(d);
}

struct create_arg {
	struct kt_ctx *ctx;
	struct tmodel t;
};

static int do_create(void *arg)
{
	struct create_arg *a = arg;
	struct kt_model *m = NULL;
	int ret = tm_create(&a->t, a->ctx, KT_QUANT_INT4, 32, &m);

	kt_model_destroy(m);
	return ret;
}

TEST(create_every_site)
{
	struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 1 };
	struct create_arg a;
	char d[64];

	snprintf(d, sizeof(d), "/tmp/kt-fault-create-%d", (int)getpid());
	ASSERT_EQ(mkdir(d, 0755), 0);
	tm_init(&a.t, 128, 256, 4, 2, KT_DTYPE_BF16, 64);
	ASSERT_EQ(kt_ctx_create(&co, &a.ctx), 0);
	walk(_metadata, "create", do_create, &a, NULL, d);
	kt_ctx_destroy(a.ctx);
	tm_free(&a.t);
	rmdir(d);
}

struct stage_arg {
	const char *ktw, *mnt;
};

static int do_stage(void *arg)
{
	struct stage_arg *a = arg;

	return kt_ktw_stage(a->ktw, a->mnt, NULL, 0, NULL, NULL);
}

TEST_TIMEOUT(stage_every_site, 600)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 3, 2, 2, 1, 65);
	struct kt_convert_opts o = { .sz = sizeof(o), .quant = KT_QUANT_INT8,
				     .layer_last = -1, .threads = 1 };
	char d[256], mnt[256], ktw[300], staged[300], buf[160];
	struct stage_arg a = { ktw, mnt };
	const char *why = "";

	snprintf(d, sizeof(d), "/tmp/kt-fault-stage-%d", (int)getpid());
	snprintf(mnt, sizeof(mnt), "/tmp/kt-fault-stage-mnt-%d", (int)getpid());
	snprintf(ktw, sizeof(ktw), "%s/m.ktw", d);
	snprintf(staged, sizeof(staged), "%s/m.ktw", mnt);
	tck_rmdir(d);
	ASSERT_EQ(tck_write(&c, d), 0);
	o.input = d;
	o.output = ktw;
	ASSERT_EQ(kt_convert(&o), 0);
	if (th_staging_mount(mnt, 8, &why, buf, sizeof(buf))) {
		tck_free(&c);
		tck_rmdir(d);
		SKIP(return, "%s", why);
	}
	walk(_metadata, "stage", do_stage, &a, staged, mnt);
	unlink(staged);
	umount(mnt);
	rmdir(mnt);
	tck_free(&c);
	tck_rmdir(d);
}
#else
TEST(fault_injection)
{
	SKIP(return, "built without -DKT_FAULT_INJECT (make fault-check)");
}
#endif

TEST_HARNESS_MAIN
