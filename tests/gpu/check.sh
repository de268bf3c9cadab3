#!/bin/sh
# check.sh — the CUDA backend checked against the CPU, and a training step timed against PyTorch.
#
# Run it on a machine with a GPU:   sh tests/gpu/check.sh        (or: make gpu-check)
# Settings (environment): BUILD=build, LENGTHS="50 200" (the training runs' lengths: every
# comparison of part 2 runs at each), TOL_FIRST=1e-5 (steps 1-10), TOL=2e-3 (the later steps),
# LARGE=1 (0: skip the GPT-2-small-sized timing), KEEP=1 (keep the temp dir even when everything
# passed), SHARDLAB_TIMEOUT_S=60 (the ranks' wait deadline), CUDA_HOME, NCCL_HOME,
# LAB_ARGS (options added to every training run on both devices, e.g. LAB_ARGS="--attn naive"
# or "--attn flash" or "--mixed": the whole comparison then holds for that variant; with
# --mixed the defaults become TOL_FIRST=2e-4 and TOL=2e-2, and zero's and fsdp's loss is
# compared with ZeRO stage 0 on one rank, whose weights are bf16 as theirs: see "The tolerances").
# PARTS="ops train collectives timing" (which parts of 2 and 3 run; the build and the probe always do).
#
# What it does, printing every command it runs:
#   1. finds a GPU (nvidia-smi -L; none: "SKIP: ..." and exit 0), builds with `make all DEPS=0`
#      (the Makefile finds CUDA and NCCL: `make cuda-status`; it needs no Debian package), and
#      checks that `single --device cuda` starts;
#   2. runs tests/gpu/test_cuda_ops (every CUDA kernel against the CPU's, op by op), then
#      trains each lab on the CPU and on CUDA, on the same seed, config and global batch, and
#      compares them (tests/gpu/compare.py):
#        single            --device cuda  vs  single --device cpu: the loss of every step, and
#                          every memory category at every step (params, grads, optim, acts,
#                          comm: set by the algorithm, so equal to the byte);
#        ddp -n 1, 2, 4    --device cuda  vs  single --device cpu (the loss), and vs ddp on the
#                          CPU at the same N (the memory); replicas' param_hash equal on every
#                          rank. -n 1 is an NCCL world of one; with fewer GPUs than ranks, the
#                          ranks share the GPU and talk through the shm backend, staged through
#                          host memory (NCCL refuses two ranks on one GPU);
#        zero --stage 1, 2, 3, fsdp --prefetch and fsdp --replicate 2 (HSDP: 2 x 1 and 2 x 2),
#                          -n 2 and 4: the loss vs single on the CPU, the memory vs the same
#                          run on the CPU;
#        pp --schedule gpipe and 1f1b, -n 2, and tp -n 2, 4 and --sp: the same two comparisons;
#        ckpt --policy every and sqrt, -n 2: the same two (its own comparison pass also checks,
#                          on the GPU, that every policy's gradients are bitwise policy none's);
#        cp -n 1, 2, 4 (zig-zag), -n 3 (contiguous) and -n 2 --kv all-gather: the same two;
#        checkpoints: zero --stage 2 -n 2 on CUDA saves half way; ddp -n 2, tp -n 2 and single
#                          on CUDA and zero -n 4 on the CPU resume it: the loss from there on
#                          vs single on the CPU;
#        shard --strategy slice, sampler and dispatch, -n 2: the loss and the memory vs the same
#                          strategy on the CPU (its batches come from the epoch sampler, not
#                          single's hash sampler, so single is no reference for it);
#        collectives -n 1, 2, 4 --device cuda --max-bytes 64M: every row's #wrong is 0;
#   3. times a training step against PyTorch eager on the same model (tests/gpu/torch_step.py),
#      at the labs' default config and at a GPT-2-small-sized one (C=768, NH=12, L=12,
#      T=1024, B=8), and prints the ratio shardlab/torch;
#   4. prints one table and exits 1 if any correctness check failed (timings are reported,
#      never asserted).
#
# The tolerances. Both sides compute in fp32 (TF32 off, the default), so the only difference is
# the order of additions: cuBLAS and the GPU's reduction kernels sum in another order than the
# CPU's loops, and an all-reduce adds the ranks' parts in yet another. Steps 1-10 start from
# the same weights and, under the learning rate's warmup, barely move them: within 1e-5 (the
# first step differs by about 1e-6 on a loss of 5.5). After that, training amplifies the
# difference like any chaotic system. How much was measured on the CPU, where the same run
# built with and without fused multiply-adds (NATIVE=1 vs 0) also differs only in rounding:
# 1e-8 over steps 1-10, at most 2.3e-6 by step 200 (the default model; 6e-8 with --layers 4):
# a growth of about 230x. The GPU's kernels start about 100x further apart (1e-6), so by step
# 200 we expect up to about 2.3e-4; TOL (2e-3) leaves ten times that. A lost gradient bucket
# (build/breaks/ddp, on the CPU) is off by 1.4e-3 at step 2 and 2.6e-2 by step 10, and a
# wrong kernel or a doubly scaled all-reduce by more: the first-steps bound catches them. The
# measured maximum of both is printed for every run.
#
# With --mixed the Linear layers' operands are rounded to bf16 on both devices, with the same
# bits, so step 1 still differs by the order of the sums only; but a last-bit difference in a
# weight now and then rounds it to the neighbouring bf16, 2^-8 away, and the runs drift apart
# faster. Measured on the CPU between ddp -n 2 and single, both --mixed: 3.7e-5 over steps 1-10,
# 2.5e-3 by step 200; zero --stage 3 -n 2 against zero --stage 0 -n 1: 2.2e-5 and 2.9e-4. So
# TOL_FIRST is 2e-4 and TOL 2e-2 there, and zero and fsdp (bf16 weights and gradients, where
# single keeps fp32) are held to ZeRO stage 0 on one rank on the CPU, not to single.
#
# Everything goes under one temp dir (kept, with its path printed, when a check failed). Every
# command runs under a time limit, so the script cannot hang; Ctrl-C stops the run in flight.
set -u
BUILD=${BUILD:-build}
LENGTHS=${LENGTHS:-50 200}
LAB_ARGS=${LAB_ARGS:-}
case " $LAB_ARGS " in *" --mixed "*) mixed=1 ;; *) mixed=0 ;; esac
if [ "$mixed" = 1 ]; then TOL_FIRST=${TOL_FIRST:-2e-4} TOL=${TOL:-2e-2}; else TOL_FIRST=${TOL_FIRST:-1e-5} TOL=${TOL:-2e-3}; fi
LARGE=${LARGE:-1}
KEEP=${KEEP:-0}
PARTS=${PARTS:-ops train collectives timing}
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

cd "$(dirname "$0")/../.." || exit 1
root=$(pwd)
here=$root/tests/gpu

tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardlab-gpu-check-XXXXXX") || { echo "gpu-check: mktemp failed"; exit 1; }
results=$tmp/results.jsonl
child=""
keep=1  # until the end says otherwise: a run that stops early leaves its evidence
# shellcheck disable=SC2317  # cleanup and stop run from the traps
cleanup() {
    if [ "$keep" = 1 ]; then echo "gpu-check: runs and logs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
# The command in flight runs in the background (below), so a signal reaches us at once; we
# pass it on to that command's `timeout`, which stops the command and its children.
# shellcheck disable=SC2317
stop() {
    if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi
    exit "$1"
}
trap 'stop 130' INT
trap 'stop 143' TERM

export SHARDLAB_RUNS="$tmp/runs"
export SHARDLAB_TIMEOUT_S="${SHARDLAB_TIMEOUT_S:-60}"

# run LIMIT_S LOG command...: print the command, run it with its output in LOG, under a time
# limit (then SIGTERM, and SIGKILL 10 s later); on failure show the end of LOG. Returns its status.
run() {
    limit=$1 log=$2
    shift 2
    echo "+ $*"
    timeout -k 10 "$limit" "$@" >"$log" 2>&1 </dev/null &
    child=$!
    wait "$child"
    status=$?
    child=""
    if [ "$status" -ne 0 ]; then
        if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
            echo "  timed out after $limit s"
        else
            echo "  exit status $status"
        fi
        tail -n 15 "$log" | sed 's/^/  | /'
    fi
    return "$status"
}

compare() {
    case $1 in
    train) python3 "$here/compare.py" "$@" --results "$results" --tol-first "$TOL_FIRST" ${STEPS:+--steps "$STEPS"} ;;
    fail) python3 "$here/compare.py" "$@" --results "$results" ${STEPS:+--steps "$STEPS"} ;;
    *) python3 "$here/compare.py" "$@" --results "$results" ;;
    esac
}

echo "# shardlab gpu-check: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname), temp dir $tmp"

# ---- 1. a GPU, NCCL, the build --------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1; then
    keep=0
    echo "SKIP: no nvidia-smi on this machine: no NVIDIA driver, so no GPU to check"
    exit 0
fi
echo "+ nvidia-smi -L"
timeout 60 nvidia-smi -L >"$tmp/gpus" 2>&1
sed 's/^/  /' "$tmp/gpus"
gpus=$(grep -c '^GPU ' "$tmp/gpus")
echo "# GPUs: $gpus${CUDA_VISIBLE_DEVICES+ (CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES)}"
if [ "$gpus" -eq 0 ]; then
    keep=0
    echo "SKIP: nvidia-smi lists no GPU"
    exit 0
fi
command -v python3 >/dev/null 2>&1 || { echo "gpu-check: python3 is needed to read the runs"; exit 1; }

# CUDA and NCCL: the Makefile finds them (nvcc in CUDA_HOME or on PATH; NCCL in NCCL_HOME when
# set, else CUDA_HOME, the system's include and multiarch library folders, or python3's
# nvidia-nccl wheel) and says on its CUDA: line what it found and uses. DEPS=0: nothing is
# installed; where ncursesw, md4c or CivetWeb are missing (a GPU node without root), shardlab is
# built without tui, lexicon and web, which this check does not use.
run 1800 "$tmp/make.log" make -j"$(nproc)" all BUILD="$BUILD" DEPS=0 ||
    { echo "gpu-check: the build failed (log: $tmp/make.log)"; exit 1; }
grep -E '^(CUDA|shardlab):' "$tmp/make.log" | sed 's/^/  /'
if ! grep -q '^CUDA:.*building the CUDA backend' "$tmp/make.log"; then
    echo "gpu-check: FAIL: this machine has $gpus GPU(s) but the build has no CUDA backend (see the CUDA: line above)"
    echo "HINT: install the CUDA toolkit, or set CUDA_HOME to where bin/nvcc is"
    exit 1
fi

# Does a rank start on the GPU? A driver that nvidia-smi sees but CUDA cannot use is a skip.
if ! run 300 "$tmp/probe.out" "$BUILD/labs/single" --device cuda --steps 1 --run-dir "$tmp/probe"; then
    if grep -q 'no usable GPU' "$tmp/probe.out"; then
        keep=0
        echo "SKIP: nvidia-smi lists $gpus GPU(s), but CUDA cannot use them: $(grep 'no usable GPU' "$tmp/probe.out" | head -n 1)"
        exit 0
    fi
    echo "gpu-check: FAIL: single --device cuda does not start (output above)"
    exit 1
fi
grep -m 1 -i -E 'cuda|nvidia' "$tmp/probe.out" | sed 's/^/  /'

# ---- 2. CUDA against the CPU ----------------------------------------------------------------
# train LAB N DEVICE DIR [options]: one training run of STEPS steps; single runs alone, every
# other lab through the launcher.
train() {
    lab=$1 n=$2 device=$3 dir=$4
    shift 4
    # $LAB_ARGS stays unquoted: a list of options, split on spaces.
    if [ "$lab" = single ]; then
        # shellcheck disable=SC2086
        run 900 "$dir.out" "$BUILD/labs/single" --device "$device" --steps "$STEPS" --run-dir "$dir" "$@" $LAB_ARGS
    else
        # shellcheck disable=SC2086
        run 900 "$dir.out" "$BUILD/shardlab" run "$lab" -n "$n" --ui none --device "$device" --steps "$STEPS" \
            --run-dir "$dir" "$@" $LAB_ARGS
    fi
}

if part ops; then
echo
echo "## the CUDA kernels against the CPU's, op by op (tests/gpu/test_cuda_ops.c)"
if run 900 "$tmp/ops-build.out" make "$BUILD/gpu/test_cuda_ops" BUILD="$BUILD" &&
    run 600 "$tmp/ops.out" "$BUILD/gpu/test_cuda_ops" && ! grep -q '^not ok' "$tmp/ops.out"; then
    echo "  $(grep -c '^ok' "$tmp/ops.out") kernel checks passed"
else
    grep '^not ok' "$tmp/ops.out" 2>/dev/null | sed 's/^/  /'
    compare fail --lab kernels --n 1 --run "$tmp/ops" --why "test_cuda_ops failed (log: $tmp/ops.out, $tmp/ops-build.out)"
fi
echo
echo "## the attention kernels at GPT-2 small's shape: flash vs naive, and each kernel timed (tests/gpu/bench_ops.c)"
if run 900 "$tmp/bench-ops-build.out" make "$BUILD/gpu/bench_ops" BUILD="$BUILD" &&
    run 600 "$tmp/bench-ops.out" "$BUILD/gpu/bench_ops"; then
    sed 's/^/  /' "$tmp/bench-ops.out"
else
    compare fail --lab kernels --n 1 --run "$tmp/bench-ops" --why "bench_ops failed (log: $tmp/bench-ops.out)"
fi
fi

train_lengths=$LENGTHS
part train || train_lengths=""
for STEPS in $train_lengths; do
    mkdir -p "$tmp/$STEPS"
    echo
    echo "## single: CUDA vs CPU, $STEPS steps, default config"
    ref=$tmp/$STEPS/single-cpu
    if train single 1 cpu "$ref"; then ref_ok=1; else
        ref_ok=0
        compare fail --lab single --n 1 --run "$ref" --why "the CPU reference run failed (log: $ref.out)"
    fi
    if train single 1 cuda "$tmp/$STEPS/single-cuda"; then
        if [ "$ref_ok" = 1 ]; then
            compare train --lab single --n 1 --run "$tmp/$STEPS/single-cuda" --ref "$ref" --mem-ref "$ref" --tol "$TOL"
        fi
    else
        compare fail --lab single --n 1 --run "$tmp/$STEPS/single-cuda" --why "single --device cuda failed (log: $tmp/$STEPS/single-cuda.out)"
    fi

    echo
    echo "## ddp: CUDA vs single on the CPU, same global batch (--batch 8 splits over 1, 2, 4 ranks)"
    for n in 1 2 4; do
        cpu=$tmp/$STEPS/ddp-cpu-$n cuda=$tmp/$STEPS/ddp-cuda-$n
        mem_ref=""
        if train ddp "$n" cpu "$cpu"; then mem_ref=$cpu; else
            compare fail --lab ddp --n "$n" --run "$cpu" --why "ddp --device cpu (the memory reference) failed (log: $cpu.out)"
        fi
        if ! train ddp "$n" cuda "$cuda"; then
            compare fail --lab ddp --n "$n" --run "$cuda" --why "ddp --device cuda failed (log: $cuda.out)"
        elif [ "$ref_ok" = 1 ] && [ -n "$mem_ref" ]; then
            compare train --lab ddp --n "$n" --run "$cuda" --ref "$ref" --mem-ref "$mem_ref" --tol "$TOL"
        elif [ "$ref_ok" = 1 ]; then
            compare train --lab ddp --n "$n" --run "$cuda" --ref "$ref" --tol "$TOL"
        fi
    done

    echo
    echo "## zero and fsdp: CUDA vs single on the CPU (the loss), vs the same run on the CPU (the memory)"
    # Stages 1-3 (fp32) and FSDP with prefetch at N = 2 and 4; stage 3's and FSDP's ranks hold
    # different shards, so their param_hash differs by design (--replicas 0). With --mixed
    # their loss reference is ZeRO stage 0 on one rank on the CPU (bf16 weights, as theirs).
    zref=$ref zref_ok=$ref_ok
    if [ "$mixed" = 1 ]; then
        zref=$tmp/$STEPS/zero-0-cpu-1
        if train zero 1 cpu "$zref" --stage 0; then zref_ok=1; else
            zref_ok=0
            compare fail --lab zero --n 1 --run "$zref" --why "the CPU reference zero --stage 0 -n 1 failed (log: $zref.out)"
        fi
    fi
    for n in 2 4; do
        for variant in "zero 1" "zero 2" "zero 3" "fsdp prefetch" "fsdp replicate"; do
            set -- $variant
            lab=$1 opt=$2
            if [ "$lab" = zero ]; then args="--stage $opt"; replicas=$([ "$opt" = 3 ] && echo 0 || echo 1)
            elif [ "$opt" = prefetch ]; then args="--prefetch"; replicas=0
            else args="--replicate 2"; replicas=0; fi  # (HSDP: a shard group's ranks hold different shards)
            cpu=$tmp/$STEPS/$lab-$opt-cpu-$n cuda=$tmp/$STEPS/$lab-$opt-cuda-$n
            mem_ref=""
            # shellcheck disable=SC2086
            if train "$lab" "$n" cpu "$cpu" $args; then mem_ref=$cpu; else
                compare fail --lab "$lab" --n "$n" --run "$cpu" --why "$lab $args --device cpu failed (log: $cpu.out)"
            fi
            # shellcheck disable=SC2086
            if ! train "$lab" "$n" cuda "$cuda" $args; then
                compare fail --lab "$lab" --n "$n" --run "$cuda" --why "$lab $args --device cuda failed (log: $cuda.out)"
            elif [ "$zref_ok" = 1 ] && [ -n "$mem_ref" ]; then
                compare train --lab "$lab" --n "$n" --run "$cuda" --ref "$zref" --mem-ref "$mem_ref" --tol "$TOL" \
                    --replicas "$replicas"
            fi
        done
    done

    echo
    echo "## pp: CUDA vs single on the CPU (the loss), vs the same run on the CPU (the memory)"
    # The default model has 2 blocks, so 2 stages; each stage holds other layers (--replicas 0).
    # The activations and gradients between stages go through batched NCCL send/recv.
    for sched in gpipe 1f1b; do
        cpu=$tmp/$STEPS/pp-$sched-cpu cuda=$tmp/$STEPS/pp-$sched-cuda
        mem_ref=""
        if train pp 2 cpu "$cpu" --schedule "$sched" --micro 4; then mem_ref=$cpu; else
            compare fail --lab pp --n 2 --run "$cpu" --why "pp --schedule $sched --device cpu failed (log: $cpu.out)"
        fi
        if ! train pp 2 cuda "$cuda" --schedule "$sched" --micro 4; then
            compare fail --lab pp --n 2 --run "$cuda" --why "pp --schedule $sched --device cuda failed (log: $cuda.out)"
        elif [ "$ref_ok" = 1 ] && [ -n "$mem_ref" ]; then
            compare train --lab pp --n 2 --run "$cuda" --ref "$ref" --mem-ref "$mem_ref" --tol "$TOL" --replicas 0
        fi
    done

    echo
    echo "## tp: CUDA vs single on the CPU (the loss), vs the same run on the CPU (the memory)"
    # t = 2 and 4 (the default model has 4 heads), and --sp at t = 2; the ranks' replicated
    # parameters hash the same (param_hash), so --replicas 1.
    for variant in "2 plain" "4 plain" "2 sp"; do
        set -- $variant
        n=$1 args=$([ "$2" = sp ] && echo --sp || true)
        cpu=$tmp/$STEPS/tp-$n-$2-cpu cuda=$tmp/$STEPS/tp-$n-$2-cuda
        mem_ref=""
        # shellcheck disable=SC2086
        if train tp "$n" cpu "$cpu" $args; then mem_ref=$cpu; else
            compare fail --lab tp --n "$n" --run "$cpu" --why "tp $args --device cpu failed (log: $cpu.out)"
        fi
        # shellcheck disable=SC2086
        if ! train tp "$n" cuda "$cuda" $args; then
            compare fail --lab tp --n "$n" --run "$cuda" --why "tp $args --device cuda failed (log: $cuda.out)"
        elif [ "$ref_ok" = 1 ] && [ -n "$mem_ref" ]; then
            compare train --lab tp --n "$n" --run "$cuda" --ref "$ref" --mem-ref "$mem_ref" --tol "$TOL" --replicas 1
        fi
    done

    echo
    echo "## ckpt: CUDA vs single on the CPU (the loss), vs the same run on the CPU (the memory)"
    # Activation checkpointing on 2 data-parallel ranks, over the other labs' 2 blocks (--layers
    # 2: the single-rank reference's model; ckpt's own default is 4): every (each block
    # recomputed on its own) and sqrt (one segment of 2). Each rank holds a replica, so
    # --replicas 1.
    for policy in every sqrt; do
        cpu=$tmp/$STEPS/ckpt-$policy-cpu cuda=$tmp/$STEPS/ckpt-$policy-cuda
        mem_ref=""
        if train ckpt 2 cpu "$cpu" --policy "$policy" --layers 2; then mem_ref=$cpu; else
            compare fail --lab ckpt --n 2 --run "$cpu" --why "ckpt --policy $policy --device cpu failed (log: $cpu.out)"
        fi
        if ! train ckpt 2 cuda "$cuda" --policy "$policy" --layers 2; then
            compare fail --lab ckpt --n 2 --run "$cuda" --why "ckpt --policy $policy --device cuda failed (log: $cuda.out)"
        elif [ "$ref_ok" = 1 ] && [ -n "$mem_ref" ]; then
            compare train --lab ckpt --n 2 --run "$cuda" --ref "$ref" --mem-ref "$mem_ref" --tol "$TOL" --replicas 1
        fi
    done

    echo
    echo "## cp: CUDA vs single on the CPU (the loss), vs the same run on the CPU (the memory)"
    # Ring attention over 1 to 4 ranks, both layouts, and --kv all-gather: the ring's kernels
    # (labs/common/cuda/ring.cu) and its hand-overs through grouped NCCL send/recv, queued on
    # NCCL's stream beside the attention kernel (or through the shm backend when the ranks share
    # a GPU). The weights are replicated (--replicas 1).
    for variant in "1 zigzag ring" "2 zigzag ring" "4 zigzag ring" "3 contiguous ring" "2 zigzag all-gather"; do
        # shellcheck disable=SC2086
        set -- $variant
        n=$1 args="--layout $2 --kv $3"
        cpu=$tmp/$STEPS/cp-$n-$2-$3-cpu cuda=$tmp/$STEPS/cp-$n-$2-$3-cuda
        mem_ref=""
        # shellcheck disable=SC2086
        if train cp "$n" cpu "$cpu" $args; then mem_ref=$cpu; else
            compare fail --lab cp --n "$n" --run "$cpu" --why "cp $args --device cpu failed (log: $cpu.out)"
        fi
        # shellcheck disable=SC2086
        if ! train cp "$n" cuda "$cuda" $args; then
            compare fail --lab cp --n "$n" --run "$cuda" --why "cp $args --device cuda failed (log: $cuda.out)"
        elif [ "$ref_ok" = 1 ] && [ -n "$mem_ref" ]; then
            compare train --lab cp --n "$n" --run "$cuda" --ref "$ref" --mem-ref "$mem_ref" --tol "$TOL" --replicas 1
        fi
    done

    echo
    echo "## shard: CUDA vs the same strategy on the CPU (the loss and the memory)"
    # Each strategy at N = 2; the replicas' param_hash agree (--replicas 1). Dispatch's parts are host
    # buffers, staged through the GPU by NCCL send/recv (or the shm backend when the ranks share one).
    for strategy in slice sampler dispatch; do
        cpu=$tmp/$STEPS/shard-$strategy-cpu cuda=$tmp/$STEPS/shard-$strategy-cuda
        if ! train shard 2 cpu "$cpu" --strategy "$strategy"; then
            compare fail --lab shard --n 2 --run "$cpu" --why "shard --strategy $strategy --device cpu failed (log: $cpu.out)"
        elif ! train shard 2 cuda "$cuda" --strategy "$strategy"; then
            compare fail --lab shard --n 2 --run "$cuda" --why "shard --strategy $strategy --device cuda failed (log: $cuda.out)"
        else
            compare train --lab shard --n 2 --run "$cuda" --ref "$cpu" --mem-ref "$cpu" --tol "$TOL" --replicas 1
        fi
    done

    echo
    echo "## distributed checkpoints: saved by zero on CUDA, resumed on CUDA and on the CPU, at other N, by other labs"
    # zero --stage 2 -n 2 on CUDA trains STEPS/2 steps of the STEPS-step schedule (--decay-steps)
    # and saves; each resumed run trains the rest
    # and is compared with single on the CPU from the step after the checkpoint (common/runfiles/dcp.h: the
    # state is device- and layout-neutral fp32, so any lab at any N on any device goes on from it).
    half=$((STEPS / 2))
    ck=$tmp/$STEPS/dcp-ck
    if train zero 2 cuda "$tmp/$STEPS/dcp-save" --stage 2 --steps "$half" --save-every "$half" --ckpt "$ck" \
        --decay-steps "$STEPS"; then
        for spec in "ddp 2 cuda" "tp 2 cuda" "single 1 cuda" "zero 4 cpu"; do
            # shellcheck disable=SC2086
            set -- $spec
            dir=$tmp/$STEPS/dcp-$1-$2-$3
            if train "$1" "$2" "$3" "$dir" --resume "$ck"; then
                [ "$ref_ok" = 1 ] && compare train --lab "resume:$1" --n "$2" --run "$dir" --ref "$ref" --tol "$TOL" \
                    --first-step $((half + 1)) --replicas 1
            else
                compare fail --lab "resume:$1" --n "$2" --run "$dir" --why "$1 --resume on $3 failed (log: $dir.out)"
            fi
        done
    else
        compare fail --lab dcp --n 2 --run "$tmp/$STEPS/dcp-save" --why "zero --save-every on cuda failed (log: $tmp/$STEPS/dcp-save.out)"
    fi
done

echo
echo "## collectives on CUDA: every result checked against a serial computation"
collective_ranks="1 2 4"
part collectives || collective_ranks=""
for n in $collective_ranks; do
    dir=$tmp/collectives-$n
    if run 900 "$dir.out" "$BUILD/shardlab" run collectives -n "$n" --ui none --device cuda --max-bytes 64M \
        --run-dir "$dir"; then
        compare collectives --n "$n" --run "$dir"
    else
        compare fail --lab collectives --n "$n" --run "$dir" --why "collectives -n $n --device cuda failed (log: $dir.out)"
    fi
done

# ---- 3. a training step against PyTorch -----------------------------------------------------
echo
echo "## a training step: shardlab (single --device cuda) vs PyTorch eager, fp32, TF32 off"
# time_vs_torch LABEL SHARDLAB_RUN WARMUP STEPS [torch_step.py options]: PyTorch's median
# ms/step on the run's config, and the ratio.
time_vs_torch() {
    label=$1 dir=$2 warmup=$3 steps=$4
    shift 4
    out=$tmp/torch-$label.out
    if run 900 "$out" python3 "$here/torch_step.py" --warmup "$warmup" --steps "$steps" --shardlab-run "$dir" "$@"; then
        sed 's/^/  /' "$out"
        ms=$(awk '/^torch_ms_per_step/ {print $2}' "$out")
        compare timing --label "$label" --run "$dir" --torch-ms "$ms" --skip "$warmup"
    else
        echo "  (no PyTorch timing for $label: see above)"
    fi
}

if ! part timing; then
    echo "  (left out: PARTS has no timing)"
elif ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    echo "  python3 has no torch with CUDA: the PyTorch timings are left out"
else
    first=${LENGTHS%% *}
    if [ -d "$tmp/$first/single-cuda" ]; then
        time_vs_torch single-small "$tmp/$first/single-cuda" 10 "$first"
    fi
    if [ "$LARGE" = 1 ]; then
        # GPT-2 small's shape (C=768, NH=12, L=12, T=1024) on 8 sequences: where a GPU is busy.
        # $big stays unquoted below: it is a list of options, split on spaces.
        big="--dim 768 --heads 12 --layers 12 --seq 1024 --batch 8"
        # shellcheck disable=SC2086
        if run 900 "$tmp/single-large.out" "$BUILD/labs/single" --device cuda --steps 30 --run-dir "$tmp/single-large" $big $LAB_ARGS
        then
            # shellcheck disable=SC2086
            time_vs_torch single-large "$tmp/single-large" 5 20 $big
            # shellcheck disable=SC2086
            time_vs_torch single-large-sdpa "$tmp/single-large" 5 20 $big --attn sdpa
        else
            echo "  (single --device cuda at the large config failed: no timing)"
        fi
    fi
fi

# ---- 4. the table ---------------------------------------------------------------------------
echo
echo "## summary: loss vs single on the CPU (steps 1-10 within $TOL_FIRST, later steps within $TOL), memory vs the CPU,"
echo "## collectives' #wrong;"
echo "## ms/step is rank 0's median; 'vs torch' is shardlab/PyTorch (lower is faster)"
python3 "$here/compare.py" table --results "$results"
status=$?
if [ "$status" = 0 ] && [ "$KEEP" != 1 ]; then keep=0; fi
exit "$status"
