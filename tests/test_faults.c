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
//   2. two jobs saving into one --ckpt folder at once (another seed each, saves slowed so that
//      they overlap): whatever the folder ends up holding, a resume from it either takes one
//      job's state whole (the manifest's job's: every rank file's data is that job's, as its
//      run alone saved it) or is refused naming the file. Broken (each rank checksummed its
//      file by reading it back, and no file named its save): most trials resumed one job's
//      manifest with the other's weights, or half of each.
#include <errno.h>
#include <stdint.h>
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

// 2. Two jobs, one checkpoint folder.

// The data section of a safetensors file (after its 8-byte length and header), malloc'd.
static char *st_data(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char len8[8];
    uint64_t h = 0;
    char *data = NULL;
    if (fread(len8, 1, 8, f) == 8) {
        for (int i = 7; i >= 0; i--) h = h << 8 | len8[i];
        fseek(f, 0, SEEK_END);
        long end = ftell(f);
        if (end >= 8 && h <= (uint64_t)end - 8 && fseek(f, (long)(8 + h), SEEK_SET) == 0) {
            *n = (size_t)end - 8 - (size_t)h;
            data = malloc(*n + 1);
            if (data && fread(data, 1, *n, f) != *n) free(data), data = NULL;
        }
    }
    fclose(f);
    return data;
}

// Whether rank r's file of step 3 in checkpoint a holds the same data as in checkpoint b.
static int same_data(const char *a, const char *b, int r) {
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/step-00000003/rank-%d-of-2.safetensors", a, r);
    snprintf(pb, sizeof pb, "%s/step-00000003/rank-%d-of-2.safetensors", b, r);
    size_t na = 0, nb = 0;
    char *da = st_data(pa, &na), *db = st_data(pb, &nb);
    int same = da && db && na == nb && memcmp(da, db, na) == 0;
    free(da);
    free(db);
    return same;
}

#define SHARED_TRIALS 6

static void check_shared_ckpt(void) {
    // Each job alone first: the state each saves at step 3, for the trials to compare with.
    char ref[2][400], cmd[4000];
    for (int j = 0; j < 2; j++) {
        snprintf(ref[j], sizeof ref[j], "%s/alone-%d", tmp, j + 1);
        snprintf(cmd, sizeof cmd, "'%s' run ddp -n 2 --ui none --steps 3 --save-every 3 --seed %d --ckpt '%s' --run-dir '%s-run'",
                 shardlab, j + 1, ref[j], ref[j]);
        int st;
        free(test_sh(NULL, cmd, &st));
        EXPECT(st == 0, "shared folder: job %d (--seed %d) alone saves step 3 (exit %d)", j + 1, j + 1, st);
    }
    int whole = 0, refused = 0, mixed = 0, other = 0;
    for (int t = 0; t < SHARED_TRIALS; t++) {
        char ck[400];
        snprintf(ck, sizeof ck, "%s/shared-%d", tmp, t);
        // Both jobs at once; each save pauses 150 ms before and after writing its files, so
        // that one job's renames land inside the other's save.
        snprintf(cmd, sizeof cmd,
                 "for s in 1 2; do SHARDLAB_TEST_SLOW_SAVE=150 timeout -s KILL 60 '%s' run ddp -n 2 --ui none --steps 3 "
                 "--save-every 3 --seed $s --ckpt '%s' --run-dir '%s-job$s' >/dev/null 2>&1 & done; wait",
                 shardlab, ck, ck);
        int st;
        free(test_sh(NULL, cmd, &st));
        snprintf(cmd, sizeof cmd, "timeout -s KILL 60 '%s' run ddp -n 2 --ui none --steps 4 --resume '%s' --run-dir '%s-resume'",
                 shardlab, ck, ck);
        char *out = test_sh(NULL, cmd, &st);
        char manifest[500];
        snprintf(manifest, sizeof manifest, "%s/manifest.json", ck);
        FILE *f = fopen(manifest, "rb");
        char text[1 << 15] = "";
        size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
        text[n] = 0;
        if (f) fclose(f);
        const char *seed = strstr(text, "\"seed\":");
        int job = seed ? atoi(seed + 7) : 0;
        if (st == 0 && (job == 1 || job == 2) && same_data(ck, ref[job - 1], 0) && same_data(ck, ref[job - 1], 1))
            whole++;
        else if (st == 0)
            mixed++, printf("# trial %d: resumed the manifest of job %d with rank 0's data %s and rank 1's %s\n", t, job,
                            same_data(ck, ref[0], 0) ? "job 1's" : same_data(ck, ref[1], 0) ? "job 2's" : "neither's",
                            same_data(ck, ref[0], 1) ? "job 1's" : same_data(ck, ref[1], 1) ? "job 2's" : "neither's");
        else if (st == 2 && strstr(out, "checkpoint refused: ") && (strstr(out, ".safetensors: ") || strstr(out, "manifest.json: ")))
            refused++;
        else
            other++, printf("# trial %d: the resume exited %d: %.300s\n", t, st, out);
        free(out);
    }
    printf("# shared folder: %d of %d resumed one job's whole state, %d refused naming the file\n", whole, SHARED_TRIALS,
           refused);
    // Proves: two jobs in one folder never make a checkpoint that passes with a mix of their
    // states. (The folder's lock may stop the second job first: then the first's is whole.)
    EXPECT(mixed == 0 && other == 0, "shared folder: no resume took a mix of two jobs' states (%d of %d did; %d "
           "ended otherwise)", mixed, SHARED_TRIALS, other);
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
    check_shared_ckpt();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("# removing %s failed\n", tmp);
    return test_done();
}
