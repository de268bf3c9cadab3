// memcpy_bw.c — the ceiling for `make bench-collectives`: how fast this machine copies memory.
//
// Run it:   build/bench/memcpy_bw [MIB]        (default 64)
//
// Every shared-memory collective is, at bottom, copies (and adds) through memory: a byte that
// goes from one rank to another is written into the shared channel and read out again. One
// core's memcpy of a buffer much larger than the caches is therefore the scale against which
// the collectives' bus bandwidth is read. Prints the median of 9 copies of MIB MiB, after one
// untimed copy that faults the pages in, as GB/s (1e9) of bytes copied; each copy reads and
// writes that many bytes, so the memory itself moves twice as much.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 64;
    if (mib < 1 || mib > 4096) {
        fprintf(stderr, "usage: memcpy_bw [MIB]  (1 to 4096, default 64)\n");
        return 2;
    }
    size_t bytes = (size_t)mib << 20;
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) {
        fprintf(stderr, "memcpy_bw: out of memory for 2 x %ld MiB\n", mib);
        return 1;
    }
    memset(src, 1, bytes);
    memcpy(dst, src, bytes);  // fault the destination's pages in
    enum { RUNS = 9 };
    double t[RUNS];
    for (int i = 0; i < RUNS; i++) {
        double t0 = now_s();
        memcpy(dst, src, bytes);
        t[i] = now_s() - t0;
        src[i] = dst[bytes - 1 - i];  // keep the copies observable
    }
    qsort(t, RUNS, sizeof t[0], compare);
    printf("# memcpy of %ld MiB, median of %d: %.3f ms\n", mib, RUNS, t[RUNS / 2] * 1e3);
    printf("memcpy_gbps %.2f\n", (double)bytes / t[RUNS / 2] / 1e9);
    free(src);
    free(dst);
    return 0;
}
