// SPDX-License-Identifier: MIT
/*
 * convert.c - kt_convert() on checkpoints written here (Qwen-MoE, DeepSeek
 * and Mixtral names; single and sharded; BF16/F16/F32/FP8), loaded back
 * with kt_model_open(); an f64 MoE forward over the loaded (dequantized)
 * weights must match one over the source weights within the quantization's
 * budget (rel. MAE: INT8 0.04, INT4 0.25, BF16 0.005). Broken checkpoints
 * must give one clear error and leave no output.
 */
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include "kt_test.h"
#include "ckpt.h"
#include "kernels/pack.h"
#include "ktcore/core.h"
#include "ktcore/model.h"
#include "test-ctx.h"

struct ref_packed {
	const struct kt_model *m;
	struct kern_pack_layout lay;
	uint32_t l;
};

static double get_packed(void *arg, uint32_t e, int m, uint32_t n, uint32_t k)
{
	const struct ref_packed *r = arg;
	const struct core_expert *ex = core_model_expert(r->m, r->l, e);

	/* the blob starts at the gate tiles (packed-layout.md) */
	return kern_pack_get(&r->lay, (enum kern_mat_id)m, ex->gate.tiles, n, k);
}

/* Convert @c written to @dir with @quant, load, compare every layer. */
static int convert_and_check(struct kt_test_meta *_metadata, struct tck *c,
			     const char *dir, int quant, uint32_t group,
			     double tol)
{
	char out[600];
	struct kt_convert_opts o = { .sz = sizeof(o), .input = dir,
				     .output = out, .quant = quant,
				     .group_size = group, .layer_last = -1,
				     .threads = 2 };
	const uint32_t T = 6, K = 3;
	struct kt_ktw_info info;
	struct kt_model *m = NULL;
	struct kt_ctx *ctx = NULL;
	uint64_t seed = 7;
	float x[6 * 512], w[6 * 3], *y;
	int32_t ids[6 * 3];
	double *ref, *got;
	uint32_t l, i;
	int ret;

	snprintf(out, sizeof(out), "%s/out.ktw", dir);
	ASSERT_EQ(tck_write(c, dir), 0);
	ret = kt_convert(&o);
	if (ret)
		TH_LOG("kt_convert: %s", kt_last_error());
	ASSERT_EQ(ret, 0);
	ASSERT_EQ(kt_ktw_inspect(out, &info, NULL, 0), 0);
	ASSERT_EQ(info.n_layers, c->n_moe);
	ASSERT_EQ(info.n_experts, c->n_experts);
	ASSERT_EQ(info.hidden, c->hidden);
	ASSERT_EQ(info.inter, c->inter);
	ASSERT_EQ(info.quant, quant);
	ASSERT_EQ(info.top_k, c->top_k);
	ASSERT_EQ(kt_ktw_verify(out, NULL), 0);
	ASSERT_EQ(test_ctx(&ctx), 0);
	ret = kt_model_open(ctx, out, NULL, &m);
	if (ret)
		TH_LOG("kt_model_open: %s", kt_last_error());
	ASSERT_EQ(ret, 0);
	ASSERT_EQ(m->n_layers, c->n_moe);
	for (l = 0; l < c->n_moe; l++)
		ASSERT_EQ(m->layer_ids[l], c->moe_ids[l]);
	ASSERT_TRUE(c->hidden <= 512);
	for (i = 0; i < T * c->hidden; i++)
		x[i] = tck_uniform(&seed);
	for (i = 0; i < T * K; i++) {
		ids[i] = (int32_t)(tck_rand(&seed) % c->n_experts);
		w[i] = 0.2f + 0.5f * (tck_uniform(&seed) + 1.0f);
	}
	ids[1] = -1;	/* skipped slot */
	ref = calloc((size_t)T * c->hidden, sizeof(double));
	got = calloc((size_t)T * c->hidden, sizeof(double));
	y = calloc((size_t)T * c->hidden, sizeof(float));
	for (l = 0; l < c->n_moe; l++) {
		struct tck_src rs = { c, l };
		struct ref_packed rp = { m, { 0 }, l };
		double err;

		kern_pack_layout(m->quant, m->hidden, m->inter, m->group_size,
				 &rp.lay);
		tck_forward_ref(c->hidden, c->inter, c->n_experts, T, K, x, ids,
				w, tck_src_get, &rs, ref);
		tck_forward_ref(c->hidden, c->inter, c->n_experts, T, K, x, ids,
				w, get_packed, &rp, got);
		for (i = 0; i < T * c->hidden; i++)
			y[i] = (float)got[i];
		err = tck_rel_mae(ref, y, (size_t)T * c->hidden);
		TH_LOG("layer %d: rel. MAE %.5f (budget %.3f)", c->moe_ids[l],
		       err, tol);
		EXPECT_LT(err, tol);
		/* and not trivially: the packed weights are not all zero */
		EXPECT_GT(fabs(got[0]) + fabs(got[c->hidden + 3]), 0.0);
	}
	free(ref);
	free(got);
	free(y);
	kt_model_destroy(m);
	kt_ctx_destroy(ctx);
	tck_free(c);
	return 0;
}

static void tmpdir(char *buf, size_t n, const char *tag)
{
	snprintf(buf, n, "/tmp/kt-conv-%s-%d", tag, (int)getpid());
	tck_rmdir(buf);
}

TEST(qwen_bf16_single_int8)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 256, 256, 8, 2, 2, 1, 1);
	char d[256];

	tmpdir(d, sizeof(d), "q8");
	convert_and_check(_metadata, &c, d, KT_QUANT_INT8, 0, 0.04);
	tck_rmdir(d);
}

TEST(deepseek_fp8_sharded_int4)
{
	struct tck c = TCK(TCK_DEEPSEEK, TCK_FP8, 256, 384, 4, 3, 2, 3, 2);
	char d[256];

	tmpdir(d, sizeof(d), "ds4");
	convert_and_check(_metadata, &c, d, KT_QUANT_INT4, 128, 0.25);
	tck_rmdir(d);
}

TEST(mixtral_f16_sharded_bf16)
{
	struct tck c = TCK(TCK_MIXTRAL, TCK_F16, 256, 256, 4, 2, 2, 2, 3);
	char d[256];

	tmpdir(d, sizeof(d), "mx");
	convert_and_check(_metadata, &c, d, KT_QUANT_BF16, 0, 0.005);
	tck_rmdir(d);
}

TEST(qwen_f32_int4_group32)
{
	struct tck c = TCK(TCK_QWEN, TCK_F32, 384, 128, 4, 1, 2, 1, 4);
	char d[256];

	tmpdir(d, sizeof(d), "q4");
	convert_and_check(_metadata, &c, d, KT_QUANT_INT4, 32, 0.25);
	tck_rmdir(d);
}

TEST(deepseek_bf16_int8)
{
	struct tck c = TCK(TCK_DEEPSEEK, TCK_BF16, 128, 256, 4, 3, 2, 1, 5);
	char d[256];

	tmpdir(d, sizeof(d), "ds8");
	convert_and_check(_metadata, &c, d, KT_QUANT_INT8, 0, 0.04);
	tck_rmdir(d);
}

static bool dir_has_only(const char *dir, const char *const *names)
{
	struct dirent *de;
	bool ok = true;
	DIR *d = opendir(dir);

	if (!d)
		return false;
	while ((de = readdir(d))) {
		const char *const *n;
		bool known = false;

		if (de->d_name[0] == '.')
			continue;
		for (n = names; *n; n++)
			if (!strcmp(*n, de->d_name) ||
			    !strncmp(de->d_name, "model-", 6))
				known = true;
		if (!known)
			ok = false;
	}
	closedir(d);
	return ok;
}

static const char *const ckpt_files[] = {
	"config.json", "model.safetensors", "model.safetensors.index.json", NULL
};

/* Convert expecting failure; the message must mention @what. */
static void expect_fail(struct kt_test_meta *_metadata, const char *dir,
			int quant, const char *what)
{
	char out[600];
	struct kt_convert_opts o = { .sz = sizeof(o), .input = dir,
				     .output = out, .quant = quant,
				     .layer_last = -1, .threads = 2 };
	int ret;

	snprintf(out, sizeof(out), "%s/out.ktw", dir);
	ret = kt_convert(&o);
	TH_LOG("error: %s", kt_last_error());
	ASSERT_LT(ret, 0);
	EXPECT_TRUE(strstr(kt_last_error(), what) != NULL);
	EXPECT_NE(access(out, F_OK), 0);
	EXPECT_TRUE(dir_has_only(dir, ckpt_files));
}

static void patch_file(const char *path, const char *from, const char *to)
{
	FILE *f = fopen(path, "r+b");
	char buf[65536];
	size_t n;
	char *p;

	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	p = memmem(buf, n, from, strlen(from));
	if (p) {
		fseek(f, p - buf, SEEK_SET);
		fwrite(to, 1, strlen(to), f);
	}
	fclose(f);
}

TEST(missing_tensor)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 4, 1, 2, 1, 6);
	char d[256], p[300];

	tmpdir(d, sizeof(d), "miss");
	ASSERT_EQ(tck_write(&c, d), 0);
	/* one more expert in the config than in the files */
	snprintf(p, sizeof(p), "%s/config.json", d);
	patch_file(p, "\"num_experts\": 4", "\"num_experts\": 5");
	expect_fail(_metadata, d, KT_QUANT_INT8, "missing tensor model.layers.0.mlp.experts.4.gate_proj.weight");
	tck_free(&c);
	tck_rmdir(d);
}

TEST(wrong_shape)
{
	struct tck c = TCK(TCK_MIXTRAL, TCK_BF16, 128, 256, 2, 1, 2, 1, 7);
	char d[256], p[300];

	tmpdir(d, sizeof(d), "shape");
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(p, sizeof(p), "%s/config.json", d);
	patch_file(p, "\"intermediate_size\": 256", "\"intermediate_size\": 128");
	expect_fail(_metadata, d, KT_QUANT_INT8, "shape [256, 128], expected [128, 128]");
	tck_free(&c);
	tck_rmdir(d);
}

TEST(unsupported_dtype)
{
	struct tck c = TCK(TCK_QWEN, TCK_F16, 128, 128, 2, 1, 2, 1, 8);
	char d[256], p[300];

	tmpdir(d, sizeof(d), "dtype");
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(p, sizeof(p), "%s/model.safetensors", d);
	patch_file(p, "\"F16\"", "\"I16\"");
	expect_fail(_metadata, d, KT_QUANT_INT8, "unsupported dtype I16");
	tck_free(&c);
	tck_rmdir(d);
}

TEST(malformed_config)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 2, 1, 2, 1, 9);
	char d[256], p[300];

	tmpdir(d, sizeof(d), "cfg");
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(p, sizeof(p), "%s/config.json", d);
	patch_file(p, "\"hidden_size\":", "\"hidden_size\" ");
	expect_fail(_metadata, d, KT_QUANT_INT8, "config.json: malformed JSON");
	tck_free(&c);
	tck_rmdir(d);
}

TEST(malformed_safetensors_header)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 2, 1, 2, 1, 10);
	char d[256], p[300];

	tmpdir(d, sizeof(d), "sthdr");
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(p, sizeof(p), "%s/model.safetensors", d);
	patch_file(p, "\"data_offsets\":[", "\"data_offsets\":{");
	expect_fail(_metadata, d, KT_QUANT_INT8, "model.safetensors: malformed JSON header");
	tck_free(&c);
	tck_rmdir(d);
}

TEST(layer_range)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 2, 3, 2, 1, 11);
	char d[256], out[300];
	struct kt_convert_opts o = { .sz = sizeof(o), .output = out,
				     .quant = KT_QUANT_INT8, .layer_first = 1,
				     .layer_last = 1, .threads = 1 };
	struct kt_ktw_info info;
	int32_t ids[4];

	tmpdir(d, sizeof(d), "range");
	ASSERT_EQ(tck_write(&c, d), 0);
	o.input = d;
	snprintf(out, sizeof(out), "%s/out.ktw", d);
	ASSERT_EQ(kt_convert(&o), 0);
	ASSERT_EQ(kt_ktw_inspect(out, &info, ids, 4), 0);
	ASSERT_EQ(info.n_layers, 1u);
	ASSERT_EQ(ids[0], 1);
	/* no MoE layer in range: an error, no file */
	unlink(out);
	o.layer_first = 7;
	o.layer_last = 9;
	ASSERT_EQ(kt_convert(&o), -EINVAL);
	ASSERT_NE(access(out, F_OK), 0);
	tck_free(&c);
	tck_rmdir(d);
}

static volatile sig_atomic_t cancel_flag;

static void cancel_after_two(void *arg, uint64_t done, uint64_t total)
{
	if (done >= 2)
		cancel_flag = 1;
}

TEST(cancelled_leaves_nothing)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 8, 2, 2, 1, 12);
	char d[256], out[300];
	struct kt_convert_opts o = { .sz = sizeof(o), .output = out,
				     .quant = KT_QUANT_INT8, .layer_last = -1,
				     .threads = 1, .progress = cancel_after_two,
				     .cancel = &cancel_flag };

	tmpdir(d, sizeof(d), "cancel");
	ASSERT_EQ(tck_write(&c, d), 0);
	o.input = d;
	snprintf(out, sizeof(out), "%s/out.ktw", d);
	ASSERT_EQ(kt_convert(&o), -EINTR);
	ASSERT_NE(access(out, F_OK), 0);
	ASSERT_TRUE(dir_has_only(d, ckpt_files));
	tck_free(&c);
	tck_rmdir(d);
}

static void die_after_three(void *arg, uint64_t done, uint64_t total)
{
	if (done >= 3)
		raise(SIGKILL);
}

TEST(killed_leaves_nothing)
{
	struct tck c = TCK(TCK_QWEN, TCK_BF16, 128, 128, 8, 2, 2, 1, 13);
	char d[256], out[300];
	int status;
	pid_t pid;

	tmpdir(d, sizeof(d), "kill");
	ASSERT_EQ(tck_write(&c, d), 0);
	snprintf(out, sizeof(out), "%s/out.ktw", d);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (!pid) {
		struct kt_convert_opts o = { .sz = sizeof(o), .input = d,
					     .output = out,
					     .quant = KT_QUANT_INT8,
					     .layer_last = -1, .threads = 1,
					     .progress = die_after_three };

		kt_convert(&o);
		_exit(0);
	}
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFSIGNALED(status));
	ASSERT_NE(access(out, F_OK), 0);
	ASSERT_TRUE(dir_has_only(d, ckpt_files));
	tck_free(&c);
	tck_rmdir(d);
}

TEST_HARNESS_MAIN
