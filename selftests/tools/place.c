// SPDX-License-Identifier: MIT
/*
 * place.c - `kt place`: the plan it prints per layer for each strategy,
 * and its refusals (frequency without statistics, bad values).
 */
#include <kt/kt.h>

#include "kt_test.h"
#include "run.h"

TEST(place_prints_layers)
{
	struct kt_run r;

	RUN_KT(&r, "place", "--layers", "3", "--experts", "16",
	       "--per-layer", "12", "--strategy", "front-loading");
	EXPECT_EQ(r.status, 0);
	EXPECT_TRUE(strstr(r.out, "front-loading, 36 of 48 experts") != NULL);
	EXPECT_TRUE(strstr(r.out, "layer   1:  16: 0-15\n") != NULL);
	EXPECT_TRUE(strstr(r.out, "layer   2:   4: 0-3\n") != NULL);
	kt_run_free(&r);
	RUN_KT(&r, "place", "--layers", "2", "--experts", "8", "--ratio",
	       "0.5");
	EXPECT_EQ(r.status, 0);
	EXPECT_TRUE(strstr(r.out, "layer   0:   4: 0,2,4,6\n") != NULL);
	kt_run_free(&r);
}

TEST(place_refuses)
{
	struct kt_run r;

	RUN_KT(&r, "place", "--layers", "2", "--experts", "8", "--strategy",
	       "frequency");
	EXPECT_EQ(r.status, 1);
	EXPECT_TRUE(strstr(r.err, "--stats") != NULL);
	kt_run_free(&r);
	RUN_KT(&r, "place", "--layers", "2", "--experts", "8", "--strategy",
	       "hottest");
	EXPECT_EQ(r.status, 2);
	kt_run_free(&r);
	RUN_KT(&r, "place", "--layers", "2", "--experts", "8", "--ratio",
	       "1.5");
	EXPECT_EQ(r.status, 2);
	kt_run_free(&r);
}

TEST_HARNESS_MAIN
