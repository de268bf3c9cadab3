#!/bin/sh
# bench_ddp.sh — DDP on N ranks against single on the same global batch: step time, side by side.
#
# usage: sh tests/bench/bench_ddp.sh [N] [STEPS]      (make bench-ddp [NGPU=2])
#
# Runs build/labs/single and build/labs/ddp (N ranks, each --sync variant) on the default
# model and global batch, three times each, and prints the median ms/step of each run, the
# median over the three, and the ratio ddp/single. On a machine with at least N cores, the
# ideal is 1/N plus the communication the backward pass could not hide.
# The step time is ms.step: the wall clock per step, from one step's record to the next
# (forward, backward, communication, the update, and the lab's logging and parameter hash), so
# the ratios compare what a run costs. (ms.work, the timed region alone, is in the logs too.)
set -eu
BUILD=${BUILD:-build}
N=${1:-2}
STEPS=${2:-100}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median_ms() {  # the median "ms.step" of a run's rank-0 step events
    grep '"ev":"step"' "$1/rank-0.jsonl" | sed 's/.*"ms":{"step":\([0-9.]*\).*/\1/' | sort -n |
        awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'
}

median3() { printf '%s\n%s\n%s\n' "$1" "$2" "$3" | sort -n | sed -n 2p; }

run_single() { "$BUILD/labs/single" --steps "$STEPS" --run-dir "$1" >/dev/null; }

run_ddp() {  # dir, then ddp options
    dir=$1; shift
    port=$((30000 + $$ % 20000))
    r=0
    while [ "$r" -lt "$N" ]; do
        RANK=$r WORLD_SIZE=$N MASTER_PORT=$port "$BUILD/labs/ddp" --steps "$STEPS" --run-dir "$dir" "$@" >/dev/null &
        r=$((r + 1))
    done
    wait
}

echo "# DDP on $N ranks vs single, $STEPS steps, default model (global batch 8 x 64 tokens), $(nproc) cores"
echo "# each figure: median wall-clock ms/step (ms.step) of a run; three runs; then their median and the ratio to single"
s1= s2= s3=
for i in 1 2 3; do run_single "$tmp/single$i"; eval "s$i=\$(median_ms $tmp/single$i)"; done
single=$(median3 "$s1" "$s2" "$s3")
printf '%-26s %8s %8s %8s   median %8s\n' "single" "$s1" "$s2" "$s3" "$single"
for sync in per-tensor bucket overlap; do
    for i in 1 2 3; do run_ddp "$tmp/$sync$i" --sync "$sync"; eval "d$i=\$(median_ms $tmp/$sync$i)"; done
    ddp=$(median3 "$d1" "$d2" "$d3")
    printf '%-26s %8s %8s %8s   median %8s   ratio ddp/single %s\n' "ddp N=$N --sync $sync" "$d1" "$d2" "$d3" "$ddp" \
        "$(awk -v a="$ddp" -v b="$single" 'BEGIN {printf "%.3f", a / b}')"
done
