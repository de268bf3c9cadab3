# shellcheck shell=sh
# lib.sh — what tests/gpu/bench.sh and profile.sh share, sourced from the checkout's root:
# the check for a GPU, and run(), which runs one command of theirs under a time limit.
# They set DRY_RUN (1: print the commands, run none) and LIMIT (seconds) before using run.

# need_gpu WHAT: the number of GPUs nvidia-smi lists, in $gpus; with none (no nvidia-smi, or
# it lists no GPU), "SKIP: ..." and exit 0: no GPU to WHAT.
need_gpu() {
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        echo "SKIP: no nvidia-smi on this machine: no NVIDIA driver, so no GPU to $1"
        exit 0
    fi
    gpus=$(timeout 60 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    if [ "$gpus" -eq 0 ]; then
        echo "SKIP: nvidia-smi lists no GPU"
        exit 0
    fi
}

# run LOG command...: print it; unless DRY_RUN, run it under LIMIT (SIGTERM, then SIGKILL 10 s
# later) with its output in LOG, and on failure show the end of LOG. Returns its status.
run() {
    log=$1
    shift
    echo "+ $*"
    [ "$DRY_RUN" = 1 ] && return 0
    timeout -k 10 "$LIMIT" "$@" >"$log" 2>&1 </dev/null
    status=$?
    if [ "$status" -ne 0 ]; then
        if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then echo "  timed out after $LIMIT s"
        else echo "  exit status $status"; fi
        tail -n 8 "$log" | sed 's/^/  | /'
    fi
    return "$status"
}
