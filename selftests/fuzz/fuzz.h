/* SPDX-License-Identifier: MIT */
/*
 * fuzz.h - one source, two builds: `make fuzz` links each harness with
 * libFuzzer (-DKT_LIBFUZZER); the selftest build replays the harness's seed
 * corpus and a bounded set of seeded mutations of it, so every input that
 * ever crashed (kept in the corpus) is a regression test of `make check`.
 * Define FUZZ_NAME (the corpus folder) before including this.
 */
#ifndef KT_SELFTESTS_FUZZ_H
#define KT_SELFTESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef KT_LIBFUZZER
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt_test.h"

/* The corpus beside this source: the tests run from the top of the tree. */
static int fuzz_corpus_dir(char *buf, size_t n)
{
	snprintf(buf, n, "selftests/fuzz/corpus/%s", FUZZ_NAME);
	return access(buf, R_OK) ? -1 : 0;
}

static uint8_t *fuzz_slurp(const char *path, size_t *len)
{
	uint8_t *buf = NULL;
	long n;
	FILE *f = fopen(path, "rb");

	if (!f)
		return NULL;
	if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 &&
	    !fseek(f, 0, SEEK_SET)) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		*len = (size_t)n;
	}
	fclose(f);
	return buf;
}

static uint64_t fuzz_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Run every corpus file, then @per mutations of each (byte flips, bytes
 * set to edge values, truncation); returns the number of files. */
static int fuzz_replay(unsigned int per)
{
	static const uint8_t edge[] = { 0, 0xff, 0x7f, 0x80, '0', '9', '"', 0x01 };
	char dir[256], path[600];
	struct dirent *de;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	int files = 0;
	DIR *d;

	if (fuzz_corpus_dir(dir, sizeof(dir)))
		return -1;
	d = opendir(dir);
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		uint8_t *buf, *mut;
		size_t len = 0;
		unsigned int i, k;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		buf = fuzz_slurp(path, &len);
		if (!buf)
			continue;
		LLVMFuzzerTestOneInput(buf, len);
		files++;
		for (i = 0; i < per && len; i++) {
			size_t l = len;

			mut = malloc(len);
			memcpy(mut, buf, len);
			for (k = 0; k < 1 + fuzz_rand(&seed) % 4; k++) {
				size_t at = fuzz_rand(&seed) % len;

				if (fuzz_rand(&seed) & 1)
					mut[at] ^= (uint8_t)(1u << (fuzz_rand(&seed) % 8));
				else
					mut[at] = edge[fuzz_rand(&seed) % sizeof(edge)];
			}
			if (fuzz_rand(&seed) % 8 == 0)
				l = fuzz_rand(&seed) % len;
			/* an exact-size copy: ASan sees any read past the end */
			{
				uint8_t *exact = malloc(l ? l : 1);

				memcpy(exact, mut, l);
				LLVMFuzzerTestOneInput(exact, l);
				free(exact);
			}
			free(mut);
		}
		free(buf);
	}
	closedir(d);
	return files;
}

TEST(corpus_and_mutations)
{
	int n = fuzz_replay(300);

	if (n < 0)
		SKIP(return, "no corpus folder selftests/fuzz/corpus/%s (run from the top of the tree)",
		     FUZZ_NAME);
	TH_LOG("%d corpus files, 300 mutations each", n);
	ASSERT_GT(n, 0);
}

TEST_HARNESS_MAIN
#endif /* !KT_LIBFUZZER */

#endif /* KT_SELFTESTS_FUZZ_H */
