// SPDX-License-Identifier: MIT
/*
 * fault.c - the hook behind ktcore/fault.h, in test builds only; the
 * loader's KT_FAULT counter sets it when the library loads.
 */
#ifdef KT_FAULT_INJECT
#include "ktcore/fault.h"

int (*core_fault_hook)(const char *site);
#endif
