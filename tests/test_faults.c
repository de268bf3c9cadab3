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
//      stderr and exit 1, at every point of the run where the disk may fill: its lock file,
//      meta.json, the start event, a step, the end. Today's failure was a second error while
//      reporting the first (the hook that writes the error event fails too, and die() waited
//      forever for itself); broken on purpose (die_at waiting on re-entry, as it did): the
//      smallest size (the disk full at its first file) hangs, caught by the deadline. The same
//      under `shardlab run`: the launcher names the rank and its error and exits 1;
//   2. the same disk under `shardlab grade`: a report it cannot write is a non-zero exit, and
//      no earlier report (a grade.json edited to 999 points) is left in its place, for one run
//      and for --labs; a reference that cannot run in the run's folder is named with the
//      disk's error, within seconds;
//   3. the same disk under the web server: a run it started (201) shows "error" on its page
//      within seconds, with the launcher's own words, not "running" forever;
//   4. one job per run directory, with ranks started by hand (as mpirun starts them): while
//      such a job runs, a second one (by hand, or through the launcher) is refused before it
//      writes a line, naming the job that holds it; a launcher's job keeps a lab started by
//      hand out the same way;
//   5. long paths: a run directory of ~3000 bytes works end to end (the lab, the launcher, the
//      grader and its reference), every file where its path says; one over PATH_MAX, or with a
//      part over NAME_MAX, is refused before anything starts, exit 2, its length named.
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "labtest.h"
#include "shelltest.h"
#include "test.h"

static const char *labs_dir, *san_labs, *shardlab;

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
// writes limited to `bytes`. `setup` (or NULL) runs before it, on that disk but without the
// limit: what cmd finds there; `after` (or NULL) after it, to look at what cmd left (a tmpfs
// goes with its namespace). Their output and cmd's exit status (124: still running after
// 30 s, killed); *secs: how long it all ran.
static char *on_full_disk_with(int tmpfs, long bytes, const char *dir, const char *setup, const char *cmd,
                               const char *after, int *status, double *secs) {
    char full[16000];
    const char *pre = setup ? setup : "true", *post = after ? after : "true";
    // (cmd's status, then `after`: "exit=N" is the last line but after's own output)
    if (tmpfs)
        snprintf(full, sizeof full,
                 "mkdir -p '%s' && timeout -s KILL 30 unshare -rm sh -c \"mount -t tmpfs -o size=%ld tmpfs '%s' && "
                 "(%s) && { %s; }; s=\\$?; %s; exit \\$s\"",
                 dir, bytes, dir, pre, cmd, post);
    else
        snprintf(full, sizeof full,
                 "mkdir -p '%s' && (%s) && { timeout -s KILL 30 prlimit --fsize=%ld sh -c \"trap '' XFSZ; exec %s\"; s=$?; "
                 "%s; exit $s; }",
                 dir, pre, bytes, cmd, post);
    double t0 = now_s();
    char *out = test_sh(NULL, full, status);
    *secs = now_s() - t0;
    if (*status == 137) *status = 124;
    return out;
}

static char *on_full_disk(int tmpfs, long bytes, const char *dir, const char *cmd, int *status, double *secs) {
    return on_full_disk_with(tmpfs, bytes, dir, NULL, cmd, NULL, status, secs);
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

// 1. A full disk, at every point of the run.
static void check_full_disk(int tmpfs) {
    printf("# the full disk: %s\n", tmpfs ? "a tmpfs of a few pages" : "RLIMIT_FSIZE (no tmpfs may be mounted here)");
    // A 3-step run writes its lock file (~150 bytes), meta.json (~700), rank-0.log (~1.2 KB),
    // rank-0.jsonl (~5.4 KB) and summary.json: tmpfs counts whole pages (4 KiB), six in all, so
    // each size below fills the disk at another file; the file size limit counts bytes, per file.
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
    // The launcher: rank 0's error named, exit 1, in a few seconds. (Under a file size limit,
    // one rank: the limit holds for the ranks' shared memory too, a memfd of some MiB; and 1000
    // bytes: the rank's log has room for its error, its event log not for a step.)
    char dir[400], cmd[2000];
    const char *ranks = tmpfs ? "ddp -n 2" : "single -n 1";
    snprintf(dir, sizeof dir, "%s/full-launch", tmp);
    snprintf(cmd, sizeof cmd, "'%s' run %s --ui none --steps 5 --run-dir '%s/run'", shardlab, ranks, dir);
    int st;
    double secs;
    char *out = on_full_disk(tmpfs, tmpfs ? 4096 : 1000, dir, cmd, &st, &secs);
    EXPECT(st == 1 && strstr(out, "shardlab: rank ") && strstr(out, says),
           "shardlab run %s on a full disk: a rank's error named, exit 1 in %.1f s (exit %d)%s%.800s", ranks, secs, st,
           st == 1 ? "" : ": ", st == 1 ? "" : out);
    free(out);
}

// 2. The grader on a full disk. A finished single run and its reference, made here (a disk
// with room), are what it grades there.
static void check_grade_full_disk(int tmpfs) {
    char graded[400], ref[400], empty[400];
    snprintf(graded, sizeof graded, "%s/graded", tmp);
    snprintf(ref, sizeof ref, "%s/graded-ref", tmp);
    snprintf(empty, sizeof empty, "%s/no-labs", tmp);
    char *a_run[] = {(char *)"", "--steps", "3", "--replay-every", "0", "--run-dir", graded, NULL};
    char *a_ref[] = {(char *)"", "--steps", "3", "--replay-every", "0", "--run-dir", ref, NULL};
    char single[400];
    snprintf(single, sizeof single, "%s/single", labs_dir);
    a_run[0] = a_ref[0] = single;
    int made = run(a_run, "graded") == 0 && run(a_ref, "graded-ref") == 0 && sh("mkdir -p '%s'", empty) == 0;
    const char *says = tmpfs ? "No space left on device" : "File too large";
    // The run copied onto the disk, an earlier report beside it (edited to 999 points), then
    // the disk filled (a tmpfs) or each file limited (300 bytes: the report is larger).
    char dir[400], stale[400], setup[4000], cmd[2000], after[600], fill[600] = "true";
    snprintf(dir, sizeof dir, "%s/full-grade", tmp);
    snprintf(stale, sizeof stale, "%s/stale-grade.json", tmp);
    write_text(stale, "w", "{\"points\":999,\"max\":5,\"failed\":0,\"pass\":true}\n");
    if (tmpfs) snprintf(fill, sizeof fill, "{ dd if=/dev/zero of='%s/fill' bs=1k 2>/dev/null; true; }", dir);
    // (on a tmpfs, only grade.json: the page it frees when the grader removes it holds the new
    // grade.json, and grade.xml finds none: the report half written, which must not stay)
    snprintf(setup, sizeof setup, "cp -r '%s/.' '%s/' && cp '%s' '%s/grade.json' && %s '%s' '%s/grade.xml' && %s", graded, dir,
             stale, dir, tmpfs ? "true" : "cp", stale, dir, fill);
    snprintf(after, sizeof after, "ls '%s' | grep -x 'grade.json\\|grade.xml' | sed 's/^/left: /'", dir);
    snprintf(cmd, sizeof cmd, "'%s' grade '%s' --ref '%s' --quiet", shardlab, dir, ref);
    int st;
    double secs;
    char *out = on_full_disk_with(tmpfs, tmpfs ? 64 << 10 : 300, dir, setup, cmd, after, &st, &secs);
    // Proves: a grade whose report cannot be written exits non-zero and leaves no report, not
    // even the earlier one (a grade.json of 999 points read as this grade). Broken variants:
    // today's exit 0 after "cannot write", and no removal of the report a failed write left.
    EXPECT(made && st == 1 && strstr(out, "cannot write grade.json and grade.xml") && strstr(out, "no report is left") &&
               !strstr(out, "left: ") && strstr(out, "every check passed") && secs < 30,
           "shardlab grade with every check passing on a full disk: exit 1 in %.1f s, no report left (exit %d)%s%.1500s", secs,
           st, st == 1 && !strstr(out, "left: ") ? "" : ": ", st == 1 && !strstr(out, "left: ") ? "" : out);
    free(out);

    // Its reference into the run's folder, on the same disk: named with the disk's error.
    snprintf(cmd, sizeof cmd, "'%s' grade '%s' --quiet", shardlab, dir);
    out = on_full_disk_with(tmpfs, tmpfs ? 64 << 10 : 300, dir, setup, cmd, after, &st, &secs);
    // Proves: the reference that could not run says why (the launcher's line with the rank's
    // error, not its last "stopped" line), the grade fails in seconds, and no report is left.
    EXPECT(st == 1 && strstr(out, "the reference run failed") && strstr(out, says) && !strstr(out, "left: ") && secs < 30,
           "shardlab grade on a full disk, its reference in the run's folder: exit 1 in %.1f s naming '%s' (exit %d)%s%.1500s",
           secs, says, st, st == 1 ? "" : ": ", st == 1 ? "" : out);
    free(out);

    // --labs: the programs missing (every configuration fails at once), the report into --out.
    snprintf(setup, sizeof setup, "cp '%s' '%s/grade.json' && %s", stale, dir, fill);
    snprintf(cmd, sizeof cmd, "'%s' grade --labs '%s' --only single --out '%s' --quiet", shardlab, empty, dir);
    out = on_full_disk_with(tmpfs, tmpfs ? 64 << 10 : 300, dir, setup, cmd, after, &st, &secs);
    // Proves: --labs says nothing was written when nothing was, and leaves no earlier report
    // for a loop to read (broken variant: write_outputs' result ignored, "written" printed).
    EXPECT(st == 1 && strstr(out, "cannot write grade.json and grade.xml") && !strstr(out, "written to") &&
               !strstr(out, "left: "),
           "shardlab grade --labs on a full disk: exit 1, no \"written\" line, no report left (exit %d)%s%.1500s", st,
           st == 1 ? "" : ": ", st == 1 ? "" : out);
    free(out);
}

// ---- a small HTTP client for the web server's API ----------------------------------------

static int web_port;
static char web_token[64];

// One request; the status, and the body in *body (malloc'd).
static int http(const char *method, const char *path, const char *json, char **body) {
    *body = calloc(1, 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)web_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) return close(fd), 0;
    char req[2048];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: http://127.0.0.1:%d\r\nX-Shardlab-Token: %s\r\n"
                     "Connection: close\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, web_port, web_port, web_token, json ? strlen(json) : 0, json ? json : "");
    if (write(fd, req, (size_t)n) != n) return close(fd), 0;
    size_t cap = 1 << 16, len = 0;
    char *all = malloc(cap);
    for (ssize_t k; (k = read(fd, all + len, cap - len - 1)) > 0;)
        if ((len += (size_t)k) + 1024 > cap) all = realloc(all, cap *= 2);
    close(fd);
    all[len] = 0;
    int status = 0;
    sscanf(all, "HTTP/1.%*d %d", &status);
    char *b = strstr(all, "\r\n\r\n");
    free(*body);
    *body = strdup(b ? b + 4 : "");
    free(all);
    return status;
}

// 3. The web server with its runs on a full disk: a run it starts fails at once; its page
// must say so (status "error", with the launcher's words), not "running" forever.
static void check_web_full_disk(int tmpfs) {
    char runs[400], cmd[2000], out_path[500];
    snprintf(runs, sizeof runs, "%s/web-runs", tmp);
    snprintf(out_path, sizeof out_path, "%s/web.out", tmp);
    if (sh("mkdir -p '%s'", runs) != 0) return;
    if (tmpfs)
        snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=8k tmpfs '%s' && SHARDLAB_RUNS='%s' exec '%s' web --port 0", runs, runs,
                 shardlab);
    else
        snprintf(cmd, sizeof cmd, "trap '' XFSZ; SHARDLAB_RUNS='%s' exec prlimit --fsize=300 '%s' web --port 0", runs, shardlab);
    char *argv_ns[] = {"/usr/bin/unshare", "-rm", "sh", "-c", cmd, NULL}, *argv_sh[] = {"/bin/sh", "-c", cmd, NULL};
    pid_t server = spawn_env(tmpfs ? argv_ns : argv_sh, "web", NULL);
    web_port = 0;
    for (double t0 = now_s(); now_s() - t0 < 20 && !web_port; usleep(50000)) {
        char *text = read_file(out_path, NULL);
        const char *at = text ? strstr(text, "http://127.0.0.1:") : NULL;
        if (at && strstr(at, "token=")) web_port = atoi(at + 17), sscanf(strstr(at, "token=") + 6, "%63[0-9a-f]", web_token);
        free(text);
    }
    char *body;
    int code = web_port ? http("POST", "/api/runs", "{\"lab\":\"single\",\"n\":1,\"steps\":5}", &body) : 0;
    char id[256] = "", path[400], status[32] = "";
    const char *at = strstr(body, "\"id\":\"");
    if (at) sscanf(at + 6, "%255[^\"]", id);
    free(body);
    double t0 = now_s(), secs = 0;
    while (id[0] && now_s() - t0 < 20) {
        snprintf(path, sizeof path, "/api/runs/%s", id);
        http("GET", path, NULL, &body);
        at = strstr(body, "\"status\":\"");
        if (at) sscanf(at + 10, "%31[^\"]", status);
        free(body);
        if (status[0] && strcmp(status, "running") != 0) break;
        usleep(100000);
    }
    secs = now_s() - t0;
    snprintf(path, sizeof path, "/api/runs/%s/events", id);
    http("GET", path, NULL, &body);
    const char *says = tmpfs ? "No space left on device" : "File too large";
    // Proves: the run's page says "error" within seconds, and its list of errors holds the
    // disk's error: on a tmpfs, where the ranks' logs have no room for theirs, in the
    // launcher's own words (broken variant: runs.c without the launcher's status and stderr:
    // "stopped", no word of why). (Under a file size limit the ranks' error events fit.)
    EXPECT(code == 201 && !strcmp(status, "error") && (!tmpfs || strstr(body, "\"by\":\"launcher\"")) && strstr(body, says) &&
               secs < 10,
           "a run the web starts on a full disk: 201, then status error in %.1f s with the launcher's words (%d, %s): %.600s",
           secs, code, status, body);
    free(body);
    if (server > 0) kill(server, SIGTERM), wait_status(server);
}

// ---- ranks by hand ---------------------------------------------------------------------

// Starts n ranks of bin by hand, as mpirun would (RANK, WORLD_SIZE, a MASTER_PORT of their
// own), with args after the program; their pids into pids, their output in tmp/<tag>.r<k>.*.
static void start_ranks(const char *bin, int n, const char *tag, char *const args[], pid_t *pids) {
    static int seq;
    char envs[8][3][64], t[64];
    int port = 31000 + (int)(getpid() % 15000) + 17 * seq++;
    for (int k = 0; k < n; k++) {
        char *argv[32] = {(char *)bin};
        int a = 1;
        for (int i = 0; args[i] && a < 31; i++) argv[a++] = args[i];
        argv[a] = NULL;
        snprintf(envs[k][0], 64, "RANK=%d", k);
        snprintf(envs[k][1], 64, "WORLD_SIZE=%d", n);
        snprintf(envs[k][2], 64, "MASTER_PORT=%d", port);
        char *env[] = {envs[k][0], envs[k][1], envs[k][2], "SHARDLAB_TIMEOUT_S=60", NULL};
        snprintf(t, sizeof t, "%s.r%d", tag, k);
        pids[k] = spawn_env(argv, t, env);
    }
}

static int starts_in(const char *dir, int r) {
    char path[600];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
    char *text = read_file(path, NULL);
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, "{\"ev\":\"start\"")); p++) n++;
    free(text);
    return n;
}

// 4. One job per run directory, for ranks started by hand: rank 0 holds it for its job and
// tells the others before any of them writes. Broken on purpose: lab_run_dir without the
// lock for ranks started by hand (rank 0 taking it, the others waiting on its word): the
// second job ran into the first's logs; caught.
static void check_hand_ranks(void) {
    char dir[400], ddp[400], single[400], steps_path[500];
    snprintf(dir, sizeof dir, "%s/hand-held", tmp);
    snprintf(ddp, sizeof ddp, "%s/ddp", labs_dir);
    snprintf(single, sizeof single, "%s/single", labs_dir);
    snprintf(steps_path, sizeof steps_path, "%s/rank-1.jsonl", dir);
    char *a_hold[] = {"--steps", "100000", "--run-dir", dir, NULL};
    pid_t holder[2];
    start_ranks(ddp, 2, "hand-holder", a_hold, holder);
    for (double t0 = now_s(); now_s() - t0 < 20; usleep(20000)) {  // (both ranks stepping)
        char *text = read_file(steps_path, NULL);
        int stepped = text && strstr(text, "{\"ev\":\"step\"");
        free(text);
        if (stepped) break;
    }
    // A second job by hand, told to --overwrite (what would remove the first's files).
    char *a_second[] = {"--steps", "3", "--overwrite", "--run-dir", dir, NULL};
    pid_t second[2];
    double t0 = now_s();
    start_ranks(ddp, 2, "hand-second", a_second, second);
    int s0 = wait_status(second[0]), s1 = wait_status(second[1]);
    double secs = now_s() - t0;
    char *e0 = captured("hand-second.r0", "err"), *e1 = captured("hand-second.r1", "err"), want[64];
    snprintf(want, sizeof want, "pid %d on ", (int)holder[0]);
    // Proves: every rank of the second job stops at once, rank 0 naming the holder (the first
    // job's rank 0), the others naming rank 0; the first job's logs hold its start alone.
    EXPECT(s0 == 1 && s1 == 1 && strstr(e0, "is in use by another job") && strstr(e0, want) &&
               strstr(e1, "rank 0 failed, so rank 1") && starts_in(dir, 0) == 1 && starts_in(dir, 1) == 1 && secs < 10,
           "ranks by hand into a run directory ranks by hand hold: refused in %.1f s (exit %d, %d), naming rank 0 of the job "
           "in it: %s | %s", secs, s0, s1, one_line(e0), one_line(e1));
    free(e0), free(e1);
    // The launcher, too.
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' run ddp -n 2 --ui none --steps 3 --overwrite --run-dir '%s' 2>&1", shardlab, dir);
    int st;
    char *out = test_sh(NULL, cmd, &st);
    // Proves: the launcher is refused before it starts a rank (nothing appended).
    EXPECT(st == 1 && strstr(out, "is in use by another job") && strstr(out, want) && starts_in(dir, 0) == 1,
           "shardlab run into a run directory ranks by hand hold: exit %d, naming their rank 0: %s", st, one_line(out));
    free(out);
    kill(holder[0], SIGTERM), kill(holder[1], SIGTERM);
    wait_status(holder[0]), wait_status(holder[1]);

    // A launcher's job keeps out a lab started by hand.
    char dir2[400];
    snprintf(dir2, sizeof dir2, "%s/launch-held", tmp);
    char *a_launch[] = {(char *)shardlab, "run", "ddp", "-n", "2", "--ui", "none", "--steps", "100000", "--run-dir", dir2, NULL};
    pid_t launcher = spawn_env(a_launch, "launch-holder", NULL);
    snprintf(steps_path, sizeof steps_path, "%s/rank-0.jsonl", dir2);
    for (double t1 = now_s(); now_s() - t1 < 20 && access(steps_path, F_OK) != 0; usleep(20000)) {}
    char *a_one[] = {single, "--steps", "3", "--overwrite", "--run-dir", dir2, NULL};
    st = run(a_one, "launch-second");
    char *err = captured("launch-second", "err");
    snprintf(want, sizeof want, "pid %d on ", (int)launcher);
    // Proves: the launcher holds the directory for its ranks: a lab by hand is refused, naming it.
    EXPECT(st == 1 && strstr(err, "is in use by another job") && strstr(err, want) && strstr(err, "run ddp -n 2"),
           "a lab by hand into a run directory a launcher holds: exit %d, naming the launcher: %s", st, one_line(err));
    free(err);
    kill(launcher, SIGTERM);
    wait_status(launcher);
}

// 5. Long paths: none cut, and those too long refused up front.
static void check_long_paths(void) {
    // ~3000 bytes: 12 folders of 240 bytes each under tmp.
    char part[241], dir[4200], dir2[4300];
    memset(part, 'p', 240), part[240] = 0;
    int n = snprintf(dir, sizeof dir, "%s/long", tmp);
    for (int i = 0; i < 12; i++) n += snprintf(dir + n, sizeof dir - (size_t)n, "/%s", part);
    snprintf(dir2, sizeof dir2, "%s/l", dir);
    n += snprintf(dir + n, sizeof dir - (size_t)n, "/run");
    char single[400];
    snprintf(single, sizeof single, "%s/single", labs_dir);
    char *a_run[] = {single, "--steps", "3", "--replay-every", "0", "--run-dir", dir, NULL};
    int st = run(a_run, "long-run");
    char *a_grade[] = {(char *)shardlab, "grade", dir, "--quiet", NULL};
    int gst = run(a_grade, "long-grade");
    char *gout = captured("long-grade", "out");
    char grade_json[4300], summary[4300];
    snprintf(grade_json, sizeof grade_json, "%s/grade.json", dir);
    snprintf(summary, sizeof summary, "%s/summary.json", dir);
    // Proves: a run directory of ~3000 bytes is the run's and the grader's whole: the run, its
    // reference (in it) and its report where the path says (broken variant: today's grader,
    // whose 2048-byte buffer cut the path: "meta.json: missing").
    EXPECT(strlen(dir) > 2900 && st == 0 && gst == 0 && access(summary, F_OK) == 0 && access(grade_json, F_OK) == 0,
           "a run directory of %zu bytes: the lab (exit %d) and its grade (exit %d) work, every file where it belongs: %s",
           strlen(dir), st, gst, one_line(gout));
    free(gout);
    char *a_launch[] = {(char *)shardlab, "run", "ddp", "-n", "2", "--ui", "none", "--steps", "2", "--run-dir", dir2, NULL};
    st = run(a_launch, "long-launch");
    char r1[4400];
    snprintf(r1, sizeof r1, "%s/rank-1.jsonl", dir2);
    EXPECT(st == 0 && access(r1, F_OK) == 0, "...and under shardlab run, 2 ranks (exit %d)", st);

    // Over PATH_MAX; a part over NAME_MAX.
    char huge[6000], wide[800];
    n = snprintf(huge, sizeof huge, "%s/huge", tmp);
    for (int i = 0; i < 21; i++) n += snprintf(huge + n, sizeof huge - (size_t)n, "/%s", part);
    char name[301];
    memset(name, 'w', 300), name[300] = 0;
    snprintf(wide, sizeof wide, "%s/%s", tmp, name);
    struct {
        const char *path, *says;
    } bad[] = {{huge, "bytes long; at most"}, {wide, "is 300 bytes long; a name takes at most"}};
    for (int i = 0; i < 2; i++) {
        char *a_lab[] = {single, "--steps", "1", "--run-dir", (char *)bad[i].path, NULL};
        char *a_l[] = {(char *)shardlab, "run", "single", "--ui", "none", "--steps", "1", "--run-dir", (char *)bad[i].path, NULL};
        char *a_g[] = {(char *)shardlab, "grade", (char *)bad[i].path, NULL};
        int s_lab = run(a_lab, "bad-lab"), s_l = run(a_l, "bad-launch"), s_g = run(a_g, "bad-grade");
        char *e_lab = captured("bad-lab", "err"), *e_l = captured("bad-launch", "err"), *e_g = captured("bad-grade", "err");
        char len[32];
        snprintf(len, sizeof len, "%zu", strlen(bad[i].path));
        const char *named = i == 0 ? len : "300";
        // Proves: refused before anything starts, exit 2, one line naming the length (broken
        // variant: today's lab, "run directory path too long" and exit 1; its launcher, no length).
        EXPECT(s_lab == 2 && s_l == 2 && s_g == 2 && strstr(e_lab, bad[i].says) && strstr(e_l, bad[i].says) &&
                   strstr(e_g, bad[i].says) && strstr(e_lab, named) && count_lines(e_lab) == 1 && count_lines(e_l) == 1,
               "a run directory %s: the lab, shardlab run and shardlab grade exit 2 (%d, %d, %d) naming its length %s: "
               "%s | %s | %s", i == 0 ? "over PATH_MAX" : "with a part over NAME_MAX", s_lab, s_l, s_g, named, one_line(e_lab),
               one_line(e_l), one_line(e_g));
        free(e_lab), free(e_l), free(e_g);
    }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_faults LABS SAN_LABS SHARDLAB\n");
        return 2;
    }
    labs_dir = argv[1], san_labs = argv[2], shardlab = argv[3];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-faults-XXXXXX");
    if (!mkdtemp(tmp)) return printf("not ok - cannot make a temporary folder\n"), 1;
    int tmpfs = can_mount_tmpfs();
    check_full_disk(tmpfs);
    check_grade_full_disk(tmpfs);
    check_web_full_disk(tmpfs);
    check_hand_ranks();
    check_long_paths();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("# removing %s failed\n", tmp);
    return test_done();
}
