#!/bin/sh
# bench_cp.sh — context parallelism's two layouts side by side: how evenly the ranks share
# attention's work, and how much of the ring's transfer the compute hides.
#
# usage: sh tests/bench/bench_cp.sh [STEPS] [ARGS...]    (make bench-cp [STEPS=30] [ARGS=...])
#
# For n = 2 and 4 ranks, zig-zag and contiguous, three runs each in turn (so the machine's
# noise falls on both alike), at --seq 256 so that attention is a large part of a step. From
# each rank's step events (the first step left out):
#   attention max/min  the busiest rank's attention time over the idlest's (attention_ms: the
#                      blocks' forward and backward arithmetic, the median over steps). Under
#                      the causal mask contiguous chunks make it large; zig-zag, near 1.
#   hidden             1 - (time waited for the ring's hand-overs) / (their time from post to
#                      end), over every rank and step: the share the compute hid.
#   ms/step            rank 0's median wall clock per step.
# Each figure is the median of the three runs. On the shared-memory backend a rank copies its
# own messages between computing, so the hidden share is what this machine's cores allow.
set -eu
BUILD=${BUILD:-build}
STEPS=${1:-30}
[ $# -gt 0 ] && shift
MODEL="--seq 256"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

field() {  # the values of a step field in a rank log, the first step left out
    grep '"ev":"step"' "$1" | sed -n "s/.*\"$2\":\\([0-9.]*\\).*/\\1/p" | sed 1d
}
median() { sort -n | awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
median3() { printf '%s\n%s\n%s\n' "$1" "$2" "$3" | sort -n | sed -n 2p; }

run_cp() {  # ranks, dir, then options
    rc_n=$1 rc_dir=$2
    shift 2
    rc_port=$((30000 + ($$ + rc_n * 11) % 20000))
    rc_r=0
    while [ "$rc_r" -lt "$rc_n" ]; do
        # shellcheck disable=SC2086
        RANK=$rc_r WORLD_SIZE=$rc_n MASTER_PORT=$rc_port "$BUILD/labs/cp" --steps "$STEPS" --run-dir "$rc_dir" \
            $MODEL "$@" >/dev/null &
        rc_r=$((rc_r + 1))
    done
    wait
}

# One run's three figures: attention max/min over the ranks, the hidden share, ms/step.
figures() {  # dir, ranks
    f_max=0 f_min=0 f_r=0 f_wait=0 f_transfer=0
    while [ "$f_r" -lt "$2" ]; do
        log="$1/rank-$f_r.jsonl"
        a=$(field "$log" attention_ms | median)
        f_max=$(echo "$f_max $a" | awk '{print ($2 > $1) ? $2 : $1}')
        f_min=$(echo "$f_min $a" | awk '{print ($1 == 0 || $2 < $1) ? $2 : $1}')
        f_wait=$(field "$log" ring_wait_ms | awk -v s="$f_wait" '{s += $1} END {print s}')
        f_transfer=$(field "$log" ring_transfer_ms | awk -v s="$f_transfer" '{s += $1} END {print s}')
        f_r=$((f_r + 1))
    done
    ms=$(grep '"ev":"step"' "$1/rank-0.jsonl" | sed 's/.*"ms":{"step":\([0-9.]*\).*/\1/' | sed 1d | median)
    echo "$f_max $f_min $f_wait $f_transfer $ms" | awk '{printf "%.3f %.3f %.2f\n", $1 / $2, ($4 > 0) ? 1 - $3 / $4 : 0, $5}'
}

echo "# cp: zig-zag against contiguous, $STEPS steps, $MODEL, ARGS ($*), $(nproc) cores"
echo "# each figure: the median of three runs; attention max/min over ranks, hidden share of the ring, rank 0 ms/step"
printf '%-4s %-11s %18s %8s %10s\n' n layout "attention max/min" hidden ms/step
for n in 2 4; do
    for i in 1 2 3; do
        for layout in zigzag contiguous; do
            run_cp "$n" "$tmp/$layout-$n-$i" --layout "$layout" "$@"
        done
    done
    for layout in zigzag contiguous; do
        for i in 1 2 3; do figures "$tmp/$layout-$n-$i" "$n" >"$tmp/f-$layout-$n-$i"; done
        col() { median3 "$(cut -d' ' -f"$1" "$tmp/f-$layout-$n-1")" "$(cut -d' ' -f"$1" "$tmp/f-$layout-$n-2")" \
            "$(cut -d' ' -f"$1" "$tmp/f-$layout-$n-3")"; }
        printf '%-4s %-11s %18s %8s %10s\n' "$n" "$layout" "$(col 1)x" "$(col 2)" "$(col 3)"
    done
done
