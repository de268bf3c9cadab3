#!/bin/sh
# starter.sh OUT — a student's copy of shardlab: `make starter OUT=dir` runs it.
#
# Writes every file of the project into OUT (the files git tracks; outside a git checkout,
# the project's folders) and, in labs/, replaces each region between the lines
#     /* BEGIN SOLUTION */                (or /* BEGIN SOLUTION: what it does */)
#     /* END SOLUTION */
# by a TODO comment and a stub, todo("..."), that stops the lab with a message naming the
# file and line (common/harness/check.h). The copy builds as it is (make -C OUT); every lab that
# reaches a stub fails loudly until the student writes the part. Regions must not nest,
# and every BEGIN needs its END: a marker out of place stops the script with the file and
# line, and nothing is left half written.
set -eu
out=${1:-}
root=$(cd "$(dirname "$0")/../../.." && pwd)
if [ -z "$out" ]; then echo "usage: make starter OUT=dir (or: sh labs/command/grade/starter.sh dir)" >&2; exit 2; fi
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
    echo "starter: $out exists and is not empty; remove it or name another folder" >&2
    exit 2
fi
tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

# The project's files.
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$root" && git ls-files -z) | (cd "$root" && xargs -0 tar cf -) | (cd "$tmp" && tar xf -)
else
    (cd "$root" && tar cf - --exclude=build --exclude=runs --exclude=node_modules \
        Makefile README.md .ci labs lessons lexicon tests tui web .gitignore) | (cd "$tmp" && tar xf -)
fi

# The solutions out of labs/.
regions=0
files=0
for f in $(cd "$tmp" && grep -rl --include='*.c' --include='*.h' --include='*.cu' 'BEGIN SOLUTION' labs | sort); do
    n=$(awk -v file="$f" '
        function fail(msg) { printf "starter: %s:%d: %s\n", file, NR, msg > "/dev/stderr"; bad = 1; exit 2 }
        /^[ \t]*\/\* BEGIN SOLUTION(: [^*]*)? \*\/[ \t]*$/ {
            if (inside) fail("BEGIN SOLUTION inside another region (opened at line " start ")")
            inside = 1; start = NR; lines = 0
            indent = $0; sub(/[^ \t].*$/, "", indent)
            what = $0; sub(/^[ \t]*\/\* BEGIN SOLUTION:? ?/, "", what); sub(/ ?\*\/[ \t]*$/, "", what)
            if (what == "") what = "this part of the algorithm"
            gsub(/\\/, "", what); gsub(/"/, "'\''", what)
            next
        }
        /^[ \t]*\/\* END SOLUTION \*\/[ \t]*$/ {
            if (!inside) fail("END SOLUTION without a BEGIN")
            inside = 0; count++
            printf "%s/* TODO: %s. Write it here (%d lines in the reference solution). */\n", indent, what, lines
            out += 2
            printf "%stodo(\"%s (%s:%d)\");\n", indent, what, file, out
            next
        }
        /SOLUTION \*\// { fail("a SOLUTION marker must be alone on its line: /* BEGIN SOLUTION */ or /* END SOLUTION */") }
        inside { lines++; next }
        { print; out++ }
        END {
            if (bad) exit 2
            if (inside) { printf "starter: %s:%d: BEGIN SOLUTION is never closed\n", file, start > "/dev/stderr"; exit 2 }
            printf "%d\n", count > "/dev/fd/3"
        }' "$tmp/$f" 3>"$tmp/.count" >"$tmp/$f.new") || exit 2
    mv "$tmp/$f.new" "$tmp/$f"
    regions=$((regions + $(cat "$tmp/.count")))
    files=$((files + 1))
done
rm -f "$tmp/.count"
if [ "$regions" -eq 0 ]; then echo "starter: no /* BEGIN SOLUTION */ regions in labs/" >&2; exit 2; fi
mkdir -p "$(dirname "$out")"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "starter: $out: $regions solution regions in $files files replaced by TODO stubs"
echo "  build it:  make -C $out        check a part:  make -C $out check TODO=<name>        grade it:  make grade LABS=$out"
