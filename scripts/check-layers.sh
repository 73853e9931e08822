#!/bin/sh
# SPDX-License-Identifier: MIT
# check-layers.sh - the floors of Documentation/layers.md: every quoted
# #include stays on its folder's floor or goes down, the public headers
# include only each other and the C library, and no includes form a loop.
# Run from the top of the tree (make check does); prints each offence.
set -u

# What each folder's sources may include ("" = only <kt/...> and the system).
allowed() {
	case $1 in
	kernels) echo "kernels" ;;
	uring) echo "uring" ;;
	gpu) echo "gpu" ;;
	ktcore) echo "ktcore kernels uring gpu" ;;
	loader) echo "loader ktcore kernels uring gpu" ;;
	tools) echo "tools" ;;
	esac
}

bad=0
edges=$(mktemp)
trap 'rm -f "$edges" "$edges.bad" "$edges.err"' EXIT

for dir in kernels uring gpu ktcore loader tools; do
	ok=$(allowed "$dir")
	for f in $(find "$dir" -name '*.[ch]' | sort); do
		# every node appears, so tsort sees files with no includes too
		echo "$f $f" >>"$edges"
		grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
		while IFS= read -r line; do
			inc=${line#*\"}
			inc=${inc%%\"*}
			to=${inc%%/*}
			case " $ok " in
			*" $to "*) ;;
			*)
				echo "check-layers: $f:${line%%:*}: $dir/ may not include \"$inc\" (allowed: $ok)"
				echo x >>"$edges.bad"
				;;
			esac
			echo "$f $inc" >>"$edges"
		done
	done
done
if [ -s "$edges.bad" ]; then
	bad=1
fi
rm -f "$edges.bad"

# Public headers: <kt/...> and the C library; never kt's own folders,
# liburing, numa or CUDA, so that any C or C++ program can include them.
for f in include/kt/*.h; do
	if grep -n '^[[:space:]]*#[[:space:]]*include' "$f" |
	   grep -E '"|<(liburing|numa|numaif|cuda)[a-z_]*\.h>|<linux/'; then
		echo "check-layers: $f includes a header a user may not have"
		bad=1
	fi
done

# A loop among the includes (inside a folder or across floors).
if ! tsort "$edges" >/dev/null 2>"$edges.err"; then
	sed 's/^/check-layers: /' "$edges.err"
	bad=1
fi
rm -f "$edges.err"

if [ "$bad" -ne 0 ]; then
	echo "check-layers: FAILED (Documentation/layers.md lists the floors)"
	exit 1
fi
echo "check-layers: ok"
