#!/bin/sh
# profile.sh — where a training step's GPU time goes: every kernel of one step of
# `single --device cuda`, timed by Nsight Compute, summed by kernel and by kind, beside the
# step's time without the profiler (so the time the GPU waits for the host shows too).
#
# Run it on a machine with a GPU and Nsight Compute:   sh tests/gpu/profile.sh   (make profile-gpu)
# Settings (environment):
#   SHAPE=gpt2              gpt2: GPT-2 small's shape (--dim 768 --heads 12 --layers 12 --seq 1024
#                           --batch 8); default: the labs' default model
#   PRECISIONS="fp32 tf32 bf16"   fp32; TF32 (--tf32); bf16 (--mixed)
#   LAB_ARGS=               more options for single (e.g. "--attn naive")
#   STEP=4                  the step profiled (the steps before it are the warm-up)
#   TOP=25                  kernels listed by name (the rest in one row)
#   NCU=                    the ncu to use (default: ncu on PATH, else CUDA's, else Nsight's own folder)
#   LIMIT=300               seconds any one command may take; OUT_DIR=, BUILD=build as bench.sh's
#   DRY_RUN=1               print every command, run none (after the GPU check)
#
# What it does, for each precision:
#   1. `single --device cuda --steps STEP+3` without the profiler: the step's median wall clock
#      (ms.step) and work (ms.work) after STEP-1 warm-up steps;
#   2. the same run under `ncu --profile-from-start off --metrics gpu__time_duration.sum`, with
#      SHARDLAB_PROFILE_STEP=STEP: the lab starts the profiler's capture as step STEP begins and
#      stops it when the step's event is written (lab.h), so ncu times exactly that step's
#      kernels, the param_hash between steps included, each launched alone (ncu serializes
#      them, so the run is slower; each kernel's own duration is what it reports);
#   3. tests/gpu/profile_table.py: the tables, and the work minus the kernels' sum: the GPU idle
#      inside the step, waiting for launches, copies and the host's reads.
# ncu reads the GPU's counters: on a machine where it cannot (some containers), step 2 fails
# and says so. About a minute per precision at GPT-2 small's shape on an H100.
# Exit status: 0 every precision profiled (or SKIP), 1 one failed or the build did.
set -u
BUILD=${BUILD:-build}
SHAPE=${SHAPE:-gpt2}
PRECISIONS=${PRECISIONS:-fp32 tf32 bf16}
LAB_ARGS=${LAB_ARGS:-}
STEP=${STEP:-4}
TOP=${TOP:-25}
LIMIT=${LIMIT:-300}
DRY_RUN=${DRY_RUN:-0}

cd "$(dirname "$0")/../.." || exit 1
here=tests/gpu
# shellcheck source=tests/gpu/lib.sh
. "$here/lib.sh"  # need_gpu, run

case $STEP in '' | *[!0-9]*) echo "profile-gpu: STEP=$STEP is not a step number (2 or more)"; exit 2 ;; esac
[ "$STEP" -ge 2 ] || { echo "profile-gpu: STEP=$STEP: profile step 2 or later (the first step sets cuBLAS up)"; exit 2; }
case $SHAPE in
default) dims="" ;;
gpt2) dims="--dim 768 --heads 12 --layers 12 --seq 1024 --batch 8" ;;
*) echo "profile-gpu: SHAPE: '$SHAPE' is not default or gpt2"; exit 2 ;;
esac
for prec in $PRECISIONS; do
    case $prec in fp32 | tf32 | bf16) ;; *) echo "profile-gpu: PRECISIONS: '$prec' is not fp32, tf32 or bf16"; exit 2 ;; esac
done

# ---- a GPU, ncu, the build --------------------------------------------------------------------
need_gpu profile
ncu=${NCU:-}
if [ -n "$ncu" ] && ! [ -x "$ncu" ]; then
    echo "profile-gpu: NCU=$ncu is not an executable (unset it to look for ncu on PATH and in CUDA's folders)"
    exit 2
fi
if [ -z "$ncu" ]; then
    for candidate in "$(command -v ncu 2>/dev/null)" /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
        if [ -n "$candidate" ] && [ -x "$candidate" ]; then ncu=$candidate; break; fi
    done
fi
if [ -z "$ncu" ]; then
    echo "SKIP: no Nsight Compute (ncu) on PATH, in /usr/local/cuda/bin or /opt/nvidia/nsight-compute: set NCU=/path/to/ncu"
    exit 0
fi
out=${OUT_DIR:-}
if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/shardlab-profile-gpu-XXXXXX") || { echo "profile-gpu: mktemp failed"; exit 1; }
fi
mkdir -p "$out/runs" || exit 1
echo "# shardlab profile-gpu: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nvidia-smi -L | head -n 1), $ncu, logs in $out"

if ! run "$out/make.log" make --no-print-directory -j"$(nproc)" cuda-status "$BUILD/labs/single" BUILD="$BUILD" DEPS=0; then
    echo "profile-gpu: the build failed (log: $out/make.log)"
    exit 1
fi
if [ "$DRY_RUN" != 1 ] && ! grep -q '^CUDA:.*building the CUDA backend' "$out/make.log"; then
    grep '^CUDA:' "$out/make.log" | sed 's/^/  /'
    echo "profile-gpu: FAIL: the build has no CUDA backend (the CUDA: line above)"
    exit 1
fi

# ---- each precision ---------------------------------------------------------------------------
failed=0
steps=$((STEP + 3))
for prec in $PRECISIONS; do
    case $prec in fp32) opt="" ;; tf32) opt="--tf32" ;; bf16) opt="--mixed" ;; esac
    dir=$out/runs/$SHAPE-$prec
    echo
    # shellcheck disable=SC2086  # $dims, $opt and $LAB_ARGS are lists of options
    if ! run "$dir.out" "$BUILD/labs/single" --device cuda --steps "$steps" --run-dir "$dir" $dims $opt $LAB_ARGS; then
        echo "profile-gpu: $prec: single failed (log: $dir.out)"
        failed=1
        continue
    fi
    csv=$out/$SHAPE-$prec.csv
    # shellcheck disable=SC2086
    if ! run "$out/$SHAPE-$prec-ncu.out" env SHARDLAB_PROFILE_STEP="$STEP" "$ncu" --profile-from-start off \
        --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$csv" \
        "$BUILD/labs/single" --device cuda --steps "$STEP" --run-dir "$dir-ncu" $dims $opt $LAB_ARGS; then
        echo "profile-gpu: $prec: single under ncu failed (logs: $out/$SHAPE-$prec-ncu.out, $csv)"
        failed=1
        continue
    fi
    [ "$DRY_RUN" = 1 ] && continue
    python3 "$here/profile_table.py" --csv "$csv" --run "$dir" --skip $((STEP - 1)) --top "$TOP" \
        --title "$SHAPE, $prec${opt:+ ($opt)}${LAB_ARGS:+ $LAB_ARGS}, step $STEP" || failed=1
done
exit "$failed"
