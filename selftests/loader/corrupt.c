// SPDX-License-Identifier: MIT
/*
 * corrupt.c - damaged .ktw files: truncation at every region, bad magic and
 * version, counts, offsets and sizes out of range or overflowing,
 * overlapping blobs, wrong checksums. Each must give -EINVAL or -EIO with a
 * message, never a crash (run under ASan with make SAN=address check).
 */
#include <fcntl.h>

#include "kt_test.h"
#include "crc-ref.h"
#include "ckpt.h"
#include "gguf-write.h"
#include "test-ctx.h"
#include "loader/ktw-format.h"

FIXTURE(ktw) {
	char dir[256];
	char good[300];
	char bad[300];
	uint8_t *img;		/* the good file */
	size_t len;
	struct ktw_header h;
	struct ktw_entry *table;
	int32_t *layers;
	struct kt_ctx *ctx;
};

FIXTURE_SETUP(ktw)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 3, 2, 2, 1, 31);
	struct kt_convert_opts o = { .sz = sizeof(o), .quant = KT_QUANT_INT8,
				     .layer_last = -1, .threads = 1 };
	FILE *f;

	snprintf(self->dir, sizeof(self->dir), "/tmp/kt-corrupt-%d", (int)getpid());
	snprintf(self->good, sizeof(self->good), "%s/good.ktw", self->dir);
	snprintf(self->bad, sizeof(self->bad), "%s/bad.ktw", self->dir);
	ASSERT_EQ(tck_convert(&c, self->dir, &o, self->good), 0);
	f = fopen(self->good, "rb");
	ASSERT_TRUE(f != NULL);
	fseek(f, 0, SEEK_END);
	self->len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	self->img = malloc(self->len);
	ASSERT_EQ(fread(self->img, 1, self->len, f), self->len);
	fclose(f);
	memcpy(&self->h, self->img, sizeof(self->h));
	self->layers = (int32_t *)(self->img + self->h.layers_off);
	self->table = (struct ktw_entry *)(self->img + self->h.table_off);
	ASSERT_EQ(self->h.n_layers, 2u);
	ASSERT_EQ(self->h.n_experts, 3u);
	ASSERT_EQ(test_ctx(&self->ctx), 0);
}

FIXTURE_TEARDOWN(ktw)
{
	kt_ctx_destroy(self->ctx);
	free(self->img);
	tck_rmdir(self->dir);
}

static void write_img(const char *path, const uint8_t *img, size_t len)
{
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);

	if (write(fd, img, len) != (ssize_t)len)
		abort();
	close(fd);
}

/* Reseal: meta_crc over layers+table, then header_crc. */
static void reseal(uint8_t *img)
{
	struct ktw_header h;
	uint64_t n;
	uint32_t crc;

	memcpy(&h, img, sizeof(h));
	n = (uint64_t)h.n_layers * h.n_experts;
	/* only when the regions are inside the image the test built */
	if (h.layers_off < (1u << 20) && h.table_off < (1u << 20) &&
	    n < 4096) {
		crc = crc32c_bits(0, img + h.layers_off, 4ull * h.n_layers);
		h.meta_crc = crc32c_bits(crc, img + h.table_off, n * 32);
	}
	h.header_crc = 0;
	h.header_crc = crc32c_bits(0, &h, sizeof(h));
	memcpy(img, &h, sizeof(h));
}

/* Both the inspector and the loader must refuse @img with @err. */
static void expect_refused(struct kt_test_meta *_metadata,
			   FIXTURE_DATA(ktw) *self, const uint8_t *img,
			   size_t len, int err, const char *what)
{
	struct kt_ktw_info info;
	struct kt_model *m = NULL;
	int ret;

	write_img(self->bad, img, len);
	ret = kt_ktw_inspect(self->bad, &info, NULL, 0);
	TH_LOG("%s: inspect: %d %s", what, ret, kt_last_error());
	EXPECT_EQ(ret, err);
	EXPECT_NE(kt_last_error()[0], '\0');
	ret = kt_model_open(self->ctx, self->bad, NULL, &m);
	EXPECT_EQ(ret, err);
	EXPECT_TRUE(m == NULL);
	if (!ret)
		kt_model_destroy(m);
}

TEST_F(ktw, good_file_opens)
{
	struct kt_model *m = NULL;

	ASSERT_EQ(kt_model_open(self->ctx, self->good, NULL, &m), 0);
	kt_model_destroy(m);
	ASSERT_EQ(kt_ktw_verify(self->good, NULL), 0);
}

TEST_F(ktw, truncated_everywhere)
{
	const uint64_t blob0 = self->table[0].offset;
	const uint64_t stride = self->h.blob_stride;
	uint64_t cuts[] = {
		0, 1, 7, 8, 100, sizeof(struct ktw_header) - 1,
		sizeof(struct ktw_header), 4095, 4096, 4097,
		self->h.layers_off + 4, self->h.table_off,
		self->h.table_off + 17, self->h.table_off + 32,
		self->h.data_off - 1, self->h.data_off, blob0 + 1,
		blob0 + self->h.part_off[2], blob0 + self->h.expert_bytes - 1,
		blob0 + stride, blob0 + 3 * stride + 5,
		self->len - stride, self->len - 4096, self->len - 1,
	};
	size_t i;

	for (i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		char what[64];

		ASSERT_LT(cuts[i], self->len);
		snprintf(what, sizeof(what), "cut at %llu", (unsigned long long)cuts[i]);
		expect_refused(_metadata, self, self->img, cuts[i], -EINVAL, what);
	}
}

TEST_F(ktw, bad_magic_and_version)
{
	uint8_t *img = malloc(self->len);
	struct ktw_header *h = (struct ktw_header *)img;

	memcpy(img, self->img, self->len);
	h->magic[0] = 'X';
	expect_refused(_metadata, self, img, self->len, -EINVAL, "magic");
	EXPECT_TRUE(strstr(kt_last_error(), "magic") != NULL);
	memcpy(img, self->img, self->len);
	h->version_major = KTW_VERSION_MAJOR + 1;
	reseal(img);
	expect_refused(_metadata, self, img, self->len, -EINVAL, "newer major version");
	EXPECT_TRUE(strstr(kt_last_error(), "version") != NULL);
	/* a newer minor is fine */
	memcpy(img, self->img, self->len);
	h->version_minor = 7;
	reseal(img);
	write_img(self->bad, img, self->len);
	{
		struct kt_ktw_info info;

		EXPECT_EQ(kt_ktw_inspect(self->bad, &info, NULL, 0), 0);
		EXPECT_EQ(info.version_minor, 7u);
	}
	/* 2.0 and 2.1 files (one quantization) read as they always did */
	for (int minor = 0; minor < 2; minor++) {
		struct kt_ktw_info info;
		struct kt_model *m = NULL;

		memcpy(img, self->img, self->len);
		h->version_minor = (uint16_t)minor;
		reseal(img);
		write_img(self->bad, img, self->len);
		EXPECT_EQ(kt_ktw_inspect(self->bad, &info, NULL, 0), 0);
		EXPECT_EQ(info.down_quant, info.quant);
		EXPECT_EQ(kt_model_open(self->ctx, self->bad, NULL, &m), 0);
		kt_model_destroy(m);
	}
	/* header damage caught by the header checksum */
	memcpy(img, self->img, self->len);
	h->hidden ^= 1u << 8;
	expect_refused(_metadata, self, img, self->len, -EINVAL, "header crc");
	EXPECT_TRUE(strstr(kt_last_error(), "header checksum") != NULL);
	/* the zero tail of the header region must stay zero */
	memcpy(img, self->img, self->len);
	img[3000] = 1;
	expect_refused(_metadata, self, img, self->len, -EINVAL, "tail");
	free(img);
}

/* Header fields out of range, each with a valid checksum. */
TEST_F(ktw, header_fields_out_of_range)
{
	uint8_t *img = malloc(self->len);
	struct ktw_header *h = (struct ktw_header *)img;
	int i;

	for (i = 0; i < 24; i++) {
		memcpy(img, self->img, self->len);
		switch (i) {
		case 0: h->n_layers = 0; break;
		case 1: h->n_layers = 0xffffffffu; break;
		case 2: h->n_experts = 0; break;
		case 3: h->n_experts = 1u << 30; break;
		case 4: h->hidden = 100; break;
		case 5: h->inter = 1u << 31; break;
		case 6: h->quant = 9; break;
		case 7: h->group_size = 64; break;	/* INT8 has none */
		case 8: h->expert_bytes += 64; break;
		case 9: h->blob_stride = 4096; break;
		case 10: h->part_off[3] += 4; break;
		case 11: h->layers_off = 8; break;
		case 12: h->layers_off = UINT64_MAX - 3; break;
		case 13: h->table_off = h->layers_off; break;
		case 14: h->table_off = UINT64_MAX - 7; break;
		case 15: h->data_off = h->table_off + 8; break;
		case 16: h->data_off = UINT64_MAX & ~4095ull; break;
		case 17: h->file_size = UINT64_MAX & ~4095ull; break;
		case 18: h->file_size -= 4096; break;
		case 19: h->flags = 1; break;	/* down quant 0 */
		case 20: h->flags = 2; break;
		case 21: h->down_quant = KT_QUANT_Q6_K; break;	/* no flag */
		case 22: h->flags = KTW_F_DOWN_QUANT;	/* INT8 does not mix */
			h->down_quant = KT_QUANT_Q6_K; break;
		case 23: h->flags = KTW_F_DOWN_QUANT;
			h->down_quant = h->quant; break;
		}
		reseal(img);
		{
			char what[32];

			snprintf(what, sizeof(what), "field case %d", i);
			expect_refused(_metadata, self, img, self->len, -EINVAL, what);
		}
	}
	free(img);
}

/* Table damage with valid checksums: offsets, sizes, order, overlap. */
TEST_F(ktw, table_out_of_range)
{
	uint8_t *img = malloc(self->len);
	struct ktw_entry *t;
	int32_t *layers;
	int i;

	for (i = 0; i < 11; i++) {
		char what[32];

		memcpy(img, self->img, self->len);
		t = (struct ktw_entry *)(img + self->h.table_off);
		layers = (int32_t *)(img + self->h.layers_off);
		switch (i) {
		case 0: t[2].offset = self->len; break;
		case 1: t[2].offset = UINT64_MAX & ~4095ull; break;
		case 2: t[2].offset += 8; break;			/* unaligned */
		case 3: t[3].offset = t[2].offset; break;		/* overlap */
		case 4: t[1].offset = t[0].offset + 4096; break;	/* partial overlap */
		case 5: t[0].offset = self->h.table_off & ~4095ull; break; /* into the table */
		case 6: t[4].size = UINT64_MAX; break;
		case 7: t[4].size = 0; break;
		case 8: t[1].expert = 0; break;			/* order */
		case 9: layers[1] = layers[0]; break;		/* not increasing */
		case 10: layers[0] = -5; break;
		}
		reseal(img);
		snprintf(what, sizeof(what), "table case %d", i);
		expect_refused(_metadata, self, img, self->len, -EINVAL, what);
	}
	/* table damage without resealing: the table checksum */
	memcpy(img, self->img, self->len);
	((struct ktw_entry *)(img + self->h.table_off))[1].crc ^= 1;
	expect_refused(_metadata, self, img, self->len, -EINVAL, "table crc");
	EXPECT_TRUE(strstr(kt_last_error(), "checksum") != NULL);
	free(img);
}

TEST_F(ktw, blob_checksum)
{
	uint8_t *img = malloc(self->len);
	struct kt_model_opts mo = { .sz = sizeof(mo),
				    .flags = KT_MODEL_F_NO_VERIFY };
	struct kt_model *m = NULL;
	uint64_t bad = 0;

	memcpy(img, self->img, self->len);
	img[self->table[4].offset + 1000] ^= 0x40;	/* layer 1, expert 1 */
	write_img(self->bad, img, self->len);
	EXPECT_EQ(kt_model_open(self->ctx, self->bad, NULL, &m), -EIO);
	TH_LOG("%s", kt_last_error());
	EXPECT_TRUE(strstr(kt_last_error(), "expert 1: checksum") != NULL);
	EXPECT_EQ(kt_ktw_verify(self->bad, &bad), -EIO);
	EXPECT_EQ(bad, 1u);
	/* asked not to verify: opens (the caller chose speed) */
	EXPECT_EQ(kt_model_open(self->ctx, self->bad, &mo, &m), 0);
	kt_model_destroy(m);
	/* the pread path checks too */
	mo.flags = KT_MODEL_F_NO_URING;
	EXPECT_EQ(kt_model_open(self->ctx, self->bad, &mo, &m), -EIO);
	free(img);
}

TEST_F(ktw, not_a_file)
{
	struct kt_model *m = NULL;
	struct kt_ktw_info info;

	EXPECT_EQ(kt_ktw_inspect(self->dir, &info, NULL, 0), -EINVAL);
	EXPECT_EQ(kt_ktw_inspect("/nonexistent/x.ktw", &info, NULL, 0), -ENOENT);
	EXPECT_EQ(kt_model_open(self->ctx, "/nonexistent/x.ktw", NULL, &m), -ENOENT);
	EXPECT_EQ(kt_model_open(self->ctx, "/dev/null", NULL, &m), -EINVAL);
}

static int open_img(struct kt_ctx *ctx, const char *path, const uint8_t *img,
		    size_t len)
{
	struct kt_ktw_info info;
	struct kt_model *m = NULL;
	int r1, r2;

	write_img(path, img, len);
	r1 = kt_ktw_inspect(path, &info, NULL, 0);
	r2 = kt_model_open(ctx, path, NULL, &m);
	kt_model_destroy(m);
	return r1 ? r1 : r2;
}

/*
 * A .ktw of a GGUF file with gate/up Q4_K and down Q6_K: 2.2 with
 * KTW_F_DOWN_QUANT, which a 2.0/2.1 reader refuses as an unknown flag
 * (its check: flags or reserved0 nonzero). Every other way of writing
 * the down type is refused by this reader.
 */
TEST(ktw_down_quant_header)
{
	struct gw_cfg c = {
		.arch = "qwen3moe", .H = 256, .I = 256, .E = 2, .k = 1, .L = 1,
		.type = GW_Q4_K, .down_type = GW_Q6_K, .seed = 5,
	};
	char out[64], bad[64];
	struct kt_convert_opts co = { .sz = sizeof(co), .output = out,
				      .layer_last = -1, .threads = 1 };
	struct gw_tensor t[8];
	struct kt_ktw_info info;
	struct kt_model_info mi;
	struct kt_model *m = NULL;
	struct ktw_header *h;
	struct kt_ctx *ctx;
	struct gw_buf b;
	uint8_t *img;
	size_t n, data, len;
	char *path;
	FILE *f;
	int i;

	gw_build(&c, &b, t, &n, &data);
	path = gw_save(&b);
	free(b.p);
	ASSERT_NE(path, NULL);
	snprintf(out, sizeof(out), "/tmp/kt-mix-%d.ktw", (int)getpid());
	snprintf(bad, sizeof(bad), "/tmp/kt-mix-%d-bad.ktw", (int)getpid());
	co.input = path;
	ASSERT_EQ(kt_convert(&co), 0);
	unlink(path);
	free(path);
	ASSERT_EQ(kt_ktw_inspect(out, &info, NULL, 0), 0);
	EXPECT_GE(info.version_minor, 2u);	/* 2.2 added the flag */
	EXPECT_EQ(info.quant, KT_QUANT_Q4_K);
	EXPECT_EQ(info.down_quant, KT_QUANT_Q6_K);
	ASSERT_EQ(test_ctx(&ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, out, NULL, &m), 0);
	kt_model_get_info(m, &mi);
	EXPECT_EQ(mi.quant, KT_QUANT_Q4_K);
	EXPECT_EQ(mi.down_quant, (uint32_t)KT_QUANT_Q6_K);
	kt_model_destroy(m);
	f = fopen(out, "rb");
	ASSERT_TRUE(f != NULL);
	fseek(f, 0, SEEK_END);
	len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	img = malloc(len);
	ASSERT_EQ(fread(img, 1, len, f), len);
	fclose(f);
	unlink(out);
	h = (struct ktw_header *)img;
	EXPECT_EQ(h->flags, KTW_F_DOWN_QUANT);
	EXPECT_EQ(h->down_quant, (uint32_t)KT_QUANT_Q6_K);
	for (i = 0; i < 6; i++) {
		struct ktw_header keep = *h;

		switch (i) {
		case 0: h->flags = 0; break;	/* the field alone */
		case 1: h->flags = 0; h->down_quant = 0; break;	/* one type */
		case 2: h->version_minor = 1; break;
		case 3: h->down_quant = KT_QUANT_Q5_K; break;	/* sizes */
		case 4: h->down_quant = KT_QUANT_BF16; break;
		case 5: h->flags |= 1u << 5; break;
		}
		reseal(img);
		EXPECT_EQ(open_img(ctx, bad, img, len), -EINVAL);
		TH_LOG("case %d: %s", i, kt_last_error());
		*h = keep;
	}
	reseal(img);
	EXPECT_EQ(open_img(ctx, bad, img, len), 0);
	unlink(bad);
	free(img);
	kt_ctx_destroy(ctx);
}

TEST_HARNESS_MAIN
