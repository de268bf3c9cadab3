#!/bin/sh
# bench_parallel.sh — tensor and pipeline parallelism against single on the same global batch:
# step time as a ratio to single's, and each pipeline schedule's bubble (formula, measured).
#
# usage: sh tests/bench/bench_parallel.sh [STEPS] [ARGS...]    (make bench-parallel [STEPS=40] [ARGS=...])
#
# The model is the default one with 8 blocks (--layers 8, so 4 stages can interleave 2
# chunks each), 8 micro-batches for the pipelines (single runs --accum 8: the same
# micro-batches). For N = 2 and 4: single, tp, tp --sp, and pp with each schedule, three runs
# each in turn (so the machine's noise falls on every variant alike). Prints the median
# ms/step of each run, the median of the three, its ratio to single's, and for the pipelines
# the bubble fraction from the formula and the one measured (summary.json).
# The step time is ms.step: the wall clock per step, from one step's record to the next
# (forward, backward, communication, the update, and the lab's logging and parameter hash), so
# the ratios compare what a run costs. (ms.work, the timed region alone, is in the logs too.)
set -eu
BUILD=${BUILD:-build}
STEPS=${1:-40}
[ $# -gt 0 ] && shift
MODEL="--layers 8 --batch 16"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median_ms() {  # the median "ms.step" of a run's rank-0 step events
    grep '"ev":"step"' "$1/rank-0.jsonl" | sed 's/.*"ms":{"step":\([0-9.]*\).*/\1/' | sort -n |
        awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'
}
median3() { printf '%s\n%s\n%s\n' "$1" "$2" "$3" | sort -n | sed -n 2p; }
bubble() {  # formula and measured, from summary.json
    sed -n 's/.*"bubble":{"formula":\([0-9.]*\),"logical":[0-9.]*,"measured":\([0-9.]*\)}.*/formula \1 measured \2/p' "$1/summary.json"
}

run_lab() {  # ranks, lab, dir, then options (sh has no locals: these names are its own)
    rl_n=$1 rl_lab=$2 rl_dir=$3
    shift 3
    rl_port=$((30000 + ($$ + rl_n * 7) % 20000))
    rl_r=0
    while [ "$rl_r" -lt "$rl_n" ]; do
        # shellcheck disable=SC2086
        RANK=$rl_r WORLD_SIZE=$rl_n MASTER_PORT=$rl_port "$BUILD/labs/$rl_lab" --steps "$STEPS" --run-dir "$rl_dir" \
            $MODEL "$@" >/dev/null &
        rl_r=$((rl_r + 1))
    done
    wait
}

VARIANTS="single tp tp-sp pp-gpipe pp-1f1b pp-interleaved"
echo "# TP and PP vs single, $STEPS steps, $MODEL, 8 micro-batches, ARGS ($*), $(nproc) cores"
echo "# each figure: median wall-clock ms/step (ms.step) of one run; three runs; their median; ratio to single; pipelines: bubble"
for n in 2 4; do
    for i in 1 2 3; do
        for v in $VARIANTS; do
            case $v in
            single) run_lab 1 single "$tmp/$v-$n-$i" --accum 8 "$@" ;;
            tp) run_lab "$n" tp "$tmp/$v-$n-$i" "$@" ;;
            tp-sp) run_lab "$n" tp "$tmp/$v-$n-$i" --sp "$@" ;;
            pp-*) run_lab "$n" pp "$tmp/$v-$n-$i" --schedule "${v#pp-}" --micro 8 "$@" ;;
            esac
        done
    done
    base=
    for v in $VARIANTS; do
        m1=$(median_ms "$tmp/$v-$n-1") m2=$(median_ms "$tmp/$v-$n-2") m3=$(median_ms "$tmp/$v-$n-3")
        med=$(median3 "$m1" "$m2" "$m3")
        [ -z "$base" ] && base=$med
        extra=""
        case $v in pp-*) extra="   bubble $(bubble "$tmp/$v-$n-2")" ;; esac
        printf 'N=%d %-15s %8s %8s %8s   median %8s ms   ratio to single %s%s\n' "$n" "$v" "$m1" "$m2" "$m3" "$med" \
            "$(awk -v a="$med" -v b="$base" 'BEGIN {printf "%.3f", a / b}')" "$extra"
    done
done
