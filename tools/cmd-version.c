// SPDX-License-Identifier: MIT
/*
 * cmd-version.c - `kt version`: the library version the command runs.
 */
#include <stdio.h>

#include <kt/kt.h>

#include "tools/cmd.h"

static int cmd_version(int argc, char **argv)
{
	printf("kt %d.%d\n", KT_VERSION_MAJOR, KT_VERSION_MINOR);
	return 0;
}

KT_COMMAND("version", cmd_version, "print kt's version");
