/* SPDX-License-Identifier: MIT */
/*
 * gguf-write.h - the tests' own GGUF writer (independent of loader/gguf.c):
 * small synthetic MoE files of one expert type, with random block values,
 * one field broken on request, and block decoding by the published
 * definitions (ggml's block_q8_0, block_q4_0) to build references.
 */
#ifndef KT_SELFTESTS_LOADER_GGUF_WRITE_H
#define KT_SELFTESTS_LOADER_GGUF_WRITE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../no-tsan.h"

/* ggml type ids and block geometry, from the spec */
enum { GW_F32 = 0, GW_F16 = 1, GW_Q4_0 = 2, GW_Q8_0 = 8, GW_Q4_K = 12,
       GW_Q5_K = 13, GW_Q6_K = 14, GW_Q2_K = 10, GW_BF16 = 30,
       GW_MXFP4 = 39 };

/* one field broken per file */
enum gw_bad {
	GW_OK = 0, GW_MAGIC, GW_VERSION1, GW_VERSION_BE, GW_NTENSORS,
	GW_NKV, GW_KEYLEN, GW_KEY_EMPTY, GW_VTYPE, GW_BOOL, GW_ARR_TYPE,
	GW_ARR_LEN, GW_STRLEN, GW_NDIMS0, GW_NDIMS5, GW_DIM0, GW_DIM_OVF,
	GW_TTYPE, GW_TTYPE_GONE, GW_BLOCK, GW_OFF_ALIGN, GW_OFF_PAST,
	GW_OVERLAP, GW_DUP_NAME, GW_DUP_KEY, GW_ALIGN_NPOT, GW_ALIGN_TYPE,
	GW_BIAS_MISSING, GW_BIAS_SHAPE, GW_BIAS_TYPE,
	GW_BAD_COUNT,
};

struct gw_cfg {
	const char *arch;	/* "qwen3moe" */
	uint32_t version;	/* 3 */
	uint32_t H, I, E, k, L, dense;
	uint32_t type;		/* of every expert tensor */
	uint32_t down_type;	/* 0: type (a mixed file otherwise) */
	uint32_t down_type_last;	/* 0: down_type; else down of the
					 * last layer (types vary by layer) */
	uint32_t alignment;	/* 0: no general.alignment key (32) */
	uint64_t seed;
	enum gw_bad bad;
	int no_ffl;		/* leave out expert_feed_forward_length */
	int bias;		/* expert biases, F32 in [-2, 2] (gpt-oss) */
	/* down's type of each MoE layer ([L - dense]; 0 entries: as above) */
	const uint32_t *down_types;
	/* each tensor's values from the seed and its index alone: files
	 * that differ in one tensor's type agree in the others */
	int seed_per_tensor;
};

struct gw_buf {
	uint8_t *p;
	size_t len, cap;
};

static inline void gw_put(struct gw_buf *b, const void *d, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 4096;
		b->p = realloc(b->p, b->cap);
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

static inline void gw_u32(struct gw_buf *b, uint32_t v)
{
	uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
			 (uint8_t)(v >> 24) };

	gw_put(b, x, 4);
}

static inline void gw_u64(struct gw_buf *b, uint64_t v)
{
	gw_u32(b, (uint32_t)v);
	gw_u32(b, (uint32_t)(v >> 32));
}

static inline void gw_str(struct gw_buf *b, const char *s)
{
	gw_u64(b, strlen(s));
	gw_put(b, s, strlen(s));
}

static inline void gw_kv_u32(struct gw_buf *b, const char *arch,
			     const char *key, uint32_t v)
{
	char k[128];

	snprintf(k, sizeof(k), "%s.%s", arch, key);
	gw_str(b, k);
	gw_u32(b, 4);		/* UINT32 */
	gw_u32(b, v);
}

/* IEEE half <-> float, written here from the format's definition */
KT_TEST_NO_TSAN
static inline float gw_h2f(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float v;

	if (e == 0)
		v = ldexpf((float)m, -24);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexpf((float)(m | 0x400), e - 25);
	return h & 0x8000 ? -v : v;
}

KT_TEST_NO_TSAN
static inline uint16_t gw_f2h(float f)
{
	/* only for positive normal scales in the tests: round to nearest */
	int e;
	float m = frexpf(f, &e);	/* f = m * 2^e, m in [0.5, 1) */
	uint32_t mm = (uint32_t)lrintf(m * 2048.0f);	/* 11 bits */

	if (mm == 2048) {
		mm = 1024;
		e++;
	}
	return (uint16_t)(((e - 1 + 15) << 10) | (mm & 0x3ff));
}

KT_TEST_NO_TSAN
static inline uint16_t gw_f2bf(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

KT_TEST_NO_TSAN
static inline float gw_bf2f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static inline uint64_t gw_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static inline size_t gw_type_bytes(uint32_t type, uint64_t n)
{
	switch (type) {
	case GW_Q8_0:
		return n / 32 * 34;
	case GW_Q4_0:
		return n / 32 * 18;
	case GW_MXFP4:
		return n / 32 * 17;
	case GW_Q4_K:
		return n / 256 * 144;
	case GW_Q5_K:
		return n / 256 * 176;
	case GW_Q6_K:
		return n / 256 * 210;
	case GW_Q2_K:
		return n / 256 * 84;
	case GW_F32:
		return n * 4;
	default:
		return n * 2;
	}
}

/* random valid data of @n elements of @type */
static inline void gw_fill(uint8_t *d, uint32_t type, uint64_t n, uint64_t *s)
{
	size_t i, len = gw_type_bytes(type, n);

	for (i = 0; i < len; i++)
		d[i] = (uint8_t)gw_rand(s);
	switch (type) {
	case GW_Q8_0:
	case GW_Q4_0: {
		size_t bb = type == GW_Q8_0 ? 34 : 18;

		/* scales in [0.002, 0.01), varying per block */
		for (i = 0; i < len; i += bb) {
			uint16_t h = gw_f2h(0.002f + 0.008f *
				(float)(gw_rand(s) % 1000) / 1000.0f);

			d[i] = (uint8_t)h;
			d[i + 1] = (uint8_t)(h >> 8);
			if (type == GW_Q8_0) {
				size_t j;

				/* ggml's quantizer gives -127..127 */
				for (j = 2; j < 34; j++)
					if (d[i + j] == 0x80)
						d[i + j] = 0x81;
			}
		}
		break;
	}
	case GW_MXFP4:
		/* E8M0 scales 2^-9 .. 2^-4 (gpt-oss's weights are ~0.02) */
		for (i = 0; i < len; i += 17)
			d[i] = (uint8_t)(118 + gw_rand(s) % 6);
		break;
	case GW_Q4_K:
	case GW_Q5_K: {
		size_t bb = type == GW_Q4_K ? 144 : 176;

		/* d in [0.0005, 0.002), dmin in [0.0005, 0.004) */
		for (i = 0; i < len; i += bb) {
			uint16_t hd = gw_f2h(0.0005f + 0.0015f *
				(float)(gw_rand(s) % 1000) / 1000.0f);
			uint16_t hm = gw_f2h(0.0005f + 0.0035f *
				(float)(gw_rand(s) % 1000) / 1000.0f);

			d[i] = (uint8_t)hd;
			d[i + 1] = (uint8_t)(hd >> 8);
			d[i + 2] = (uint8_t)hm;
			d[i + 3] = (uint8_t)(hm >> 8);
		}
		break;
	}
	case GW_Q6_K:
		/* d (the last 2 bytes) in [1e-4, 3e-4) (no f16 subnormal);
		 * signed scales any */
		for (i = 0; i < len; i += 210) {
			uint16_t hd = gw_f2h(1e-4f + 2e-4f *
				(float)(gw_rand(s) % 1000) / 1000.0f);

			d[i + 208] = (uint8_t)hd;
			d[i + 209] = (uint8_t)(hd >> 8);
		}
		break;
	case GW_BF16:
	case GW_F16:
	case GW_F32:
		for (i = 0; i < n; i++) {
			float v = ((float)(gw_rand(s) % 20001) - 10000.0f) *
				  4e-6f;

			if (type == GW_F16 && fabsf(v) < 1e-3f)
				v = 0.0f;	/* no f16 subnormals */
			if (type == GW_F32) {
				memcpy(d + 4 * i, &v, 4);
			} else {
				uint16_t h = type == GW_BF16 ? gw_f2bf(v) :
					     (v == 0.0f ? 0 :
					      (uint16_t)(gw_f2h(fabsf(v)) |
							 (v < 0 ? 0x8000 : 0)));

				d[2 * i] = (uint8_t)h;
				d[2 * i + 1] = (uint8_t)(h >> 8);
			}
		}
		break;
	}
}

/* the 6-bit scale and min of sub-block @j (of 8) in the 12 scale bytes @sc
 * of a Q4_K or Q5_K block: bytes 0-3 scales, 4-7 mins of j < 4 (low 6
 * bits); for j >= 4, the nibbles of byte j + 4 and the top 2 bits of
 * bytes j - 4 (scale) and j (min) */
KT_TEST_NO_TSAN
static inline void gw_k4_scale_min(const uint8_t *sc, unsigned int j,
				   int *scale, int *mn)
{
	if (j < 4) {
		*scale = sc[j] & 63;
		*mn = sc[j + 4] & 63;
	} else {
		*scale = (sc[j + 4] & 0xf) | ((sc[j - 4] >> 6) << 4);
		*mn = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
	}
}

/* element @k of row @n ([N][K] of @type at @d), by the block definitions */
KT_TEST_NO_TSAN
static inline double gw_get(const uint8_t *d, uint32_t type, uint64_t K,
			    uint64_t n, uint64_t k)
{
	const uint8_t *b;
	uint16_t h;
	float f;

	switch (type) {
	case GW_Q8_0:
		/* block_q8_0: f16 d, int8 qs[32]; w = d * q */
		b = d + (n * (K / 32) + k / 32) * 34;
		return (double)gw_h2f((uint16_t)(b[0] | b[1] << 8)) *
		       (int8_t)b[2 + k % 32];
	case GW_Q4_0: {
		/* block_q4_0: f16 d, qs[16]: element j in the low nibble of
		 * qs[j], element j + 16 in its high nibble; w = d * (q - 8) */
		unsigned int j = k % 32;
		int q;

		b = d + (n * (K / 32) + k / 32) * 18;
		q = j < 16 ? (b[2 + j] & 0xf) : (b[2 + j - 16] >> 4);
		return (double)gw_h2f((uint16_t)(b[0] | b[1] << 8)) * (q - 8);
	}
	case GW_MXFP4: {
		/* block_mxfp4: E8M0 e, qs[16] as block_q4_0's; OCP E2M1
		 * codes (sign bit 3, magnitudes 0 .5 1 1.5 2 3 4 6),
		 * w = e2m1 * 2^(e - 127) */
		static const double mag[8] = { 0, 0.5, 1, 1.5, 2, 3, 4, 6 };
		unsigned int j = k % 32;
		int q;

		b = d + (n * (K / 32) + k / 32) * 17;
		q = j < 16 ? (b[1 + j] & 0xf) : (b[1 + j - 16] >> 4);
		return (q & 8 ? -mag[q & 7] : mag[q & 7]) *
		       ldexp(1.0, (int)b[0] - 127);
	}
	case GW_Q4_K: {
		/* block_q4_K: f16 d, f16 dmin, scales[12] (6-bit scale and
		 * min of 8 sub-blocks), qs[128]; element 64c + l is the low
		 * nibble of qs[32c + l], 64c + 32 + l its high nibble;
		 * w = d * sc_j * q - dmin * m_j, j = sub-block of 32 */
		unsigned int e = k % 256, c = e / 64, l = e % 32;
		int scale, mn, q;

		b = d + (n * (K / 256) + k / 256) * 144;
		gw_k4_scale_min(b + 4, e / 32, &scale, &mn);
		q = (e % 64) < 32 ? (b[16 + 32 * c + l] & 0xf) :
				    (b[16 + 32 * c + l] >> 4);
		return (double)gw_h2f((uint16_t)(b[0] | b[1] << 8)) * scale * q -
		       (double)gw_h2f((uint16_t)(b[2] | b[3] << 8)) * mn;
	}
	case GW_Q5_K: {
		/* block_q5_K: f16 d, f16 dmin, scales[12] as Q4_K's, qh[32],
		 * qs[128] as Q4_K's; bit 2c of qh[l] adds 16 to element
		 * 64c + l, bit 2c + 1 to element 64c + 32 + l */
		unsigned int e = k % 256, c = e / 64, l = e % 32;
		unsigned int hi = (e % 64) >= 32;
		int scale, mn, q;

		b = d + (n * (K / 256) + k / 256) * 176;
		gw_k4_scale_min(b + 4, e / 32, &scale, &mn);
		q = hi ? (b[48 + 32 * c + l] >> 4) : (b[48 + 32 * c + l] & 0xf);
		if (b[16 + l] & (1u << (2 * c + hi)))
			q += 16;
		return (double)gw_h2f((uint16_t)(b[0] | b[1] << 8)) * scale * q -
		       (double)gw_h2f((uint16_t)(b[2] | b[3] << 8)) * mn;
	}
	case GW_Q6_K: {
		/* block_q6_K: ql[128], qh[64], int8 scales[16], f16 d; in half
		 * h of 128, element 128h + 32i + l (l < 32): the low nibble
		 * (i = 0, 1) or high nibble (i = 2, 3) of ql[64h + 32(i&1) +
		 * l], bits 2i..2i+1 of qh[32h + l] above it; scale of its 16;
		 * w = d * scale * (q - 32) */
		unsigned int e = k % 256, hf = e / 128, i = e % 128 / 32,
			     l = e % 32;
		uint8_t lq;
		int q;

		b = d + (n * (K / 256) + k / 256) * 210;
		lq = b[64 * hf + 32 * (i & 1) + l];
		q = (i < 2 ? (lq & 0xf) : (lq >> 4)) |
		    (((b[128 + 32 * hf + l] >> (2 * i)) & 3) << 4);
		return (double)gw_h2f((uint16_t)(b[208] | b[209] << 8)) *
		       (int8_t)b[192 + e / 16] * (q - 32);
	}
	case GW_F32:
		memcpy(&f, d + 4 * (n * K + k), 4);
		return f;
	default:
		memcpy(&h, d + 2 * (n * K + k), 2);
		return type == GW_BF16 ? gw_bf2f(h) : gw_h2f(h);
	}
}

struct gw_tensor {
	char name[64];
	uint32_t n_dims;
	uint64_t ne[3];
	uint32_t type;
	uint64_t off, bytes;
};

/*
 * Build the file image of @c into @b; @t (room for 6 * L + 1) receives the
 * tensors, *@data_off the start of the data region. The experts of layer
 * l >= dense are blk.l.ffn_{gate,up,down}_exps.weight (t[3 * (l - dense)
 * + m]); token_embd.weight (F32 [H, 2]) is an extra non-expert tensor;
 * with @c->bias, blk.l.ffn_{gate,up,down}_exps.bias (F32 [I or H, E])
 * follow it.
 */
static inline void gw_build(const struct gw_cfg *c, struct gw_buf *b,
			    struct gw_tensor *t, size_t *n_t,
			    size_t *data_off)
{
	static const char *mats[3] = { "gate", "up", "down" };
	uint32_t align = c->alignment ? c->alignment : 32, l, i;
	uint64_t s = c->seed | 1, off = 0, n_kv = 9;
	size_t n = 0, j;
	const char *arch = c->arch ? c->arch : "qwen3moe";

	memset(b, 0, sizeof(*b));
	/* tensors first (their offsets), written after the metadata */
	for (l = c->dense; l < c->L; l++) {
		for (i = 0; i < 3; i++, n++) {
			snprintf(t[n].name, sizeof(t[n].name),
				 "blk.%u.ffn_%s_exps.weight", l, mats[i]);
			t[n].n_dims = 3;
			t[n].ne[0] = i == 2 ? c->I : c->H;
			t[n].ne[1] = i == 2 ? c->H : c->I;
			t[n].ne[2] = c->E;
			t[n].type = i == 2 && c->down_types &&
				    c->down_types[l - c->dense] ?
				    c->down_types[l - c->dense] :
				    i == 2 && c->down_type_last &&
				    l == c->L - 1 ? c->down_type_last :
				    i == 2 && c->down_type ? c->down_type :
				    c->type;
		}
	}
	snprintf(t[n].name, sizeof(t[n].name), "token_embd.weight");
	t[n].n_dims = 2;
	t[n].ne[0] = c->H;
	t[n].ne[1] = 2;
	t[n].ne[2] = 1;
	t[n++].type = GW_F32;
	for (l = c->dense; c->bias && l < c->L; l++) {
		for (i = 0; i < 3; i++) {
			bool last = l == c->L - 1 && i == 2;

			if (last && c->bad == GW_BIAS_MISSING)
				continue;
			snprintf(t[n].name, sizeof(t[n].name),
				 "blk.%u.ffn_%s_exps.bias", l, mats[i]);
			t[n].n_dims = 2;
			t[n].ne[0] = (i == 2 ? c->H : c->I) +
				     (last && c->bad == GW_BIAS_SHAPE) * 32;
			t[n].ne[1] = c->E;
			t[n].ne[2] = 1;
			/* Q8_0 where an F32 belongs */
			t[n++].type = last && c->bad == GW_BIAS_TYPE ?
				      GW_Q8_0 : GW_F32;
		}
	}
	for (j = 0; j < n; j++) {
		t[j].off = off;
		t[j].bytes = gw_type_bytes(t[j].type,
					   t[j].ne[0] * t[j].ne[1] * t[j].ne[2]);
		off = (off + t[j].bytes + align - 1) / align * align;
	}
	if (c->bad == GW_DUP_NAME)
		snprintf(t[1].name, sizeof(t[1].name), "%s", t[0].name);

	/* header */
	gw_u32(b, c->bad == GW_MAGIC ? 0x46554748u : 0x46554747u);
	gw_u32(b, c->bad == GW_VERSION1 ? 1 : c->bad == GW_VERSION_BE ?
	       0x03000000u : c->version ? c->version : 3);
	gw_u64(b, c->bad == GW_NTENSORS ? (1ull << 40) : n);
	n_kv += !!c->alignment + !!c->dense + (c->bad == GW_DUP_KEY);
	gw_u64(b, c->bad == GW_NKV ? (1ull << 62) : n_kv);
	/* metadata */
	if (c->bad == GW_KEYLEN) {
		gw_u64(b, 1ull << 50);
	} else if (c->bad == GW_KEY_EMPTY) {
		gw_u64(b, 0);
	} else {
		gw_str(b, "general.architecture");
	}
	gw_u32(b, c->bad == GW_VTYPE ? 13 : 8);		/* STRING */
	if (c->bad == GW_STRLEN)
		gw_u64(b, 1ull << 60);
	else
		gw_str(b, arch);
	gw_str(b, "general.name");
	gw_u32(b, 8);
	gw_str(b, "kt test");
	gw_str(b, "tokenizer.ggml.add_bos_token");
	gw_u32(b, 7);					/* BOOL */
	gw_put(b, c->bad == GW_BOOL ? "\x02" : "\x01", 1);
	gw_str(b, "tokenizer.ggml.tokens");
	gw_u32(b, 9);					/* ARRAY */
	gw_u32(b, c->bad == GW_ARR_TYPE ? 99 : 8);
	gw_u64(b, c->bad == GW_ARR_LEN ? (1ull << 61) : 3);
	gw_str(b, "a");
	gw_str(b, "bc");
	gw_str(b, "");
	if (c->alignment) {
		gw_str(b, "general.alignment");
		gw_u32(b, c->bad == GW_ALIGN_TYPE ? 10 : 4);
		if (c->bad == GW_ALIGN_TYPE)
			gw_u64(b, align);
		else
			gw_u32(b, c->bad == GW_ALIGN_NPOT ? 48 : align);
	}
	gw_kv_u32(b, arch, "embedding_length", c->H);
	if (!c->no_ffl)
		gw_kv_u32(b, arch, "expert_feed_forward_length", c->I);
	gw_kv_u32(b, arch, c->no_ffl ? "feed_forward_length" :
		  "expert_count", c->no_ffl ? c->I : c->E);
	if (c->no_ffl)
		gw_kv_u32(b, arch, "expert_count", c->E);
	gw_kv_u32(b, arch, "expert_used_count", c->k);
	gw_kv_u32(b, arch, "block_count", c->L);
	if (c->dense)
		gw_kv_u32(b, arch, "leading_dense_block_count", c->dense);
	if (c->bad == GW_DUP_KEY)
		gw_kv_u32(b, arch, "block_count", c->L);
	/* tensor infos */
	for (j = 0; j < n; j++) {
		gw_str(b, t[j].name);
		if (j == 0 && c->bad == GW_NDIMS0) {
			gw_u32(b, 0);
		} else if (j == 0 && c->bad == GW_NDIMS5) {
			gw_u32(b, 5);
			for (i = 0; i < 5; i++)
				gw_u64(b, 1);
		} else {
			gw_u32(b, t[j].n_dims);
			for (i = 0; i < t[j].n_dims; i++)
				gw_u64(b, j == 0 && i == 1 &&
				       c->bad == GW_DIM0 ? 0 :
				       j == 0 && i == 2 &&
				       c->bad == GW_DIM_OVF ? (1ull << 62) :
				       j == 0 && i == 0 && c->bad == GW_BLOCK ?
				       t[j].ne[0] + 16 : t[j].ne[i]);
		}
		gw_u32(b, j == 0 && c->bad == GW_TTYPE ? 1000 :
		       j == 0 && c->bad == GW_TTYPE_GONE ? 4 : t[j].type);
		gw_u64(b, j == n - 1 && c->bad == GW_OFF_ALIGN ? t[j].off + 1 :
		       j == n - 1 && c->bad == GW_OFF_PAST ?
		       t[j].off + (1ull << 40) :
		       j == 1 && c->bad == GW_OVERLAP ? t[0].off : t[j].off);
	}
	/* padding, then the data */
	while (b->len % align)
		gw_put(b, "", 1);
	*data_off = b->len;
	{
		size_t total = b->len + off;
		uint8_t *z;

		if (total > b->cap) {
			b->p = realloc(b->p, total);
			b->cap = total;
		}
		z = b->p + b->len;
		memset(z, 0, off);
		for (j = 0; j < n; j++) {
			uint64_t ne = t[j].ne[0] * t[j].ne[1] * t[j].ne[2], i2;

			if (c->seed_per_tensor)
				s = (c->seed | 1) + (j + 1) * 0x9e3779b97f4a7c15ull;
			gw_fill(z + t[j].off, t[j].type, ne, &s);
			/* biases of a size that moves the activation */
			for (i2 = 0; strstr(t[j].name, ".bias") &&
				     t[j].type == GW_F32 && i2 < ne;
			     i2++) {
				float v;

				memcpy(&v, z + t[j].off + 4 * i2, 4);
				v *= 50.0f;
				memcpy(z + t[j].off + 4 * i2, &v, 4);
			}
		}
		b->len = total;
	}
	*n_t = n;
}

/* Write @b to a fresh temporary file; returns its path (free it). */
static inline char *gw_save(const struct gw_buf *b)
{
	char *path = strdup("/tmp/kt-gguf-XXXXXX.gguf");
	int fd = mkstemps(path, 5);

	if (fd < 0 || write(fd, b->p, b->len) != (ssize_t)b->len) {
		if (fd >= 0) {
			close(fd);
			unlink(path);
		}
		free(path);
		return NULL;
	}
	close(fd);
	return path;
}

#endif /* KT_SELFTESTS_LOADER_GGUF_WRITE_H */
