#!/bin/sh
# bench_zero.sh — each ZeRO stage and FSDP against DDP on the same ranks and global batch:
# step time as a ratio to DDP, and peak memory per rank.
#
# usage: sh tests/bench/bench_zero.sh [STEPS] [ARGS...]     (make bench-zero [STEPS=60] [ARGS="--dim 128"])
#
# For N = 2 and 4: build/labs/ddp (its default, overlapped buckets), zero --stage 0..3 and
# fsdp with and without --prefetch, on the default model (or ARGS), three runs each in turn,
# so that the machine's noise falls on every variant alike. Prints the median ms/step of
# each run, the median of the three, its ratio to DDP's median, and rank 0's peak memory
# (summary.json's mem_peak) next to DDP's.
# The step time is ms.step: the wall clock per step, from one step's record to the next
# (forward, backward, communication, the update, and the lab's logging and parameter hash), so
# the ratios compare what a run costs. (ms.work, the timed region alone, is in the logs too.)
set -eu
BUILD=${BUILD:-build}
STEPS=${1:-60}
[ $# -gt 0 ] && shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median_ms() {  # the median "ms.step" of a run's rank-0 step events
    grep '"ev":"step"' "$1/rank-0.jsonl" | sed 's/.*"ms":{"step":\([0-9.]*\).*/\1/' | sort -n |
        awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'
}
median3() { printf '%s\n%s\n%s\n' "$1" "$2" "$3" | sort -n | sed -n 2p; }
peak() { sed 's/.*"mem_peak":\([0-9]*\).*/\1/' "$1/summary.json"; }

run_lab() {  # n, lab, dir, then options
    n=$1 lab=$2 dir=$3
    shift 3
    port=$((30000 + ($$ + n * 7) % 20000))
    r=0
    while [ "$r" -lt "$n" ]; do
        RANK=$r WORLD_SIZE=$n MASTER_PORT=$port "$BUILD/labs/$lab" --steps "$STEPS" --run-dir "$dir" "$@" >/dev/null &
        r=$((r + 1))
    done
    wait
}

echo "# ZeRO and FSDP vs DDP, $STEPS steps, default model unless ARGS ($*), $(nproc) cores"
echo "# each figure: median wall-clock ms/step (ms.step) of one run; three runs; their median; ratio to DDP; rank 0's peak memory"
for n in 2 4; do
    for i in 1 2 3; do
        for v in ddp zero0 zero1 zero2 zero3 fsdp fsdp-prefetch; do
            case $v in
            ddp) run_lab "$n" ddp "$tmp/$v-$n-$i" "$@" ;;
            zero*) run_lab "$n" zero "$tmp/$v-$n-$i" --stage "${v#zero}" "$@" ;;
            fsdp) run_lab "$n" fsdp "$tmp/$v-$n-$i" "$@" ;;
            fsdp-prefetch) run_lab "$n" fsdp "$tmp/$v-$n-$i" --prefetch "$@" ;;
            esac
        done
    done
    ddp=
    for v in ddp zero0 zero1 zero2 zero3 fsdp fsdp-prefetch; do
        m1=$(median_ms "$tmp/$v-$n-1") m2=$(median_ms "$tmp/$v-$n-2") m3=$(median_ms "$tmp/$v-$n-3")
        med=$(median3 "$m1" "$m2" "$m3")
        [ -z "$ddp" ] && ddp=$med ddp_peak=$(peak "$tmp/$v-$n-1")
        printf 'N=%d %-14s %8s %8s %8s   median %8s ms   ratio to ddp %s   peak %s KiB (ddp %s KiB)\n' "$n" "$v" \
            "$m1" "$m2" "$m3" "$med" "$(awk -v a="$med" -v b="$ddp" 'BEGIN {printf "%.3f", a / b}')" \
            "$(($(peak "$tmp/$v-$n-1") / 1024))" "$((ddp_peak / 1024))"
    done
done
