/* SPDX-License-Identifier: MIT */
/*
 * cmd.h - how a `kt` subcommand registers itself: each tools/cmd-*.c file
 * places one KT_COMMAND() in the kt_cmds section; kt.c walks the section.
 */
#ifndef KT_TOOLS_CMD_H
#define KT_TOOLS_CMD_H

struct kt_cmd {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);	/* argv[0] is the name */
};

#define KT_COMMAND(cname, fn, sum)					\
	static const struct kt_cmd kt_cmd_##fn				\
	__attribute__((used, section("kt_cmds"), aligned(8))) =		\
		{ .name = (cname), .summary = (sum), .run = (fn) }

extern const struct kt_cmd __start_kt_cmds[], __stop_kt_cmds[];

#endif /* KT_TOOLS_CMD_H */
