// SPDX-License-Identifier: MIT
/*
 * reader.c - the bulk span reader (io_uring with and without registered
 * buffers, pread) and the CRC32C it checks with, against a bitwise
 * reference.
 */
#include <fcntl.h>

#include "kt_test.h"
#include "loader/crc-ref.h"
#include "loader/ckpt.h"
#include "kernels/crc32c.h"
#include "uring/reader.h"

TEST(crc32c_vectors)
{
	static const uint8_t zeros[32], ones[32] = {
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };

	/* RFC 3720 B.4 and the usual check value */
	ASSERT_EQ(kern_crc32c(0, "123456789", 9), 0xe3069283u);
	ASSERT_EQ(kern_crc32c(0, zeros, 32), 0x8a9136aau);
	ASSERT_EQ(kern_crc32c(0, ones, 32), 0x62a8ab43u);
	ASSERT_EQ(kern_crc32c_sw(0, "123456789", 9), 0xe3069283u);
}

TEST(crc32c_lengths_and_alignment)
{
	size_t n = 200000, off, len;
	uint8_t *b = malloc(n);
	uint64_t s = 3;

	for (off = 0; off < n; off++)
		b[off] = (uint8_t)tck_rand(&s);
	for (off = 0; off < 9; off++)
		for (len = 0; len + off < n; len = len * 3 + 1) {
			uint32_t want = crc32c_bits(0, b + off, len);

			ASSERT_EQ(kern_crc32c(0, b + off, len), want);
			ASSERT_EQ(kern_crc32c_sw(0, b + off, len), want);
		}
	/* chaining: crc(a || b) from crc(a) */
	ASSERT_EQ(kern_crc32c(kern_crc32c(0, b, 77777), b + 77777, n - 77777),
		  crc32c_bits(0, b, n));
	free(b);
}

struct seen {
	size_t n;
	uint8_t *count;
	const uint8_t *file;
	int bad;
};

static int on_span(void *arg, size_t idx, const struct ur_span *s)
{
	struct seen *v = arg;

	v->count[idx]++;
	if (memcmp(s->dst, v->file + s->file_off, s->len))
		v->bad++;
	return 0;
}

static int fail_at_3(void *arg, size_t idx, const struct ur_span *s)
{
	return idx == 3 ? -EIO : 0;
}

FIXTURE(rd) {
	char path[256];
	uint8_t *file;
	size_t len;
};

FIXTURE_SETUP(rd)
{
	uint64_t s = 11;
	size_t i;
	int fd;

	self->len = 24u << 20;	/* 24 MiB: several requests and windows */
	self->file = malloc(self->len);
	for (i = 0; i < self->len; i += 8) {
		uint64_t v = tck_rand(&s);

		memcpy(self->file + i, &v, 8);
	}
	snprintf(self->path, sizeof(self->path), "/tmp/kt-reader-%d", (int)getpid());
	fd = open(self->path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	ASSERT_EQ(write(fd, self->file, self->len), (ssize_t)self->len);
	close(fd);
}

FIXTURE_TEARDOWN(rd)
{
	unlink(self->path);
	free(self->file);
}

/* Random 4 KiB-aligned spans, some adjacent (merged), some with gaps. */
static size_t make_spans(struct ur_span *sp, size_t max, uint8_t *mem,
			 size_t file_len, uint64_t seed)
{
	uint64_t off = 0, mo = 0;
	size_t n = 0;

	while (n < max) {
		uint64_t len = (1 + tck_rand(&seed) % 300) * 4096;

		if (tck_rand(&seed) % 3 == 0)
			off += (tck_rand(&seed) % 8) * 4096;	/* file gap */
		if (tck_rand(&seed) % 4 == 0)
			mo += 4096;				/* memory gap */
		if (off + len > file_len)
			break;
		sp[n++] = (struct ur_span){ off, len, mem + mo };
		off += len;
		mo += len;
	}
	return n;
}

static void read_case(struct kt_test_meta *_metadata, FIXTURE_DATA(rd) *self,
		      bool direct, const struct ur_read_opts *o, uint64_t seed)
{
	struct ur_span sp[256];
	struct ur_read_opts ro = *o;
	struct ur_read_stats st;
	struct seen v = { 0 };
	size_t mem_len = self->len + (1u << 20), n, i;
	uint8_t *mem = aligned_alloc(4096, mem_len);
	int fd = open(self->path, O_RDONLY | (direct ? O_DIRECT : 0));

	if (fd < 0 && direct)
		fd = open(self->path, O_RDONLY);
	ASSERT_GE(fd, 0);
	memset(mem, 0, mem_len);
	n = make_spans(sp, 256, mem, self->len, seed);
	ASSERT_GT(n, 4u);
	v.n = n;
	v.count = calloc(n, 1);
	v.file = self->file;
	ro.region = mem;
	ro.region_len = mem_len;
	ASSERT_EQ(ur_read_spans(fd, sp, n, &ro, on_span, &v, &st), 0);
	for (i = 0; i < n; i++)
		ASSERT_EQ(v.count[i], 1);
	ASSERT_EQ(v.bad, 0);
	TH_LOG("%zu spans, %llu requests, io_uring %d fixed %d", n,
	       (unsigned long long)st.requests, st.io_uring, st.fixed);
	if (!o->no_uring && ur_available())
		ASSERT_TRUE(st.io_uring);
	/* a failing callback stops the read with its error */
	ASSERT_EQ(ur_read_spans(fd, sp, n, &ro, fail_at_3, NULL, NULL), -EIO);
	/* past the end of the file: -EIO, not a hang */
	sp[0].file_off = self->len - 4096;
	sp[0].len = 8192;
	ASSERT_EQ(ur_read_spans(fd, sp, 1, &ro, NULL, NULL, NULL), -EIO);
	close(fd);
	free(v.count);
	free(mem);
}

TEST_F(rd, uring_fixed_direct)
{
	struct ur_read_opts o = { 0 };

	if (!ur_available())
		SKIP(return, "io_uring is not available here");
	read_case(_metadata, self, true, &o, 1);
}

TEST_F(rd, uring_plain_small_blocks)
{
	struct ur_read_opts o = { .no_fixed = true, .block = 64 << 10,
				  .depth = 4 };

	if (!ur_available())
		SKIP(return, "io_uring is not available here");
	read_case(_metadata, self, true, &o, 2);
}

TEST_F(rd, uring_deep_buffered_sync)
{
	struct ur_read_opts o = { .depth = 256, .block = 1 << 20,
				  .sync_cb = true, .no_populate = true };

	if (!ur_available())
		SKIP(return, "io_uring is not available here");
	read_case(_metadata, self, false, &o, 3);
}

TEST_F(rd, pread_fallback)
{
	struct ur_read_opts o = { .no_uring = true, .block = 3 << 20 };

	read_case(_metadata, self, true, &o, 4);
}

TEST_HARNESS_MAIN
