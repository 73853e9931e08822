/* SPDX-License-Identifier: MIT */
/*
 * mask.h - which experts a model leaves out at load: the old one-bitmap
 * expert_mask (every layer) and the per-layer layer_masks (kt/place.h).
 */
#ifndef KT_LOADER_MASK_H
#define KT_LOADER_MASK_H

#include <stdbool.h>
#include <stdint.h>
#include <kt/kt.h>

/* Expert @e of layer index @layer is left out by either mask (or NULL). */
static inline bool ldr_masked(const uint64_t *expert_mask,
			      const uint64_t *layer_masks, uint32_t n_experts,
			      uint32_t layer, uint32_t e)
{
	if (expert_mask && (expert_mask[e / 64] >> (e % 64) & 1))
		return true;
	return layer_masks &&
	       (layer_masks[layer * KT_PLACE_WORDS(n_experts) + e / 64] >>
		(e % 64) & 1);
}

#endif /* KT_LOADER_MASK_H */
