// SPDX-License-Identifier: MIT
/*
 * amx-loops.c - what bounds the AMX tile loops on this core: ns per
 * TDPBSSD for the peak loop and for the tile-load patterns the kernels of
 * kernels/moe-amx.h run (operands from L1 or L2, C stored per KC chunk),
 * best of 30, one thread. The table in Documentation/simd.md comes from
 * it. Run by scripts/amx-loops.sh; not part of the library.
 */
#pragma GCC target("amx-tile,amx-int8,avx512f")
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "kernels/amx.h"
#include "ktcore/core.h"

#define TILE	1024u
#define ROUNDS	100000u
#define BEST_OF	30

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void config(void)
{
	struct kern_amx_cfg c;
	int t;

	kern_amx_cfg_init(&c);
	for (t = 0; t < 8; t++)
		kern_amx_cfg_tile(&c, t, 16, 64);
	__asm__ volatile("" ::: "memory");
	_tile_loadconfig(&c);
}

/*
 * One round of a 2x2 block: A tiles at @a and @a + TILE, B tiles at @b and
 * @b + @bstep, four TDPs (the order of amx_gu_tiles()).
 */
static inline void block(const uint8_t *a, const uint8_t *b, size_t bstep)
{
	_tile_loadd(4, a, 64);
	_tile_loadd(6, b, 64);
	_tile_dpbssd(0, 4, 6);
	_tile_loadd(7, b + bstep, 64);
	_tile_dpbssd(1, 4, 7);
	_tile_loadd(5, a + TILE, 64);
	_tile_dpbssd(2, 5, 6);
	_tile_dpbssd(3, 5, 7);
}

enum loop { PEAK, L1_BOTH, L2_A, L2_BOTH, CHUNK_STORE, CHUNK_NO_STORE,
	    CHUNK_ALTERNATE };

static const char *const names[] = {
	"4 TDPs, no loads (peak)",
	"2A + 2B loads, all in L1",
	"A from L2 (512 KiB), B in L1 (16 KiB)",
	"A from L2, B from L2 (64 KiB panel)",
	"zero, 2 K steps, store C (down INT8)",
	"zero, 2 K steps, no store",
	"2x1, C sets alternate per chunk",
};

/*
 * One KC chunk (2 K steps) of one column block for two token blocks into
 * C tiles @ca, @cb (B tile @bt) while the other set, @sa and @sb, the
 * previous chunk's, is stored: the store waits for no TDP in flight. A
 * tiles from the caller's buf; tile numbers are literals (the intrinsics
 * take immediates).
 */
#define CHUNK_SET(ca, cb, bt, sa, sb, b, c)				\
	do {								\
		_tile_zero(ca);						\
		_tile_zero(cb);						\
		_tile_loadd(4, buf, 64);				\
		_tile_loadd(bt, (b), 64);				\
		_tile_dpbssd(ca, 4, bt);				\
		_tile_loadd(5, buf + TILE, 64);				\
		_tile_dpbssd(cb, 5, bt);				\
		_tile_loadd(4, buf + 2 * TILE, 64);			\
		_tile_loadd(bt, (b) + TILE, 64);			\
		_tile_dpbssd(ca, 4, bt);				\
		_tile_loadd(5, buf + 3 * TILE, 64);			\
		_tile_dpbssd(cb, 5, bt);				\
		_tile_stored(sa, (c), 64);				\
		_tile_stored(sb, (c) + 256, 64);			\
	} while (0)

/* ns per TDP of @l, best of BEST_OF runs of ROUNDS rounds */
static double run(enum loop l, uint8_t *buf, int32_t *c)
{
	double best = 1e30;
	uint8_t *a2 = buf + (4u << 20);		/* 512 KiB of A */
	unsigned int r, i;

	for (r = 0; r < BEST_OF; r++) {
		double t = now();

		for (i = 0; i < ROUNDS; i++) {
			size_t k = (size_t)(i & 7) * TILE;
			size_t ak = (size_t)(i & 255) * 2 * TILE;

			switch (l) {
			case PEAK:
				_tile_dpbssd(0, 4, 6);
				_tile_dpbssd(1, 4, 7);
				_tile_dpbssd(2, 5, 6);
				_tile_dpbssd(3, 5, 7);
				break;
			case L1_BOTH:
				block(buf + 2 * (k & 3 * TILE), buf + 65536 + k,
				      8 * TILE);
				break;
			case L2_A:
				block(a2 + ak, buf + 65536 + k, 8 * TILE);
				break;
			case L2_BOTH:
				block(a2 + ak, buf + 65536 + (size_t)(i & 31) *
				      TILE, 32 * TILE);
				break;
			case CHUNK_STORE:
			case CHUNK_NO_STORE:
				_tile_zero(0);
				_tile_zero(1);
				_tile_zero(2);
				_tile_zero(3);
				block(buf, buf + 65536, 2 * TILE);
				block(buf + 2 * TILE, buf + 65536 + TILE,
				      2 * TILE);
				if (l == CHUNK_NO_STORE)
					break;
				_tile_stored(0, c, 64);
				_tile_stored(1, c + 256, 64);
				_tile_stored(2, c + 512, 64);
				_tile_stored(3, c + 768, 64);
				break;
			case CHUNK_ALTERNATE:
				CHUNK_SET(0, 1, 6, 2, 3, buf + 65536,
					  c + 512);
				CHUNK_SET(2, 3, 7, 0, 1, buf + 65536 +
					  2 * TILE, c);
				break;
			}
		}
		t = now() - t;
		if (t < best)
			best = t;
	}
	return best * 1e9 / ROUNDS /
	       (l >= CHUNK_STORE ? 8 : 4);
}

int main(void)
{
	size_t bytes = 8u << 20;
	uint8_t *buf;
	int32_t *c;
	double peak = 0;
	unsigned int l;

	if (!core_isa_runs(KT_ISA_AMX, core_cpu_flags())) {
		fprintf(stderr, "amx-loops: no AMX here\n");
		return 1;
	}
	buf = aligned_alloc(4096, bytes);
	c = aligned_alloc(4096, 4 * TILE);
	if (!buf || !c)
		return 1;
	memset(buf, 1, bytes);
	config();
	printf("%-40s %9s %8s\n", "loop", "ns/TDP", "of peak");
	for (l = PEAK; l <= CHUNK_ALTERNATE; l++) {
		double ns = run((enum loop)l, buf, c);

		if (l == PEAK)
			peak = ns;
		printf("%-40s %9.2f %8.2f\n", names[l], ns, peak / ns);
	}
	_tile_release();
	free(buf);
	free(c);
	return 0;
}
