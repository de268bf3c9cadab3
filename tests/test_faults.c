// test_faults.c — faults from outside the process, each ending in a clear message and a
// non-zero exit: never a hang, never a run that says "ok" when it is not.
//
// Usage: test_faults LABS SAN_LABS SHARDLAB   (optimized labs, sanitized labs, the optimized
//                                             shardlab)
//
// What it proves:
//   1. a full disk: a lab whose run directory is on a filesystem that fills up (a tmpfs of a
//      few pages in a mount namespace of its own where the test may make one; a file size
//      limit, RLIMIT_FSIZE with SIGXFSZ ignored, where it may not) stops with its error on
//      stderr and exit 1, at every point of the run where the disk may fill: writing
//      meta.json, the start event, a step, the end. Today's failure was a second error while
//      reporting the first (the hook that writes the error event fails too, and die() waited
//      forever for itself); broken on purpose (die_at waiting on re-entry, as it did): every
//      the smallest size (the disk full at meta.json) hangs, caught by the deadline. The same under `shardlab run`: the
//      launcher names the rank and its error and exits 1.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shelltest.h"
#include "test.h"

static const char *labs_dir, *san_labs, *shardlab;
static char tmp[256];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Whether this test may mount a tmpfs in a mount namespace of its own (root, or user
// namespaces allowed).
static int can_mount_tmpfs(void) {
    int st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/probe' && unshare -rm sh -c \"mount -t tmpfs -o size=8k tmpfs '%s/probe'\"", tmp,
             tmp);
    free(test_sh(NULL, cmd, &st));
    return st == 0;
}

// `cmd` (a shell command line) run with its run directory DIR on a disk that is full after
// `bytes`: a tmpfs of that size mounted at DIR for it alone, or (tmpfs 0) every file it
// writes limited to `bytes`. Its output and exit status (124: still running after 30 s,
// killed); *secs: how long it ran.
static char *on_full_disk(int tmpfs, long bytes, const char *dir, const char *cmd, int *status, double *secs) {
    char full[8000];
    if (tmpfs)
        snprintf(full, sizeof full,
                 "mkdir -p '%s' && timeout -s KILL 30 unshare -rm sh -c \"mount -t tmpfs -o size=%ld tmpfs '%s' && "
                 "exec %s\"",
                 dir, bytes, dir, cmd);
    else
        snprintf(full, sizeof full, "mkdir -p '%s' && timeout -s KILL 30 prlimit --fsize=%ld sh -c \"trap '' XFSZ; exec %s\"",
                 dir, bytes, cmd);
    double t0 = now_s();
    char *out = test_sh(NULL, full, status);
    *secs = now_s() - t0;
    if (*status == 137) *status = 124;
    return out;
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

// 1. A full disk, at every point of the run.
static void check_full_disk(void) {
    int tmpfs = can_mount_tmpfs();
    printf("# the full disk: %s\n", tmpfs ? "a tmpfs of a few pages" : "RLIMIT_FSIZE (no tmpfs may be mounted here)");
    // A 3-step run writes meta.json (~700 bytes), rank-0.log (~1.2 KB), rank-0.jsonl (~5.4 KB)
    // and summary.json: tmpfs counts whole pages (4 KiB), five in all, so each size below
    // fills the disk at another file; the file size limit counts bytes, per file.
    static const long pages[] = {4096, 8192, 12288, 16384};
    static const long bytes[] = {100, 700, 1500, 5000};
    const char *says = tmpfs ? "No space left on device" : "File too large";
    for (int i = 0; i < 4; i++) {
        long size = tmpfs ? pages[i] : bytes[i];
        char dir[400], cmd[2000];
        snprintf(dir, sizeof dir, "%s/full-%ld", tmp, size);
        snprintf(cmd, sizeof cmd, "'%s/single' --steps 3 --run-dir '%s/run'", san_labs, dir);
        int st;
        double secs;
        char *out = on_full_disk(tmpfs, size, dir, cmd, &st, &secs);
        // Proves: the lab ends, exit 1, with the cause on stderr, wherever the disk filled up.
        // Broken: die_at waiting for itself when its hook fails: exit 124 (killed at 30 s).
        EXPECT(st == 1 && strstr(out, says) && count(out, "error:") >= 1,
               "single on a disk full after %ld bytes: exit 1 in %.1f s with '%s' (exit %d)%s%.800s", size, secs, says, st,
               st == 1 ? "" : ": ", st == 1 ? "" : out);
        free(out);
    }
    // The launcher: rank 0's error named, exit 1, in a few seconds.
    char dir[400], cmd[2000];
    snprintf(dir, sizeof dir, "%s/full-launch", tmp);
    snprintf(cmd, sizeof cmd, "'%s' run ddp -n 2 --ui none --steps 5 --run-dir '%s/run'", shardlab, dir);
    int st;
    double secs;
    char *out = on_full_disk(tmpfs, tmpfs ? 4096 : 100, dir, cmd, &st, &secs);
    EXPECT(st == 1 && strstr(out, "shardlab: rank ") && strstr(out, says),
           "shardlab run ddp -n 2 on a full disk: a rank's error named, exit 1 in %.1f s (exit %d)%s%.800s", secs, st,
           st == 1 ? "" : ": ", st == 1 ? "" : out);
    free(out);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_faults LABS SAN_LABS SHARDLAB\n");
        return 2;
    }
    labs_dir = argv[1], san_labs = argv[2], shardlab = argv[3];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-faults-XXXXXX");
    if (!mkdtemp(tmp)) return printf("not ok - cannot make a temporary folder\n"), 1;
    check_full_disk();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("# removing %s failed\n", tmp);
    return test_done();
}
