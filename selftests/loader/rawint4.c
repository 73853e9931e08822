// SPDX-License-Identifier: MIT
/*
 * rawint4.c - compressed-tensors "pack-quantized" INT4 checkpoints (the
 * format of Kimi-K2-Thinking), written here by the format's definition:
 * weight_packed I32 [N][K/8] with column 8j + i in nibble i of word j as
 * q + 8, weight_scale BF16 [N][K/G], weight_shape I64 [2]. Converted with
 * --method int4 the values and scales are kept exactly (kt's INT4 with the
 * same group); the forward matches an f64 one over q * scale; broken
 * checkpoints are refused by name.
 */
#include "kt_test.h"
#include "ckpt.h"
#include "kernels/pack.h"
#include "ktcore/core.h"
#include "ktcore/model.h"
#include "test-ctx.h"

struct ct {
	uint32_t H, I, E, G;
	uint64_t seed;
	float *w;		/* [E][3][I*H] exact values q * scale */
};

static float *ct_mat(const struct ct *c, uint32_t e, int m)
{
	return c->w + ((size_t)e * 3 + (size_t)m) * c->I * c->H;
}

/* One matrix [N][K]: random q and bf16 scales; w = q * scale exactly. */
static void ct_matrix(struct tck_list *l, struct ct *c, const char *base,
		      float *w, uint32_t N, uint32_t K, uint64_t *seed)
{
	uint32_t *pk = calloc((size_t)N * K / 8, 4);
	uint16_t *sc = malloc((size_t)N * K / c->G * 2);
	int64_t *shape = malloc(16);
	char name[256];
	uint32_t n, k;

	for (n = 0; n < N; n++)
		for (k = 0; k < K / c->G; k++)
			sc[n * (K / c->G) + k] =
				tck_bf16(0.001f + 0.01f * (tck_uniform(seed) + 1));
	for (n = 0; n < N; n++)
		for (k = 0; k < K; k++) {
			int q = (int)(tck_rand(seed) % 16) - 8;

			pk[((size_t)n * K + k) / 8] |=
				(uint32_t)(q + 8) << (4 * (k % 8));
			w[(size_t)n * K + k] = (float)q *
				tck_from_bf16(sc[n * (K / c->G) + k / c->G]);
		}
	shape[0] = N;
	shape[1] = K;
	snprintf(name, sizeof(name), "%s_packed", base);
	tck_add(l, name, "I32", N, K / 8, pk, (size_t)N * K / 2);
	snprintf(name, sizeof(name), "%s_scale", base);
	tck_add(l, name, "BF16", N, K / c->G, sc, (size_t)N * K / c->G * 2);
	snprintf(name, sizeof(name), "%s_shape", base);
	tck_add(l, name, "I64", 2, 0, shape, 16);
}

/* One MoE layer (layer 0) of Qwen3-MoE names; config.json with @qcfg. */
static int ct_write(struct ct *c, const char *dir, const char *qcfg)
{
	static const char *const mn[3] = { "gate_proj", "up_proj", "down_proj" };
	uint64_t seed = c->seed;
	struct tck_list l = { 0 };
	char path[512], base[200];
	uint32_t e;
	size_t i;
	int m, ret;
	FILE *f;

	mkdir(dir, 0755);
	c->w = malloc((size_t)c->E * 3 * c->I * c->H * sizeof(float));
	for (e = 0; e < c->E; e++)
		for (m = 0; m < 3; m++) {
			snprintf(base, sizeof(base),
				 "model.layers.0.mlp.experts.%u.%s.weight", e,
				 mn[m]);
			ct_matrix(&l, c, base, ct_mat(c, e, m),
				  m == 2 ? c->H : c->I, m == 2 ? c->I : c->H,
				  &seed);
		}
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	ret = tck_write_st(path, &l, 0, 1);
	for (i = 0; i < l.n; i++)
		free(l.t[i].data);
	free(l.t);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	f = fopen(path, "w");
	if (!f)
		return -errno;
	fprintf(f, "{\"model_type\": \"qwen3_moe\", \"hidden_size\": %u,\n"
		" \"moe_intermediate_size\": %u, \"num_experts\": %u,\n"
		" \"num_experts_per_tok\": 2, \"num_hidden_layers\": 1,\n"
		" \"quantization_config\": %s}\n", c->H, c->I, c->E, qcfg);
	fclose(f);
	return ret;
}

#define QCFG(fmt, bits, group, sym)					\
	"{\"quant_method\": \"compressed-tensors\", \"format\": \"" fmt	\
	"\", \"config_groups\": {\"group_0\": {\"targets\": [\"Linear\"], " \
	"\"weights\": {\"num_bits\": " #bits ", \"group_size\": " #group	\
	", \"symmetric\": " #sym ", \"strategy\": \"group\", "		\
	"\"type\": \"int\"}}}, \"ignore\": [\"lm_head\"]}"

static const char *const good_cfg = QCFG("pack-quantized", 4, 32, true);

static double ct_get(void *arg, uint32_t e, int m, uint32_t n, uint32_t k)
{
	const struct ct *c = arg;

	return ct_mat(c, e, m)[(size_t)n * (m == 2 ? c->I : c->H) + k];
}

static void tmpdir(char *buf, size_t n, const char *tag)
{
	snprintf(buf, n, "/tmp/kt-ri4-%s-%d", tag, (int)getpid());
	tck_rmdir(buf);
}

static int ct_convert(const char *dir, int quant, uint32_t group, char *out,
		      size_t n)
{
	struct kt_convert_opts o = { .sz = sizeof(o), .input = dir,
				     .output = out, .quant = quant,
				     .group_size = group, .layer_last = -1,
				     .threads = 2 };

	snprintf(out, n, "%s/m.ktw", dir);
	return kt_convert(&o);
}

TEST(kept_exactly_and_forward)
{
	struct ct c = { 256, 384, 4, 32, 51, NULL };
	struct kern_pack_layout lay;
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	struct kt_ktw_info info;
	char d[256], out[300];
	const uint32_t T = 6, K = 2;
	float x[6 * 256], w[6 * 2], y[6 * 256];
	int32_t ids[6 * 2];
	double ref[6 * 256], err;
	uint64_t seed = 3;
	uint32_t e, id, n, k, bad = 0, i;

	tmpdir(d, sizeof(d), "keep");
	ASSERT_EQ(ct_write(&c, d, good_cfg), 0);
	i = (uint32_t)ct_convert(d, KT_QUANT_INT4, 0, out, sizeof(out));
	if (i)
		TH_LOG("kt_convert: %s", kt_last_error());
	ASSERT_EQ(i, 0u);
	ASSERT_EQ(kt_ktw_inspect(out, &info, NULL, 0), 0);
	EXPECT_EQ(info.quant, KT_QUANT_INT4);
	EXPECT_EQ(info.group_size, 32u);
	ASSERT_EQ(test_ctx(&ctx), 0);
	ASSERT_EQ(kt_model_open(ctx, out, NULL, &m), 0);
	ASSERT_EQ(kern_pack_layout(KT_QUANT_INT4, c.H, c.I, 32, &lay), 0);
	for (e = 0; e < c.E; e++)
		for (id = 0; id < 3; id++) {
			const struct core_expert *ex = core_model_expert(m, 0, e);
			uint32_t N = id == 2 ? c.H : c.I, KK = id == 2 ? c.I : c.H;

			for (n = 0; n < N; n++)
				for (k = 0; k < KK; k++)
					bad += kern_pack_get(&lay, id,
						ex->gate.tiles, n, k) !=
					       ct_mat(&c, e, (int)id)[(size_t)n *
								      KK + k];
		}
	EXPECT_EQ(bad, 0u);
	for (i = 0; i < T * c.H; i++)
		x[i] = tck_uniform(&seed);
	for (i = 0; i < T * K; i++) {
		ids[i] = (int32_t)(tck_rand(&seed) % c.E);
		w[i] = 0.5f;
	}
	{
		struct kt_moe_args a = { .x = x, .ids = ids, .w = w, .y = y,
					 .tokens = T, .top_k = K, .layer = 0,
					 .x_dtype = KT_DTYPE_F32,
					 .ids_dtype = KT_DTYPE_I32,
					 .y_dtype = KT_DTYPE_F32 };

		ASSERT_EQ(kt_moe_forward(ctx, m, &a), 0);
	}
	tck_forward_ref(c.H, c.I, c.E, T, K, x, ids, w, ct_get, &c, ref);
	err = tck_rel_mae(ref, y, (size_t)T * c.H);
	/* exact weights: what is left is the int8 activations' rounding */
	TH_LOG("rel. MAE %.5f", err);
	EXPECT_LT(err, 0.02);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	free(c.w);
	tck_rmdir(d);
}

/* Other methods dequantize q * scale and quantize again. */
TEST(to_bf16)
{
	struct ct c = { 128, 256, 2, 32, 52, NULL };
	char d[256], out[300];
	struct kt_ktw_info info;

	tmpdir(d, sizeof(d), "bf");
	ASSERT_EQ(ct_write(&c, d, good_cfg), 0);
	ASSERT_EQ(ct_convert(d, KT_QUANT_BF16, 0, out, sizeof(out)), 0);
	ASSERT_EQ(kt_ktw_inspect(out, &info, NULL, 0), 0);
	EXPECT_EQ(info.quant, KT_QUANT_BF16);
	free(c.w);
	tck_rmdir(d);
}

/* Replace the first @len bytes equal to @from in @path by @to. */
static void patch_bin(const char *path, const void *from, const void *to,
		      size_t len)
{
	FILE *f = fopen(path, "r+b");
	static char buf[1 << 20];
	size_t n;
	char *p;

	if (!f)
		return;
	n = fread(buf, 1, sizeof(buf), f);
	p = memmem(buf, n, from, len);
	if (p) {
		fseek(f, p - buf, SEEK_SET);
		fwrite(to, 1, len, f);
	}
	fclose(f);
}

static void patch_file(const char *path, const char *from, const char *to)
{
	patch_bin(path, from, to, strlen(from));
}

/* Write a good checkpoint, apply @patch to @file, expect @what. */
static void refused(struct kt_test_meta *_metadata, const char *tag,
		    const char *cfg, const char *file, const char *from,
		    const char *to, uint32_t group, const char *what)
{
	struct ct c = { 128, 128, 2, 32, 53, NULL };
	char d[256], p[300], out[300];
	int ret;

	tmpdir(d, sizeof(d), tag);
	ASSERT_EQ(ct_write(&c, d, cfg), 0);
	if (file) {
		snprintf(p, sizeof(p), "%s/%s", d, file);
		patch_file(p, from, to);
	}
	ret = ct_convert(d, KT_QUANT_INT4, group, out, sizeof(out));
	TH_LOG("error: %s", kt_last_error());
	EXPECT_EQ(ret, -EINVAL);
	EXPECT_TRUE(strstr(kt_last_error(), what) != NULL);
	EXPECT_NE(access(out, F_OK), 0);
	free(c.w);
	tck_rmdir(d);
}

TEST(group_size_16_refused)
{
	refused(_metadata, "g16", QCFG("pack-quantized", 4, 16, true), NULL,
		NULL, NULL, 0, "group_size must be 32, 64 or 128");
}

TEST(asymmetric_refused)
{
	refused(_metadata, "asym", QCFG("pack-quantized", 4, 32, false), NULL,
		NULL, NULL, 0, "symmetric 4-bit integer");
}

TEST(eight_bits_refused)
{
	refused(_metadata, "b8", QCFG("pack-quantized", 8, 32, true), NULL,
		NULL, NULL, 0, "symmetric 4-bit integer");
}

TEST(other_format_refused)
{
	refused(_metadata, "fmt", QCFG("int-quantized", 4, 32, true), NULL,
		NULL, NULL, 0, "pack-quantized only");
}

TEST(group_in_config_disagrees_with_scales)
{
	/* the config says 64, the scales are per 32 */
	refused(_metadata, "g64", QCFG("pack-quantized", 4, 64, true), NULL,
		NULL, NULL, 0, "weight_scale: shape [128, 4], expected [128, 2]");
}

TEST(other_group_asked_refused)
{
	refused(_metadata, "ask", good_cfg, NULL, NULL, NULL, 128,
		"keeps it as it is");
}

TEST(weight_shape_disagrees)
{
	static const int64_t from[2] = { 128, 128 }, to[2] = { 128, 129 };
	struct ct c = { 128, 128, 2, 32, 54, NULL };
	char d[256], p[300], out[300];

	tmpdir(d, sizeof(d), "wsh");
	ASSERT_EQ(ct_write(&c, d, good_cfg), 0);
	snprintf(p, sizeof(p), "%s/model.safetensors", d);
	patch_bin(p, from, to, sizeof(from));
	EXPECT_EQ(ct_convert(d, KT_QUANT_INT4, 0, out, sizeof(out)), -EINVAL);
	TH_LOG("error: %s", kt_last_error());
	EXPECT_TRUE(strstr(kt_last_error(),
			   "weight_shape holds [128, 129], expected [128, 128]"));
	EXPECT_NE(access(out, F_OK), 0);
	free(c.w);
	tck_rmdir(d);
}

TEST(packed_wrong_dtype)
{
	refused(_metadata, "dt", good_cfg, "model.safetensors",
		"\"I32\",\"shape\":[128,16]", "\"F32\",\"shape\":[128,16]", 0,
		"expected I32");
}

TEST(shape_tensor_wrong_rank)
{
	refused(_metadata, "rk", good_cfg, "model.safetensors",
		"\"I64\",\"shape\":[2]", "\"I32\",\"shape\":[4]", 0,
		"expected two I32 or I64");
}

TEST_HARNESS_MAIN
