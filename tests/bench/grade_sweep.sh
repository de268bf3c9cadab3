#!/bin/sh
# grade_sweep.sh — does a correct run of the course's length get full marks? The reference
# labs run as the READMEs run them, at 200 and at 1000 steps, each graded by shardlab grade.
#
# usage: sh tests/bench/grade_sweep.sh [LENGTHS]       (make grade-sweep [LENGTHS="200 1000"])
#
# The configurations are the READMEs' commands, at their defaults:
#   make lab-ddp NGPU=2                    ddp on 2 ranks
#   make lab-zero STAGE=2 NGPU=4           ZeRO stage 2 on 4 ranks
#   make lab-fsdp NGPU=4                   FSDP on 4 ranks
#   make lab-tp NGPU=2                     tensor parallelism on 2 ranks
#   make lab-pp NGPU=2 SCHEDULE=1f1b       a 1F1B pipeline of 2 stages, 4 micro-batches
#   make lab-ckpt NGPU=2 POLICY=sqrt       activation checkpointing on 2 data-parallel ranks
#   make lab-shard NGPU=2                  data sharding with the sampler on 2 ranks
# Each run keeps its replay points (the default for runs of 50 steps or more), so the grader
# compares the loss and the gradient norm exactly over steps 1-10 and over 10 steps replayed
# from each of them, and the curve as a whole. The single-rank references are shared through
# one --refs directory. Prints one row per run (points, the loss check's measurement, the
# time the run and its grading took) and exits 1 unless every run has full marks.
# About 10 minutes on 2 cores for both lengths.
set -u
BUILD=${BUILD:-build}
LENGTHS=${1:-200 1000}
cd "$(dirname "$0")/../.." || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardlab-grade-sweep-XXXXXX") || exit 1
keep=0
trap 'if [ "$keep" = 1 ]; then echo "grade-sweep: runs kept in $tmp"; else rm -rf "$tmp"; fi' EXIT
[ -x "$BUILD/shardlab" ] || { echo "grade-sweep: no $BUILD/shardlab: run make first"; exit 2; }

CONFIGS="ddp-2|ddp|2|
zero2-4|zero|4|--stage 2
fsdp-4|fsdp|4|
tp-2|tp|2|
pp1f1b-2|pp|2|--schedule 1f1b --micro 4
ckpt-sqrt-2|ckpt|2|--policy sqrt
shard-2|shard|2|--strategy sampler"

# A field of grade.json (a tiny reader: shardlab's JSON is one line, fields in a known order).
points() { sed -n 's/^{"run_dir":"[^"]*","lab":"[^"]*","label":"[^"]*","points":\([0-9]*\),"max":\([0-9]*\),.*/\1 \2/p' "$1/grade.json"; }
failed() { grep -o '"name":"[a-z.]*","result":"FAIL"' "$1/grade.json" | sed 's/"name":"\([a-z.]*\)".*/\1/' | tr '\n' ' '; }
loss_measured() {
    grep -o '"name":"loss.reference","result":"[A-Z]*","points":[0-9]*,"max":[0-9]*,"what":"[^"]*","measured":"[^"]*"' \
        "$1/grade.json" | sed 's/.*"measured":"\([^"]*\)"/\1/'
}

status=0
printf '# shardlab grade-sweep: %s, %s cores, lengths %s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc)" "$LENGTHS"
printf '%-12s %6s %8s %8s %7s  %s\n' config steps points run_s grade_s "loss.reference measured / failed checks"
for steps in $LENGTHS; do
    echo "$CONFIGS" | while IFS='|' read -r label lab n args; do
        dir=$tmp/$label-$steps
        t0=$(date +%s)
        # shellcheck disable=SC2086
        "$BUILD/shardlab" run "$lab" -n "$n" --ui none --steps "$steps" --run-dir "$dir" $args >"$dir.out" 2>&1
        rc=$?
        t1=$(date +%s)
        "$BUILD/shardlab" grade "$dir" --quiet --refs "$tmp/refs" >"$dir.grade" 2>&1
        t2=$(date +%s)
        pm=$(points "$dir")
        got=${pm% *} max=${pm#* }
        if [ "$rc" -ne 0 ] || [ -z "$pm" ] || [ "$got" != "$max" ]; then
            echo FAIL >>"$tmp/failed"
            printf '%-12s %6s %8s %8s %7s  FAIL (run exit %s): %s\n' "$label" "$steps" "${got:-?}/${max:-?}" \
                $((t1 - t0)) $((t2 - t1)) "$rc" "$(failed "$dir")"
        else
            printf '%-12s %6s %8s %8s %7s  %s\n' "$label" "$steps" "$got/$max" $((t1 - t0)) $((t2 - t1)) \
                "$(loss_measured "$dir")"
        fi
    done
done
if [ -f "$tmp/failed" ]; then
    status=1
    keep=1
    echo "grade-sweep: $(wc -l <"$tmp/failed") run(s) without full marks"
else
    echo "grade-sweep: every run has full marks"
fi
exit "$status"
