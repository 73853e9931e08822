// SPDX-License-Identifier: MIT
/*
 * ffn-emu.cc - gpu/ffn.cu's expert kernels, compiled for the host and run
 * by the warp emulator (cuda-emu.h) through gpu_ffn_launch()'s own grids,
 * against an f64 reference computed from the device layout's definition
 * (gpu/layout.h): every quantization, INT4 group sizes, f32 and bf16
 * activations, decode and prefill kernels, slot counts around the
 * kernels' blocking (1, 8, 9, 16, 70). Catches fragment, layout and
 * indexing mistakes without a GPU; the GPU itself runs
 * selftests/gpu-device. TAP output.
 */
#include "cuda-emu.h"
#include "gpu/ffn.cu"

extern "C" {
#include "gpu/gpu.h"	/* C: gpu_ffn_launch() is libkt's */
}
#include "../kernels/util.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

dim3 threadIdx, blockIdx, blockDim, gridDim;
struct emu_warp *emu_cur_warp;

/* ---- coroutines: the threads of one block -------------------------------- */

#define EMU_STACK	(256 * 1024)

enum emu_state { EMU_RUN, EMU_WARP, EMU_BLOCK, EMU_DONE };

struct emu_lane {
	void *sp;		/* saved stack pointer while switched out */
	enum emu_state state;
	void *stack;
};

static struct {
	void *sched_sp;
	std::vector<struct emu_lane> lanes;
	std::vector<struct emu_warp> warps;
	unsigned int cur;
	void (*run)(void **params);
	void **params;
} emu;

/*
 * emu_swap(&from_sp, to_sp): save the callee-saved registers on this
 * stack, park its pointer in *from_sp, continue on to_sp. ucontext's
 * swapcontext would also make a sigprocmask call per switch, which was
 * half the run time here.
 */
extern "C" void emu_swap(void **from_sp, void *to_sp);
asm(".text\n"
    ".globl emu_swap\n"
    ".type emu_swap, @function\n"
    "emu_swap:\n"
    "	pushq %rbp\n	pushq %rbx\n	pushq %r12\n"
    "	pushq %r13\n	pushq %r14\n	pushq %r15\n"
    "	movq %rsp, (%rdi)\n"
    "	movq %rsi, %rsp\n"
    "	popq %r15\n	popq %r14\n	popq %r13\n"
    "	popq %r12\n	popq %rbx\n	popq %rbp\n"
    "	ret\n"
    ".size emu_swap, .-emu_swap\n");

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
/* ASan follows the stack switches of coroutines only when told */
#define EMU_SWITCH(from, to, stack) do {				\
		void *fake_ = NULL;					\
		__sanitizer_start_switch_fiber(&fake_, (stack),		\
					       (stack) ? EMU_STACK : 0); \
		emu_swap((from), (to));					\
		__sanitizer_finish_switch_fiber(fake_, NULL, NULL);	\
	} while (0)
#else
#define EMU_SWITCH(from, to, stack) emu_swap((from), (to))
#endif

static void emu_lane_main(void)
{
#if defined(__SANITIZE_ADDRESS__)
	__sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
	emu.run(emu.params);
	emu.lanes[emu.cur].state = EMU_DONE;
	EMU_SWITCH(&emu.lanes[emu.cur].sp, emu.sched_sp, NULL);
	abort();	/* a finished thread is never switched to */
}

/* A fresh stack that emu_swap() "returns" into emu_lane_main() from. */
static void emu_lane_start(struct emu_lane *l)
{
	/* at the entry of a function, rsp + 8 is 16-byte aligned */
	uintptr_t top = ((uintptr_t)l->stack + EMU_STACK) & ~(uintptr_t)15;
	void **sp = (void **)(top - 16);

	sp[1] = NULL;				/* no return from the entry */
	sp[0] = (void *)emu_lane_main;		/* emu_swap's ret */
	sp -= 6;				/* r15 r14 r13 r12 rbx rbp */
	memset(sp, 0, 6 * sizeof(void *));
	l->sp = sp;
	l->state = EMU_RUN;
}

void emu_wait(enum emu_wait_kind k)
{
	struct emu_lane *l = &emu.lanes[emu.cur];

	l->state = k == EMU_WAIT_WARP ? EMU_WARP : EMU_BLOCK;
	EMU_SWITCH(&l->sp, emu.sched_sp, NULL);
}

/*
 * Run every thread of the current block until all are done: each runs to
 * its next barrier; a warp (block) whose live threads all wait at a warp
 * (block) barrier goes on. Returns -1 on a deadlock (threads of one warp at
 * different barriers, or a barrier some thread never reaches).
 */
static int emu_block_run(unsigned int n)
{
	for (;;) {
		bool ran = false, live = false;

		for (unsigned int i = 0; i < n; i++) {
			if (emu.lanes[i].state != EMU_RUN)
				continue;
			emu.cur = i;
			threadIdx = dim3{ i, 0, 0 };
			emu_cur_warp = &emu.warps[i / 32];
			EMU_SWITCH(&emu.sched_sp, emu.lanes[i].sp,
				   emu.lanes[i].stack);
			ran = true;
		}
		for (unsigned int w = 0; w < n / 32; w++) {
			bool all = true, any = false;

			for (unsigned int i = w * 32; i < w * 32 + 32; i++) {
				any |= emu.lanes[i].state == EMU_WARP;
				all &= emu.lanes[i].state == EMU_WARP ||
				       emu.lanes[i].state == EMU_DONE;
			}
			if (any && all)
				for (unsigned int i = w * 32; i < w * 32 + 32; i++)
					if (emu.lanes[i].state == EMU_WARP)
						emu.lanes[i].state = EMU_RUN;
		}
		{
			bool all = true, any = false;

			for (unsigned int i = 0; i < n; i++) {
				any |= emu.lanes[i].state == EMU_BLOCK;
				all &= emu.lanes[i].state == EMU_BLOCK ||
				       emu.lanes[i].state == EMU_DONE;
			}
			if (any && all)
				for (unsigned int i = 0; i < n; i++)
					if (emu.lanes[i].state == EMU_BLOCK)
						emu.lanes[i].state = EMU_RUN;
		}
		for (unsigned int i = 0; i < n; i++)
			live |= emu.lanes[i].state != EMU_DONE;
		if (!live)
			return 0;
		if (!ran) {
			bool runnable = false;

			for (unsigned int i = 0; i < n; i++)
				runnable |= emu.lanes[i].state == EMU_RUN;
			if (!runnable)
				return -1;
		}
	}
}

/* ---- launching the emulated kernels -------------------------------------- */

/* the kernels a launch can name, by enum gpu_fn_id (the limit probes none) */
typedef void (*emu_fn)(void **params);

#define FFN(n) [](void **p) { n(*(const struct gpu_ffn_args *)p[0]); }

static const emu_fn emu_fns[GPU_FN_COUNT] = {
	[GPU_FN_GU_GEMV_INT8] = FFN(kt_gu_gemv_int8),
	[GPU_FN_GU_GEMV_INT4] = FFN(kt_gu_gemv_int4),
	[GPU_FN_GU_GEMV_BF16] = FFN(kt_gu_gemv_bf16),
	[GPU_FN_DOWN_GEMV_INT8] = FFN(kt_down_gemv_int8),
	[GPU_FN_DOWN_GEMV_INT4] = FFN(kt_down_gemv_int4),
	[GPU_FN_DOWN_GEMV_BF16] = FFN(kt_down_gemv_bf16),
	[GPU_FN_GU_MMA_INT8] = FFN(kt_gu_mma_int8),
	[GPU_FN_GU_MMA_INT4] = FFN(kt_gu_mma_int4),
	[GPU_FN_GU_MMA_BF16] = FFN(kt_gu_mma_bf16),
	[GPU_FN_DOWN_MMA_INT8] = FFN(kt_down_mma_int8),
	[GPU_FN_DOWN_MMA_INT4] = FFN(kt_down_mma_int4),
	[GPU_FN_DOWN_MMA_BF16] = FFN(kt_down_mma_bf16),
	[GPU_FN_REDUCE] = FFN(kt_reduce),
	[GPU_FN_COMBINE] = [](void **p) {
		kt_combine(*(const struct gpu_combine_args *)p[0]); },
};

static int launches, bad_launches;

/* cuLaunchKernel for the emulator: 1-D blocks of whole warps, block by block */
static CUresult emu_launch(CUfunction f, unsigned int gx, unsigned int gy,
			   unsigned int gz, unsigned int bx, unsigned int by,
			   unsigned int bz, unsigned int shmem, CUstream s,
			   void **params, void **extra)
{
	emu_fn fn = *(const emu_fn *)f;
	CUresult ret = 0;

	(void)shmem; (void)s; (void)extra;
	launches++;
	if (!fn || by != 1 || bz != 1 || !bx || bx % 32) {
		bad_launches++;
		return 1;	/* CUDA_ERROR_INVALID_VALUE */
	}
	blockDim = dim3{ bx, by, bz };
	gridDim = dim3{ gx, gy, gz };
	emu.run = fn;
	emu.params = params;
	emu.warps.assign(bx / 32, emu_warp{});
	if (emu.lanes.size() < bx) {
		size_t old = emu.lanes.size();

		emu.lanes.resize(bx);
		for (size_t i = old; i < bx; i++)
			emu.lanes[i].stack = malloc(EMU_STACK);
	}
	for (unsigned int z = 0; z < gz && !ret; z++)
		for (unsigned int y = 0; y < gy && !ret; y++)
			for (unsigned int x = 0; x < gx && !ret; x++) {
				blockIdx = dim3{ x, y, z };
				for (unsigned int i = 0; i < bx; i++)
					emu_lane_start(&emu.lanes[i]);
				if (emu_block_run(bx)) {
					bad_launches++;
					ret = 719;	/* CUDA_ERROR_LAUNCH_FAILED */
				}
			}
	return ret;
}

static void emu_release(void)
{
	for (auto &l : emu.lanes)
		free(l.stack);
	emu.lanes.clear();
}

/* A gpu_dev whose module is the emulator: gpu_ffn_launch() picks the grids. */
static void emu_dev(struct gpu_dev *d)
{
	memset(d, 0, sizeof(*d));
	d->mod = (CUmodule)(uintptr_t)1;
	for (int i = 0; i < GPU_FN_COUNT; i++)
		d->fn[i] = (CUfunction)(uintptr_t)&emu_fns[i];
	d->cu.launch_kernel = emu_launch;
}

/* ---- one op on made-up experts ------------------------------------------- */

static struct tu_rng rng = { 0x9e3779b97f4a7c15ull };

static uint64_t rnd(void)
{
	return tu_next(&rng);
}

static double unif(void)
{
	return tu_unif(&rng);
}

struct expert {
	struct gpu_layout l;
	std::vector<uint8_t> blob;
};

/* weight (n, k) of part @p (gate, up, down) by gpu/layout.h's definition */
static double weight(const struct expert *e, int p, uint32_t n, uint32_t k)
{
	const struct gpu_layout *l = &e->l;
	const uint8_t *q = e->blob.data() + l->off[GPU_GATE_Q + p];
	const float *s = (const float *)(e->blob.data() + l->off[GPU_GATE_S + p]);
	uint32_t K = p == 2 ? l->inter : l->hidden;

	switch (l->quant) {
	case GPU_Q_INT8:
		return (int8_t)q[(size_t)n * K + k] * (double)s[n];
	case GPU_Q_INT4: {
		uint8_t b = q[((size_t)n * K + k) / 2];
		int nib = k % 2 ? b >> 4 : b & 15;

		return (nib - 8) * (double)s[(size_t)n * (K / l->group) +
					    k / l->group];
	}
	default:
		return kern_bf16_to_f32(((const uint16_t *)q)[(size_t)n * K + k]);
	}
}

static void make_expert(struct expert *e, uint32_t quant, uint32_t H,
			uint32_t I, uint32_t G)
{
	struct gpu_layout *l = &e->l;

	if (gpu_layout_init(l, quant, H, I, G))
		abort();
	e->blob.assign(l->total, 0);
	for (int p = 0; p < 3; p++) {
		uint32_t N = p == 2 ? H : I, K = p == 2 ? I : H;
		uint8_t *q = e->blob.data() + l->off[GPU_GATE_Q + p];
		float *s = (float *)(e->blob.data() + l->off[GPU_GATE_S + p]);
		size_t i;

		if (quant == GPU_Q_BF16) {
			for (i = 0; i < (size_t)N * K; i++)
				((uint16_t *)q)[i] = kern_f32_to_bf16((float)((unif() -
					0.5) * 3.4 / sqrt((double)K)));
			continue;
		}
		for (i = 0; i < l->bytes[GPU_GATE_Q + p]; i++)
			q[i] = (uint8_t)rnd();
		for (i = 0; i < l->bytes[GPU_GATE_S + p] / 4; i++)
			s[i] = (float)((0.5 + unif()) / sqrt((double)K) /
				       (quant == GPU_Q_INT8 ? 73.0 : 4.6));
	}
}

static double silu(double g)
{
	return g / (1.0 + exp(-g));
}

/*
 * Groups of sizes @ms (one per expert, distinct tokens each) through
 * gpu_ffn_launch(); returns y's rel MAE to the reference, or -1 when a
 * launch failed.
 */
static double run_op(uint32_t quant, uint32_t H, uint32_t I, uint32_t G,
		     const std::vector<uint32_t> &ms, bool xbf16, bool mma)
{
	uint32_t n_groups = (uint32_t)ms.size(), T = 0, slots = 0, max_m = 0;
	std::vector<struct expert> ex(n_groups);
	std::vector<struct gpu_group> grp(n_groups);

	for (uint32_t m : ms) {
		slots += m;
		max_m = m > max_m ? m : max_m;
	}
	T = max_m + 3;
	std::vector<float> x((size_t)T * H), slot_w(slots), a((size_t)slots * I);
	std::vector<float> ypart((size_t)slots * H), y((size_t)T * H, NAN);
	std::vector<uint16_t> xb((size_t)T * H);
	std::vector<int32_t> slot_tok(slots), tok_slot((size_t)T * n_groups, -1);
	std::vector<double> ref((size_t)T * H, 0.0);
	struct gpu_dev d;
	struct gpu_ffn_args args;
	uint32_t slot = 0;

	for (size_t i = 0; i < x.size(); i++) {
		xb[i] = kern_f32_to_bf16((float)(unif() * 2 - 1));
		x[i] = kern_bf16_to_f32(xb[i]);
	}
	for (uint32_t g = 0; g < n_groups; g++) {
		std::vector<int32_t> perm(T);

		make_expert(&ex[g], quant, H, I, G);
		for (uint32_t t = 0; t < T; t++)
			perm[t] = (int32_t)t;
		for (uint32_t t = T - 1; t > 0; t--)
			std::swap(perm[t], perm[rnd() % (t + 1)]);
		grp[g] = gpu_group{};
		for (int p = 0; p < 3; p++) {
			const struct gpu_layout *l = &ex[g].l;

			grp[g].w[p] = (uint64_t)(uintptr_t)(ex[g].blob.data() +
							     l->off[GPU_GATE_Q + p]);
			grp[g].s[p] = l->bytes[GPU_GATE_S + p] ?
				(uint64_t)(uintptr_t)(ex[g].blob.data() +
						      l->off[GPU_GATE_S + p]) : 0;
		}
		grp[g].slot0 = slot;
		grp[g].m = ms[g];
		for (uint32_t j = 0; j < ms[g]; j++, slot++) {
			slot_tok[slot] = perm[j];
			slot_w[slot] = (float)(0.1 + unif());
			tok_slot[(size_t)perm[j] * n_groups + g] = (int32_t)slot;
		}
	}
	/* the reference, from the layout's definition of each weight */
	for (uint32_t g = 0; g < n_groups; g++)
		for (uint32_t s = grp[g].slot0; s < grp[g].slot0 + grp[g].m; s++) {
			const float *xr = &x[(size_t)slot_tok[s] * H];
			std::vector<double> act(I);

			for (uint32_t i = 0; i < I; i++) {
				double gs = 0, us = 0;

				for (uint32_t k = 0; k < H; k++) {
					gs += weight(&ex[g], 0, i, k) * xr[k];
					us += weight(&ex[g], 1, i, k) * xr[k];
				}
				act[i] = silu(gs) * us;
			}
			for (uint32_t h = 0; h < H; h++) {
				double v = 0;

				for (uint32_t i = 0; i < I; i++)
					v += weight(&ex[g], 2, h, i) * act[i];
				ref[(size_t)slot_tok[s] * H + h] += slot_w[s] * v;
			}
		}
	args = gpu_ffn_args{};
	args.groups = (uint64_t)(uintptr_t)grp.data();
	args.x = xbf16 ? (uint64_t)(uintptr_t)xb.data() :
			 (uint64_t)(uintptr_t)x.data();
	args.slot_tok = (uint64_t)(uintptr_t)slot_tok.data();
	args.slot_w = (uint64_t)(uintptr_t)slot_w.data();
	args.tok_slot = (uint64_t)(uintptr_t)tok_slot.data();
	args.a = (uint64_t)(uintptr_t)a.data();
	args.ypart = (uint64_t)(uintptr_t)ypart.data();
	args.y = (uint64_t)(uintptr_t)y.data();
	args.H = H;
	args.I = I;
	args.group = G;
	args.n_groups = n_groups;
	args.x_bf16 = xbf16;
	args.top_k = n_groups;
	args.tokens = T;
	emu_dev(&d);
	if (gpu_ffn_launch(&d, (enum kt_quant)quant, &args, max_m, T, mma,
			   NULL))
		return -1;
	std::vector<double> got(y.begin(), y.end());

	return tu_rel_mae(got.data(), ref.data(), ref.size());
}

/* ---- the cases ------------------------------------------------------------ */

static int n_test, n_fail;

static void check(bool ok, const char *what)
{
	n_test++;
	n_fail += !ok;
	printf("%sok %d %s\n", ok ? "" : "not ", n_test, what);
}

/* kt_combine: y = (y if acc) + ya + yb, bf16 rounded once, bit for bit */
static void combine_case(bool acc)
{
	const uint32_t n = 1000;
	std::vector<float> ya(n), yb(n);
	std::vector<uint16_t> y(n), want(n);
	struct gpu_combine_args c = {};
	struct gpu_dev d;
	char what[64];

	for (uint32_t i = 0; i < n; i++) {
		ya[i] = (float)(unif() - 0.5);
		yb[i] = (float)(unif() - 0.5);
		y[i] = kern_f32_to_bf16((float)unif());
		want[i] = kern_f32_to_bf16((acc ? kern_bf16_to_f32(y[i]) : 0.0f) + ya[i] +
				   yb[i]);
	}
	c.y = (uint64_t)(uintptr_t)y.data();
	c.ya = (uint64_t)(uintptr_t)ya.data();
	c.yb = (uint64_t)(uintptr_t)yb.data();
	c.n = n;
	c.H = 100;
	c.y_bf16 = 1;
	c.acc = acc;
	emu_dev(&d);
	snprintf(what, sizeof(what), "combine bf16 y%s", acc ? " accumulating" : "");
	check(!gpu_combine_launch(&d, &c, NULL) && y == want, what);
}

int main(void)
{
	static const struct {
		uint32_t quant, G;
		const char *name;
		double tol;
	} qs[] = {
		/* bf16 activations in the tensor-core paths: a few 1e-3 */
		{ GPU_Q_INT8, 0, "int8", 0.01 },
		{ GPU_Q_INT4, 32, "int4 g32", 0.01 },
		{ GPU_Q_INT4, 128, "int4 g128", 0.01 },
		{ GPU_Q_BF16, 0, "bf16", 0.01 },
	};
	/* decode kernels: around 8 slots per pass; the tiles: 1, 64 per tile */
	const std::vector<uint32_t> decode = { 1, 3, 8, 9, 20 };
	const std::vector<uint32_t> prefill = { 1, 16, 70 };
	const uint32_t H = 128, I = 256;

	printf("TAP version 13\n");
	for (const auto &q : qs)
		for (int path = 0; path < 2; path++)
			for (int xbf16 = 0; xbf16 < 2; xbf16++) {
				double e = run_op(q.quant, H, I, q.G, path ?
						  prefill : decode, xbf16, path);
				char what[96];

				printf("# %s %s x %s: rel MAE %.2e\n", q.name,
				       path ? "mma" : "gemv",
				       xbf16 ? "bf16" : "f32", e);
				snprintf(what, sizeof(what), "%s %s x %s", q.name,
					 path ? "prefill tiles" : "decode",
					 xbf16 ? "bf16" : "f32");
				check(e >= 0 && e <= q.tol, what);
			}
	combine_case(false);
	combine_case(true);
	check(launches > 0 && !bad_launches, "every launch had a kernel and a 1-D block of whole warps");
	emu_release();
	printf("1..%d\n# Totals: pass:%d fail:%d skip:0\n", n_test,
	       n_test - n_fail, n_fail);
	return n_fail ? 1 : 0;
}
