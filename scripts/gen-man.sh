#!/bin/sh
# SPDX-License-Identifier: MIT
# gen-man.sh - man pages from the sources, so none can drift: one kt_*(3)
# page per public function from the kernel-doc comments of include/kt/*.h,
# and kt(1) from the command's own --help texts. Needs only sh and awk.
# Usage: gen-man.sh -o DIR [-k KT_BIN] [-v VERSION] HEADER...
#        gen-man.sh --check LIBKT_SO DIR   (every exported kt_* has a page)
set -eu

if [ "${1:-}" = "--check" ]; then
	lib=$2 dir=$3
	missing=$(nm -D --defined-only "$lib" | awk '$3 ~ /^kt_/ {
		sub(/@.*/, "", $3); print $3 }' | sort -u | while read -r s; do
			[ -f "$dir/man3/$s.3" ] || echo "$s"
		done)
	n=$(find "$dir/man3" -name 'kt_*.3' | wc -l)
	if [ -n "$missing" ]; then
		echo "gen-man: exported without a man page:" $missing >&2
		exit 1
	fi
	echo "  MANCHK  $n pages; every exported kt_* symbol has one"
	exit 0
fi

out="" kt="" version="0.1"
while getopts o:k:v: opt; do
	case $opt in
	o) out=$OPTARG ;;
	k) kt=$OPTARG ;;
	v) version=$OPTARG ;;
	*) echo "usage: gen-man.sh -o DIR [-k KT_BIN] [-v VERSION] HEADER..." >&2
	   exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ -n "$out" ] || { echo "gen-man: -o DIR is required" >&2; exit 2; }
mkdir -p "$out/man1" "$out/man3"
rm -f "$out"/man3/kt_*.3

# Section 3: a small state machine over each header. Kernel-doc blocks
# (/** ... */) describe the declaration that follows them; an exported
# function without one gets its page from the plain comment above it.
awk -v out="$out/man3" -v version="$version" '
function esc(s) {
	gsub(/\\/, "\\e", s)
	sub(/^[.'"'"']/, "\\\\\\&&", s)
	return s
}
function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
function add(k, s) { doc[k] = doc[k] == "" ? trim(s) : doc[k] " " trim(s) }
function reset_doc() {
	split("", doc); split("", argname); nargs = 0; ndesc = 0
	mode = "head"; kname = ""
}
function parse(line,   r, m) {
	r = line; sub(/^ \*/, "", r)
	if (kname == "") {
		m = r; sub(/^ /, "", m)
		kname = m
		if (kname ~ /^(struct|typedef) /) sub(/ - .*/, "", kname)
		else sub(/[ (].*/, "", kname)
		sub(/^[^-]*- ?/, "", m)
		doc["summary"] = trim(m)
		return
	}
	if (r == "") {
		if (mode == "desc" && doc["d" ndesc] != "") ndesc++
		mode = "desc"
		return
	}
	if (r ~ /^ @[A-Za-z_0-9.]+:/) {
		m = r; sub(/^ @/, "", m)
		argname[++nargs] = substr(m, 1, index(m, ":") - 1)
		sub(/^[^:]*:/, "", m)
		mode = "a" nargs; add(mode, m)
		return
	}
	if (r ~ /^ (Context|Return):/) {
		m = r; sub(/^ /, "", m)
		mode = substr(m, 1, index(m, ":") - 1)
		sub(/^[^:]*:/, "", m); add(mode, m)
		return
	}
	if (mode == "head") { add("summary", r); return }
	if (mode != "desc" && r ~ /^(\t|  )/) { add(mode, r); return }
	mode = "desc"; add("d" ndesc, r)
}
function struct_doc(   t, i) {
	t = esc(doc["summary"])
	for (i = 0; i <= ndesc; i++)
		if (doc["d" i] != "") t = t "\n.PP\n" esc(doc["d" i])
	for (i = 1; i <= nargs; i++)
		t = t "\n.TP\n.I " argname[i] "\n" esc(doc["a" i])
	return t
}
function structs(proto, f,   s, n, seen_s, any) {
	s = proto
	while (match(s, /struct kt_[a-z0-9_]+/)) {
		n = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
		if (!(n in sdoc) || (n in seen_s)) continue
		seen_s[n] = 1
		if (!any++) print ".SH STRUCTURES" > f
		print ".SS " n > f
		if (n in sbody) print ".nf\n" sbody[n] ".fi" > f
		print sdoc[n] > f
	}
}
function page(name, proto, hdr,   f, i, up) {
	f = out "/" name ".3"
	up = toupper(name)
	print ".TH " up " 3 \"\" \"kt " version "\" \"kt Library Functions\"" > f
	print ".SH NAME" > f
	print name " \\- " esc(doc["summary"] != "" ? doc["summary"] : \
		"see the SYNOPSIS") > f
	print ".SH SYNOPSIS\n.nf\n.B #include <kt/kt.h>\n.PP" > f
	print esc(proto) > f
	print ".fi" > f
	if (nargs) {
		print ".SH ARGUMENTS" > f
		for (i = 1; i <= nargs; i++)
			print ".TP\n.I " argname[i] "\n" esc(doc["a" i]) > f
	}
	if (ndesc || doc["d0"] != "") {
		print ".SH DESCRIPTION" > f
		for (i = 0; i <= ndesc; i++)
			if (doc["d" i] != "")
				print (i ? ".PP\n" : "") esc(doc["d" i]) > f
	}
	structs(proto, f)
	if (doc["Context"] != "")
		print ".SH CONTEXT\n" esc(doc["Context"]) > f
	if (doc["Return"] != "")
		print ".SH RETURN VALUE\n" esc(doc["Return"]) > f
	print ".SH SEE ALSO\n.BR kt (1)," > f
	print "the header\n.IR " hdr "\nand Documentation/ of the kt sources." > f
	close(f)
	pages++
}
FNR == 1 { if (FILENAME == first) pass++; if (!first) { first = FILENAME; pass = 1 }
	   hdr = FILENAME; sub(/.*include\//, "", hdr); depth = 0
	   reset_doc(); have = 0; plain = ""; inbody = "" }
inbody != "" {
	sbody[inbody] = sbody[inbody] esc($0) "\n"
	if ($0 ~ /^};/) inbody = ""
	next
}
have && kname ~ /^struct / && $0 ~ "^" kname " \\{" && depth == 0 {
	sdoc[kname] = struct_doc(); sbody[kname] = esc($0) "\n"
	inbody = kname; have = 0; next
}
/^#ifdef __cplusplus/ { incpp = 1; next }
incpp { if (/^#endif/) incpp = 0; next }
/^\/\*\*$/ { inkd = 1; reset_doc(); next }
inkd && /^ \*\/$/ { inkd = 0; have = 1; next }
inkd { parse($0); next }
/^\/\*/ && depth == 0 {
	inc = !/\*\//; plain = $0
	sub(/^\/\* ?/, "", plain); sub(/ ?\*\/.*/, "", plain); next
}
inc { l = $0; sub(/^ \*? ?/, "", l); sub(/ ?\*\/.*/, "", l)
      plain = plain " " l; if ($0 ~ /\*\//) inc = 0; next }
depth == 0 && !indecl && /^([a-z]|KT_RING_INLINE ).*[ *]kt_[a-z0-9_]+\(/ && !/^(typedef|#)/ {
	indecl = 1; decl = ""
}
indecl {
	decl = decl " " $0
	if ($0 ~ /\)[^(]*(;|\{)? *$/ && $0 ~ /(;|\{|\)) *$/) {
		indecl = 0
		p = decl; sub(/\{.*/, "", p); sub(/;.*/, "", p)
		gsub(/[ \t]+/, " ", p); p = trim(p)
		sub(/^(static inline|KT_RING_INLINE) /, "", p)
		fn = p; sub(/\(.*/, "", fn); sub(/.*[ *]/, "", fn)
		if (!(have && kname == fn)) {
			reset_doc(); doc["summary"] = plain
		}
		if (pass == 2 && !(fn in done)) { page(fn, p ";", hdr); done[fn] = 1 }
		have = 0
		if ($0 !~ /\{/) next
	} else next
}
{
	t = $0; gsub(/"[^"]*"/, "", t)
	depth += gsub(/\{/, "{", t) - gsub(/\}/, "}", t)
	if (depth == 0 && $0 ~ /;|^}/ && $0 !~ /^\/\*/) have = have && 0
	if ($0 !~ /^[ \t]*$/ && $0 !~ /^\/\*/) plain = (depth ? plain : "")
}
END { printf "  MAN3    %d pages in %s\n", pages, out }
' "$@" "$@"

# Section 1: kt(1) from `kt --help` and each `kt CMD --help`.
[ -n "$kt" ] || exit 0
f="$out/man1/kt.1"
tmp="$f.tmp"
{
	echo ".TH KT 1 \"\" \"kt $version\" \"kt Manual\""
	echo ".SH NAME"
	echo "kt \\- run, benchmark and convert Mixture-of-Experts layers on the CPU"
	echo ".SH SYNOPSIS"
	echo ".B kt"
	echo ".I command"
	echo "[options]"
	echo ".SH DESCRIPTION"
	echo "The command line of kt, a runtime for the routed experts of MoE"
	echo "layers. It links libkt and uses only its public API. Exit status:"
	echo "0 success, 1 the work failed (stderr says why), 2 bad usage."
	echo ".SH COMMANDS"
	"$kt" --help | awk '/^  [a-z]/ { print $1 }' | while read -r c; do
		echo ".SS kt $c"
		echo ".nf"
		"$kt" "$c" --help 2>&1 | sed 's/\\/\\e/g; s/^\([.'"'"']\)/\\\&\1/'
		echo ".fi"
	done
	echo ".SH ENVIRONMENT"
	echo "KT_ISA, KT_THREADS, KT_LOG and the others are described in"
	echo "Documentation/environment.md of the kt sources."
	echo ".SH SEE ALSO"
	echo ".BR kt_ctx_create (3),"
	echo ".BR kt_model_open (3),"
	echo ".BR kt_ring_init (3)"
} > "$tmp"
mv "$tmp" "$f"
echo "  MAN1    $f"
