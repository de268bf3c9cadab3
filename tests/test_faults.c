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
//      forever for itself); broken on purpose (die_at waiting on re-entry, as it did): the
//      smallest size (the disk full at meta.json) hangs, caught by the deadline. The same
//      under `shardlab run`: the launcher names the rank and its error and exits 1.
//   2. two jobs on one port: two ddp jobs of 2 ranks started by hand, the README's way
//      (RANK, WORLD_SIZE, MASTER_PORT unset: both on the default port), their 4 ranks
//      started in each of the 12 orders that begin with job A (A0 B0 A1 B1, A0 B1 B0 A1, ...),
//      in a /dev/shm of their own (a tmpfs in a mount namespace; else on a port of the
//      test's own, which takes the same path). Once with arguments that differ (--seed), once
//      with the very same arguments. No rank trains with another job's: the job whose rank 0
//      came first trains alone (its last param_hash is that of the job run alone), every
//      other rank stops with exit 1 and a message saying why. Before, a second rank 0 removed
//      the first one's segment, and a late rank waited for a new one: ranks paired across the
//      jobs, and all four ended ok, each pair mixing the two jobs' data.
//   3. two jobs saving into one --ckpt folder at once (another seed each, saves slowed so that
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

// ---- 2. two jobs on one port ----------------------------------------------------------------

// Starts the ranks of jobs A and B (2 ranks each) in `order` ("A0 B1 B0 A1"), each after the
// one before by 50 ms (after the first rank 0, once its name is there, so that it is the
// first): lab, out folder, port ("" for the default), order, A's arguments, B's. Each rank's
// stdout, stderr and exit status go to OUT/<rank>.out, .err and .rc.
static const char *cross_script =
    "lab=$1 out=$2 port=$3 order=$4 args_a=$5 args_b=$6\n"
    "unset MASTER_PORT MASTER_ADDR LOCAL_RANK LOCAL_WORLD_SIZE PMIX_NAMESPACE OMPI_MCA_ess_base_jobid SLURM_JOB_ID\n"
    "unset SLURM_STEP_ID SHARDLAB_SHM SHARDLAB_SHM_FD SHARDLAB_RUN_DIR SHARDLAB_TEST_HANG\n"
    "[ -n \"$port\" ] && export MASTER_PORT=$port\n"
    "name=/dev/shm/shardlab-$(id -u)-${port:-29500}\n"
    "first=1\n"
    "for p in $order; do\n"
    "  job=${p%?} r=${p#?}\n"
    "  if [ $job = A ]; then args=$args_a; else args=$args_b; fi\n"
    "  (RANK=$r WORLD_SIZE=2 SHARDLAB_TIMEOUT_S=20 SHARDLAB_RUNS=$out/runs-$job \"$lab\" $args >$out/$p.out 2>$out/$p.err\n"
    "   echo $? >$out/$p.rc) &\n"
    "  if [ $r = 0 ] && [ $first = 1 ]; then\n"
    "    first=0 i=0\n"
    "    while [ ! -e $name ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done\n"
    "  fi\n"
    "  sleep 0.05\n"
    "done\n"
    "wait\n";

static int private_shm;  // the jobs get a /dev/shm of their own (else a port of their own)
static char cross_port[16];

// The file's text (malloc'd, "" if it cannot be read).
static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    size_t cap = 1 << 20, n = 0;
    char *text = calloc(1, cap);
    if (f) n = fread(text, 1, cap - 1, f), fclose(f);
    text[n] = 0;
    return text;
}

// What one rank of a crossing run did.
typedef struct {
    int rc;           // its exit status (-1: none)
    int ok;           // its run log ends with {"ev":"end",...,"status":"ok"}
    char hash[17];    // its last step's param_hash ("" if none)
    char *err;        // its stderr
} CrossRank;

static void cross_rank(const char *out, const char *who, CrossRank *c) {
    char path[700];
    memset(c, 0, sizeof *c);
    snprintf(path, sizeof path, "%s/%s.rc", out, who);
    char *rc = slurp(path);
    c->rc = *rc ? atoi(rc) : -1;
    free(rc);
    snprintf(path, sizeof path, "%s/%s.err", out, who);
    c->err = slurp(path);
    // Its run directory, from its first line: "ddp: ...; run directory <dir>".
    snprintf(path, sizeof path, "%s/%s.out", out, who);
    char *text = slurp(path), *at = strstr(text, "; run directory ");
    if (at) {
        at += strlen("; run directory ");
        at[strcspn(at, "\n")] = 0;
        snprintf(path, sizeof path, "%s/rank-%c.jsonl", at, who[1]);
        char *log = slurp(path), *h = NULL;
        for (char *p = log; (p = strstr(p, "\"param_hash\":\"")); p++) h = p + strlen("\"param_hash\":\"");
        if (h) snprintf(c->hash, sizeof c->hash, "%.16s", h);
        char *end = strstr(log, "{\"ev\":\"end\"");
        c->ok = end && strstr(end, "\"status\":\"ok\"") != NULL;
        free(log);
    }
    free(text);
}

// Runs `order` with jobs A (args_a) and B (args_b) in a fresh folder; fills rank[] for A0 A1 B0 B1.
static void cross_run(const char *tag, const char *order, const char *args_a, const char *args_b, CrossRank rank[4]) {
    char out[400], script[400], cmd[3000];
    snprintf(out, sizeof out, "%s/cross-%s", tmp, tag);
    snprintf(script, sizeof script, "%s/cross.sh", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", out, out);
    if (system(cmd) != 0) printf("# %s failed\n", cmd);
    char run[1500];
    snprintf(run, sizeof run, "sh '%s' '%s/ddp' '%s' '%s' '%s' '%s' '%s'", script, labs_dir, out,
             private_shm ? "" : cross_port, order, args_a, args_b);
    if (private_shm) snprintf(cmd, sizeof cmd, "unshare -rm sh -c \"mount -t tmpfs tmpfs /dev/shm && %s\"", run);
    else snprintf(cmd, sizeof cmd, "%s", run);
    int st;
    free(test_sh(NULL, cmd, &st));
    const char *who[4] = {"A0", "A1", "B0", "B1"};
    for (int i = 0; i < 4; i++) cross_rank(out, who[i], &rank[i]);
}

static void cross_free(CrossRank rank[4]) {
    for (int i = 0; i < 4; i++) free(rank[i].err);
}

// The 12 orders of A0 A1 B0 B1 that start with a rank of job A (the other 12 swap the jobs).
static int cross_orders(char orders[12][16]) {
    const char *who[4] = {"A0", "A1", "B0", "B1"};
    int n = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++)
                for (int d = 0; d < 4; d++) {
                    int used = 1 << a | 1 << b | 1 << c | 1 << d;
                    if (used != 15 || who[a][0] != 'A') continue;
                    snprintf(orders[n++], 16, "%s %s %s %s", who[a], who[b], who[c], who[d]);
                }
    return n;
}

// Whether a rank stopped as one turned away must: exit 1, and `says` in what it wrote.
static int stopped_saying(const CrossRank *r, const char *says) { return r->rc == 1 && !r->ok && strstr(r->err, says); }

static int trained(const CrossRank *r, const char *ref) { return r->rc == 0 && r->ok && strcmp(r->hash, ref) == 0; }

static void check_two_jobs_on_one_port(void) {
    private_shm = can_mount_tmpfs();
    snprintf(cross_port, sizeof cross_port, "%d", 42000 + (int)(getpid() % 20000));
    printf("# two jobs on one port: %s\n", private_shm ? "the default port, in a /dev/shm of their own"
                                                      : "no /dev/shm of their own may be mounted here: a port of the test's own");
    char script[400];
    snprintf(script, sizeof script, "%s/cross.sh", tmp);
    test_put_file(script, cross_script, 0);
    const char *args_a = "--steps 5 --seed 1", *args_b = "--steps 5 --seed 2";
    // What each job trains alone: its last param_hash.
    CrossRank alone_a[4], alone_b[4];
    cross_run("alone-a", "A0 A1", args_a, args_b, alone_a);
    cross_run("alone-b", "B0 B1", args_a, args_b, alone_b);
    char ref_a[17], ref_b[17];
    snprintf(ref_a, sizeof ref_a, "%s", alone_a[0].hash);
    snprintf(ref_b, sizeof ref_b, "%s", alone_b[2].hash);
    // Proves: the references are real runs, and the two seeds train apart.
    EXPECT(trained(&alone_a[1], ref_a) && trained(&alone_b[3], ref_b) && *ref_a && strcmp(ref_a, ref_b) != 0,
           "each job alone trains, both ranks ok with one param_hash (A %s, B %s)", ref_a, ref_b);
    cross_free(alone_a), cross_free(alone_b);

    char orders[12][16], crossed[2][300] = {"", ""};
    int n = cross_orders(orders);
    for (int same = 0; same < 2; same++) {
        for (int i = 0; i < n; i++) {
            const char *order = orders[i];
            CrossRank r[4];  // A0 A1 B0 B1
            char tag[32];
            snprintf(tag, sizeof tag, "%s-%d", same ? "same" : "seed", i);
            cross_run(tag, order, args_a, same ? args_a : args_b, r);
            // The job whose rank 0 came first holds the name: X; the other is Y.
            int x = strstr(order, "A0") < strstr(order, "B0") ? 0 : 2, y = 2 - x;
            const char *ref = x == 0 || same ? ref_a : ref_b;
            const char *taken = "is taken: another job uses its shared memory";
            // Crossed: a rank ended ok holding what its own job does not train (other seeds),
            // or both jobs ended ok (the same arguments: each must have trained with the other's).
            int mixed = 0, all_ok = 1;
            for (int k = 0; k < 4; k++) {
                mixed |= r[k].rc == 0 && r[k].ok && strcmp(r[k].hash, k < 2 || same ? ref_a : ref_b) != 0;
                all_ok &= r[k].rc == 0 && r[k].ok;
            }
            if (same ? all_ok : mixed)
                snprintf(crossed[same] + strlen(crossed[same]), sizeof crossed[same] - strlen(crossed[same]), "%s%s",
                         *crossed[same] ? ", " : "", order);
            int ok;
            char detail[1400];
            snprintf(detail, sizeof detail, "exits A0 %d A1 %d B0 %d B1 %d; A0: %.300s A1: %.300s B0: %.300s B1: %.300s",
                     r[0].rc, r[1].rc, r[2].rc, r[3].rc, r[0].err, r[1].err, r[2].err, r[3].err);
            if (!same) {
                // Proves: X trains alone and right (its param_hash is that of X alone); Y's rank
                // 0 stops naming the job that has the port and the fix, Y's rank 1 naming the
                // argument that differs. Broken: today's shm_attach, which removed X's segment
                // when Y's rank 0 came: ranks paired across the jobs.
                ok = trained(&r[x], ref) && trained(&r[x + 1], ref) && stopped_saying(&r[y], taken) &&
                     strstr(r[y].err, "HINT: start every rank of this job with MASTER_PORT=") &&
                     stopped_saying(&r[y + 1], "is another one: its arguments differ from this rank's at argument 4: '--seed");
                EXPECT(ok, "two jobs (--seed 1, --seed 2) on one port, started %s: job %c trains alone, job %c's ranks stop "
                           "with the reason%s%s",
                       order, 'A' + x / 2, 'A' + y / 2, ok ? "" : ": ", ok ? "" : detail);
            } else {
                // The same lab, world and arguments: nothing tells the jobs' ranks apart. Proves:
                // X's rank 0 trains with whichever rank 1 reaches it first, and rightly (the same
                // training); the other rank 1 and Y's rank 0 stop with the reason. So never both
                // jobs end ok. Broken: rank 0 removing the name once every rank is in (the old
                // lifetime): a late rank 1 waits for a new segment, Y's rank 0 makes it, and
                // both pairs train across the jobs.
                int one = trained(&r[1], ref) ? 1 : 3, other = one == 1 ? 3 : 1;
                ok = trained(&r[x], ref) && trained(&r[one], ref) && stopped_saying(&r[y], taken) &&
                     stopped_saying(&r[other], "has its rank 1 already: process ");
                EXPECT(ok, "the same job twice on one port, started %s: %c0 trains with %c1, the other two stop with the "
                           "reason%s%s",
                       order, 'A' + x / 2, one == 1 ? 'A' : 'B', ok ? "" : ": ", ok ? "" : detail);
            }
            cross_free(r);
        }
    }
    // The two summaries. Proves: in no order did a rank that ended ok train with a rank of the
    // other job, and never did two jobs that ran at once both end ok. Broken (shm_attach as it
    // was: rank 0 removed a segment in use, and the name went once everyone joined): with other
    // seeds, ranks ended ok having trained across the jobs in 6 of the 12 orders; with the same
    // arguments both jobs ended ok in 10.
    EXPECT(!*crossed[0], "two jobs with other seeds: in none of the %d orders does a rank end ok having trained with the "
                         "other job's (crossed: %s)", n, *crossed[0] ? crossed[0] : "none");
    EXPECT(!*crossed[1], "the same job twice: in none of the %d orders do both jobs end ok (both ok: %s)", n,
           *crossed[1] ? crossed[1] : "none");
}

// ---- 3. two jobs, one checkpoint folder -------------------------------------------------------

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
    check_two_jobs_on_one_port();
    check_shared_ckpt();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("# removing %s failed\n", tmp);
    return test_done();
}
