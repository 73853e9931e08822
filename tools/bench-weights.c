// SPDX-License-Identifier: MIT
/*
 * bench-weights.c - synthetic expert weights for kt bench: N(0, 0.02) with
 * per-row magnitudes, a pure function of (seed, layer, expert), generated
 * by a helper thread one expert ahead while kt packs the previous one.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench.h"
#include "tools/stats.h"

#define SYNTH_SIGMA	0.02f

/* Two slots: kt packs one while the helper fills the other. */
struct synth_slot {
	void *mat[3];			/* gate, up, down */
	int64_t idx;			/* layer * E + expert held, or -1 */
};

struct synth {
	struct synth_cfg cfg;
	size_t elems;			/* of one matrix: H * I */
	size_t esize;
	int64_t total;			/* layers * experts */
	struct synth_slot slot[2];
	pthread_t helper;
	bool helper_running;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int64_t job;			/* index the helper makes, or -1 */
	bool busy;			/* helper holds a job */
	bool quit;
	int64_t done;			/* experts handed to kt */
	uint64_t t_start, t_drawn;	/* progress line */
};

static inline uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* xorshift64*: one multiply per 64 random bits is plenty for test data. */
static inline uint64_t xs64(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

/*
 * Normal deviates come from a table of 65536 Box-Muller samples indexed
 * by 16-bit slices of the generator: four values per 64-bit draw and no
 * transcendental in the loop, which keeps generating several GB of
 * weights to about a nanosecond per value.
 */
#define NORM_BITS	16
#define NORM_SIZE	(1u << NORM_BITS)

static float norm_table[NORM_SIZE];
static pthread_once_t norm_once = PTHREAD_ONCE_INIT;

static void norm_init(void)
{
	uint64_t s = 0x243f6a8885a308d3ull;	/* fixed: the table is data */
	uint32_t i;

	for (i = 0; i < NORM_SIZE; i += 2) {
		/* u1 in (0, 1] so that log() stays finite */
		double u1 = ((double)(xs64(&s) >> 11) + 1.0) * 0x1p-53;
		double u2 = (double)(xs64(&s) >> 11) * 0x1p-53;
		double r = sqrt(-2.0 * log(u1));

		norm_table[i] = (float)(r * cos(2.0 * M_PI * u2));
		norm_table[i + 1] = (float)(r * sin(2.0 * M_PI * u2));
	}
}

static inline float unif(uint64_t *s)
{
	return (float)(xs64(s) >> 40) * (1.0f / 16777216.0f);
}

/* f32 -> bf16, round to nearest even (the values here are finite). */
static inline uint16_t to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static uint64_t seed_of(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t s = seed ^ (a * 0x100000001b3ull);
	uint64_t v;

	splitmix64(&s);
	s ^= b * 0xc2b2ae3d27d4eb4full;
	splitmix64(&s);
	s ^= c;
	v = splitmix64(&s);
	return v ? v : 1;	/* xorshift never leaves 0 */
}

/* @n values of N(0, sigma^2) from the generator state @s. */
static void fill_row(void *dst, enum kt_dtype dt, size_t n, float sigma,
		     uint64_t *s)
{
	uint16_t *b = dst;
	float *f = dst;
	size_t i = 0;
	unsigned int j;
	uint64_t r;

	/* four values per draw; the tail takes a fresh draw too */
	if (dt == KT_DTYPE_BF16) {
		for (; i + 4 <= n; i += 4) {
			r = xs64(s);
			for (j = 0; j < 4; j++, r >>= NORM_BITS)
				b[i + j] = to_bf16(norm_table[r & (NORM_SIZE - 1)] *
						   sigma);
		}
		for (r = xs64(s); i < n; i++, r >>= NORM_BITS)
			b[i] = to_bf16(norm_table[r & (NORM_SIZE - 1)] * sigma);
		return;
	}
	for (; i + 4 <= n; i += 4) {
		r = xs64(s);
		for (j = 0; j < 4; j++, r >>= NORM_BITS)
			f[i + j] = norm_table[r & (NORM_SIZE - 1)] * sigma;
	}
	for (r = xs64(s); i < n; i++, r >>= NORM_BITS)
		f[i] = norm_table[r & (NORM_SIZE - 1)] * sigma;
}

/*
 * Row r of a [rows][cols] matrix: sigma times a per-row magnitude in
 * [0.5, 1.5), and one row in 64 three times larger, so that per-row and
 * per-group quantization scales differ as they do in real checkpoints.
 */
static void gen_matrix(void *dst, enum kt_dtype dt, uint32_t rows,
		       uint32_t cols, uint64_t seed)
{
	size_t esize = dt == KT_DTYPE_BF16 ? 2 : 4;
	uint64_t s = seed;
	uint32_t r;

	for (r = 0; r < rows; r++) {
		float mag = SYNTH_SIGMA * (0.5f + unif(&s));

		if (!(xs64(&s) & 63))
			mag *= 3.0f;
		fill_row((char *)dst + (size_t)r * cols * esize, dt, cols, mag,
			 &s);
	}
}

static void gen_expert(struct synth *s, int64_t idx, struct synth_slot *sl)
{
	uint32_t layer = (uint32_t)(idx / s->cfg.n_experts);
	uint32_t expert = (uint32_t)(idx % s->cfg.n_experts);
	uint32_t h = s->cfg.hidden, in = s->cfg.inter;

	gen_matrix(sl->mat[0], s->cfg.dtype, in, h,
		   seed_of(s->cfg.seed, layer, expert, 0));
	gen_matrix(sl->mat[1], s->cfg.dtype, in, h,
		   seed_of(s->cfg.seed, layer, expert, 1));
	gen_matrix(sl->mat[2], s->cfg.dtype, h, in,
		   seed_of(s->cfg.seed, layer, expert, 2));
	sl->idx = idx;
}

static void *helper_main(void *arg)
{
	struct synth *s = arg;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		int64_t job;

		while (s->job < 0 && !s->quit)
			pthread_cond_wait(&s->cond, &s->lock);
		if (s->quit)
			break;
		job = s->job;
		s->job = -1;
		pthread_mutex_unlock(&s->lock);
		gen_expert(s, job, &s->slot[job & 1]);
		pthread_mutex_lock(&s->lock);
		s->busy = false;
		pthread_cond_broadcast(&s->cond);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/**
 * synth_buffer_bytes() - memory the generator holds (two experts).
 * @cfg: configuration.
 * Return: bytes.
 */
uint64_t synth_buffer_bytes(const struct synth_cfg *cfg)
{
	uint64_t esize = cfg->dtype == KT_DTYPE_BF16 ? 2 : 4;

	return 2 * 3 * (uint64_t)cfg->hidden * cfg->inter * esize;
}

/**
 * synth_create() - set up a generator of synthetic experts.
 * @cfg: geometry, dtype and seed; copied.
 * @out: receives the generator; pass it as the kt_model_desc arg with
 *	 synth_get_expert() as get_expert.
 * Return: 0; -EINVAL bad dtype; -ENOMEM; or a pthread error as -errno.
 */
int synth_create(const struct synth_cfg *cfg, struct synth **out)
{
	struct synth *s;
	int i, j, ret;

	if (cfg->dtype != KT_DTYPE_F32 && cfg->dtype != KT_DTYPE_BF16)
		return -EINVAL;
	pthread_once(&norm_once, norm_init);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->esize = cfg->dtype == KT_DTYPE_BF16 ? 2 : 4;
	s->elems = (size_t)cfg->hidden * cfg->inter;
	s->total = (int64_t)cfg->n_layers * cfg->n_experts;
	s->job = -1;
	for (i = 0; i < 2; i++) {
		s->slot[i].idx = -1;
		for (j = 0; j < 3; j++) {
			s->slot[i].mat[j] = malloc(s->elems * s->esize);
			if (!s->slot[i].mat[j]) {
				ret = -ENOMEM;
				goto free_slots;
			}
		}
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	ret = -pthread_create(&s->helper, NULL, helper_main, s);
	/* without a helper thread the generation is just not overlapped */
	s->helper_running = !ret;
	s->t_start = stats_now_ns();
	*out = s;
	return 0;

free_slots:
	for (i = 0; i < 2; i++)
		for (j = 0; j < 3; j++)
			free(s->slot[i].mat[j]);
	free(s);
	return ret;
}

static void draw_progress(struct synth *s, uint32_t layer, uint32_t expert,
			  bool last)
{
	uint64_t now = stats_now_ns();
	double pct;

	if (!s->cfg.progress)
		return;
	if (!last && now - s->t_drawn < 100000000ull)
		return;
	s->t_drawn = now;
	if (last) {
		fputs("\r\033[K", stderr);
		return;
	}
	pct = 100.0 * (double)s->done / (double)(s->total ? s->total : 1);
	fprintf(stderr,
		"\r\033[Kgenerating and packing weights: %3.0f%% (layer %u/%u, expert %u/%u, %.1f s)",
		pct, layer + 1, s->cfg.n_layers, expert + 1, s->cfg.n_experts,
		(double)(now - s->t_start) * 1e-9);
}

/**
 * synth_get_expert() - kt_expert_fn of the generator.
 * @arg: the struct synth.
 * @layer: layer index.
 * @expert: expert index.
 * @src: set to the expert's matrices, valid until the next call.
 *
 * Context: kt_model_create()'s thread.
 * Return: 0; -EINVAL when (@layer, @expert) is out of range.
 */
int synth_get_expert(void *arg, uint32_t layer, uint32_t expert,
		     struct kt_expert_src *src)
{
	struct synth *s = arg;
	struct synth_slot *sl;
	int64_t idx;

	if (layer >= s->cfg.n_layers || expert >= s->cfg.n_experts)
		return -EINVAL;
	idx = (int64_t)layer * s->cfg.n_experts + expert;
	sl = &s->slot[idx & 1];

	pthread_mutex_lock(&s->lock);
	/* the helper is normally making exactly this one */
	while (s->busy)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	/* first call, or kt asked out of order: make it here */
	if (sl->idx != idx)
		gen_expert(s, idx, sl);

	/*
	 * The other slot was handed out by the previous call, which kt is done
	 * with now that it asks for the next expert: refill it ahead.
	 */
	if (s->helper_running && idx + 1 < s->total) {
		pthread_mutex_lock(&s->lock);
		s->job = idx + 1;
		s->busy = true;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
	}
	src->gate = sl->mat[0];
	src->up = sl->mat[1];
	src->down = sl->mat[2];
	s->done++;
	draw_progress(s, layer, expert, false);
	return 0;
}

/**
 * synth_destroy() - stop the helper, free the buffers, clear the progress
 *	line.
 * @s: generator, may be NULL.
 */
void synth_destroy(struct synth *s)
{
	int i, j;

	if (!s)
		return;
	if (s->helper_running) {
		pthread_mutex_lock(&s->lock);
		s->quit = true;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->helper, NULL);
	}
	if (s->done)
		draw_progress(s, 0, 0, true);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	for (i = 0; i < 2; i++)
		for (j = 0; j < 3; j++)
			free(s->slot[i].mat[j]);
	free(s);
}

/**
 * synth_fill_bf16() - @n bf16 values of N(0, @sigma^2), seeded.
 * @dst: output.
 * @n: count.
 * @seed: seed.
 * @sigma: standard deviation.
 */
void synth_fill_bf16(uint16_t *dst, size_t n, uint64_t seed, float sigma)
{
	uint64_t s = seed_of(seed, 0, 0, 0);

	pthread_once(&norm_once, norm_init);
	fill_row(dst, KT_DTYPE_BF16, n, sigma, &s);
}

/**
 * synth_fill_f32() - @n f32 values of N(0, @sigma^2), seeded.
 * @dst: output.
 * @n: count.
 * @seed: seed.
 * @sigma: standard deviation.
 */
void synth_fill_f32(float *dst, size_t n, uint64_t seed, float sigma)
{
	uint64_t s = seed_of(seed, 0, 0, 0);

	pthread_once(&norm_once, norm_init);
	fill_row(dst, KT_DTYPE_F32, n, sigma, &s);
}
