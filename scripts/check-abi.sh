#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# check-abi.sh - prove that libkt.so, libkt.map and include/kt/ agree: every
# exported symbol is versioned KT_0 and listed in libkt.map, every listed
# name is exported, every function the public headers declare is exported,
# and every inline helper has its exported twin (KT_RING_INLINE); only
# internal __kt_* helpers may be plain static inline.
# Usage: check-abi.sh build/libkt.so [libkt.map] [include/kt]
set -eu
lib=$1
map=${2:-libkt.map}
inc=${3:-include/kt}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

say() { echo "check-abi: $*" >&2; fail=1; }

nm -D --defined-only --with-symbol-versions "$lib" |
	awk '$2 ~ /[TDBRVWiu]/ { print $3 }' | sort > "$tmp/versioned"
grep -vE '^_*kt_[A-Za-z0-9_]+@@KT_0$|^KT_0@@KT_0$' "$tmp/versioned" \
	> "$tmp/bad" || true
if [ -s "$tmp/bad" ]; then
	say "exported symbols outside the versioned kt_* ABI:"
	cat "$tmp/bad" >&2
fi
sed -n 's/@@KT_0$//p' "$tmp/versioned" | grep -v '^KT_0$' | sort -u \
	> "$tmp/exported"

# names listed in the map's global section (comments stripped)
sed -e 's:/\*.*\*/::g' "$map" |
	awk '/global:/ { g = 1; next } /local:/ { g = 0 } g' |
	grep -oE '^[[:space:]]*[A-Za-z_][A-Za-z0-9_]*;' | tr -d ' \t;' |
	sort > "$tmp/listed"
if [ -n "$(sort "$tmp/listed" | uniq -d)" ]; then
	say "listed twice in $map: $(uniq -d "$tmp/listed" | tr '\n' ' ')"
fi
sort -u -o "$tmp/listed" "$tmp/listed"

# functions the headers declare or define at file scope
grep -hE '^[A-Za-z_].*\b_*kt_[a-z0-9_]+\(' "$inc"/*.h | grep -v '^typedef' \
	> "$tmp/decl_lines"
grep -E '^static inline' "$tmp/decl_lines" |
	grep -oE '\b_*kt_[a-z0-9_]+\(' | tr -d '(' | sort -u > "$tmp/inline"
grep -vE '^static inline' "$tmp/decl_lines" |
	grep -oE '\b_*kt_[a-z0-9_]+\(' | tr -d '(' | sort -u > "$tmp/declared"
bad_inline=$(grep -v '^__kt_' "$tmp/inline" || true)
[ -z "$bad_inline" ] ||
	say "static inline without an exported twin (use KT_RING_INLINE):" \
	    $bad_inline

diff_sets() {	# $1 $2 label
	local only
	only=$(comm -23 "$1" "$2" | tr '\n' ' ')
	[ -z "$only" ] || say "$3: $only"
}
diff_sets "$tmp/exported" "$tmp/listed" "exported but not listed in $map"
diff_sets "$tmp/listed" "$tmp/exported" "listed in $map but not exported"
diff_sets "$tmp/declared" "$tmp/exported" \
	"declared in $inc but not exported (no twin?)"
diff_sets "$tmp/exported" "$tmp/declared" \
	"exported but declared in no public header"

[ "$fail" -eq 0 ] || exit 1
twins=$(cat "$inc"/*.h | grep -cE '^KT_RING_INLINE ' || true)
echo "check-abi: $(wc -l < "$tmp/exported") symbols (of them $twins" \
	"exported twins of inline helpers), all versioned KT_0, listed in" \
	"$map and declared in $inc"
