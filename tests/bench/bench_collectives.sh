#!/bin/sh
# bench_collectives.sh — shardlab's all-reduce (or all-to-all) next to Open MPI's, on this machine.
#
# Run it:   make bench-collectives [COLL=all_to_all]
#           BUILD=build sh tests/bench/bench_collectives.sh     (after building build/labs/collectives)
# Settings (environment): COLL=all_reduce (or all_to_all), NS="2 4" rank counts, REPEATS=3,
# MIN=1K, MAX=64M, ITERS=20, WARMUP=5.
#
# For each N it runs, REPEATS times and interleaved (so a change in the machine's load hits
# both alike):
#   - build/labs/collectives --colls $COLL, its ranks started by hand (RANK, WORLD_SIZE,
#     MASTER_PORT), as a shell or mpirun would start them;
#   - tests/bench/mpi_collectives.c under mpirun: MPI_Allreduce or MPI_Alltoall on the same
#     sizes, same data (zeros), timed the same way (slowest rank's mean over ITERS calls).
# Then, per size, the median bus bandwidth (busbw = algbw x 2(N-1)/N for all-reduce, x (N-1)/N
# for all-to-all, nccl-tests) of each, and the ratio shardlab / MPI, against the target: 1.3
# from 1 MiB for the all-reduce, 1.0 from 64 KiB for the all-to-all. The ceiling: one core's
# memcpy bandwidth (memcpy_bw.c).
#
# Open MPI is needed only here. Missing, it is installed with apt-get when we are root;
# otherwise the script prints the command and exits 1. MPI runs on one node through shared
# memory: --mca pml ob1 --mca btl self,vader (self,sm on Open MPI 5, where vader became sm).
#
# A benchmark, not a test: it asserts nothing about speed and exits 0 when every run worked.
# Output: '#' lines are comments; every other line is a row of whitespace-separated columns.
set -u
BUILD=${BUILD:-build}
COLL=${COLL:-all_reduce}
NS=${NS:-"2 4"}
REPEATS=${REPEATS:-3}
MIN=${MIN:-1K}
MAX=${MAX:-64M}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
LAB=$BUILD/labs/collectives
MPI_BIN=$BUILD/bench/mpi_collectives
MEMCPY_BIN=$BUILD/bench/memcpy_bw

die() {
    echo "bench-collectives: $*" >&2
    exit 1
}

# ---- Open MPI ------------------------------------------------------------------------------
if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
    echo "bench-collectives: Open MPI (mpicc, mpirun) is missing; the comparison needs it"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bench-collectives: installing: apt-get install -y openmpi-bin libopenmpi-dev"
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev; }; then
            die "apt-get could not install openmpi-bin libopenmpi-dev"
        fi
    else
        echo "bench-collectives: run as root, then again:"
        echo "  apt-get update && apt-get install -y openmpi-bin libopenmpi-dev"
        exit 1
    fi
fi
[ -x "$LAB" ] || die "$LAB is missing: run 'make bench-collectives' (it builds it)"
[ -x "$MEMCPY_BIN" ] || die "$MEMCPY_BIN is missing: run 'make bench-collectives' (it builds it)"
case "$COLL" in
    all_reduce) TARGET=1.3 FROM=1048576 ;;
    all_to_all) TARGET=1.0 FROM=65536 ;;
    *) echo "bench-collectives: COLL=$COLL: all_reduce or all_to_all" >&2; exit 2 ;;
esac
mkdir -p "$BUILD/bench"
mpicc -O3 -Wall -Wextra tests/bench/mpi_collectives.c -o "$MPI_BIN" || die "mpicc tests/bench/mpi_collectives.c failed"
# Shared memory between the ranks of one node: the vader BTL (renamed sm in Open MPI 5).
if ompi_info --parsable 2>/dev/null | grep -q "mca:btl:vader"; then btl=self,vader; else btl=self,sm; fi
MPIRUN="mpirun --oversubscribe --allow-run-as-root --mca pml ob1 --mca btl $btl"
mpi_run() { timeout 900 mpirun --oversubscribe --allow-run-as-root --mca pml ob1 --mca btl "$btl" "$@"; }

tmp=$(mktemp -d /tmp/shardlab-bench-collectives-XXXXXX) || die "mktemp failed"
trap 'rm -rf "$tmp"' EXIT INT TERM

# ---- the runs ------------------------------------------------------------------------------
# shardlab on N ranks; writes "size busbw" lines to $2.
run_shardlab() {
    n=$1 out=$2 dir=$tmp/run-$$-$3
    port=$((20000 + ($$ + $3 * 7) % 20000))
    pids="" r=0
    while [ "$r" -lt "$n" ]; do
        env -u SHARDLAB_SHM -u SHARDLAB_RUN_DIR -u SHARDLAB_LOG_CAPTURED RANK="$r" WORLD_SIZE="$n" MASTER_PORT="$port" \
            "$LAB" --colls "$COLL" --min-bytes "$MIN" --max-bytes "$MAX" --iters "$ITERS" --warmup "$WARMUP" \
            --run-dir "$dir" >/dev/null 2>"$tmp/err-$r" &
        pids="$pids $!"
        r=$((r + 1))
    done
    failed=0
    for p in $pids; do wait "$p" || failed=1; done
    [ "$failed" = 0 ] || die "shardlab run on $n ranks failed: $(cat "$tmp"/err-*)"
    grep -v '^#' "$dir/rank-0.log" | awk '{print $1, $6}' >"$out"
    rm -rf "$dir"
}

# MPI's on N ranks; writes "size busbw" lines to $2.
run_mpi() {
    n=$1 out=$2
    mpi_run -np "$n" "$MPI_BIN" --coll "$COLL" --min-bytes "$MIN" --max-bytes "$MAX" --iters "$ITERS" \
        --warmup "$WARMUP" >"$tmp/mpi.out" 2>"$tmp/mpi.err" || die "mpirun on $n ranks failed: $(cat "$tmp/mpi.err")"
    grep -v '^#' "$tmp/mpi.out" | awk '{print $1, $6}' >"$out"
    [ -n "$mpi_version" ] || mpi_version=$(grep -o 'Open MPI v[0-9.]*' "$tmp/mpi.out" | head -n 1)
}

# "size value" lines from several files -> "size median" per size, in size order.
medians() {
    cat "$@" | awk '
        { n[$1]++; v[$1, n[$1]] = $2 }
        END {
            for (s in n) {
                k = n[s]
                for (i = 1; i <= k; i++) a[i] = v[s, i]
                for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
                m = k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
                print s, m
            }
        }' | sort -n
}

mpi_version=""
echo "# bench-collectives: $COLL busbw, shardlab (shm backend) vs Open MPI, on this machine"
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# sizes $MIN..$MAX x2, warmup $WARMUP, iters $ITERS, median of $REPEATS runs each; MPI: $MPIRUN"
"$MEMCPY_BIN" 64 >"$tmp/memcpy.out" || die "memcpy_bw failed"
memcpy=$(awk '/^memcpy_gbps/ {print $2}' "$tmp/memcpy.out")
echo "# ceiling: memcpy of 64 MiB on one core: $memcpy GB/s (median of 9)"

rep=1
while [ "$rep" -le "$REPEATS" ]; do
    for n in $NS; do
        run_shardlab "$n" "$tmp/shardlab-$n-$rep" "$rep$n"
        run_mpi "$n" "$tmp/mpi-$n-$rep"
    done
    rep=$((rep + 1))
done
echo "# MPI: $mpi_version; load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- the tables ----------------------------------------------------------------------------
for n in $NS; do
    medians "$tmp"/shardlab-"$n"-* >"$tmp/s-$n"
    medians "$tmp"/mpi-"$n"-* >"$tmp/m-$n"
    echo "#"
    echo "# N=$n: $COLL busbw (GB/s), median of $REPEATS; ratio = shardlab / MPI (target: >= $TARGET from $FROM bytes)"
    printf "# %10s %14s %10s %8s\n" "size" "shardlab" "MPI" "ratio"
    # Sizes both ran, in size order: "size shardlab mpi".
    awk 'NR == FNR { s[$1] = $2; next } $1 in s { print $1, s[$1], $2 }' "$tmp/s-$n" "$tmp/m-$n" |
        awk -v n="$n" -v coll="$COLL" -v target="$TARGET" -v from="$FROM" '
        { r = $3 > 0 ? $2 / $3 : 0; printf "  %10d %14.2f %10.2f %8.2f\n", $1, $2, $3, r
          if ($1 >= from && $1 <= 67108864) { big++; logsum += log(r > 0 ? r : 1e-9); if (r >= target) met++
                                              if (min == "" || r < min) min = r } }
        END { if (big) printf "# N=%d %s, from %d bytes: ratio min %.2f, geometric mean %.2f; >= %s at %d of %d sizes\n",
                              n, coll, from, min, exp(logsum / big), target, met, big }'
done
