/* SPDX-License-Identifier: MIT */
/*
 * io.h - small file helpers of the loader: whole reads and writes that
 * retry short transfers, and 4 KiB-aligned buffers for O_DIRECT.
 */
#ifndef KT_LOADER_IO_H
#define KT_LOADER_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define LDR_HUGETLBFS_MAGIC 0x958458f6	/* statfs f_type of hugetlbfs */

/* 0, -errno, or -EIO when the file ends first. */
int ldr_pread_full(int fd, void *buf, size_t len, uint64_t off);
int ldr_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);
/*
 * Remove the temporaries "<@prefix><pid>" in @dir that a killed process
 * left (its pid no longer runs): a staged copy's temporary holds
 * hugepages until it is removed. Return: how many were removed.
 */
unsigned int ldr_remove_stale_temps(const char *dir, const char *prefix);
/* Aligned to 4 KiB, size rounded up to 4 KiB; release with free(). */
void *ldr_io_buf_alloc(size_t len);

#endif /* KT_LOADER_IO_H */
