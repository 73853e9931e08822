// SPDX-License-Identifier: MIT
/*
 * hfconfig.c - fuzz the config.json reader: any JSON must give a clean
 * error or a geometry inside the .ktw limits, with the FP8 block sizes
 * non-zero (the converter divides by them).
 */
#include <stdlib.h>

#include "loader/hfconfig.h"
#include "loader/ktw-format.h"

#define FUZZ_NAME "hfconfig"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ldr_hfconfig cfg;
	uint32_t l, moe = 0;

	if (ldr_hfconfig_parse("config.json", (const char *)data, size, &cfg))
		return 0;
	if (!cfg.fp8_block[0] || !cfg.fp8_block[1] ||
	    cfg.n_experts > KTW_MAX_EXPERTS || cfg.n_layers > KTW_MAX_LAYERS ||
	    cfg.hidden > KTW_MAX_DIM || cfg.inter > KTW_MAX_DIM)
		abort();	/* what the converter relies on */
	for (l = 0; l < cfg.n_layers; l++)
		moe += cfg.is_moe[l];
	(void)moe;
	ldr_hfconfig_free(&cfg);
	return 0;
}
