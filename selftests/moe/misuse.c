// SPDX-License-Identifier: MIT
/*
 * misuse.c - the documented invalid uses of the API: a model destroyed
 * with an op running, an op naming a model that is not live, two threads
 * on one ring, a ring used after kt_ring_exit(). Release builds must stay
 * safe (the op finishes first, the others fail with -EINVAL, no other
 * ring is touched); KT_DEBUG builds (make DEBUG=1, make debug-check) must
 * abort with a "kt: misuse:" message.
 */
#include <pthread.h>
#include <sys/wait.h>

#include <kt/kt.h>
#include <kt/ring.h>
#include "kt_test.h"
#include "model.h"

#define MH	256
#define MI	256
#define ME	8
#define MT	2048	/* tokens of the long op: some milliseconds */
#define MK	8

struct mfix {
	struct kt_ctx *ctx;
	struct kt_model *m;
	struct tmodel t;
	float *x, *w, *y;
	int32_t *ids;
};

static int mfix_init(struct mfix *f)
{
	struct kt_ctx_opts o = { .sz = sizeof(o),
				 .log_level = KT_CTX_LOG_LEVEL(KT_LOG_ERROR) };
	struct tu_rng r = { 5 };
	size_t i;

	memset(f, 0, sizeof(*f));
	tm_init(&f->t, MH, MI, ME, 1, KT_DTYPE_F32, 9);
	if (kt_ctx_create(&o, &f->ctx) || tm_create(&f->t, f->ctx,
						     KT_QUANT_INT8, 0, &f->m))
		return -1;
	f->x = malloc(sizeof(float) * MT * MH);
	f->y = malloc(sizeof(float) * MT * MH);
	f->w = malloc(sizeof(float) * MT * MK);
	f->ids = malloc(sizeof(int32_t) * MT * MK);
	for (i = 0; i < (size_t)MT * MH; i++)
		f->x[i] = (float)tu_normal(&r);
	for (i = 0; i < (size_t)MT * MK; i++) {
		f->ids[i] = (int32_t)(i % ME);
		f->w[i] = 0.125f;
	}
	return 0;
}

static void mfix_args(const struct mfix *f, struct kt_moe_args *a,
		      uint32_t tokens)
{
	*a = (struct kt_moe_args){
		.x = f->x, .ids = f->ids, .w = f->w, .y = f->y,
		.tokens = tokens, .top_k = MK, .x_dtype = KT_DTYPE_F32,
		.ids_dtype = KT_DTYPE_I32, .y_dtype = KT_DTYPE_F32,
	};
}

static __attribute__((unused)) void mfix_free(struct mfix *f)
{
	kt_model_destroy(f->m);
	kt_ctx_destroy(f->ctx);
	tm_free(&f->t);
	free(f->x);
	free(f->y);
	free(f->w);
	free(f->ids);
}

/*
 * Submit the long op and return once the leader has taken it, and most
 * likely started it: it looks the model up just after taking the entry.
 */
static void submit_long(struct kt_ring *ring, const struct mfix *f)
{
	struct kt_moe_args a;

	mfix_args(f, &a, MT);
	kt_prep_moe(kt_get_sqe(ring), f->m, 0, &a, 1);
	kt_submit(ring);
	while (__kt_load_acquire(&ring->sh->sq_head) != ring->sqe_tail)
		__kt_cpu_relax();
	usleep(5000);
}

static __attribute__((unused)) int run_one(struct kt_ring *ring, struct kt_model *m,
		   const struct mfix *f, uint64_t ud)
{
	struct kt_moe_args a;
	struct kt_cqe *cqe;
	int res;

	mfix_args(f, &a, 1);
	kt_prep_moe(kt_get_sqe(ring), m, 0, &a, ud);
	kt_submit(ring);
	if (kt_wait_cqe(ring, &cqe))
		return INT32_MIN;
	res = cqe->user_data == ud ? cqe->res : INT32_MIN + 1;
	kt_cqe_seen(ring);
	return res;
}

#ifndef KT_DEBUG
/* Release: kt_model_destroy() waits for the op; later ops fail cleanly. */
TEST(destroy_model_with_op_running_waits)
{
	struct kt_model *gone;
	struct kt_ring ring;
	struct kt_cqe *cqe;
	struct mfix f;

	ASSERT_EQ(mfix_init(&f), 0);
	ASSERT_EQ(kt_ring_init(f.ctx, 8, &ring), 0);
	submit_long(&ring, &f);
	gone = f.m;
	kt_model_destroy(f.m);		/* while the op runs */
	f.m = NULL;
	ASSERT_EQ(kt_wait_cqe(&ring, &cqe), 0);
	EXPECT_EQ(cqe->user_data, 1u);
	/* it ran to the end on live memory, or (a leader slowed down
	 * between taking the entry and starting it) found no model */
	if (cqe->res)
		EXPECT_EQ(cqe->res, -EINVAL);
	kt_cqe_seen(&ring);
	/* the pointer is only compared, never read */
	EXPECT_EQ(run_one(&ring, gone, &f, 2), -EINVAL);
	kt_ring_exit(&ring);
	mfix_free(&f);
}

TEST(op_on_model_of_another_context_fails)
{
	struct kt_ctx_opts o = { .sz = sizeof(o), .threads = 1,
				 .log_level = KT_CTX_LOG_LEVEL(KT_LOG_ERROR) };
	struct kt_ctx *other;
	struct kt_ring ring;
	struct mfix f;

	ASSERT_EQ(mfix_init(&f), 0);
	ASSERT_EQ(kt_ctx_create(&o, &other), 0);
	ASSERT_EQ(kt_ring_init(other, 8, &ring), 0);
	EXPECT_EQ(run_one(&ring, f.m, &f, 3), -EINVAL);
	kt_ring_exit(&ring);
	kt_ctx_destroy(other);
	mfix_free(&f);
}

/*
 * Two threads submitting on one ring can move its SQ tail past its size;
 * the leader then drops that ring's entries, and other rings go on.
 */
TEST(sq_tail_past_its_size_is_dropped)
{
	struct kt_ring bad, good;
	struct kt_cqe *cqe;
	struct mfix f;

	ASSERT_EQ(mfix_init(&f), 0);
	ASSERT_EQ(kt_ring_init(f.ctx, 8, &bad), 0);
	ASSERT_EQ(kt_ring_init(f.ctx, 8, &good), 0);
	/* what racing submitters leave: a tail 3 entries too far */
	bad.sqe_tail += 8 + 3;
	kt_submit(&bad);
	EXPECT_EQ(run_one(&good, f.m, &f, 4), 0);
	EXPECT_EQ(kt_peek_cqe(&bad, &cqe), -EAGAIN);	/* nothing ran */
	/* the ring works again from where the leader left it */
	EXPECT_EQ(run_one(&bad, f.m, &f, 5), 0);
	kt_ring_exit(&bad);
	kt_ring_exit(&good);
	mfix_free(&f);
}

TEST(released_ring_refuses_every_call)
{
	struct kt_ring ring;
	struct kt_cqe *cqe;
	struct mfix f;

	ASSERT_EQ(mfix_init(&f), 0);
	ASSERT_EQ(kt_ring_init(f.ctx, 8, &ring), 0);
	kt_ring_exit(&ring);
	EXPECT_TRUE(kt_get_sqe(&ring) == NULL);
	EXPECT_EQ(kt_submit(&ring), -EINVAL);
	EXPECT_EQ(kt_peek_cqe(&ring, &cqe), -EINVAL);
	EXPECT_EQ(kt_wait_cqe(&ring, &cqe), -EINVAL);
	kt_cqe_seen(&ring);	/* nothing to release, no crash */
	kt_ring_exit(&ring);
	mfix_free(&f);
}
#else
/* Run @fn in a child; it must abort with a "kt: misuse:" message. */
static void expect_abort(struct kt_test_meta *_metadata,
			 void (*fn)(struct mfix *f), const char *what)
{
	char buf[4096] = "";
	int p[2], status;
	size_t len;
	ssize_t n;
	pid_t pid;

	ASSERT_EQ(pipe(p), 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (!pid) {
		struct mfix f;

		dup2(p[1], 2);
		close(p[0]);
		if (mfix_init(&f))
			_exit(3);
		fn(&f);
		_exit(0);	/* no abort: the misuse went unseen */
	}
	close(p[1]);
	/* to the end: the message may come in several writes */
	for (len = 0; len < sizeof(buf) - 1; len += (size_t)n) {
		n = read(p[0], buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
	}
	buf[len] = '\0';
	close(p[0]);
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	TH_LOG("%s: %s", what, buf);
	ASSERT_TRUE(WIFSIGNALED(status));
	EXPECT_EQ(WTERMSIG(status), SIGABRT);
	EXPECT_NE(strstr(buf, "kt: misuse: "), NULL);
	EXPECT_NE(strstr(buf, what), NULL);
}

static void destroy_running(struct mfix *f)
{
	struct kt_ring ring;

	kt_ring_init(f->ctx, 8, &ring);
	submit_long(&ring, f);
	kt_model_destroy(f->m);
}

TEST(debug_destroy_model_with_op_running_aborts)
{
	expect_abort(_metadata, destroy_running, "kt_model_destroy()");
}

static void after_exit(struct mfix *f)
{
	struct kt_ring ring;

	kt_ring_init(f->ctx, 8, &ring);
	kt_ring_exit(&ring);
	kt_get_sqe(&ring);
}

TEST(debug_ring_used_after_exit_aborts)
{
	expect_abort(_metadata, after_exit, "released by kt_ring_exit()");
}

static void *submit_from_here(void *arg)
{
	kt_submit(arg);
	return NULL;
}

static void other_thread(struct mfix *f)
{
	struct kt_ring ring;
	pthread_t th;

	kt_ring_init(f->ctx, 8, &ring);
	pthread_create(&th, NULL, submit_from_here, &ring);
	pthread_join(th, NULL);
}

TEST(debug_ring_used_by_second_thread_aborts)
{
	expect_abort(_metadata, other_thread, "a ring belongs to the thread");
}

static void tail_jump(struct mfix *f)
{
	struct kt_ring ring;
	struct kt_cqe *cqe;

	kt_ring_init(f->ctx, 8, &ring);
	ring.sqe_tail += 8 + 3;
	kt_submit(&ring);
	kt_wait_cqe_timeout(&ring, &cqe, 2000000000ull);
}

TEST(debug_sq_tail_past_its_size_aborts)
{
	expect_abort(_metadata, tail_jump, "two threads submit on it");
}
#endif

TEST_HARNESS_MAIN
