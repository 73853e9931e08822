// SPDX-License-Identifier: MIT
/*
 * corrupt.c - damaged .ktw files: truncation at every region, bad magic and
 * version, counts, offsets and sizes out of range or overflowing,
 * overlapping blobs, wrong checksums. Each must give -EINVAL or -EIO with a
 * message, never a crash (run under ASan with make SAN=address check).
 */
#include <fcntl.h>
#include <math.h>

#include "kt_test.h"
#include "crc-ref.h"
#include "ckpt.h"
#include "gguf-write.h"
#include "kt-bin.h"
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

static bool all_zero_bytes(const uint8_t *p, size_t n)
{
	while (n--)
		if (*p++)
			return false;
	return true;
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
		case 6: h->quant = 10; break;
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
	EXPECT_EQ(h->flags, KTW_F_DOWN_QUANT | KTW_F_QK_REC);
	EXPECT_EQ(h->down_quant, (uint32_t)KT_QUANT_Q6_K);
	/* a 2.3 reader knows neither the record layout nor its flag */
	EXPECT_TRUE(h->flags & ~(uint32_t)(KTW_F_DOWN_QUANT | KTW_F_2_3));
	for (i = 0; i < 8; i++) {
		struct ktw_header keep = *h;

		switch (i) {
		case 0: h->flags = KTW_F_QK_REC; break;	/* the field alone */
		case 1: h->flags = KTW_F_QK_REC; h->down_quant = 0; break;
		case 2: h->version_minor = 1; break;
		case 3: h->down_quant = KT_QUANT_Q5_K; break;	/* sizes */
		case 4: h->down_quant = KT_QUANT_BF16; break;
		case 5: h->flags |= 1u << 5; break;
		/* scales in the layout before 2.4, or the flag in 2.3 */
		case 6: h->flags &= ~KTW_F_QK_REC; break;
		case 7: h->version_minor = 3; break;
		}
		reseal(img);
		EXPECT_EQ(open_img(ctx, bad, img, len), -EINVAL);
		TH_LOG("case %d: %s", i, kt_last_error());
		if (i == 6)
			EXPECT_NE(strstr(kt_last_error(),
					 "re-run kt convert"), NULL);
		*h = keep;
	}
	reseal(img);
	EXPECT_EQ(open_img(ctx, bad, img, len), 0);
	unlink(bad);
	free(img);
	kt_ctx_destroy(ctx);
}

/*
 * 2.3: a gpt-oss GGUF file (H 160, I 96: packed 256 and 128; biases; the
 * clamped SwiGLU; one layer of 3 experts) converted. Each fact is behind its own flag, which a
 * 2.0..2.2 reader refuses; this reader refuses every inconsistent
 * spelling of them, a damaged bias section, and a truncated one.
 */
FIXTURE(oss) {
	char good[64];
	char bad[64];
	uint8_t *img;
	size_t len;
	struct ktw_header h;
	struct kt_ctx *ctx;
};

FIXTURE_SETUP(oss)
{
	struct gw_cfg c = {
		.arch = "gpt-oss", .H = 160, .I = 96, .E = 3, .k = 2, .L = 1,
		.type = GW_Q8_0, .seed = 7, .bias = 1,
	};
	struct kt_convert_opts co = { .sz = sizeof(co), .output = self->good,
				      .layer_last = -1, .threads = 1 };
	struct gw_tensor t[32];
	struct gw_buf b;
	size_t n, data;
	char *path;
	FILE *f;

	snprintf(self->good, sizeof(self->good), "/tmp/kt-oss-%d.ktw",
		 (int)getpid());
	snprintf(self->bad, sizeof(self->bad), "/tmp/kt-oss-%d-bad.ktw",
		 (int)getpid());
	gw_build(&c, &b, t, &n, &data);
	path = gw_save(&b);
	free(b.p);
	ASSERT_NE(path, NULL);
	co.input = path;
	if (kt_convert(&co))
		TH_LOG("%s", kt_last_error());
	ASSERT_EQ(kt_convert(&co), 0);
	unlink(path);
	free(path);
	f = fopen(self->good, "rb");
	ASSERT_TRUE(f != NULL);
	fseek(f, 0, SEEK_END);
	self->len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	self->img = malloc(self->len);
	ASSERT_EQ(fread(self->img, 1, self->len, f), self->len);
	fclose(f);
	memcpy(&self->h, self->img, sizeof(self->h));
	ASSERT_EQ(self->h.flags, KTW_F_ACT | KTW_F_PADDED | KTW_F_BIAS);
	ASSERT_EQ(self->h.hidden, 256u);
	ASSERT_EQ(self->h.inter, 128u);
	ASSERT_EQ(test_ctx(&self->ctx), 0);
}

FIXTURE_TEARDOWN(oss)
{
	kt_ctx_destroy(self->ctx);
	free(self->img);
	unlink(self->good);
	unlink(self->bad);
}

/* header_crc over the header_size bytes the header says it has */
static void reseal_sized(uint8_t *img)
{
	struct ktw_header *h = (struct ktw_header *)img;

	h->header_crc = 0;
	h->header_crc = crc32c_bits(0, img, h->header_size);
}

static void reseal_bias(uint8_t *img)
{
	struct ktw_header *h = (struct ktw_header *)img;

	h->bias_crc = crc32c_bits(0, img + h->bias_off, h->bias_size);
	reseal_sized(img);
}

/* What a 2.2 reader checks of the flags: only KTW_F_DOWN_QUANT is known. */
static bool reader_2_2_refuses(const struct ktw_header *h)
{
	return h->flags & ~(uint32_t)KTW_F_DOWN_QUANT;
}

/* inspect and open both refuse with @err (open alone: @inspect_err 0) */
static void oss_refused(struct kt_test_meta *_metadata,
			FIXTURE_DATA(oss) *self, const uint8_t *img, size_t len,
			int inspect_err, int err, const char *what)
{
	struct kt_ktw_info info;
	struct kt_model *m = NULL;
	int ret;

	write_img(self->bad, img, len);
	ret = kt_ktw_inspect(self->bad, &info, NULL, 0);
	EXPECT_EQ(ret, inspect_err);
	ret = kt_model_open(self->ctx, self->bad, NULL, &m);
	TH_LOG("%s: %d %s", what, ret, kt_last_error());
	EXPECT_EQ(ret, err);
	EXPECT_NE(kt_last_error()[0], '\0');
	EXPECT_TRUE(m == NULL);
	if (!ret)
		kt_model_destroy(m);
}

/* y of layer 0 for a fixed batch */
static int oss_forward(struct kt_ctx *ctx, const char *path,
		       const struct kt_model_opts *mo, float *y)
{
	static float x[4 * 160], w[4 * 2];
	static int32_t ids[4 * 2];
	struct kt_moe_args a = {
		.x = x, .ids = ids, .w = w, .y = y, .tokens = 4, .top_k = 2,
		.x_dtype = KT_DTYPE_F32, .ids_dtype = KT_DTYPE_I32,
		.y_dtype = KT_DTYPE_F32,
	};
	struct kt_model *m;
	int i, ret;

	for (i = 0; i < 4 * 160; i++)
		x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
	for (i = 0; i < 8; i++) {
		ids[i] = (i / 2 + i % 2) % 3;
		w[i] = 0.5f + 0.125f * (float)i;
	}
	ret = kt_model_open(ctx, path, mo, &m);
	if (ret)
		return ret;
	ret = kt_moe_forward(ctx, m, &a);
	kt_model_destroy(m);
	return ret;
}

TEST_F(oss, header_and_old_readers)
{
	struct kt_ktw_info info;
	struct kt_model_info mi;
	struct kt_model *m = NULL;
	struct kt_model_opts mo = { .sz = sizeof(mo),
				    .flags = KT_MODEL_F_GPU_UPLOAD };

	ASSERT_EQ(kt_ktw_inspect(self->good, &info, NULL, 0), 0);
	EXPECT_EQ(info.version_minor, KTW_VERSION_MINOR);
	EXPECT_EQ(info.hidden, 160u);
	EXPECT_EQ(info.inter, 96u);
	EXPECT_EQ(info.hidden_packed, 256u);
	EXPECT_EQ(info.inter_packed, 128u);
	EXPECT_EQ(info.act, (uint32_t)KT_ACT_SWIGLU_OAI);
	EXPECT_EQ(info.act_alpha, KT_SWIGLU_OAI_ALPHA);
	EXPECT_EQ(info.act_limit, KT_SWIGLU_OAI_LIMIT);
	EXPECT_EQ(info.bias, 1u);
	EXPECT_EQ(self->h.header_size, (uint32_t)sizeof(struct ktw_header));
	/* 6 KiB: the section is padded to 8 */
	EXPECT_EQ(self->h.bias_size, 3ull * (2 * 128 + 256) * 4);
	EXPECT_EQ(self->h.bias_off + 4096 * ((self->h.bias_size + 4095) / 4096),
		  self->h.file_size);
	ASSERT_EQ(kt_ktw_verify(self->good, NULL), 0);
	ASSERT_EQ(kt_model_open(self->ctx, self->good, NULL, &m), 0);
	kt_model_get_info(m, &mi);
	EXPECT_EQ(mi.hidden, 160u);
	EXPECT_EQ(mi.inter, 96u);
	EXPECT_EQ(mi.act, (uint32_t)KT_ACT_SWIGLU_OAI);
	EXPECT_EQ(mi.bias, 1u);
	kt_model_destroy(m);
	/* a 2.2 reader (flags other than KTW_F_DOWN_QUANT: "unknown header
	 * flags") refuses the file on each of the three flags alone */
	EXPECT_TRUE(reader_2_2_refuses(&self->h));
	{
		struct ktw_header h = { 0 };

		h.flags = KTW_F_ACT;
		EXPECT_TRUE(reader_2_2_refuses(&h));
		h.flags = KTW_F_PADDED;
		EXPECT_TRUE(reader_2_2_refuses(&h));
		h.flags = KTW_F_BIAS;
		EXPECT_TRUE(reader_2_2_refuses(&h));
		h.flags = KTW_F_DOWN_QUANT;
		EXPECT_FALSE(reader_2_2_refuses(&h));
	}
	/* kt inspect names the activation, the biases and both sizes */
	{
		char bin[PATH_MAX], out[64], text[4096];
		char *argv[] = { bin, "inspect", self->good, NULL };
		size_t n;
		FILE *f;

		kt_bin(bin, sizeof(bin));
		snprintf(out, sizeof(out), "/tmp/kt-oss-%d.txt", (int)getpid());
		EXPECT_EQ(kt_exec(argv, out), 0);
		f = fopen(out, "r");
		ASSERT_TRUE(f != NULL);
		n = fread(text, 1, sizeof(text) - 1, f);
		text[n] = '\0';
		fclose(f);
		unlink(out);
		TH_LOG("%s", text);
		EXPECT_NE(strstr(text, "activation:    swiglu_oai (alpha 1.702, limit 7)"),
			  NULL);
		EXPECT_NE(strstr(text, "biases:        yes"), NULL);
		EXPECT_NE(strstr(text, "hidden:        160 (packed 256)"), NULL);
		EXPECT_NE(strstr(text, "intermediate:  96 per expert (packed 128)"),
			  NULL);
	}
	/* the GPU kernels are plain silu: refused at open, with a reason */
	EXPECT_EQ(kt_model_open(self->ctx, self->good, &mo, &m), -EOPNOTSUPP);
	EXPECT_NE(strstr(kt_last_error(), "biases"), NULL);
}

/* A plain file (no K-quant) is 2.4 with flags 0, readable by a 2.2
 * reader; a genuine 2.2 one (a 192-byte header) reads as it always did. */
TEST(ktw_2_3_plain_and_2_2)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 3, 2, 2, 1, 31);
	struct kt_convert_opts o = { .sz = sizeof(o), .quant = KT_QUANT_INT8,
				     .layer_last = -1, .threads = 1 };
	char dir[64], good[96], old[96];
	struct ktw_header *h;
	struct kt_ktw_info info;
	struct kt_ctx *ctx;
	static float y1[4 * 160], y2[4 * 160];
	uint8_t *img;
	size_t len;
	FILE *f;

	snprintf(dir, sizeof(dir), "/tmp/kt-plain-%d", (int)getpid());
	snprintf(good, sizeof(good), "%s/good.ktw", dir);
	snprintf(old, sizeof(old), "%s/old.ktw", dir);
	ASSERT_EQ(tck_convert(&c, dir, &o, good), 0);
	f = fopen(good, "rb");
	ASSERT_TRUE(f != NULL);
	fseek(f, 0, SEEK_END);
	len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	img = malloc(len);
	ASSERT_EQ(fread(img, 1, len, f), len);
	fclose(f);
	h = (struct ktw_header *)img;
	EXPECT_EQ(h->version_minor, KTW_VERSION_MINOR);
	EXPECT_EQ(h->flags, 0u);
	EXPECT_FALSE(reader_2_2_refuses(h));
	/* the 2.3 fields are all zero: a 2.2 header of 192 bytes */
	EXPECT_TRUE(all_zero_bytes(img + KTW_HEADER_2_2_BYTES,
				   sizeof(*h) - KTW_HEADER_2_2_BYTES));
	h->version_minor = 2;
	h->header_size = KTW_HEADER_2_2_BYTES;
	reseal_sized(img);
	write_img(old, img, len);
	ASSERT_EQ(kt_ktw_inspect(old, &info, NULL, 0), 0);
	EXPECT_EQ(info.version_minor, 2u);
	EXPECT_EQ(info.hidden_packed, info.hidden);
	EXPECT_EQ(info.act, 0u);
	EXPECT_EQ(info.bias, 0u);
	ASSERT_EQ(test_ctx(&ctx), 0);
	/* the same y bits as the 2.3 file it was made of (H 128) */
	ASSERT_EQ(oss_forward(ctx, good, NULL, y1), 0);
	ASSERT_EQ(oss_forward(ctx, old, NULL, y2), 0);
	EXPECT_EQ(memcmp(y1, y2, 4 * 128 * 4), 0);
	/* a 2.2 header whose tail is not zero: damage, as before */
	img[KTW_HEADER_2_2_BYTES + 4] = 1;
	write_img(old, img, len);
	EXPECT_EQ(kt_ktw_inspect(old, &info, NULL, 0), -EINVAL);
	kt_ctx_destroy(ctx);
	free(img);
	tck_rmdir(dir);
}

/* Header fields of 2.3 out of range or inconsistent, resealed. */
TEST_F(oss, header_fields)
{
	uint8_t *img = malloc(self->len);
	struct ktw_header *h = (struct ktw_header *)img;
	int i;

	for (i = 0; i < 32; i++) {
		char what[32];

		memcpy(img, self->img, self->len);
		switch (i) {
		case 0: h->act = 2; break;		/* unknown activation */
		case 1: h->act = 77; break;
		case 2: h->act = KT_ACT_SILU; break;	/* flag, silu */
		case 3: h->act_alpha = NAN; break;
		case 4: h->act_limit = 0.0f; break;
		case 5: h->act_alpha = -1.0f; break;
		case 6: h->act_limit = INFINITY; break;
		case 7: h->flags &= ~KTW_F_ACT; break;	/* act, no flag */
		case 8: h->flags &= ~KTW_F_PADDED; break;
		case 9: h->flags &= ~KTW_F_BIAS; break;
		case 10: h->hidden_io = h->hidden + 32; break;	/* > packed */
		case 11: h->inter_io = h->inter + 128; break;
		case 12: h->hidden_io = 161; break;	/* not of 32 */
		case 13: h->inter_io = 100; break;
		case 14: h->hidden_io = 0; break;
		case 15: h->hidden_io = 96; break;	/* pads to 128, not 256 */
		case 16: h->hidden_io = h->hidden;	/* nothing padded */
			h->inter_io = h->inter; break;
		case 17: h->bias_off += 4096; break;
		case 18: h->bias_off -= 4096; break;	/* into the blobs */
		case 19: h->bias_off += 8; break;	/* unaligned */
		case 20: h->bias_off = UINT64_MAX & ~4095ull; break;
		case 21: h->bias_off = 0; break;
		case 22: h->bias_size += 4; break;
		case 23: h->bias_size -= 4; break;
		case 24: h->bias_size = 0; break;
		case 25: h->bias_size = UINT64_MAX; break;
		case 26: h->version_minor = 2; break;	/* 2.2 lacks them */
		case 27: h->header_size = KTW_HEADER_2_2_BYTES; break;
		case 28: h->file_size += 4096; break;	/* not the bias end */
		case 29: h->flags |= 1u << 5; break;	/* unknown */
		case 30: h->flags &= ~(KTW_F_ACT | KTW_F_PADDED | KTW_F_BIAS);
			break;
		case 31: h->flags |= KTW_F_QK_REC; break;	/* MXFP4 */
		}
		reseal_sized(img);
		snprintf(what, sizeof(what), "2.3 field case %d", i);
		oss_refused(_metadata, self, img, self->len, -EINVAL, -EINVAL,
			    what);
	}
	free(img);
}

/* The bias section: its checksum, padding and the padded rows. */
TEST_F(oss, bias_section)
{
	uint8_t *img = malloc(self->len);
	struct ktw_header *h = (struct ktw_header *)img;
	struct kt_model_opts mo = { .sz = sizeof(mo),
				    .flags = KT_MODEL_F_NO_VERIFY };
	uint64_t bad = 0, stride = 2 * 128 + 256;
	static float y1[4 * 160], y2[4 * 160];
	float *b;

	/* a flipped bit: -EIO from open (whatever the flags) and verify;
	 * inspect reads no data */
	memcpy(img, self->img, self->len);
	img[self->h.bias_off + 100] ^= 0x10;
	oss_refused(_metadata, self, img, self->len, 0, -EIO, "bias crc");
	EXPECT_NE(strstr(kt_last_error(), "bias section: checksum"), NULL);
	EXPECT_EQ(kt_ktw_verify(self->bad, &bad), -EIO);
	EXPECT_EQ(bad, 1u);
	EXPECT_NE(strstr(kt_last_error(), "bias section"), NULL);
	{
		struct kt_model *m = NULL;

		EXPECT_EQ(kt_model_open(self->ctx, self->bad, &mo, &m), -EIO);
		mo.flags = KT_MODEL_F_MMAP;
		EXPECT_EQ(kt_model_open(self->ctx, self->bad, &mo, &m), -EIO);
		mo.flags = 0;
		mo.budget = 2 * self->h.blob_stride;	/* the cache */
		EXPECT_EQ(kt_model_open(self->ctx, self->bad, &mo, &m), -EIO);
		mo.budget = 0;
	}
	/* nonzero bytes after the section, before the end of the file */
	memcpy(img, self->img, self->len);
	img[self->len - 1] = 1;
	oss_refused(_metadata, self, img, self->len, 0, -EIO, "bias tail");
	EXPECT_NE(strstr(kt_last_error(), "padding"), NULL);
	/* a bias in a padded row (expert 1's gate row 100 of I 96), its
	 * checksum made right: still refused */
	memcpy(img, self->img, self->len);
	b = (float *)(img + self->h.bias_off);
	b[stride + 100] = 1.0f;
	reseal_bias(img);
	oss_refused(_metadata, self, img, self->len, 0, -EINVAL, "padded bias");
	memcpy(img, self->img, self->len);
	b = (float *)(img + self->h.bias_off);
	b[stride + 2 * 128 + 200] = 1.0f;	/* down, beyond H 160 */
	reseal_bias(img);
	oss_refused(_metadata, self, img, self->len, 0, -EINVAL, "padded down bias");
	/* a changed bias with its checksum made right opens, and y moves:
	 * the biases come from the file */
	ASSERT_EQ(oss_forward(self->ctx, self->good, NULL, y1), 0);
	memcpy(img, self->img, self->len);
	b = (float *)(img + self->h.bias_off);
	b[2 * 128 + 5] += 1.0f;		/* expert 0's down bias, row 5 */
	reseal_bias(img);
	write_img(self->bad, img, self->len);
	ASSERT_EQ(oss_forward(self->ctx, self->bad, NULL, y2), 0);
	EXPECT_NE(memcmp(y1, y2, sizeof(y1)), 0);
	(void)h;
	free(img);
}

TEST_F(oss, truncated)
{
	uint64_t cuts[] = {
		self->h.bias_off, self->h.bias_off + 1, self->h.bias_off + 4096,
		self->h.bias_off + self->h.bias_size - 1, self->len - 4096,
		self->len - 1,
	};
	size_t i;

	for (i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		char what[64];

		ASSERT_LT(cuts[i], self->len);
		snprintf(what, sizeof(what), "cut at %llu",
			 (unsigned long long)cuts[i]);
		oss_refused(_metadata, self, self->img, cuts[i], -EINVAL,
			    -EINVAL, what);
		EXPECT_NE(strstr(kt_last_error(), "truncated"), NULL);
	}
}

TEST_HARNESS_MAIN
