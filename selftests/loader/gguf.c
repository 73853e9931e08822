// SPDX-License-Identifier: MIT
/*
 * gguf.c - the GGUF parser and model checks on files written by the tests'
 * own writer: a valid file parses as written; each broken header field,
 * and every truncation, is refused with -EINVAL and a message naming the
 * field; kt_model_open refuses what kt cannot run, naming why.
 */
#include <errno.h>
#include <string.h>

#include <kt/kt.h>
#include "kt_test.h"
#include "gguf-write.h"
#include "test-ctx.h"
#include "loader/gguf.h"

static const struct gw_cfg small = {
	.arch = "qwen3moe", .H = 256, .I = 128, .E = 4, .k = 2, .L = 2,
	.type = GW_Q8_0, .seed = 7,
};

static int parse_image(const struct gw_buf *b, size_t len, struct ldr_gguf *g)
{
	memset(g, 0, sizeof(*g));
	g->path = "test.gguf";
	g->fd = -1;
	g->base = b->p;
	g->size = len;
	return ldr_gguf_parse(g);
}

TEST(valid_file_parses_as_written)
{
	struct gw_tensor t[16];
	struct gw_cfg c = small;
	struct ldr_gguf g;
	struct gw_buf b;
	size_t n, data, i;
	uint64_t v;
	char arch[32];

	c.alignment = 64;
	gw_build(&c, &b, t, &n, &data);
	ASSERT_EQ(parse_image(&b, b.len, &g), 0);
	EXPECT_EQ(g.version, 3u);
	EXPECT_EQ(g.alignment, 64u);
	EXPECT_EQ(g.data_off, data);
	ASSERT_EQ(g.n_tensors, n);
	for (i = 0; i < n; i++) {
		const struct ldr_gguf_tensor *x = ldr_gguf_tensor(&g, t[i].name);

		ASSERT_NE(x, NULL);
		EXPECT_EQ(x->type, t[i].type);
		EXPECT_EQ(x->nbytes, t[i].bytes);
		EXPECT_EQ(x->offset, t[i].off);
		EXPECT_EQ(x->ne[0], t[i].ne[0]);
		EXPECT_EQ(x->data, b.p + data + t[i].off);
	}
	ASSERT_EQ(ldr_gguf_get_uint(&g, "qwen3moe.expert_count", 100, &v), 0);
	EXPECT_EQ(v, 4u);
	EXPECT_EQ(ldr_gguf_get_uint(&g, "qwen3moe.expert_count", 3, &v),
		  -EINVAL);
	EXPECT_EQ(ldr_gguf_get_uint(&g, "nope", 3, &v), -ENOENT);
	EXPECT_EQ(ldr_gguf_get_uint(&g, "general.name", 3, &v), -EINVAL);
	ASSERT_EQ(ldr_gguf_get_str(&g, "general.architecture", arch,
				   sizeof(arch)), 0);
	EXPECT_EQ(strcmp(arch, "qwen3moe"), 0);
	ldr_gguf_release(&g);
	/* version 2 has the same layout */
	c.version = 2;
	free(b.p);
	gw_build(&c, &b, t, &n, &data);
	ASSERT_EQ(parse_image(&b, b.len, &g), 0);
	ldr_gguf_release(&g);
	free(b.p);
}

static const struct {
	enum gw_bad bad;
	const char *word;	/* the message names the field */
} bads[] = {
	{ GW_MAGIC, "magic" },
	{ GW_VERSION1, "version" },
	{ GW_VERSION_BE, "version" },
	{ GW_NTENSORS, "tensor count" },
	{ GW_NKV, "metadata count" },
	{ GW_KEYLEN, "string length" },
	{ GW_KEY_EMPTY, "empty metadata key" },
	{ GW_VTYPE, "value type" },
	{ GW_BOOL, "bool" },
	{ GW_ARR_TYPE, "array element type" },
	{ GW_ARR_LEN, "array length" },
	{ GW_STRLEN, "string length" },
	{ GW_NDIMS0, "n_dims" },
	{ GW_NDIMS5, "n_dims" },
	{ GW_DIM0, "dimension 1" },
	{ GW_DIM_OVF, "dimension 2" },
	{ GW_TTYPE, "not a ggml type" },
	{ GW_TTYPE_GONE, "not a ggml type" },
	{ GW_BLOCK, "block" },
	{ GW_OFF_ALIGN, "general.alignment" },
	{ GW_OFF_PAST, "past the end" },
	{ GW_OVERLAP, "overlap" },
	{ GW_DUP_NAME, "appears twice" },
	{ GW_DUP_KEY, "appears twice" },
	{ GW_ALIGN_NPOT, "power of two" },
	{ GW_ALIGN_TYPE, "not uint32" },
};

TEST(every_bad_field_refused_by_name)
{
	struct gw_tensor t[16];
	struct ldr_gguf g;
	struct gw_buf b;
	size_t n, data, i;

	for (i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		struct gw_cfg c = small;

		c.bad = bads[i].bad;
		c.alignment = bads[i].bad == GW_ALIGN_NPOT ||
			      bads[i].bad == GW_ALIGN_TYPE ? 64 : 0;
		gw_build(&c, &b, t, &n, &data);
		EXPECT_EQ(parse_image(&b, b.len, &g), -EINVAL);
		TH_LOG("bad %d: %s", bads[i].bad, kt_last_error());
		EXPECT_NE(strstr(kt_last_error(), bads[i].word), NULL);
		ldr_gguf_release(&g);
		free(b.p);
	}
}

/* every prefix of the file (exact-size copies: ASan sees over-reads) */
TEST(every_truncation_refused)
{
	struct gw_tensor t[16];
	struct ldr_gguf g;
	struct gw_buf b, cut = { 0 };
	size_t n, data, len;
	struct gw_cfg c[2] = { small, small };
	int i;

	/* K-quant blocks (Q6_K, down Q5_K): whole super-blocks of 256 */
	c[1].H = 256;
	c[1].I = 256;
	c[1].type = GW_Q6_K;
	c[1].down_type = GW_Q5_K;
	for (i = 0; i < 2; i++) {
		gw_build(&c[i], &b, t, &n, &data);
		for (len = 0; len < b.len;
		     len += len < data + 64 ? 1 : 4093) {
			cut.p = malloc(len ? len : 1);
			memcpy(cut.p, b.p, len);
			ASSERT_EQ(parse_image(&cut, len, &g), -EINVAL);
			ldr_gguf_release(&g);
			free(cut.p);
		}
		ASSERT_EQ(parse_image(&b, b.len, &g), 0);
		ldr_gguf_release(&g);
		free(b.p);
	}
}

/* kt_model_open: what kt does not run is refused and named */
static int open_cfg(struct kt_ctx *ctx, const struct gw_cfg *c,
		    struct kt_model **m)
{
	struct gw_tensor t[64];
	struct gw_buf b;
	size_t n, data;
	char *path;
	int ret;

	gw_build(c, &b, t, &n, &data);
	path = gw_save(&b);
	free(b.p);
	if (!path)
		return -EIO;
	ret = kt_model_open(ctx, path, NULL, m);
	unlink(path);
	free(path);
	return ret;
}

TEST(model_refusals_name_the_reason)
{
	struct kt_ctx *ctx;
	struct kt_model *m = NULL;
	struct gw_cfg c;

	ASSERT_EQ(test_ctx(&ctx), 0);
	c = small;
	c.type = GW_Q2_K;
	c.I = 256;		/* a whole super-block along K of down */
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EOPNOTSUPP);
	EXPECT_NE(strstr(kt_last_error(), "Q2_K"), NULL);
	/* Q4_0 is kt's INT4: it does not mix with a GGUF block type */
	c = small;
	c.down_type = GW_Q4_0;
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EOPNOTSUPP);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), "Q4_0"), NULL);
	EXPECT_NE(strstr(kt_last_error(), "blk.0.ffn_gate_exps.weight"), NULL);
	EXPECT_NE(strstr(kt_last_error(), "only among Q8_0, Q4_K"), NULL);
	/* down Q6_K in layer 0, Q4_K in the last: types that vary by layer */
	c = small;
	c.H = 256;
	c.I = 256;
	c.type = GW_Q4_0;
	c.down_type = GW_Q4_0;
	c.down_type_last = GW_Q8_0;
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EOPNOTSUPP);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), "blk.1.ffn_down_exps.weight is Q8_0"), NULL);
	EXPECT_NE(strstr(kt_last_error(), "blk.0.ffn_down_exps.weight is Q4_0"), NULL);
	EXPECT_NE(strstr(kt_last_error(), "vary by layer only among"), NULL);
	/* a Q6_K super-block scale (its last 2 bytes) that is a NaN */
	{
		struct gw_tensor t[16];
		struct gw_buf b;
		size_t n, data;
		char *path;

		c = small;
		c.H = 256;
		c.I = 256;
		c.type = GW_Q6_K;
		gw_build(&c, &b, t, &n, &data);
		b.p[data + t[0].off + 208] = 0x00;
		b.p[data + t[0].off + 209] = 0x7e;
		path = gw_save(&b);
		free(b.p);
		ASSERT_NE(path, NULL);
		EXPECT_EQ(kt_model_open(ctx, path, NULL, &m), -EINVAL);
		EXPECT_NE(strstr(kt_last_error(), "not finite"), NULL);
		unlink(path);
		free(path);
	}
	/* a mix with a float type: BF16 gate/up, Q6_K down */
	c = small;
	c.H = 256;
	c.I = 256;
	c.type = GW_BF16;
	c.down_type = GW_Q6_K;
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EOPNOTSUPP);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), "ffn_down_exps.weight is Q6_K"), NULL);
	EXPECT_NE(strstr(kt_last_error(), "BF16"), NULL);
	/* expert biases: all three in every layer, [N, E], a float type */
	c = small;
	c.bias = 1;
	c.L = 2;
	c.bad = GW_BIAS_MISSING;
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EINVAL);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), "layer 1 has 2 of the three"), NULL);
	c.bad = GW_BIAS_SHAPE;
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EINVAL);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), "ffn_down_exps.bias has shape"),
		  NULL);
	c.bad = GW_BIAS_TYPE;
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EOPNOTSUPP);
	EXPECT_NE(strstr(kt_last_error(), "F32, F16 and BF16 biases"), NULL);
	/* multiples of 32 are padded to the tiles; others are refused */
	c = small;
	c.arch = "gpt-oss";
	c.H = 2896;
	c.I = 64;
	c.L = 1;
	c.type = GW_F32;
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EOPNOTSUPP);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), "embedding_length = 2896"), NULL);
	c.H = 128;
	c.I = 80;
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EOPNOTSUPP);
	EXPECT_NE(strstr(kt_last_error(), "expert_feed_forward_length = 80"),
		  NULL);
	c = small;
	c.arch = "llama";
	c.dense = 2;		/* no layer left with experts */
	c.no_ffl = 1;
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EINVAL);
	TH_LOG("%s", kt_last_error());
	EXPECT_NE(strstr(kt_last_error(), "no stacked expert tensors"), NULL);
	c = small;
	c.arch = "bert";
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EOPNOTSUPP);
	EXPECT_NE(strstr(kt_last_error(), "bert"), NULL);
	c = small;
	c.bad = GW_BLOCK;
	EXPECT_EQ(open_cfg(ctx, &c, &m), -EINVAL);
	EXPECT_NE(strstr(kt_last_error(), "dimension 0"), NULL);
	EXPECT_EQ(m, NULL);
	kt_ctx_destroy(ctx);
}

TEST_HARNESS_MAIN
