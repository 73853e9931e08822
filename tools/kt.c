// SPDX-License-Identifier: MIT
/*
 * kt.c - entry point of the `kt` command: dispatches to the subcommands
 * registered with KT_COMMAND().
 */
#include <stdio.h>
#include <string.h>

#include "tools/cmd.h"

static void usage(FILE *f)
{
	const struct kt_cmd *c;

	fprintf(f, "usage: kt <command> [options]\n\ncommands:\n");
	for (c = __start_kt_cmds; c < __stop_kt_cmds; c++)
		fprintf(f, "  %-10s %s\n", c->name, c->summary);
	fprintf(f, "\n'kt <command> --help' describes a command.\n");
}

int main(int argc, char **argv)
{
	const struct kt_cmd *c;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (c = __start_kt_cmds; c < __stop_kt_cmds; c++)
		if (!strcmp(c->name, argv[1]))
			return c->run(argc - 1, argv + 1);
	fprintf(stderr, "kt: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
