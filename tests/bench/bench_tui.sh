#!/bin/sh
# bench_tui.sh — does watching a run slow it down? The same DDP run, with no dashboard
# (--ui none) and with the dashboard open in a terminal (--ui tui, in a tmux pane, as a person
# would watch it), alternating, REPEATS times each. For each run: the mean of rank 0's step
# times (ms.step of its step events). Prints both medians and their ratio (tui / none; 1.00
# means no cost). The machine is shared and noisy: read the ratio, not the milliseconds.
#
#   sh tests/bench/bench_tui.sh [NGPU] [STEPS]       (make bench-tui)
# The step time is ms.step: the wall clock per step, from one step's record to the next
# (forward, backward, communication, the update, and the lab's logging and parameter hash), so
# the ratios compare what a run costs. (ms.work, the timed region alone, is in the logs too.)
set -eu
BUILD=${BUILD:-build}
N=${1:-2}
STEPS=${2:-500}
REPEATS=${REPEATS:-5}
command -v tmux >/dev/null || { echo "bench_tui: needs tmux (apt-get install tmux)"; exit 1; }
tmp=$(mktemp -d)
sock="shardlab-bench-$$"
trap 'tmux -L "$sock" kill-server 2>/dev/null; rm -rf "$tmp"' EXIT

mean_step_ms() {  # the mean of rank 0's ms.step
    sed -n 's/.*"ev":"step".*"ms":{"step":\([0-9.]*\).*/\1/p' "$1/rank-0.jsonl" |
        awk '{ s += $1; n++ } END { if (n) printf "%.3f\n", s / n; else print "nan" }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# ddp, $N ranks, $STEPS steps, $REPEATS runs each way, alternating; step time: wall clock (ms.step)"
echo "#  run   ui    mean step (ms)"
for i in $(seq 1 "$REPEATS"); do
    "$BUILD/shardlab" run ddp -n "$N" --steps "$STEPS" --run-dir "$tmp/none-$i" --ui none >/dev/null
    m=$(mean_step_ms "$tmp/none-$i"); echo "$m" >>"$tmp/none"
    printf '%6d  none  %10s\n' "$i" "$m"
    tmux -L "$sock" -f /dev/null new-session -d -x 120 -y 36 -s "b$i" \
        "LC_ALL=C.UTF-8 $BUILD/shardlab run ddp -n $N --steps $STEPS --run-dir $tmp/tui-$i --ui tui"
    while [ ! -f "$tmp/tui-$i/summary.json" ]; do sleep 0.2; done
    sleep 0.5
    tmux -L "$sock" send-keys -t "b$i" q
    m=$(mean_step_ms "$tmp/tui-$i"); echo "$m" >>"$tmp/tui"
    printf '%6d  tui   %10s\n' "$i" "$m"
done
none=$(median <"$tmp/none")
tui=$(median <"$tmp/tui")
echo "# median mean step: none $none ms, tui $tui ms; ratio tui/none $(awk -v a="$tui" -v b="$none" 'BEGIN { printf "%.3f", a / b }')"
