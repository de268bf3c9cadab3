#!/bin/sh
# run.sh — runs every test program and prints "N passed, N failed" as its last line.
#
# A test program prints "ok - ..." or "not ok - ..." per check (tests/test.h). We count those
# lines. A program that exits non-zero without printing a "not ok" line (a crash, a sanitizer
# report, a hang killed by the timeout) counts as one failure, so nothing fails silently.
#
# Two at a time: the machine CI runs on has two cores, and the longest tests (the grader's,
# single's: a sanitized program on one core for minutes) leave the second idle. They run in
# a lane of their own beside the rest. The tests that time how work overlaps (a bucket's
# all-reduce inside the backward pass, a prefetched all-gather, the dashboard's deadlines)
# wait for that lane to finish, so that they never share the cores with it.
BUILD=${BUILD:-build}
BESIDE=${BESIDE-test_grade test_single}
QUIET=${QUIET-test_ddp test_zero test_fsdp test_tui test_launch}
passed=0
failed=0
log=$(mktemp)
lane=$(mktemp -d)
trap 'rm -rf "$log" "$lane"' EXIT

run() {
    name=$1
    shift
    start=$(date +%s)
    # test_variants builds and grades a dozen copies of the labs (one of them self-graded by
    # its own make grade, a whole build): twice the others' limit. So does test_catalog,
    # which starts every lab with every option (about 190 s alone, 580 s on a loaded machine).
    limit=600
    case "$name" in test_variants | test_catalog) limit=1200 ;; esac
    timeout "$limit" "$@" >"$log" 2>&1
    status=$?
    p=$(grep -c '^ok ' "$log")
    f=$(grep -c '^not ok ' "$log")
    if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "not ok - $name exited with status $status without reporting a failed check" >>"$log"
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    echo "== $name: $p passed, $f failed ($(( $(date +%s) - start ))s)"
    # Show the failures (and what the program said around them) right here.
    if [ "$f" -ne 0 ]; then grep -v '^ok ' "$log" | tail -n 40; fi
}

# Test program $2 (named $1) with the arguments it takes.
run_test() {
    name=$1
    t=$2
    case "$name" in
        test_single) run "$name" "$t" "$BUILD/labs/single" "$BUILD/san/labs/single" ;;
        test_ddp) run "$name" "$t" "$BUILD/labs/ddp" "$BUILD/labs/single" "$BUILD/san/labs/ddp" "$BUILD/breaks/ddp" ;;
        test_zero) run "$name" "$t" "$BUILD/labs/zero" "$BUILD/labs/single" "$BUILD/san/labs/zero" "$BUILD/breaks/zero" ;;
        test_fsdp) run "$name" "$t" "$BUILD/labs/fsdp" "$BUILD/labs/zero" "$BUILD/labs/single" "$BUILD/san/labs/fsdp" \
            "$BUILD/breaks/fsdp" ;;
        test_pp) run "$name" "$t" "$BUILD/labs/pp" "$BUILD/labs/single" "$BUILD/san/labs/pp" "$BUILD/breaks/pp" ;;
        test_ckpt) run "$name" "$t" "$BUILD/labs/ckpt" "$BUILD/labs/single" "$BUILD/san/labs/ckpt" "$BUILD/breaks/ckpt" ;;
        test_tp) run "$name" "$t" "$BUILD/labs/tp" "$BUILD/labs/single" "$BUILD/san/labs/tp" "$BUILD/breaks/tp" ;;
        test_cp) run "$name" "$t" "$BUILD/labs/cp" "$BUILD/labs/single" "$BUILD/san/labs/cp" ;;
        test_ep) run "$name" "$t" "$BUILD/labs/ep" "$BUILD/labs/single" "$BUILD/san/labs/ep" ;;
        test_web) run "$name" "$t" "." "$BUILD/san/shardlab" ;;
        test_lexicon) run "$name" "$t" "." "$BUILD/san/shardlab" "$BUILD/shardlab" "$BUILD/labs" ;;
        test_commands | test_figures | test_design) run "$name" "$t" "." ;;
        test_build | test_bench_gpu) run "$name" "$t" "." ;;
        test_gpu_check) run "$name" "$t" "." "$BUILD/shardlab" ;;
        test_dcp) run "$name" "$t" "$BUILD/labs" "$BUILD/shardlab" "$BUILD/san/labs" ;;
        test_shard) run "$name" "$t" "$BUILD/labs/shard" "$BUILD/labs/single" "$BUILD/san/labs/shard" "$BUILD/breaks/shard" ;;
        test_variants) run "$name" "$t" "$BUILD/shardlab" ;;
        test_sandbox) run "$name" "$t" "$BUILD/shardlab" ;;
        test_mixed) run "$name" "$t" "$BUILD/shardlab" "$BUILD/labs" "$BUILD/san/labs" ;;
        test_nonfinite) run "$name" "$t" "$BUILD/labs" "$BUILD/san/labs" "$BUILD/san/shardlab" ;;
        test_faults) run "$name" "$t" "$BUILD/labs" "$BUILD/san/labs" "$BUILD/shardlab" ;;
        test_grade) run "$name" "$t" "$BUILD/san/shardlab" "$BUILD/labs" "$BUILD/shardlab" ;;
        test_collectives) run "$name" "$t" "$BUILD/san/labs/collectives" ;;
        test_trace) run "$name" "$t" "$BUILD/labs" "$BUILD/san/shardlab" ;;
        test_catalog) run "$name" "$t" "$BUILD/labs" "$BUILD/san/shardlab" ;;
        test_launch) run "$name" "$t" "$BUILD/san/shardlab" "$BUILD/san/fixtures" ;;
        test_plan | test_whatif) run "$name" "$t" "$BUILD/san/shardlab" "$BUILD/labs" ;;
        test_tui | test_tui_replay | test_tui_panels) run "$name" "$t" "$BUILD/san/shardlab" "$BUILD/labs" ;;
        *) run "$name" "$t" ;;
    esac
}

# The second lane, started first: its tests one after another, into files of their own.
(
    log=$lane/log
    for name in $BESIDE; do
        [ -x "$BUILD/san/tests/$name" ] && run_test "$name" "$BUILD/san/tests/$name"
    done
    echo "$passed $failed" >"$lane/counts"
) >"$lane/out" 2>&1 &
beside=$!

for t in "$BUILD"/san/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    case " $BESIDE $QUIET " in *" $name "*) continue ;; esac
    run_test "$name" "$t"
done

# The second lane's results, and its counts (a lane that ended without them is a failure);
# then the tests that time overlap, on cores of their own.
wait "$beside"
cat "$lane/out"
if read -r p f <"$lane/counts" 2>/dev/null; then
    passed=$((passed + p))
    failed=$((failed + f))
else
    echo "not ok - the second lane ($BESIDE) ended without its counts"
    failed=$((failed + 1))
fi
for name in $QUIET; do
    [ -x "$BUILD/san/tests/$name" ] && run_test "$name" "$BUILD/san/tests/$name"
done

# The CUDA kernels against the CPU's: built when the build has the CUDA backend; without a
# usable GPU it reports one skip (so CI proves it compiles and links, a GPU machine runs it).
if [ -x "$BUILD/gpu/test_cuda_ops" ]; then run test_cuda_ops "$BUILD/gpu/test_cuda_ops"; fi

# The course in a real browser (headless Chromium through playwright-core; make deps-browser
# installs them): it starts the optimized server and a lab, and prints ok / not ok lines.
run test_browser node tests/browser/e2e.js "$BUILD/shardlab" "$BUILD/browser"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
