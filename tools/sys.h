/* SPDX-License-Identifier: MIT */
/*
 * sys.h - machine facts the tools read from sysfs and procfs themselves
 * (cache and memory sizes) because the public API does not carry them.
 */
#ifndef KT_TOOLS_SYS_H
#define KT_TOOLS_SYS_H

#include <stdbool.h>
#include <stdint.h>

uint64_t sys_l3_bytes(void);
uint64_t sys_mem_available(void);
uint64_t sys_mem_total(void);
unsigned int sys_cpus_usable(void);
bool sys_stderr_tty(void);

#endif /* KT_TOOLS_SYS_H */
