// mpi_collectives.c — the peer for `make bench-collectives`: Open MPI's MPI_Allreduce or
// MPI_Alltoall, timed the way labs/03-collectives/collectives.c times dist_all_reduce and
// dist_all_to_all.
//
// Run it:   mpicc -O3 tests/bench/mpi_collectives.c -o build/bench/mpi_collectives
//           mpirun -np 4 build/bench/mpi_collectives [--coll all_reduce|all_to_all]
//                  [--min-bytes 1K] [--max-bytes 64M] [--factor 2] [--iters 20] [--warmup 5]
//
// Same sizes (bytes rounded down to whole floats; all_to_all: to p equal blocks, at least one
// float each), same data (zeros; all_reduce in place), same measurement: a barrier, then
// --iters calls timed on every rank; the row reports the slowest rank's mean. algbw = size /
// time (GB/s, 1e9), busbw = algbw x 2(p-1)/p (all_reduce) or (p-1)/p (all_to_all), as in
// nccl-tests. Before timing, one call on known data checks the result: the all-reduce's sum
// of r + 1 over ranks, the all-to-all's block q from rank q holding 64 q + r.
// Output: '#' lines are comments; every other line is size count type time(us) algbw busbw
// #wrong, the columns of labs/03-collectives/collectives.c.
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// "4096", "64K", "64M", "1G" (powers of 1024).
static uint64_t parse_bytes(const char *text) {
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10, end++;
    else if (*end == 'M' || *end == 'm') v <<= 20, end++;
    else if (*end == 'G' || *end == 'g') v <<= 30, end++;
    if (end == text || *end || v == 0) {
        fprintf(stderr, "mpi_collectives: '%s' is not a size (e.g. 4096, 64K, 16M)\n", text);
        exit(2);
    }
    return v;
}

// One timed call, on zeros: all_reduce in place, all_to_all from buf to recv.
static void call(int a2a, float *buf, float *recv, size_t n, int b) {
    if (a2a) MPI_Alltoall(buf, b, MPI_FLOAT, recv, b, MPI_FLOAT, MPI_COMM_WORLD);
    else MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    uint64_t min_bytes = 1024, max_bytes = 64 << 20;
    int factor = 2, iters = 20, warmup = 5, a2a = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--coll") && (!strcmp(argv[i + 1], "all_reduce") || !strcmp(argv[i + 1], "all_to_all")))
            a2a = !strcmp(argv[i + 1], "all_to_all");
        else if (!strcmp(argv[i], "--min-bytes")) min_bytes = parse_bytes(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-bytes")) max_bytes = parse_bytes(argv[i + 1]);
        else if (!strcmp(argv[i], "--factor")) factor = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else {
            if (rank == 0) fprintf(stderr, "mpi_collectives: unknown option or value '%s'\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (factor < 2 || iters < 1 || warmup < 0) MPI_Abort(MPI_COMM_WORLD, 2);
    size_t max_count = max_bytes / sizeof(float) ? max_bytes / sizeof(float) : 1;
    // (all_to_all rounds a size below p floats up to p)
    float *buf = malloc((max_count + (size_t)p) * sizeof(float)), *recv = malloc((max_count + (size_t)p) * sizeof(float));
    if (!buf || !recv) MPI_Abort(MPI_COMM_WORLD, 1);

    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(version, &len);
    if (rank == 0) {
        printf("# mpi_collectives: %d ranks, %s; %.*s\n", p,
               a2a ? "MPI_Alltoall(MPI_FLOAT)" : "MPI_Allreduce(MPI_IN_PLACE, MPI_FLOAT, MPI_SUM)",
               (int)strcspn(version, "\n"), version);
        printf("# %10s %12s %6s %10s %12s %12s %7s\n", "size", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
               "#wrong");
    }
    double wrong_total = 0;
    size_t last = 0;
    for (uint64_t bytes = min_bytes; bytes <= max_bytes; bytes *= (uint64_t)factor) {
        size_t n = bytes < sizeof(float) ? 1 : bytes / sizeof(float);
        if (a2a) n = n < (size_t)p ? (size_t)p : n - n % (size_t)p;  // p equal blocks
        if (n == last) continue;
        last = n;
        int b = (int)(n / (size_t)p);
        double wrong = 0;
        if (a2a) {  // block q of rank r's input holds 64 r + q: block q of its output, 64 q + r
            for (size_t i = 0; i < n; i++) buf[i] = (float)(64 * rank + (int)(i / (size_t)b));
            MPI_Alltoall(buf, b, MPI_FLOAT, recv, b, MPI_FLOAT, MPI_COMM_WORLD);
            for (size_t i = 0; i < n; i++) wrong += recv[i] != (float)(64 * (int)(i / (size_t)b) + rank);
        } else {  // every element must be 1 + 2 + ... + p
            for (size_t i = 0; i < n; i++) buf[i] = (float)(rank + 1);
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            for (size_t i = 0; i < n; i++) wrong += buf[i] != (float)(p * (p + 1) / 2);
        }
        memset(buf, 0, n * sizeof(float));
        for (int i = 0; i < warmup; i++) call(a2a, buf, recv, n, b);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) call(a2a, buf, recv, n, b);
        double mine = (MPI_Wtime() - t0) / iters * 1e6, slowest;
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        wrong_total += wrong;
        double algbw = (double)(n * sizeof(float)) / (slowest * 1e3), busbw = algbw * (a2a ? 1.0 : 2.0) * (p - 1) / p;
        if (rank == 0)
            printf("  %10zu %12zu %6s %10.2f %12.2f %12.2f %7.0f\n", n * sizeof(float), n, "float", slowest, algbw, busbw,
                   wrong);
    }
    if (rank == 0) printf("# Out of bounds values : %.0f %s\n", wrong_total, wrong_total == 0 ? "OK" : "FAILED");
    free(buf), free(recv);
    MPI_Finalize();
    return wrong_total == 0 ? 0 : 1;
}
