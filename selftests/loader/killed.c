// SPDX-License-Identifier: MIT
/*
 * killed.c - crash safety: `kt convert` and `kt stage` killed with SIGKILL
 * at random points, many times. The output name must then hold either
 * nothing (or the previous complete file) or a complete file that passes
 * kt_ktw_verify(); never a partial one. The kill points are spread over
 * the measured length of one uninterrupted run; no timing is asserted.
 */
#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <time.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <stdbool.h>

#include <kt/kt.h>
#include "kt_test.h"
#include "kt-bin.h"
#include "hugetlb.h"
#include "ckpt.h"

#define KILLS 40	/* per command; KT_KILLS overrides */
#define EXTRA_PAGES 8

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static pid_t spawn(char *const argv[])
{
	pid_t pid = fork();

	if (!pid) {
		int fd = open("/dev/null", O_WRONLY);

		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Run to the end; its length in microseconds, or 0 when it failed. */
static uint64_t timed_run(char *const argv[])
{
	uint64_t t0 = now_us();
	int status;
	pid_t pid = spawn(argv);

	if (pid < 0 || waitpid(pid, &status, 0) != pid ||
	    !WIFEXITED(status) || WEXITSTATUS(status))
		return 0;
	return now_us() - t0 + 1;
}

/* Start @argv, SIGKILL it after @delay_us; whether it died of the kill. */
static bool run_killed(char *const argv[], uint64_t delay_us)
{
	int status;
	pid_t pid = spawn(argv);

	if (pid < 0)
		return false;
	usleep((useconds_t)delay_us);
	kill(pid, SIGKILL);
	if (waitpid(pid, &status, 0) != pid)
		return false;
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

static unsigned int kills(void)
{
	const char *e = getenv("KT_KILLS");

	return e && atoi(e) > 0 ? (unsigned int)atoi(e) : KILLS;
}

/* @path is absent (-1), or complete and verified (1); 0 if damaged. */
static int outcome(struct kt_test_meta *_metadata, const char *path)
{
	int ret;

	if (access(path, F_OK))
		return -1;
	ret = kt_ktw_verify(path, NULL);
	if (ret)
		TH_LOG("%s: %s", path, kt_last_error());
	return ret ? 0 : 1;
}

/* Count the files of @dir other than @keep (NULL-terminated). */
static unsigned int strays(const char *dir, const char *const *keep)
{
	unsigned int n = 0;
	struct dirent *de;
	DIR *d = opendir(dir);
	const char *const *k;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		bool known = de->d_name[0] == '.' && (!de->d_name[1] ||
			     (de->d_name[1] == '.' && !de->d_name[2]));

		for (k = keep; *k && !known; k++)
			known = !strcmp(de->d_name, *k) ||
				!strncmp(de->d_name, "model-", 6);
		n += !known;
	}
	closedir(d);
	return n;
}

/*
 * A kill between the link of the finished O_TMPFILE as out.ktw.tmp.PID and
 * its rename leaves that name behind: it must be complete. Check, remove
 * and count such files.
 */
static unsigned int linked_tmps(struct kt_test_meta *_metadata,
				const char *dir)
{
	char p[600];
	unsigned int n = 0;
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "out.ktw.tmp.", 12))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		EXPECT_EQ(outcome(_metadata, p), 1);
		unlink(p);
		n++;
	}
	closedir(d);
	return n;
}

TEST_TIMEOUT(convert_sigkill_leaves_nothing_or_a_whole_file, 600)
{
	static const char *const keep[] = { "config.json", "model.safetensors",
					    "out.ktw", NULL };
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 256, 256, 8, 2, 2, 1, 51);
	char d[256], out[300], bin[PATH_MAX];
	char *argv[] = { bin, "convert", "--input", d, "--output", out,
			 "--method", "int8", "--threads", "1", NULL };
	unsigned int i, n = kills(), absent = 0, whole = 0, kept = 0, tmps = 0;
	uint64_t full, seed = 0x51u;

	snprintf(d, sizeof(d), "/tmp/kt-killed-conv-%d", (int)getpid());
	tck_rmdir(d);
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(out, sizeof(out), "%s/out.ktw", d);
	kt_bin(bin, sizeof(bin));
	full = timed_run(argv);
	ASSERT_GT(full, 0u);
	for (i = 0; i < n; i++) {
		/* odd rounds start from a complete file: it must survive */
		bool had = i & 1;
		int o;

		if (!had)
			unlink(out);
		else if (access(out, F_OK))
			ASSERT_GT(timed_run(argv), 0u);
		run_killed(argv, tck_rand(&seed) % (full + full / 4));
		o = outcome(_metadata, out);
		ASSERT_NE(o, 0);
		if (had)
			ASSERT_EQ(o, 1);
		absent += o < 0;
		whole += o > 0;
		kept += had;
		tmps += linked_tmps(_metadata, d);
	}
	TH_LOG("%u kills over %llu us: %u left nothing, %u a complete file (%u over a previous one); %u complete temporaries, %u other files",
	       n, (unsigned long long)full, absent, whole, kept, tmps,
	       strays(d, keep));
	/* O_TMPFILE: a killed conversion leaves no partial temporary */
	EXPECT_EQ(strays(d, keep), 0u);
	tck_free(&c);
	tck_rmdir(d);
}

/* Count (and with @rm remove) the temporaries of killed stages in @mnt. */
static unsigned int stage_tmps(const char *mnt, bool rm)
{
	char p[600];
	unsigned int n = 0;
	struct dirent *de;
	DIR *dd = opendir(mnt);

	if (!dd)
		return 0;
	while ((de = readdir(dd))) {
		if (!strncmp(de->d_name, ".m.ktw.tmp.", 11)) {
			snprintf(p, sizeof(p), "%s/%s", mnt, de->d_name);
			n += !rm || !unlink(p);
		}
	}
	closedir(dd);
	return n;
}

FIXTURE(stg) {
	char dir[256];
	char mnt[256];
	char ktw[300];
	bool mounted;
};

FIXTURE_SETUP(stg)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 256, 256, 8, 2, 2, 1, 52);
	struct kt_convert_opts o = { .sz = sizeof(o), .quant = KT_QUANT_INT8,
				     .layer_last = -1, .threads = 1 };
	const char *why = "";
	char buf[160];

	snprintf(self->dir, sizeof(self->dir), "/tmp/kt-killed-stg-%d", (int)getpid());
	snprintf(self->mnt, sizeof(self->mnt), "/tmp/kt-killed-mnt-%d", (int)getpid());
	snprintf(self->ktw, sizeof(self->ktw), "%s/m.ktw", self->dir);
	ASSERT_EQ(tck_convert(&c, self->dir, &o, self->ktw), 0);
	if (th_staging_mount(self->mnt, EXTRA_PAGES, &why, buf, sizeof(buf)))
		SKIP(return, "%s", why);
	self->mounted = true;
}

FIXTURE_TEARDOWN(stg)
{
	char staged[600];

	snprintf(staged, sizeof(staged), "%s/m.ktw", self->mnt);
	unlink(staged);
	stage_tmps(self->mnt, true);	/* they would pin hugepages */
	if (self->mounted)
		umount(self->mnt);
	rmdir(self->mnt);
	tck_rmdir(self->dir);
}

TEST_F_TIMEOUT(stg, stage_sigkill_leaves_nothing_or_a_whole_file, 600)
{
	char staged[600], bin[PATH_MAX];
	char *argv[] = { bin, "stage", self->ktw, self->mnt, NULL };
	unsigned int i, n = kills(), absent = 0, whole = 0, most = 0;
	uint64_t full, seed = 0x52u;

	snprintf(staged, sizeof(staged), "%s/m.ktw", self->mnt);
	kt_bin(bin, sizeof(bin));
	full = timed_run(argv);
	/* the pages are the machine's: another process may take them
	 * between the setup and here (stage.c tests kt stage itself) */
	if (!full)
		SKIP(return, "kt stage failed uninterrupted (hugepages taken meanwhile?)");
	for (i = 0; i < n; i++) {
		int o;

		unlink(staged);
		run_killed(argv, tck_rand(&seed) % (full + full / 4));
		o = outcome(_metadata, staged);
		ASSERT_NE(o, 0);
		absent += o < 0;
		whole += o > 0;
		/* hugetlbfs has no O_TMPFILE: a killed stage leaves its
		 * temporary, and the next stage removes it (its pid is gone),
		 * so that one at most is ever left and the pages never run out */
		if (stage_tmps(self->mnt, false) > most)
			most = stage_tmps(self->mnt, false);
	}
	TH_LOG("%u kills over %llu us: %u left nothing, %u a complete file; at most %u temporaries of killed stages at once",
	       n, (unsigned long long)full, absent, whole, most);
	EXPECT_LE(most, 1u);
}

TEST_HARNESS_MAIN
