/* SPDX-License-Identifier: MIT */
/*
 * version.h - the one place kt's version number is written; the Makefile
 * reads it from here for the soname, kt.pc and install names.
 */
#ifndef KT_VERSION_H
#define KT_VERSION_H

#define KT_VERSION_MAJOR 0
#define KT_VERSION_MINOR 1
#define KT_VERSION_PATCH 0

/* One number that compares in order: KT_VERSION_CODE >= KT_VERSION(0, 2, 0) */
#define KT_VERSION(major, minor, patch) \
	(((major) << 16) | ((minor) << 8) | (patch))
#define KT_VERSION_CODE \
	KT_VERSION(KT_VERSION_MAJOR, KT_VERSION_MINOR, KT_VERSION_PATCH)

#endif /* KT_VERSION_H */
