// SPDX-License-Identifier: MIT
/*
 * geom.c - the packed geometry a .ktw must match, from the kernels' own
 * layout function: a file written by another layout is refused, not read.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/pack.h"
#include "loader/error.h"
#include "loader/ktw.h"

static int check_quant(int quant, uint32_t group_size)
{
	bool grouped = quant == KT_QUANT_INT4 || quant == KT_QUANT_FP8 ||
		       quant == KT_QUANT_Q8_0 || quant == KT_QUANT_Q4_K ||
		       quant == KT_QUANT_Q5_K || quant == KT_QUANT_Q6_K ||
		       quant == KT_QUANT_MXFP4;

	if (quant != KT_QUANT_INT8 && quant != KT_QUANT_INT4 &&
	    quant != KT_QUANT_BF16 && quant != KT_QUANT_FP8 &&
	    quant != KT_QUANT_Q8_0 && !kern_quant_is_k(quant) &&
	    quant != KT_QUANT_MXFP4)
		return ldr_err(-EINVAL, "unknown quantization %d", quant);
	if (quant == KT_QUANT_FP8 && group_size != 128 &&
	    group_size != KT_GROUP_CHANNEL)
		return ldr_err(-EINVAL, "FP8 scale group %u is neither 128 (128x128 blocks) nor %u (per row)",
			       group_size, KT_GROUP_CHANNEL);
	/* the GGUF quantizations (from kt convert of a .gguf) and MXFP4
	 * (one E8M0 scale per 32) have 32 */
	if ((quant == KT_QUANT_Q8_0 || kern_quant_is_k(quant) ||
	     quant == KT_QUANT_MXFP4) && group_size != 32)
		return ldr_err(-EINVAL, "%s group size %u is not 32",
			       kt_quant_name((enum kt_quant)quant), group_size);
	if (!grouped && group_size)
		return ldr_err(-EINVAL, "group size %u given for %s", group_size,
			       kt_quant_name((enum kt_quant)quant));
	if (quant == KT_QUANT_INT4 && group_size != 32 && group_size != 64 &&
	    group_size != 128)
		return ldr_err(-EINVAL, "INT4 group size %u is not 32, 64 or 128",
			       group_size);
	return 0;
}

int ldr_geom_init_mix(struct ldr_geom *g, int quant, int down_quant,
		      uint32_t hidden, uint32_t inter, uint32_t group_size)
{
	bool grouped = quant == KT_QUANT_INT4 || quant == KT_QUANT_FP8 ||
		       quant == KT_QUANT_Q8_0 || kern_quant_is_k(quant) ||
		       quant == KT_QUANT_MXFP4;
	struct kern_pack_layout l;
	int i, ret;

	ret = check_quant(quant, group_size);
	if (ret)
		return ret;
	if (down_quant != quant) {
		bool mix = (quant == KT_QUANT_Q8_0 || kern_quant_is_k(quant)) &&
			   (down_quant == KT_QUANT_Q8_0 ||
			    kern_quant_is_k(down_quant));

		if (!mix)
			return ldr_err(-EINVAL, "quantization %d with down %d: only Q8_0, Q4_K, Q5_K and Q6_K (5..8) may differ between gate/up and down",
				       quant, down_quant);
	}
	memset(&l, 0, sizeof(l));
	if (kern_pack_layout_mix((enum kt_quant)quant, (enum kt_quant)down_quant,
				 hidden, inter, group_size, &l))
		return ldr_err(-EINVAL, "bad geometry hidden %u inter %u (%s, down %s): %s",
			       hidden, inter,
			       kt_quant_name((enum kt_quant)quant),
			       kt_quant_name((enum kt_quant)down_quant),
			       l.err ? l.err : "?");
	memset(g, 0, sizeof(*g));
	g->quant = quant;
	g->down_quant = down_quant;
	g->hidden = hidden;
	g->inter = inter;
	g->group_size = grouped ? group_size : 0;
	g->down_chunk = l.kc;
	g->expert_bytes = l.total;
	for (i = 0; i < 3; i++) {
		g->part_off[KTW_PART_GATE_TILES + i] = l.tiles_off[i];
		g->part_off[KTW_PART_GATE_SCALES + i] = l.scales_off[i];
	}
	return 0;
}

int ldr_geom_init(struct ldr_geom *g, int quant, uint32_t hidden,
		  uint32_t inter, uint32_t group_size)
{
	return ldr_geom_init_mix(g, quant, quant, hidden, inter, group_size);
}
