/* SPDX-License-Identifier: MIT */
/*
 * amx-untile.h - drop <immintrin.h>'s macros of the tile instructions the
 * tile bodies use, so that the includer can define its own in their place:
 * the AMX emulation test, and amx-cross -v's no-op tiles. Include after
 * <immintrin.h>, then define every name below.
 */
#undef _tile_loadconfig
#undef _tile_release
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stored
#undef _tile_dpbssd
#undef _tile_dpbsud
#undef _tile_dpbf16ps
