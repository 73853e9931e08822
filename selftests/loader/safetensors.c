// SPDX-License-Identifier: MIT
/*
 * safetensors.c - the safetensors reader on good and malformed files: bad
 * header lengths, broken JSON, wrong types, offsets outside the data or
 * overlapping, sizes that disagree with shape and dtype, overflowing shapes.
 */
#include <errno.h>
#include <fcntl.h>

#include <kt/kt.h>

#include "kt_test.h"
#include "loader/safetensors.h"

static char path[256];

static void write_st(const char *json, uint64_t hlen_override, size_t data)
{
	uint64_t hl = hlen_override ? hlen_override : strlen(json);
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	char zero[256] = { 0 };

	if (write(fd, &hl, 8) != 8 ||
	    write(fd, json, strlen(json)) != (ssize_t)strlen(json))
		abort();
	while (data) {
		size_t n = data < sizeof(zero) ? data : sizeof(zero);

		if (write(fd, zero, n) != (ssize_t)n)
			abort();
		data -= n;
	}
	close(fd);
}

static void setup_path(void)
{
	snprintf(path, sizeof(path), "/tmp/kt-st-%d.safetensors", (int)getpid());
}

TEST(good_file)
{
	struct ldr_st_file *f;

	setup_path();
	write_st("{\"__metadata__\":{\"a\":\"b\"},"
		 "\"x\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
		 "\"y\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[12,16]},"
		 "\"z\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[16,20]}}  ",
		 0, 20);
	ASSERT_EQ(ldr_st_open(path, &f), 0);
	ASSERT_EQ(f->n_tensors, 3u);
	ldr_st_close(f);
	unlink(path);
}

TEST(malformed)
{
	static const struct { const char *json; uint64_t hlen; size_t data; } bad[] = {
		{ "{", 0, 0 },
		{ "[]", 0, 0 },
		{ "{\"x\":1}", 0, 0 },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, 4 },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 0, 4 },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 0, 4 },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 0, 8 },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 0, 4 },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 0, 4 },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 0, 4 },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 0, 4 },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		  "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 0, 8 },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		  "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8 },
		{ "{\"x\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 0, 4 },
		{ "{\"__metadata__\":3}", 0, 0 },
		{ "{}", 1ull << 40, 0 },
		{ "{}", 1, 0 },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 0, 4 },
	};
	struct ldr_st_file *f = NULL;
	size_t i;

	setup_path();
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int ret;

		write_st(bad[i].json, bad[i].hlen, bad[i].data);
		ret = ldr_st_open(path, &f);
		TH_LOG("case %zu: %d %s", i, ret, kt_last_error());
		EXPECT_EQ(ret, -EINVAL);
		EXPECT_NE(kt_last_error()[0], '\0');
	}
	/* shorter than the length field */
	{
		int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);

		ASSERT_EQ(write(fd, "abc", 3), 3);
		close(fd);
		EXPECT_EQ(ldr_st_open(path, &f), -EINVAL);
	}
	unlink(path);
}

TEST_HARNESS_MAIN
