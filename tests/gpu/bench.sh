#!/bin/sh
# bench.sh — a training step on one GPU, shardlab and PyTorch side by side: ms per step, peak
# memory, and the ratios shardlab/PyTorch.
#
# Run it on a machine with a GPU:   sh tests/gpu/bench.sh        (or: make bench-gpu)
# Settings (environment):
#   SHAPES="default gpt2"   default: the labs' default model (B=8 T=64 L=2 C=64 NH=4);
#                           gpt2: GPT-2 small's shape (--dim 768 --heads 12 --layers 12 --seq 1024
#                           --batch 8; V=256, 86.2M parameters)
#   ROWS="shardlab eager-sdpa eager-manual compile"   which implementations: shardlab's single
#                           --device cuda; PyTorch eager with F.scaled_dot_product_attention,
#                           eager with the attention written out as shardlab's naive does, and
#                           torch.compile (with sdpa)
#   PRECISIONS="fp32 tf32 bf16"   fp32 with TF32 off; TF32 (shardlab --tf32); bf16 (PyTorch:
#                           autocast; shardlab: --mixed, when single --help lists it)
#   ATTN="naive flash"      shardlab's --attn values (when single --help lacks --attn: one row
#                           without it, and a line saying so)
#   WARMUP=, STEPS=         untimed, then timed steps per row (default 5 and 20 at default,
#                           3 and 5 at gpt2)
#   LIMIT=150               seconds any one command may take (then it is stopped: a failed row)
#   OUT_DIR=                where the logs, the runs, results.jsonl and table.md go (default:
#                           a new temp dir, kept); BUILD=build
#   DRY_RUN=1               print every command, run none (after the GPU check)
#
# What it does:
#   1. finds a GPU (nvidia-smi -L; none: "SKIP: ..." and exit 0), builds build/labs/single with
#      the Makefile's CUDA detection (make cuda-status; DEPS=0: no Debian package needed);
#   2. per shape, shardlab: `single --device cuda --steps WARMUP+STEPS` for each --attn and
#      precision; its run directory gives ms per step (the median of ms.step, the wall clock,
#      after the warm-up) and the peak (mem.peak: the counting allocator's high-water mark);
#   3. per shape, PyTorch (tests/gpu/torch_step.py, one process per implementation, every
#      precision in it): the median wall-clock step after the warm-up, each step bracketed by
#      torch.cuda.synchronize(), and torch.cuda.max_memory_allocated;
#   4. prints every row as one markdown table, last (tests/gpu/bench_table.py), and writes it
#      to OUT_DIR/table.md. A row that fails or times out is a FAIL line in it; the rest run.
# About 3 minutes on an H100 with every row (torch.compile's compilations are most of it).
# Exit status: 0 every row ran (or SKIP), 1 a row failed or the build did.
set -u
BUILD=${BUILD:-build}
SHAPES=${SHAPES:-default gpt2}
ROWS=${ROWS:-shardlab eager-sdpa eager-manual compile}
PRECISIONS=${PRECISIONS:-fp32 tf32 bf16}
ATTN=${ATTN:-naive flash}
LIMIT=${LIMIT:-150}
DRY_RUN=${DRY_RUN:-0}

cd "$(dirname "$0")/../.." || exit 1
here=tests/gpu
# shellcheck source=tests/gpu/lib.sh
. "$here/lib.sh"  # need_gpu, run

# ---- 1. a GPU, the build --------------------------------------------------------------------
need_gpu time
out=${OUT_DIR:-}
if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/shardlab-bench-gpu-XXXXXX") || { echo "bench-gpu: mktemp failed"; exit 1; }
fi
mkdir -p "$out/runs" || exit 1
results=$out/results.jsonl
: >"$results"
echo "# shardlab bench-gpu: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nvidia-smi -L | head -n 1), logs in $out"

table() { [ "$DRY_RUN" = 1 ] || python3 "$here/bench_table.py" "$@" --results "$results"; }

if ! run "$out/make.log" make --no-print-directory -j"$(nproc)" cuda-status "$BUILD/labs/single" BUILD="$BUILD" DEPS=0; then
    echo "bench-gpu: the build failed (log: $out/make.log)"
    exit 1
fi
if [ "$DRY_RUN" != 1 ]; then
    grep '^CUDA:' "$out/make.log" | sed 's/^/  /'
    if ! grep -q '^CUDA:.*building the CUDA backend' "$out/make.log"; then
        echo "bench-gpu: FAIL: this machine has $gpus GPU(s) but the build has no CUDA backend (the CUDA: line above)"
        exit 1
    fi
fi

# What this single offers: --attn (flash and naive attention) and --mixed (bf16) on CUDA.
help=$("$BUILD/labs/single" --help 2>/dev/null)
case $help in *--attn*) has_attn=1 ;; *) has_attn=0 ;; esac
case $help in *--mixed*) has_mixed=1 ;; *) has_mixed=0 ;; esac
[ "$has_attn" = 1 ] || echo "# single --help has no --attn: shardlab runs its one attention (naive), the --attn rows are skipped"
[ "$has_mixed" = 1 ] || echo "# single --help has no --mixed: shardlab's bf16 rows are skipped"
torch_ok=1
if [ "$DRY_RUN" != 1 ] && ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    torch_ok=0
    echo "# python3 has no torch with CUDA: the PyTorch rows fail"
fi

# ---- 2. and 3. each shape ---------------------------------------------------------------------
for shape in $SHAPES; do
    case $shape in
    default) dims="" warmup=${WARMUP:-5} steps=${STEPS:-20} ;;
    gpt2) dims="--dim 768 --heads 12 --layers 12 --seq 1024 --batch 8" warmup=${WARMUP:-3} steps=${STEPS:-5} ;;
    *) echo "bench-gpu: SHAPES: '$shape' is not default or gpt2"; exit 2 ;;
    esac
    echo
    echo "## $shape${dims:+ ($dims)}: $warmup warm-up steps, then $steps timed"
    for row in $ROWS; do
        case $row in
        shardlab)
            attns=$([ "$has_attn" = 1 ] && echo "$ATTN" || echo "-")
            for attn in $attns; do
                impl=shardlab attn_opt=""
                [ "$attn" = - ] || impl="shardlab $attn" attn_opt="--attn $attn"
                for prec in $PRECISIONS; do
                    case $prec in
                    fp32) opt="" ;;
                    tf32) opt="--tf32" ;;
                    bf16) [ "$has_mixed" = 1 ] || continue; opt="--mixed" ;;
                    *) echo "bench-gpu: PRECISIONS: '$prec' is not fp32, tf32 or bf16"; exit 2 ;;
                    esac
                    dir=$out/runs/$shape-shardlab-$attn-$prec
                    # shellcheck disable=SC2086  # $dims, $attn_opt and $opt are lists of options
                    if run "$dir.out" "$BUILD/labs/single" --device cuda --steps $((warmup + steps)) --run-dir "$dir" \
                        $dims $attn_opt $opt; then
                        table shardlab --shape "$shape" --impl "$impl" --precision "$prec" --run "$dir" --skip "$warmup"
                    else
                        table fail --shape "$shape" --impl "$impl" --precision "$prec" --why "single failed (log: $dir.out)"
                    fi
                done
            done
            ;;
        eager-sdpa | eager-manual | compile)
            case $row in
            eager-sdpa) impl="torch eager sdpa" opts="--attn sdpa" ;;
            eager-manual) impl="torch eager manual" opts="--attn manual" ;;
            compile) impl="torch.compile sdpa" opts="--attn sdpa --compile" ;;
            esac
            precs=$(echo "$PRECISIONS" | tr ' ' ',')
            log=$out/$shape-torch-$row.out
            if [ "$torch_ok" = 0 ]; then
                table missing --shape "$shape" --impl "$impl" --precision "$precs" --why "python3 has no torch with CUDA"
                continue
            fi
            # shellcheck disable=SC2086
            run "$log" python3 "$here/torch_step.py" $dims $opts --warmup "$warmup" --steps "$steps" --precision "$precs" \
                --results "$results" --shape "$shape"
            [ "$DRY_RUN" = 1 ] || grep -E '^torch_(ms_per_step|peak_bytes)|failed' "$log" | sed 's/^/  /'
            table missing --shape "$shape" --impl "$impl" --precision "$precs" --why "torch_step.py stopped first (log: $log)"
            ;;
        *) echo "bench-gpu: ROWS: '$row' is not shardlab, eager-sdpa, eager-manual or compile"; exit 2 ;;
        esac
    done
done

# ---- 4. the table -----------------------------------------------------------------------------
[ "$DRY_RUN" = 1 ] && exit 0
echo
echo "## ms/step: median wall clock per step after the warm-up; peak MiB: shardlab's mem.peak, PyTorch's"
echo "## torch.cuda.max_memory_allocated (neither counts the CUDA context); ratios: shardlab / PyTorch at the"
echo "## same shape and precision (lower is better); shardlab's bf16 is --mixed, PyTorch's is autocast; the note:"
echo "## shardlab's median ms.work (forward, backward, update) and the share of the step outside it (logging,"
echo "## the param_hash: issue 24's target is 2% at most)"
table table --markdown "$out/table.md"
status=$?
echo "(the table is also in $out/table.md)"
exit "$status"
