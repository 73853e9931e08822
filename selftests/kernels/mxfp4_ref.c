// SPDX-License-Identifier: MIT
/*
 * mxfp4_ref.c - MXFP4 against an independent numpy decoder
 * (mxfp4_ref.py): OCP blocks made in numpy are packed with
 * kern_pack_rows_mxfp4(), read back with kern_pack_get() and run through
 * kt_model_create() + kt_moe_forward(); numpy checks both. Skips without
 * /usr/bin/python3 and numpy.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

#include "kt_test.h"
#include "kernels/mxfp4.h"

#define PYTHON	"/usr/bin/python3"
#define SCRIPT	"selftests/kernels/mxfp4_ref.py"

/* The source tree: $KT_SRCDIR, the working directory, or above the build. */
static int find_src(char *out, size_t n)
{
	const char *env = getenv("KT_SRCDIR");
	char exe[PATH_MAX], p[2 * PATH_MAX];
	ssize_t len;

	if (env) {
		snprintf(out, n, "%s", env);
		return 0;
	}
	if (!access(SCRIPT, R_OK) && getcwd(out, n))
		return 0;
	len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (len < 0)
		return -1;
	exe[len] = 0;
	dirname(exe);
	for (const char *up = "/../../../.."; *up; up += 3) {
		snprintf(p, sizeof(p), "%s%s/" SCRIPT, exe, up);
		if (!access(p, R_OK)) {
			snprintf(p, sizeof(p), "%s%s", exe, up);
			return realpath(p, out) ? 0 : -1;
		}
	}
	return -1;
}

static int run_py(const char *src, const char *verb, const char *dir)
{
	char cmd[3 * PATH_MAX];
	int st;

	snprintf(cmd, sizeof(cmd), PYTHON " %s/" SCRIPT " %s %s", src, verb,
		 dir);
	fflush(stdout);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void *read_file(const char *dir, const char *name, size_t bytes)
{
	char p[PATH_MAX + 64];
	void *buf = malloc(bytes);
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "rb");
	if (!f || fread(buf, 1, bytes, f) != bytes) {
		free(buf);
		buf = NULL;
	}
	if (f)
		fclose(f);
	return buf;
}

static int write_file(const char *dir, const char *name, const void *buf,
		      size_t bytes)
{
	char p[PATH_MAX + 64];
	FILE *f;
	int ok;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "wb");
	if (!f)
		return -EIO;
	ok = fwrite(buf, 1, bytes, f) == bytes;
	return fclose(f) || !ok ? -EIO : 0;
}

/*
 * Pack matrix @id of @l from the OCP blocks @b ([N][K/2]) and scales @s
 * ([N][K/32]) row block by row block; write every weight read back, f32
 * [N][K], to @deq.
 */
static int pack_ocp(const struct kern_pack_layout *l, enum kern_mat_id id,
		    unsigned int N, const uint8_t *b, const uint8_t *s,
		    uint8_t *blob, float *deq)
{
	unsigned int K = id == KERN_MAT_DOWN ? l->inter : l->hidden;
	uint8_t *codes = malloc((size_t)16 * K);
	unsigned int nb, r, j, n, k;
	int ret = 0;

	for (nb = 0; nb < N / 16 && !ret; nb++) {
		for (r = 0; r < 16; r++)
			for (j = 0; j < K / 32; j++)
				kern_mxfp4_unpack_ocp(b + (size_t)(nb * 16 + r) *
						      (K / 2) + j * 16,
						      codes + (size_t)r * K +
						      j * 32);
		ret = kern_pack_rows_mxfp4(l, id, nb, codes,
					   s + (size_t)nb * 16 * (K / 32),
					   blob);
	}
	for (n = 0; n < N && !ret; n++)
		for (k = 0; k < K; k++)
			deq[(size_t)n * K + k] = kern_pack_get(l, id, blob, n,
							       k);
	free(codes);
	return ret;
}

struct ref_model {
	unsigned int H, I;
	float *w[16][3];	/* dequantized weights per expert, matrix */
};

static int get_expert(void *arg, uint32_t layer, uint32_t e,
		      struct kt_expert_src *src)
{
	struct ref_model *rm = arg;

	src->gate = rm->w[e][0];
	src->up = rm->w[e][1];
	src->down = rm->w[e][2];
	return 0;
}

TEST(numpy_reference)
{
	char src[PATH_MAX], dir[] = "/tmp/kt-mxfp4-XXXXXX", name[64];
	unsigned int H, I, E, topk, T, ex, mat;
	struct kern_pack_layout l, lx;
	struct ref_model rm = { 0 };
	struct kt_ctx *ctx = NULL;
	struct kt_model *m = NULL;
	char meta[PATH_MAX + 16];
	FILE *mf;
	uint8_t *blob, *b, *s;
	float *x, *w, *y, *deq;
	int32_t *ids;
	int rc;

	if (access(PYTHON, X_OK))
		SKIP(return, PYTHON " not found");
	if (find_src(src, sizeof(src)))
		SKIP(return, "source tree not found (set KT_SRCDIR)");
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	rc = run_py(src, "gen", dir);
	if (rc == 4) {
		snprintf(name, sizeof(name), "rm -rf %s", dir);
		ASSERT_EQ(system(name), 0);
		SKIP(return, "numpy missing (python3-numpy)");
	}
	ASSERT_EQ(rc, 0);
	snprintf(meta, sizeof(meta), "%s/meta.txt", dir);
	mf = fopen(meta, "r");
	ASSERT_TRUE(mf != NULL);
	ASSERT_EQ(fscanf(mf, "%u %u %u %u %u", &H, &I, &E, &topk, &T), 5);
	fclose(mf);
	ASSERT_LE(E, 16u);
	rm.H = H;
	rm.I = I;
	ASSERT_EQ(kern_pack_layout(KT_QUANT_MXFP4, H, I, 0, &l), 0);
	blob = malloc(l.total);
	for (ex = 0; ex < E; ex++)
		for (mat = 0; mat < 3; mat++) {
			unsigned int N = mat < 2 ? I : H, K = mat < 2 ? H : I;

			snprintf(name, sizeof(name), "blocks-%u-%u.bin", ex, mat);
			b = read_file(dir, name, (size_t)N * K / 2);
			snprintf(name, sizeof(name), "scales-%u-%u.bin", ex, mat);
			s = read_file(dir, name, (size_t)N * K / 32);
			ASSERT_TRUE(b && s);
			deq = malloc((size_t)N * K * 4);
			ASSERT_EQ(pack_ocp(&l, mat, N, b, s, blob, deq), 0);
			snprintf(name, sizeof(name), "deq-%u-%u.bin", ex, mat);
			ASSERT_EQ(write_file(dir, name, deq, (size_t)N * K * 4),
				  0);
			rm.w[ex][mat] = deq;
			free(b);
			free(s);
		}
	/* the extreme scales: rows 0..15 of a gate of K = H */
	ASSERT_EQ(kern_pack_layout(KT_QUANT_MXFP4, H, 128, 32, &lx), 0);
	b = read_file(dir, "blocks-x.bin", (size_t)16 * H / 2);
	s = read_file(dir, "scales-x.bin", (size_t)16 * H / 32);
	ASSERT_TRUE(b && s);
	free(blob);
	blob = calloc(1, lx.total);
	deq = malloc((size_t)16 * H * 4);
	ASSERT_EQ(pack_ocp(&lx, KERN_MAT_GATE, 16, b, s, blob, deq), 0);
	ASSERT_EQ(write_file(dir, "deq-x.bin", deq, (size_t)16 * H * 4), 0);
	free(deq);
	free(b);
	free(s);
	free(blob);

	/* the weights are exact MXFP4 values (e >= 3): packing them again
	 * with the block rule gives the same values, whatever codes */
	{
		struct kt_ctx_opts co = { .sz = sizeof(co), .threads = 2 };
		struct kt_model_desc d = {
			.sz = sizeof(d), .hidden = H, .inter = I,
			.n_experts = E, .n_layers = 1,
			.src_dtype = KT_DTYPE_F32, .quant = KT_QUANT_MXFP4,
			.get_expert = get_expert, .arg = &rm,
		};
		struct kt_moe_args a = { 0 };

		ASSERT_EQ(kt_ctx_create(&co, &ctx), 0);
		ASSERT_EQ(kt_model_create(ctx, &d, &m), 0);
		x = read_file(dir, "x.bin", (size_t)T * H * 4);
		ids = read_file(dir, "ids.bin", (size_t)T * topk * 4);
		w = read_file(dir, "w.bin", (size_t)T * topk * 4);
		ASSERT_TRUE(x && ids && w);
		y = calloc((size_t)T * H, 4);
		a.x = x;
		a.ids = ids;
		a.w = w;
		a.y = y;
		a.tokens = T;
		a.top_k = topk;
		a.x_dtype = KT_DTYPE_F32;
		a.ids_dtype = KT_DTYPE_I32;
		a.y_dtype = KT_DTYPE_F32;
		ASSERT_EQ(kt_moe_forward(ctx, m, &a), 0);
		TH_LOG("forward on %s", kt_isa_name(kt_ctx_isa(ctx)));
		ASSERT_EQ(write_file(dir, "y.bin", y, (size_t)T * H * 4), 0);
		kt_model_destroy(m);
		kt_ctx_destroy(ctx);
		free(x);
		free(ids);
		free(w);
		free(y);
	}
	for (ex = 0; ex < E; ex++)
		for (mat = 0; mat < 3; mat++)
			free(rm.w[ex][mat]);
	EXPECT_EQ(run_py(src, "check", dir), 0);
	snprintf(name, sizeof(name), "rm -rf %s", dir);
	ASSERT_EQ(system(name), 0);
}

TEST_HARNESS_MAIN
