// SPDX-License-Identifier: MIT
/*
 * regress.c - one test per bug found by trying kt as a new user would,
 * each named after the bug: inputs that crashed or misled
 * kt convert, kt verify and kt forward must now give a clear error that
 * names the file and field at fault, and leave no output behind.
 */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sys/wait.h>

#include "kt_test.h"
#include "kt-bin.h"
#include "ckpt.h"
#include "test-ctx.h"
#include "loader/ktw-format.h"

static void tmpdir(char *buf, size_t n, const char *tag)
{
	snprintf(buf, n, "/tmp/kt-regress-%s-%d", tag, (int)getpid());
	tck_rmdir(buf);
}

/* Replace the first @from in @path by @to (any length). */
static int replace_in(const char *path, const char *from, const char *to)
{
	char buf[65536], *p;
	size_t n;
	FILE *f = fopen(path, "rb");

	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strstr(buf, from);
	if (!p)
		return -1;
	f = fopen(path, "wb");
	fwrite(buf, 1, (size_t)(p - buf), f);
	fputs(to, f);
	fputs(p + strlen(from), f);
	fclose(f);
	return 0;
}

/* kt_convert() must fail with -EINVAL naming @what, and write nothing. */
static void convert_refused(struct kt_test_meta *_metadata, const char *dir,
			    const char *what)
{
	char out[600];
	struct kt_convert_opts o = { .sz = sizeof(o), .input = dir,
				     .output = out, .quant = KT_QUANT_INT8,
				     .layer_last = -1, .threads = 2 };
	int ret;

	snprintf(out, sizeof(out), "%s/out.ktw", dir);
	ret = kt_convert(&o);
	TH_LOG("kt_convert: %d %s", ret, kt_last_error());
	EXPECT_EQ(ret, -EINVAL);
	EXPECT_TRUE(strstr(kt_last_error(), what) != NULL);
	EXPECT_NE(access(out, F_OK), 0);
}

/* was: SIGFPE in find_mat, 2^32 cast to a uint32 block size of 0 */
TEST(convert_fp8_weight_block_size_2pow32_sigfpe)
{
	static const char *const bad[] = {
		"[4294967296, 128]", "[128, 4294967296]", "[0, 128]",
		"[128, -1]", "[128]", "\"128\"", "[128, 1.5]",
	};
	struct tck c = TCK(TCK_DEEPSEEK, TCK_FP8, 128, 128, 2, 2, 2, 1, 41);
	char d[256], p[300], from[64] = "[128, 128]";
	size_t i;

	tmpdir(d, sizeof(d), "fp8blk");
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(p, sizeof(p), "%s/config.json", d);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ASSERT_EQ(replace_in(p, from, bad[i]), 0);
		snprintf(from, sizeof(from), "%s", bad[i]);
		convert_refused(_metadata, d, "quantization_config.weight_block_size");
	}
	tck_free(&c);
	tck_rmdir(d);
}

/* was: calloc of ~206 GB, "Cannot allocate memory" naming no field */
TEST(convert_num_experts_4294967295_ktw_limits)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 2, 3, 2, 1, 42);
	char d[256], p[300];

	tmpdir(d, sizeof(d), "nexp");
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(p, sizeof(p), "%s/config.json", d);
	ASSERT_EQ(replace_in(p, "\"num_experts\": 2", "\"num_experts\": 4294967295"), 0);
	convert_refused(_metadata, d, "num_experts = 4294967295 exceeds the .ktw limit");
	/* each count within its limit, the product (3 x 65536) not: */
	ASSERT_EQ(replace_in(p, "\"num_experts\": 4294967295", "\"num_experts\": 65536"), 0);
	ASSERT_EQ(replace_in(p, "\"num_hidden_layers\": 3", "\"num_hidden_layers\": 70"), 0);
	convert_refused(_metadata, d, "experts = 4587520 blobs exceed the .ktw limit");
	/* layers beyond the format's limit, by name */
	ASSERT_EQ(replace_in(p, "\"num_hidden_layers\": 70", "\"num_hidden_layers\": 5000"), 0);
	convert_refused(_metadata, d, "num_hidden_layers = 5000 exceeds");
	tck_free(&c);
	tck_rmdir(d);
}

static void write_img(const char *path, const uint8_t *img, size_t len)
{
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);

	if (fd < 0 || write(fd, img, len) != (ssize_t)len)
		abort();
	close(fd);
}

/* was: flipped padding bytes passed kt verify (no check, no checksum) */
TEST(ktw_padding_flipped_passes_verify)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 3, 2, 2, 1, 43);
	struct kt_convert_opts o = { .sz = sizeof(o), .quant = KT_QUANT_INT8,
				     .layer_last = -1, .threads = 1 };
	struct kt_model_opts mo = { .sz = sizeof(mo) };
	char d[256], good[300], bad[300];
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	struct kt_ktw_info info;
	struct ktw_header h;
	struct ktw_entry e;
	uint8_t *img;
	size_t len;
	uint64_t nbad = 0, at;
	FILE *f;

	tmpdir(d, sizeof(d), "pad");
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(good, sizeof(good), "%s/good.ktw", d);
	snprintf(bad, sizeof(bad), "%s/bad.ktw", d);
	o.input = d;
	o.output = good;
	ASSERT_EQ(kt_convert(&o), 0);
	f = fopen(good, "rb");
	ASSERT_TRUE(f != NULL);
	fseek(f, 0, SEEK_END);
	len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	img = malloc(len);
	ASSERT_EQ(fread(img, 1, len, f), len);
	fclose(f);
	memcpy(&h, img, sizeof(h));
	memcpy(&e, img + h.table_off + 4 * sizeof(e), sizeof(e));
	ASSERT_GT(h.blob_stride, h.expert_bytes);	/* a tail to flip */
	ASSERT_EQ(test_ctx(&ctx), 0);

	/* between the layer list and the table */
	ASSERT_GT(h.table_off, h.layers_off + 4ull * h.n_layers);
	img[h.layers_off + 4ull * h.n_layers] ^= 1;
	write_img(bad, img, len);
	EXPECT_EQ(kt_ktw_verify(bad, NULL), -EINVAL);
	EXPECT_TRUE(strstr(kt_last_error(), "nonzero padding between the layer list") != NULL);
	img[h.layers_off + 4ull * h.n_layers] ^= 1;

	/* between the table and the first blob: refused at open */
	at = h.data_off - 1;
	img[at] ^= 0x80;
	write_img(bad, img, len);
	EXPECT_EQ(kt_ktw_verify(bad, NULL), -EINVAL);
	TH_LOG("%s", kt_last_error());
	EXPECT_TRUE(strstr(kt_last_error(), "nonzero padding between the table and the first blob") != NULL);
	EXPECT_EQ(kt_ktw_inspect(bad, &info, NULL, 0), -EINVAL);
	EXPECT_EQ(kt_model_open(ctx, bad, NULL, &m), -EINVAL);
	img[at] ^= 0x80;

	/* a blob's tail (layer 1, expert 1): verify and a verified open */
	at = e.offset + h.blob_stride - 1;
	img[at] = 0x5a;
	write_img(bad, img, len);
	EXPECT_EQ(kt_ktw_verify(bad, &nbad), -EIO);
	EXPECT_EQ(nbad, 1u);
	TH_LOG("%s", kt_last_error());
	EXPECT_TRUE(strstr(kt_last_error(), "expert 1: nonzero padding after the blob") != NULL);
	EXPECT_EQ(kt_model_open(ctx, bad, NULL, &m), -EIO);
	EXPECT_TRUE(strstr(kt_last_error(), "nonzero padding after the blob") != NULL);
	mo.flags = KT_MODEL_F_NO_URING;
	EXPECT_EQ(kt_model_open(ctx, bad, &mo, &m), -EIO);
	/* not asked to verify: opens, as with a bad checksum */
	mo.flags = KT_MODEL_F_NO_VERIFY;
	EXPECT_EQ(kt_model_open(ctx, bad, &mo, &m), 0);
	kt_model_destroy(m);
	m = NULL;
	img[at] = 0;
	/* and the repaired file is whole again */
	write_img(bad, img, len);
	EXPECT_EQ(kt_ktw_verify(bad, NULL), 0);
	kt_ctx_destroy(ctx);
	free(img);
	tck_free(&c);
	tck_rmdir(d);
}

/* Run @argv with stderr into @err; the exit status. */
static void npy_raw(const char *path, const char *hdr, size_t hlen,
		    const void *data, size_t bytes)
{
	uint16_t hl = (uint16_t)hlen;
	FILE *f = fopen(path, "wb");

	fwrite("\x93NUMPY\x01\x00", 1, 8, f);
	fwrite(&hl, 2, 1, f);
	fwrite(hdr, 1, hlen, f);
	fwrite(data, 1, bytes, f);
	fclose(f);
}

static void npy2(const char *path, const char *descr, unsigned r, unsigned c,
		 const void *data, size_t esz)
{
	char h[128];
	int n = snprintf(h, sizeof(h),
			 "{'descr': '%s', 'fortran_order': False, 'shape': (%u, %u), }\n",
			 descr, r, c);

	npy_raw(path, h, (size_t)n, data, esz * r * c);
}

/* The error line of @err must name @file and contain @what (warnings,
 * e.g. about hugepages, may come first). */
static void blames(struct kt_test_meta *_metadata, const char *err,
		   const char *file, const char *what)
{
	char line[1024] = "";
	FILE *f = fopen(err, "r");

	ASSERT_TRUE(f != NULL);
	while (fgets(line, sizeof(line), f) &&
	       strncmp(line, "kt forward: ", 12))
		;
	fclose(f);
	TH_LOG("%s", line);
	EXPECT_TRUE(strstr(line, file) != NULL);
	EXPECT_TRUE(strstr(line, what) != NULL);
}

/* was: wrong H blamed on ids, bad k on weights, NUL on "only C order" */
TEST(forward_blames_the_wrong_file)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 2, 1, 1, 1, 44);
	char d[256], ktw[300], xp[300], ip[300], wp[300], yp[300], ep[300];
	char bin[PATH_MAX];
	char *argv[] = { bin, "forward", "--model", ktw, "--layer", "0",
			 "--input", xp, "--ids", ip, "--weights", wp,
			 "--output", yp, NULL };
	static float x[2 * 256], w[2 * 17];
	static int32_t ids[2 * 17];
	char h[128];
	int n;

	tmpdir(d, sizeof(d), "fwd");
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(ktw, sizeof(ktw), "%s/m.ktw", d);
	snprintf(xp, sizeof(xp), "%s/x.npy", d);
	snprintf(ip, sizeof(ip), "%s/ids.npy", d);
	snprintf(wp, sizeof(wp), "%s/w.npy", d);
	snprintf(yp, sizeof(yp), "%s/y.npy", d);
	snprintf(ep, sizeof(ep), "%s/err.txt", d);
	kt_bin(bin, sizeof(bin));
	{
		char *cv[] = { bin, "convert", "--input", d, "--output", ktw,
			       "--method", "bf16", NULL };

		ASSERT_EQ(kt_exec(cv, ep), 0);
	}
	/* the baseline runs */
	npy2(xp, "<f4", 2, 128, x, 4);
	npy2(ip, "<i4", 2, 1, ids, 4);
	npy2(wp, "<f4", 2, 1, w, 4);
	ASSERT_EQ(kt_exec(argv, ep), 0);

	/* x with the wrong H (transposed): x is at fault, not ids */
	npy2(xp, "<f4", 128, 2, x, 4);
	EXPECT_NE(kt_exec(argv, ep), 0);
	blames(_metadata, ep, xp, "hidden size");
	npy2(xp, "<f4", 2, 256, x, 4);
	EXPECT_NE(kt_exec(argv, ep), 0);
	blames(_metadata, ep, xp, "x has 256 columns");
	npy2(xp, "<f4", 2, 128, x, 4);

	/* k = 0 and k = 17: ids is at fault, even with weights to match */
	npy2(ip, "<i4", 2, 0, ids, 4);
	npy2(wp, "<f4", 2, 0, w, 4);
	EXPECT_NE(kt_exec(argv, ep), 0);
	blames(_metadata, ep, ip, "top-k must be in 1..");
	npy2(ip, "<i4", 2, 17, ids, 4);
	npy2(wp, "<f4", 2, 1, w, 4);
	EXPECT_NE(kt_exec(argv, ep), 0);
	blames(_metadata, ep, ip, "top-k must be in 1..");
	npy2(ip, "<i4", 2, 1, ids, 4);

	/* ids rows not those of x: ids named, with x's count */
	npy2(ip, "<i4", 3, 1, ids, 4);
	EXPECT_NE(kt_exec(argv, ep), 0);
	blames(_metadata, ep, ip, "ids has 3 rows");
	npy2(ip, "<i4", 2, 1, ids, 4);

	/* a NUL byte in a header: malformed, not "only C-order arrays" */
	n = snprintf(h, sizeof(h),
		     "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }\n");
	h[20] = '\0';
	npy_raw(wp, h, (size_t)n, w, 8);
	EXPECT_NE(kt_exec(argv, ep), 0);
	blames(_metadata, ep, wp, "a NUL byte at offset 30");
	/* the real Fortran case still says so */
	n = snprintf(h, sizeof(h),
		     "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 1), }\n");
	npy_raw(wp, h, (size_t)n, w, 8);
	EXPECT_NE(kt_exec(argv, ep), 0);
	blames(_metadata, ep, wp, "only C-order arrays");
	tck_free(&c);
	tck_rmdir(d);
}

TEST_HARNESS_MAIN
