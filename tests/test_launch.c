// test_launch.c — `shardlab run`, the launcher, end to end.
//
// usage: test_launch SHARDLAB FIXTURES_DIR      (tests/run.sh passes build/san/shardlab and
//                                                build/san/fixtures)
//
// The launcher runs tests/fixtures/ranklab (SHARDLAB_LABS=FIXTURES_DIR), a stand-in lab whose
// ranks all-reduce every step, so these tests do not depend on the training labs. Checked:
//   - bad input gets exit 2 and one line; a misspelt lab or command a did-you-mean, and the
//     help to try a command the user can type;
//   - a good run at N=1 and N=3: the torchrun variables, one log per rank, rank 0's output
//     echoed, every rank's events ending with {"ev":"end","status":"ok"};
//   - faults: a rank killed with SIGKILL (20 runs), a rank hung in a collective (20 runs), a
//     rank that fails on purpose, ranks that fail before they join: a non-zero exit, one line
//     naming the rank and the cause, and the run over within the deadline;
//   - a rank that exits 0 without an end event saying ok fails the run (exit 1, "stopped");
//   - Ctrl-C, SIGTERM and SIGHUP reach the ranks; a second Ctrl-C does not wait;
//   - a SIGKILLed launcher leaves no orphans;
//   - one job per run directory: a second one refused, naming the first; a finished run
//     refused unless --overwrite, which replaces it; a dead job's lock taken by the next.
// After every run, "nothing left behind" means: no process whose environment holds that run's
// SHARDLAB_RUN_DIR, no /dev/shm/shardlab-<launcher pid>-* segment, and every rank-<r>.jsonl
// following the schema and ending with an "end" event (the launcher writes one for a rank
// that could not).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "command/runs/runschema.h"
#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static const char *shardlab;

// ---- helpers ----------------------------------------------------------------------------

// One launcher run: its pid, exit code, start and end times, captured output.
typedef struct {
    pid_t pid;
    int code;
    double t0, t1;
    char tag[64], dir[512];
    char *out, *err;
} Job;

// Starts `shardlab <args>` (args split at spaces) with extra environment `env` ("K=V K=V",
// or NULL); stdout and stderr go to <tmp>/<tag>.out and .err. job->dir is <tmp>/runs/<tag>,
// for the caller to pass as --run-dir.
static void job_init(Job *j, const char *tag) {
    memset(j, 0, sizeof *j);
    snprintf(j->tag, sizeof j->tag, "%s", tag);
    snprintf(j->dir, sizeof j->dir, "%s/runs/%s", tmp, tag);
}

static void job_start(Job *j, const char *env, const char *fmt, ...) {
    char args[1024], envs[256] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    if (env) snprintf(envs, sizeof envs, "%s", env);
    fflush(stdout);
    j->t0 = now_s();
    j->pid = fork();
    if (j->pid == 0) {
        char path[512], *argv[64] = {(char *)shardlab};
        int argc = 1;
        for (char *a = strtok(args, " "); a && argc < 63; a = strtok(NULL, " ")) argv[argc++] = a;
        for (char *e = strtok(envs, " "); e; e = strtok(NULL, " ")) putenv(e);
        snprintf(path, sizeof path, "%s/%s.out", tmp, j->tag);
        dup2(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), 1);
        snprintf(path, sizeof path, "%s/%s.err", tmp, j->tag);
        dup2(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
        execv(shardlab, argv);
        _exit(127);
    }
}

// Waits for every job in jobs[0..n) (they may run at the same time), noting when each ended.
// The first line of rank r's event log in j's run directory ("" if there is none).
static void first_event(const Job *j, int r, char *line, size_t size) {
    char path[600];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", j->dir, r);
    FILE *f = fopen(path, "r");
    line[0] = 0;
    if (f) {
        if (!fgets(line, (int)size, f)) line[0] = 0;
        fclose(f);
    }
}

static void job_wait(Job *jobs, int n) {
    for (int left = n; left > 0;) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) break;
        for (int i = 0; i < n; i++)
            if (jobs[i].pid == pid) {
                Job *j = &jobs[i];
                j->t1 = now_s();
                j->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                char path[512];
                snprintf(path, sizeof path, "%s/%s.out", tmp, j->tag);
                j->out = read_file(path, NULL);
                snprintf(path, sizeof path, "%s/%s.err", tmp, j->tag);
                j->err = read_file(path, NULL);
                if (!j->out) j->out = calloc(1, 1);
                if (!j->err) j->err = calloc(1, 1);
                left--;
            }
    }
}

static void job_free(Job *j) {
    free(j->out);
    free(j->err);
    j->out = j->err = NULL;
}

static int run_job(Job *j, const char *tag, const char *env, const char *args) {
    job_init(j, tag);
    job_start(j, env, "%s", args);
    job_wait(j, 1);
    return j->code;
}

// Segments this launcher created and left: /dev/shm/shardlab-<pid>-*.
static int shm_left(pid_t launcher) {
    char prefix[64];
    int n = snprintf(prefix, sizeof prefix, "shardlab-%d-", (int)launcher), k = 0;
    DIR *d = opendir("/dev/shm");
    for (struct dirent *e; d && (e = readdir(d));) k += strncmp(e->d_name, prefix, (size_t)n) == 0;
    if (d) closedir(d);
    return k;
}

// Every line of each rank's rank-<r>.jsonl follows the schema and the last one is an end
// event (with `status`, if not NULL). Returns 1, or 0 with the first problem in why.
static int events_ended(const char *dir, int world, const char *status, char *why, size_t n) {
    for (int r = 0; r < world; r++) {
        char path[600], err[256];
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
        char *text = read_file(path, NULL);
        if (!text) return snprintf(why, n, "no %s", path), 0;
        int ok = 1, ended = 0;
        for (char *line = text, *nl; ok && (nl = strchr(line, '\n')); line = nl + 1) {
            JsonValue *v = json_parse(line, (size_t)(nl - line), err, sizeof err);
            if (!v || !runschema_check_event(v, err, sizeof err)) {
                snprintf(why, n, "rank %d: %s in: %.*s", r, err, (int)(nl - line), line);
                ok = 0;
            }
            if (ok) {
                const JsonValue *st = json_get(v, "status");
                ended = strcmp(json_get(v, "ev")->string, "end") == 0 && (!status || strcmp(st->string, status) == 0);
            }
            json_free(v);
        }
        if (ok && (!*text || text[strlen(text) - 1] != '\n')) snprintf(why, n, "rank %d: last line unfinished", r), ok = 0;
        if (ok && !ended) snprintf(why, n, "rank %d: last event is not an end event%s%s", r, status ? " with status " : "", status ? status : "");
        free(text);
        if (!ok || !ended) return 0;
    }
    return 1;
}

// Nothing left behind by a finished job (see the top comment). Returns 1, or 0 with why.
static int clean_after(const Job *j, int world, char *why, size_t n) {
    int procs = procs_left(j->dir), segs = shm_left(j->pid);
    if (procs) return snprintf(why, n, "%d process(es) of the run still alive", procs), 0;
    if (segs) return snprintf(why, n, "%d /dev/shm/shardlab-%d-* segment(s) left", segs, (int)j->pid), 0;
    return events_ended(j->dir, world, NULL, why, n);
}

// Waits (up to 20 s) until rank r has logged a step; returns its pid from rank-<r>.pid.
static pid_t wait_for_step(const char *dir, int r) {
    char path[600];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
    for (double t0 = now_s(); now_s() - t0 < 20; usleep(5000)) {
        char *text = read_file(path, NULL);
        int stepped = text && strstr(text, "{\"ev\":\"step\"");
        free(text);
        if (!stepped) continue;
        snprintf(path, sizeof path, "%s/rank-%d.pid", dir, r);
        text = read_file(path, NULL);
        pid_t pid = text ? (pid_t)atoi(text) : 0;
        free(text);
        return pid;
    }
    return 0;
}

// ---- the tests ----------------------------------------------------------------------------

static void test_bad_input(void) {
    const char *cases[][2] = {
        {"", "no command"},
        {"frobnicate", "an unknown command"},
        {"grade", "grade without a run directory"},
        {"grade --bogus", "grade with an unknown option"},
        {"grade /nonexistent-run-dir", "grade on a directory that does not exist"},
        {"web --port x", "web --port that is not a number"},
        {"web --bogus 1", "web with an unknown option"},
        {"tui /nonexistent-run-dir", "tui on a directory that does not exist"},
        {"tui --panel nine", "tui --panel with an unknown panel"},
        {"run ranklab -n 0", "-n 0"},
        {"run ranklab -n 9", "-n 9 (more than 8 ranks)"},
        {"run ranklab -n x", "-n x"},
        {"run ranklab -n", "-n without a value"},
        {"run", "no lab"},
        {"run nosuchlab -n 2", "an unknown lab"},
        {"run ranklab -n 2 --ui tui", "--ui tui without a terminal"},
        {"run ranklab -n 2 --ui web", "--ui web (not built yet)"},
        {"run ranklab -n 2 --ui=bogus", "--ui=bogus"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Job j;
        run_job(&j, "bad", NULL, cases[i][0]);
        // Proves: wrong input is refused with the usage exit code and one clear line, and
        // nothing is started (no output).
        EXPECT(j.code == 2 && count_lines(j.err) == 1 && !*j.out,
               "bad input, %s: exit 2 with one line on stderr (exit %d, %d lines: %s)", cases[i][1], j.code,
               count_lines(j.err), one_line(j.err));
        if (strstr(cases[i][0], "nosuchlab"))
            // Proves: the message lists the labs there are, so the user can pick one.
            EXPECT(strstr(j.err, "ranklab") != NULL, "an unknown lab's message lists the available labs: %s", one_line(j.err));
        if (strstr(cases[i][0], "frobnicate"))
            // Proves: the message says which commands exist.
            EXPECT(strstr(j.err, "run") != NULL, "an unknown command's message names 'run': %s", one_line(j.err));
        job_free(&j);
    }
    // Proves: a misspelt lab gets a did-you-mean in the user's words (shardlab run's, or make's
    // when make started us), and the help to try is a command the user can type: this
    // shardlab, as it was started (broken variant: "(try 'shardlab run --help')").
    const char *typos[][3] = {{"run ranklb -n 2", NULL, "did you mean 'ranklab'?"},
                              {"run ranklb -n 2", "MAKELEVEL=1", "did you mean 'make lab-ranklab'?"},
                              {"rnu ranklab", NULL, "did you mean 'run'?"}};
    for (size_t i = 0; i < sizeof typos / sizeof typos[0]; i++) {
        Job j;
        char help[600];
        snprintf(help, sizeof help, "(try '%s%s --help')", shardlab, strncmp(typos[i][0], "run ", 4) ? "" : " run");
        run_job(&j, "typo", typos[i][1], typos[i][0]);
        EXPECT(j.code == 2 && count_lines(j.err) == 1 && strstr(j.err, typos[i][2]) && strstr(j.err, help),
               "%s (%s): exit 2, one line with \"%s\" and \"%s\" (exit %d: %s)", typos[i][0], typos[i][1] ? typos[i][1] : "",
               typos[i][2], help,
               j.code, one_line(j.err));
        job_free(&j);
    }
    Job j;
    run_job(&j, "help", NULL, "--help");
    // Proves: --help works at both levels and exits 0.
    EXPECT(j.code == 0 && strstr(j.out, "run <lab>"), "shardlab --help: exit 0 with usage (exit %d)", j.code);
    job_free(&j);
    run_job(&j, "help", NULL, "run --help");
    EXPECT(j.code == 0 && strstr(j.out, "-n N"), "shardlab run --help: exit 0 with usage (exit %d)", j.code);
    job_free(&j);
}

static void test_good_runs(void) {
    // N = 1, no --run-dir: the launcher names the run under $SHARDLAB_RUNS itself.
    Job j;
    run_job(&j, "one", NULL, "run ranklab -n 1 --steps 5 --ms 5");
    char runs[300], why[1024] = "";
    snprintf(runs, sizeof runs, "%s/runs", tmp);
    DIR *d = opendir(runs);
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, "ranklab-", 8) == 0) found++, snprintf(j.dir, sizeof j.dir, "%.200s/%.255s", runs, e->d_name);
    if (d) closedir(d);
    // Proves: one rank runs to the end, in a new runs/ranklab-<time>-<hex> directory.
    EXPECT(j.code == 0 && found == 1, "-n 1: exit 0 and one new run directory ranklab-* (exit %d, %d found; %s)", j.code,
           found, one_line(j.err));
    EXPECT(events_ended(j.dir, 1, "ok", why, sizeof why), "-n 1: rank-0.jsonl ends with status ok (%s)", why);
    EXPECT(clean_after(&j, 1, why, sizeof why), "-n 1: nothing left behind (%s)", why);
    // Proves: rank 0's output reaches the user, and the final line says where the run is.
    EXPECT(strstr(j.out, "ranklab: step 5/5") && strstr(j.out, "finished on 1 rank(s); run written to"),
           "-n 1: stdout has rank 0's progress and the summary line");
    job_free(&j);

    // N = 3, with -n after the lab's options: those must reach every rank unchanged.
    job_init(&j, "three");
    job_start(&j, NULL, "run ranklab --steps 10 --ms 5 -n 3 --run-dir %s", j.dir);
    job_wait(&j, 1);
    EXPECT(j.code == 0, "-n 3: exit 0 (exit %d: %s)", j.code, one_line(j.err));
    // Proves: every rank ran the 10 steps asked for (--steps passed through) and ended ok.
    EXPECT(events_ended(j.dir, 3, "ok", why, sizeof why), "-n 3: every rank-<r>.jsonl ends with status ok (%s)", why);
    int port0 = -1, env_ok = 1;
    for (int r = 0; r < 3; r++) {
        char path[600], want[200];
        snprintf(path, sizeof path, "%s/rank-%d.log", j.dir, r);
        char *log = read_file(path, NULL), *p;
        snprintf(want, sizeof want,
                 "RANK=%d LOCAL_RANK=%d WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=", r, r);
        int port = log && (p = strstr(log, want)) ? atoi(p + strlen(want)) : -1;
        if (r == 0) port0 = port;
        env_ok &= port > 0 && port < 65536 && port == port0;
        free(log);
    }
    // Proves: each rank got its own log and the torchrun variables, the same port for all.
    EXPECT(env_ok, "-n 3: rank-<r>.log shows RANK=r LOCAL_RANK=r WORLD_SIZE=3 ... and one MASTER_PORT (%d)", port0);
    // Proves: the launcher echoes rank 0's output, all of it, and only rank 0's.
    EXPECT(strstr(j.out, "ranklab rank 0 of 3") && strstr(j.out, "ranklab: step 10/10") && !strstr(j.out, "rank 1 of 3"),
           "-n 3: stdout has rank 0's lines (first and last) and not rank 1's");
    EXPECT(clean_after(&j, 3, why, sizeof why), "-n 3: nothing left behind (%s)", why);
    job_free(&j);
}

static void test_fail_on_purpose(void) {
    // Rank 2 dies at step 3; ranks 0 and 1 then stop too, blaming rank 2. In every other run
    // rank 2 takes 200 ms to exit, so they exit first: the launcher must still name rank 2.
    int named = 0, quoted = 0, clean = 0, exit1 = 0;
    char why[1024] = "", last_err[1024] = "";
    for (int i = 0; i < 5; i++) {
        Job j;
        char tag[32];
        snprintf(tag, sizeof tag, "fail%d", i);
        job_init(&j, tag);
        job_start(&j, NULL, "run ranklab -n 3 --steps 50 --ms 5 --fail-rank 2 --fail-step 3 --fail-exit-ms %d --run-dir %s",
                  i % 2 ? 200 : 0, j.dir);
        job_wait(&j, 1);
        exit1 += j.code == 1;
        named += strncmp(j.err, "shardlab: rank 2 failed (exit 1)", 32) == 0 && count_lines(j.err) == 1;
        quoted += strstr(j.err, "ranklab rank 2: error: failing at step 3") != NULL;
        clean += clean_after(&j, 3, why, sizeof why);
        snprintf(last_err, sizeof last_err, "%s", j.err);
        job_free(&j);
    }
    // Proves: a failed rank makes the run fail, with the usual exit code for a failure.
    EXPECT(exit1 == 5, "--fail-rank 2: exit 1 in %d of 5 runs", exit1);
    // Proves: one line names the first rank to fail, not a rank that stopped because of it,
    // and quotes that rank's own error line.
    EXPECT(named == 5 && quoted == 5, "--fail-rank 2: one line names rank 2 and quotes its error in %d/%d of 5 runs: %s",
           named, quoted, one_line(last_err));
    EXPECT(clean == 5, "--fail-rank 2: nothing left behind in %d of 5 runs (%s)", clean, why);

    // Rank 0 fails: its output is the user's (echoed on stdout), its error line with it, and
    // the launcher's one line (stderr) quotes that line: the echo must leave it out.
    Job j0;
    job_init(&j0, "fail-rank0");  // (not "fail0": the loop above ran there, and a run directory holds one run)
    job_start(&j0, NULL, "run ranklab -n 2 --steps 50 --ms 5 --fail-rank 0 --fail-step 3 --run-dir %s", j0.dir);
    job_wait(&j0, 1);
    int shown = 0;
    for (const char *p = j0.out; (p = strstr(p, "failing at step 3")); p++) shown++;
    for (const char *p = j0.err; (p = strstr(p, "failing at step 3")); p++) shown++;
    // Proves: the error is on the terminal once, in the launcher's line naming rank 0 (broken
    // variant: the echo of rank 0's output shows the line the launcher quotes).
    EXPECT(j0.code == 1 && shown == 1 && strncmp(j0.err, "shardlab: rank 0 failed (exit 1): ", 34) == 0 &&
               strstr(j0.err, "failing at step 3"),
           "--fail-rank 0: exit 1, rank 0's error shown once (%d times), the launcher names rank 0: %s", shown,
           one_line(j0.err));
    EXPECT(clean_after(&j0, 2, why, sizeof why), "--fail-rank 0: nothing left behind (%s)", why);
    job_free(&j0);

    // Bad options: every rank exits 2 before it joins the run, so no rank removes the
    // shared-memory name: only the launcher can.
    Job j;
    job_init(&j, "prejoin");
    job_start(&j, NULL, "run ranklab -n 3 --steps x --run-dir %s", j.dir);
    job_wait(&j, 1);
    // Proves: a rank's usage error (a bad option, a batch that does not divide over N) is the
    // launcher's usage error: exit 2 and one line, the lab's own, whose help to try is the
    // command that shows the lab's help, as typed (the launcher tells its ranks: broken
    // variant, "(try 'ranklab --help')", a program not on the PATH).
    char lab_help[600];
    snprintf(lab_help, sizeof lab_help, "(try '%s run ranklab --help')", shardlab);
    EXPECT(j.code == 2 && count_lines(j.err) == 1 && strstr(j.err, "shardlab run: ranklab: --steps: 'x'") &&
               strstr(j.err, lab_help),
           "ranks failing before they join: exit 2, one line: the lab's usage error, ending %s (exit %d: %s)", lab_help,
           j.code, one_line(j.err));
    // Proves: the launcher removes the segment itself, and writes end events for ranks that
    // never opened their event log.
    EXPECT(clean_after(&j, 3, why, sizeof why), "ranks failing before they join: nothing left behind (%s)", why);
    // Proves: the end events the launcher writes say why the rank stopped, in its own words.
    char line[2048];
    first_event(&j, 0, line, sizeof line);
    EXPECT(strstr(line, "\"ev\":\"error\"") && strstr(line, "failed (exit 2)") && strstr(line, "ranklab: --steps: 'x'"),
           "ranks failing before they join: their error events quote their own line (%s)", one_line(line));
    job_free(&j);

    // Proves: a rank that starts late still meets the bad option itself: the launcher gives the
    // others the grace to exit on a usage error before it stops them, so rank 0, which reads
    // its options 300 ms after its peers have failed, reports its own line, not a SIGTERM.
    Job late;
    job_init(&late, "prejoin-late");
    job_start(&late, "RANKLAB_SLOW_START=0", "run ranklab -n 3 --steps x --run-dir %s", late.dir);
    job_wait(&late, 1);
    first_event(&late, 0, line, sizeof line);
    EXPECT(late.code == 2 && strstr(line, "failed (exit 2)") && strstr(line, "ranklab: --steps: 'x'"),
           "a rank starting late after its peers' usage error: exit 2, its own line in its error event, not a "
           "signal (exit %d: %s)", late.code, one_line(line));
    EXPECT(clean_after(&late, 3, why, sizeof why), "a rank starting late: nothing left behind (%s)", why);
    job_free(&late);

    // Proves: a run that never started, in a directory the launcher named itself, is not left
    // behind (a --run-dir the user named stays, above).
    char runs[300];
    snprintf(runs, sizeof runs, "%s/runs", tmp);
    int before = 0, after = 0;
    DIR *d = opendir(runs);
    for (struct dirent *e; d && (e = readdir(d));) before += e->d_name[0] != '.';
    if (d) closedir(d);
    run_job(&j, "unstarted", NULL, "run ranklab -n 2 --steps x");
    d = opendir(runs);
    for (struct dirent *e; d && (e = readdir(d));) after += e->d_name[0] != '.';
    if (d) closedir(d);
    EXPECT(j.code == 2 && after == before, "a usage error with no --run-dir: exit 2, no run directory left (exit %d, %d -> %d)",
           j.code, before, after);
    job_free(&j);
}

// A rank that exits 0 is not finished unless its log says so: the launcher's word and exit
// status follow the rank's end event, which the dashboards and the grader read.
static void test_end_status(void) {
    const struct {
        const char *end, *said, *status;
    } cases[] = {
        {"none", "shardlab: rank 0 exited with status 0 without writing an end event", "error"},
        {"error", "shardlab: rank 0 exited with status 0, but its end event says status error", "error"},
        {"ok", NULL, "ok"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Job j;
        char tag[32], why[1024] = "";
        snprintf(tag, sizeof tag, "end-%s", cases[i].end);
        job_init(&j, tag);
        job_start(&j, NULL, "run ranklab -n 2 --steps 3 --ms 1 --end %s --run-dir %s", cases[i].end, j.dir);
        job_wait(&j, 1);
        // Rank 0's log (rank 1 always ends ok), or with --end ok every rank's.
        int ended = events_ended(j.dir, cases[i].said ? 1 : 2, cases[i].status, why, sizeof why);
        if (cases[i].said)
            // Proves: exit 1 and a line naming the rank and what it left out, "stopped" and not
            // "finished", and its log ended with status error (broken variant: exit 0 and
            // "finished" beside a log that says error).
            EXPECT(j.code == 1 && strstr(j.err, cases[i].said) && strstr(j.out, "ranklab stopped; run written to") &&
                       !strstr(j.out, "finished") && ended,
                   "--end %s: exit 1, '%s', 'stopped', rank 0's log ends with status error (exit %d: %s; %s)", cases[i].end,
                   cases[i].said, j.code, one_line(j.err), why);
        else
            // Proves: a rank whose log ends ok is a finished run, exit 0.
            EXPECT(j.code == 0 && strstr(j.out, "finished on 2 rank(s)") && ended,
                   "--end ok: exit 0, 'finished', every log ends ok (exit %d: %s; %s)", j.code, one_line(j.err), why);
        EXPECT(clean_after(&j, 2, why, sizeof why), "--end %s: nothing left behind (%s)", cases[i].end, why);
        job_free(&j);
    }
}

static void test_kill_a_rank(void) {
    enum { RUNS = 20 };
    int failed = 0, named = 0, fast = 0, clean = 0;
    double worst = 0;
    char why[1024] = "", bad_err[1024] = "";
    for (int i = 0; i < RUNS; i++) {
        Job j;
        char tag[32];
        snprintf(tag, sizeof tag, "kill%d", i);
        job_init(&j, tag);
        job_start(&j, NULL, "run ranklab -n 3 --steps 1000 --ms 20 --run-dir %s", j.dir);
        pid_t victim = wait_for_step(j.dir, 1);
        double t_kill = now_s();
        if (victim > 0) kill(victim, SIGKILL);
        job_wait(&j, 1);
        double took = j.t1 - t_kill;
        worst = took > worst ? took : worst;
        failed += victim > 0 && j.code != 0;
        int ok = strstr(j.err, "rank 1 was killed by signal 9 (SIGKILL)") != NULL;
        named += ok;
        if (!ok) snprintf(bad_err, sizeof bad_err, "%s", j.err);
        fast += took < 2.0;
        clean += clean_after(&j, 3, why, sizeof why);
        job_free(&j);
    }
    // Proves: a rank dying mid-run fails the run, every time.
    EXPECT(failed == RUNS, "kill -9 rank 1: non-zero exit in %d of %d runs", failed, RUNS);
    // Proves: the one line names the dead rank and the signal.
    EXPECT(named == RUNS, "kill -9 rank 1: stderr names rank 1 and signal 9 in %d of %d runs %s", named, RUNS, one_line(bad_err));
    // Proves: the launcher notices and stops the others quickly (labs/DESIGN.md, Faults: 2 s).
    EXPECT(fast == RUNS, "kill -9 rank 1: the run ended within 2 s of the kill in %d of %d runs (worst %.2f s)", fast,
           RUNS, worst);
    // Proves: no orphans, no shared memory, and dashboards see every rank ended.
    EXPECT(clean == RUNS, "kill -9 rank 1: nothing left behind in %d of %d runs (%s)", clean, RUNS, why);
}

static void test_hung_rank(void) {
    // Rank 1 stops forever in its 5th collective; the others time out after 1 s.
    enum { RUNS = 20, AT_ONCE = 4 };
    int failed = 0, named = 0, fast = 0, clean = 0;
    double worst = 0;
    char why[1024] = "", bad_err[1024] = "";
    for (int i = 0; i < RUNS; i += AT_ONCE) {
        Job jobs[AT_ONCE];
        for (int k = 0; k < AT_ONCE; k++) {
            char tag[32];
            snprintf(tag, sizeof tag, "hang%d", i + k);
            job_init(&jobs[k], tag);
            job_start(&jobs[k], "SHARDLAB_TEST_HANG=1:5 SHARDLAB_TIMEOUT_S=1",
                      "run ranklab -n 3 --steps 1000 --ms 5 --run-dir %s", jobs[k].dir);
        }
        job_wait(jobs, AT_ONCE);
        for (int k = 0; k < AT_ONCE; k++) {
            Job *j = &jobs[k];
            double took = j->t1 - j->t0;
            worst = took > worst ? took : worst;
            failed += j->code != 0;
            int ok = strncmp(j->err, "shardlab: rank ", 15) == 0 && strstr(j->err, "timed out") &&
                     strstr(j->err, "waiting for rank 1");
            named += ok;
            if (!ok) snprintf(bad_err, sizeof bad_err, "%s", j->err);
            fast += took < 5.0;
            clean += clean_after(j, 3, why, sizeof why);
            job_free(j);
        }
    }
    // Proves: a stuck collective ends the run instead of hanging it.
    EXPECT(failed == RUNS, "hung rank 1: non-zero exit in %d of %d runs", failed, RUNS);
    // Proves: the line names a rank and says it timed out waiting for rank 1, the stuck one.
    EXPECT(named == RUNS, "hung rank 1: stderr says 'timed out ... waiting for rank 1' in %d of %d runs %s", named,
           RUNS, one_line(bad_err));
    // Proves: 1 s deadline + 1 s grace before SIGKILL: over within 5 s even 4 runs at a time.
    EXPECT(fast == RUNS, "hung rank 1: over within 5 s in %d of %d runs (worst %.2f s)", fast, RUNS, worst);
    // Proves: the stuck rank, which ignores SIGTERM, is killed, and its log is ended for it.
    EXPECT(clean == RUNS, "hung rank 1: nothing left behind in %d of %d runs (%s)", clean, RUNS, why);
}

static void test_stopped_rank(void) {
    // Rank 3 of 4 is stopped (SIGSTOP, as a debugger or Ctrl-Z would): its peers time out. In
    // the ring, rank 0 waits for rank 3, rank 1 for rank 0, rank 2 for rank 1: whichever times
    // out first must name rank 3, the one that stopped, not the neighbour it waited on.
    enum { RUNS = 6, AT_ONCE = 3 };
    int failed = 0, named = 0, clean = 0;
    char why[1024] = "", bad_err[1024] = "";
    for (int i = 0; i < RUNS; i += AT_ONCE) {
        Job jobs[AT_ONCE];
        pid_t stopped[AT_ONCE];
        for (int k = 0; k < AT_ONCE; k++) {
            char tag[32];
            snprintf(tag, sizeof tag, "stop%d", i + k);
            job_init(&jobs[k], tag);
            job_start(&jobs[k], "SHARDLAB_TIMEOUT_S=2", "run ranklab -n 4 --steps 1000 --ms 5 --algo ring --run-dir %s", jobs[k].dir);
        }
        for (int k = 0; k < AT_ONCE; k++) {
            stopped[k] = wait_for_step(jobs[k].dir, 3);
            if (stopped[k] > 0) kill(stopped[k], SIGSTOP);
        }
        job_wait(jobs, AT_ONCE);
        for (int k = 0; k < AT_ONCE; k++) {
            Job *j = &jobs[k];
            failed += stopped[k] > 0 && j->code == 1;
            int ok = strncmp(j->err, "shardlab: rank ", 15) == 0 && strstr(j->err, "timed out") &&
                     strstr(j->err, "waiting for rank 3") && !strstr(j->err, "waiting for rank 0") &&
                     !strstr(j->err, "waiting for rank 1") && !strstr(j->err, "waiting for rank 2");
            named += ok;
            if (!ok) snprintf(bad_err, sizeof bad_err, "%s", j->err);
            clean += clean_after(j, 4, why, sizeof why);
            job_free(j);
        }
    }
    // Proves: a stopped rank ends the run with the failure exit code (it cannot hang it).
    EXPECT(failed == RUNS, "stopped rank 3: exit 1 in %d of %d runs", failed, RUNS);
    // Proves: the one line names rank 3, the stopped rank, and no rank that merely waited
    // on another waiting rank (broken variant: the waiter names its own ring neighbour).
    EXPECT(named == RUNS, "stopped rank 3: stderr says 'waiting for rank 3' and no other in %d of %d runs %s", named, RUNS,
           one_line(bad_err));
    // Proves: the stopped rank is killed (SIGKILL reaches a stopped process) and its log ended.
    EXPECT(clean == RUNS, "stopped rank 3: nothing left behind in %d of %d runs (%s)", clean, RUNS, why);
}

static void test_interrupt(void) {
    // SIGHUP: the terminal closed under the progress line (--ui none here; test_tui closes
    // a real terminal).
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    const char *tags[] = {"int", "term", "hup"}, *names[] = {"Ctrl-C", "SIGTERM", "SIGHUP"};
    char why[1024] = "";
    for (int i = 0; i < 3; i++) {
        Job j;
        job_init(&j, tags[i]);
        job_start(&j, NULL, "run ranklab -n 3 --steps 1000 --ms 20 --run-dir %s", j.dir);
        wait_for_step(j.dir, 0);
        double t_sig = now_s();
        kill(j.pid, sigs[i]);
        job_wait(&j, 1);
        const char *name = names[i];
        // Proves: the exit code says which signal stopped the run, as a shell expects.
        EXPECT(j.code == 128 + sigs[i] && strstr(j.err, "shardlab: interrupted; 3 rank(s) stopped"),
               "%s: exit %d and 'interrupted; 3 rank(s) stopped' (exit %d: %s)", name, 128 + sigs[i], j.code, one_line(j.err));
        // Proves: the signal reached the ranks, which ended their own logs (status error, and
        // their own message), well before the launcher's 2 s grace ran out.
        int own = 1;
        for (int r = 0; r < 3; r++) {
            char path[700], want[64];
            snprintf(path, sizeof path, "%s/rank-%d.jsonl", j.dir, r);
            snprintf(want, sizeof want, "interrupted by signal %d", sigs[i]);
            char *text = read_file(path, NULL);
            own &= text && strstr(text, want) != NULL;
            free(text);
        }
        EXPECT(own && events_ended(j.dir, 3, "error", why, sizeof why) && j.t1 - t_sig < 2.0,
               "%s: every rank wrote its own end event, in %.2f s (%s)", name, j.t1 - t_sig, why);
        EXPECT(clean_after(&j, 3, why, sizeof why), "%s: nothing left behind (%s)", name, why);
        job_free(&j);
    }

    // Ranks that cannot stop (rank 1 hangs, the others wait for it with a long deadline):
    // after one Ctrl-C the launcher waits its 2 s grace, then kills; a second Ctrl-C kills now.
    for (int twice = 0; twice < 2; twice++) {
        Job j;
        job_init(&j, twice ? "int2" : "int1");
        job_start(&j, "SHARDLAB_TEST_HANG=1:5 SHARDLAB_TIMEOUT_S=60", "run ranklab -n 3 --steps 1000 --ms 5 --run-dir %s",
                  j.dir);
        wait_for_step(j.dir, 0);
        usleep(200000);  // everyone is inside the hung collective now
        kill(j.pid, SIGINT);
        usleep(100000);
        double t_last = now_s();
        if (twice) kill(j.pid, SIGINT);
        job_wait(&j, 1);
        double took = j.t1 - t_last;
        if (twice)
            // Proves: the second Ctrl-C does not wait for the grace period.
            EXPECT(j.code == 130 && took < 1.0, "two Ctrl-C: exit 130 within 1 s of the second (exit %d, %.2f s)", j.code, took);
        else
            // Proves: ranks that ignore the signal are killed when the 2 s grace runs out.
            EXPECT(j.code == 130 && took > 1.5 && took < 3.5, "one Ctrl-C, stuck ranks: killed after the grace (exit %d, %.2f s)",
                   j.code, took);
        EXPECT(clean_after(&j, 3, why, sizeof why), "%s Ctrl-C, stuck ranks: nothing left behind (%s)", twice ? "two" : "one", why);
        job_free(&j);
    }
}

// How many start events rank r's log in dir holds (-1: no log).
static int start_events(const char *dir, int r) {
    char path[600];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
    char *text = read_file(path, NULL);
    int n = text ? 0 : -1;
    for (const char *p = text; p && (p = strstr(p, "{\"ev\":\"start\"")); p++) n++;
    free(text);
    return n;
}

// One job per run directory (common/runfiles/joblock.h): the launcher holds it, for its ranks, from before
// it starts them until it exits.
//   - a second job into a directory a job holds is refused at once (exit 1), naming the
//     directory and the job that holds it, and writes nothing there;
//   - a directory that holds a finished run is refused (exit 2, one line naming --overwrite);
//     with --overwrite, the earlier run is replaced, not appended to;
//   - a lock whose job was killed (SIGKILL, no clean-up) holds nothing: the next job takes it.
// Broken on purpose: joblock_take granting every lock (the second job, with --overwrite, removed
// the first one's files and ran) and runlog_hold_dir without its check for an earlier run
// (appended to): both caught.
static void test_one_job_per_dir(void) {
    Job a, b;
    job_init(&a, "held");
    job_start(&a, NULL, "run ranklab -n 2 --steps 400 --ms 5 --run-dir %s", a.dir);
    wait_for_step(a.dir, 1);
    job_init(&b, "held-again");
    snprintf(b.dir, sizeof b.dir, "%s", a.dir);
    // (with --overwrite, which would remove the first job's files were the directory not held)
    job_start(&b, NULL, "run ranklab -n 2 --steps 3 --ms 1 --overwrite --run-dir %s", b.dir);
    job_wait(&b, 1);
    char holder[64];
    snprintf(holder, sizeof holder, "pid %d on ", (int)a.pid);
    // Proves: the second job is refused within seconds, naming the directory and the job in it.
    EXPECT(b.code == 1 && strstr(b.err, "is in use by another job") && strstr(b.err, a.dir) && strstr(b.err, holder) &&
               strstr(b.err, "run ranklab -n 2 --steps 400") && b.t1 - b.t0 < 5,
           "a second job into a run directory a job holds: exit 1 in %.1f s, naming it and the job (pid %d): %s",
           b.t1 - b.t0, (int)a.pid, one_line(b.err));
    job_wait(&a, 1);
    char why[1024] = "";
    // Proves: the first job ran on undisturbed: each rank's log holds its own start alone.
    EXPECT(a.code == 0 && start_events(a.dir, 0) == 1 && start_events(a.dir, 1) == 1 && events_ended(a.dir, 2, "ok", why, sizeof why),
           "...and the first job finished ok, one start event in each rank's log (exit %d, %d and %d starts%s%s)", a.code,
           start_events(a.dir, 0), start_events(a.dir, 1), why[0] ? ": " : "", why);
    job_free(&a), job_free(&b);

    // The finished run's directory again: refused, then replaced with --overwrite.
    job_init(&b, "finished-again");
    snprintf(b.dir, sizeof b.dir, "%s", a.dir);
    job_start(&b, NULL, "run ranklab -n 2 --steps 3 --ms 1 --run-dir %s", b.dir);
    job_wait(&b, 1);
    // Proves: a finished run is never appended to; the one line says what to do instead.
    EXPECT(b.code == 2 && count_lines(b.err) == 1 && strstr(b.err, "holds a finished run") && strstr(b.err, "--overwrite") &&
               start_events(a.dir, 0) == 1,
           "a run directory that holds a finished run: exit 2, one line naming --overwrite, nothing appended (exit %d): %s",
           b.code, one_line(b.err));
    job_free(&b);
    job_init(&b, "overwrite");
    snprintf(b.dir, sizeof b.dir, "%s", a.dir);
    job_start(&b, NULL, "run ranklab -n 2 --steps 3 --ms 1 --overwrite --run-dir %s", b.dir);
    job_wait(&b, 1);
    char *log = NULL, path[700];
    snprintf(path, sizeof path, "%s/rank-0.jsonl", b.dir);
    log = read_file(path, NULL);
    // Proves: --overwrite replaces the earlier run: its logs hold the new run alone (3 steps).
    EXPECT(b.code == 0 && start_events(b.dir, 0) == 1 && start_events(b.dir, 1) == 1 && log &&
               strstr(log, "\"step\":3,") && !strstr(log, "\"step\":4,"),
           "--overwrite: the earlier run replaced, one start event and 3 steps in its logs (exit %d): %s", b.code,
           one_line(b.err));
    free(log);
    job_free(&b);

    // A job killed with SIGKILL leaves its lock file; the kernel has let go of the lock.
    job_init(&a, "killed-holder");
    job_start(&a, NULL, "run ranklab -n 2 --steps 1000 --ms 20 --run-dir %s", a.dir);
    wait_for_step(a.dir, 0);
    kill(a.pid, SIGKILL);
    job_wait(&a, 1);
    for (double t0 = now_s(); procs_left(a.dir) && now_s() - t0 < 5; usleep(10000)) {}
    job_init(&b, "after-killed");
    snprintf(b.dir, sizeof b.dir, "%s", a.dir);
    snprintf(path, sizeof path, "%s/lock", a.dir);
    int left = access(path, F_OK) == 0;
    job_start(&b, NULL, "run ranklab -n 2 --steps 3 --ms 1 --overwrite --run-dir %s", b.dir);
    job_wait(&b, 1);
    // Proves: a stale lock (its job dead, its file left) is no lock: the next job runs.
    EXPECT(left && b.code == 0 && start_events(b.dir, 0) == 1,
           "the lock file of a job killed with SIGKILL is taken by the next job (file left %d, exit %d): %s", left, b.code,
           one_line(b.err));
    job_free(&a), job_free(&b);
}

static void test_launcher_killed(void) {
    // Nobody is left to stop the ranks of a SIGKILLed launcher: the kernel must
    // (PR_SET_PDEATHSIG), or they would run on as orphans.
    Job j;
    job_init(&j, "orphans");
    job_start(&j, NULL, "run ranklab -n 3 --steps 1000 --ms 20 --run-dir %s", j.dir);
    wait_for_step(j.dir, 0);
    kill(j.pid, SIGKILL);
    job_wait(&j, 1);
    int left = procs_left(j.dir);
    for (double t0 = now_s(); left && now_s() - t0 < 2; usleep(10000)) left = procs_left(j.dir);
    // Proves: every rank died with the launcher (within 2 s).
    EXPECT(left == 0, "launcher killed with SIGKILL: no rank outlives it (%d left)", left);
    job_free(&j);
}

// Segments of this user named shardlab-* whose creator is gone, and whether `keep` (a name
// under /dev/shm, or NULL) is still there. A segment's header says who created it: the
// launcher or the rank 0 that made it (common/comm/shm.c, shm_internal.h); its first 16 bytes are the magic and
// then the world size and the creator's pid.
static int shm_dead_left(void) {
    int k = 0;
    DIR *d = opendir("/dev/shm");
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, "shardlab-", 9) != 0) continue;
        char path[300];
        snprintf(path, sizeof path, "/dev/shm/%.250s", e->d_name);
        int fd = open(path, O_RDONLY);
        struct stat st;
        int32_t head[4] = {0};
        if (fd < 0) continue;
        int mine = fstat(fd, &st) == 0 && st.st_uid == getuid();
        ssize_t got = read(fd, head, sizeof head);
        close(fd);
        // Not ours, or being created right now by a live process: not residue.
        if (!mine || (got == (ssize_t)sizeof head && head[3] > 0 && kill(head[3], 0) == 0)) continue;
        if (got < (ssize_t)sizeof head && time(NULL) - st.st_mtime < 10) continue;
        k++;
        printf("# left: %s (creator pid %d)\n", e->d_name, got == (ssize_t)sizeof head ? head[3] : 0);
    }
    if (d) closedir(d);
    return k;
}

static int shm_exists(const char *name) {
    char path[300];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    return access(path, F_OK) == 0;
}

static void test_launcher_killed_starting(void) {
    // The launcher SIGKILLed while it starts: before the ranks have all joined the run,
    // nobody has removed the shared memory's name yet, and the launcher cannot. Whatever the
    // moment, no segment may be left (16 MiB each, until reboot).
    const int at_ms[] = {0, 5, 10, 20, 40, 80, 120, 200};
    int left = 0, procs = 0;
    for (int i = 0; i < 3 * (int)(sizeof at_ms / sizeof at_ms[0]); i++) {
        Job j;
        char tag[32];
        snprintf(tag, sizeof tag, "startkill%d", i);
        job_init(&j, tag);
        job_start(&j, NULL, "run ranklab -n 4 --steps 1000 --ms 20 --run-dir %s", j.dir);
        usleep((useconds_t)at_ms[i % (sizeof at_ms / sizeof at_ms[0])] * 1000);
        kill(j.pid, SIGKILL);
        job_wait(&j, 1);
        int p = procs_left(j.dir);
        for (double t0 = now_s(); p && now_s() - t0 < 2; usleep(10000)) p = procs_left(j.dir);
        procs += p;
        left += shm_left(j.pid);
        job_free(&j);
    }
    // Proves: the ranks die with their launcher at any point of its start.
    EXPECT(procs == 0, "launcher killed while starting (0 to 200 ms): no rank outlives it (%d left)", procs);
    // Proves: no /dev/shm/shardlab-<launcher pid>-* is left, whenever the kill came (broken
    // variant: a named segment that only the ranks remove, after all of them joined).
    EXPECT(left == 0, "launcher killed while starting (0 to 200 ms): no shared memory left (%d segments)", left);

    // Ranks started by hand (as mpirun or srun would) name their segment after the job:
    // /dev/shm/shardlab-<uid>-<MASTER_PORT>, created by rank 0. Rank 0 alone, waiting for a
    // rank 1 that never comes, then SIGKILLed: its segment outlives it. The next `shardlab
    // run` removes a segment whose creator is gone, and never one whose creator lives.
    char port[16], name[64], env[64], dir[600], *args[] = {NULL};
    snprintf(port, sizeof port, "%d", 20000 + (int)(getpid() % 9000));
    snprintf(name, sizeof name, "shardlab-%d-%s", (int)getuid(), port);
    snprintf(dir, sizeof dir, "%s/runs/byhand", tmp);
    (void)args;
    fflush(stdout);
    pid_t rank0 = fork();
    if (rank0 == 0) {
        setenv("RANK", "0", 1), setenv("WORLD_SIZE", "2", 1), setenv("MASTER_PORT", port, 1);
        setenv("SHARDLAB_TIMEOUT_S", "60", 1);
        snprintf(env, sizeof env, "%s/ranklab", getenv("SHARDLAB_LABS"));
        int nul = open("/dev/null", O_WRONLY);
        dup2(nul, 1), dup2(nul, 2);
        execl(env, env, "--steps", "5", "--run-dir", dir, (char *)NULL);
        _exit(127);
    }
    for (double t0 = now_s(); !shm_exists(name) && now_s() - t0 < 10; usleep(10000)) {}
    int made = shm_exists(name);
    Job j;
    run_job(&j, "sweeplive", NULL, "run ranklab -n 2 --steps 2 --ms 1");
    int kept = shm_exists(name);
    job_free(&j);
    kill(rank0, SIGKILL);
    waitpid(rank0, NULL, 0);
    int orphaned = shm_exists(name);
    run_job(&j, "sweepdead", NULL, "run ranklab -n 1 --steps 1 --ms 1");
    int swept = !shm_exists(name);
    job_free(&j);
    // Proves: a live job's segment is never taken from it by another run.
    EXPECT(made && kept, "a segment whose rank 0 is alive survives another shardlab run (made %d, kept %d)", made, kept);
    // Proves: the next run clears what a SIGKILLed rank 0 left (broken variant: no sweep).
    EXPECT(orphaned && swept, "a segment whose rank 0 was SIGKILLed is removed by the next shardlab run (left %d, removed %d)",
           orphaned, swept);
    // Proves: after all of this, no segment of this user with a dead creator is left.
    EXPECT(shm_dead_left() == 0, "no /dev/shm/shardlab-* of this user with a dead creator is left");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -f '/dev/shm/%s'", name);  // if the test failed
    if (system(cmd) != 0) fprintf(stderr, "could not remove /dev/shm/%s\n", name);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_launch SHARDLAB FIXTURES_DIR\n");
        return 2;
    }
    shardlab = argv[1];
    snprintf(tmp, sizeof tmp, "/tmp/test_launch-XXXXXX");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    char runs[300];
    snprintf(runs, sizeof runs, "%s/runs", tmp);
    setenv("SHARDLAB_RUNS", runs, 1);
    setenv("SHARDLAB_LABS", argv[2], 1);
    unsetenv("SHARDLAB_TEST_HANG");
    unsetenv("SHARDLAB_TIMEOUT_S");
    unsetenv("MAKELEVEL");  // (under make test): the launcher would speak make's words

    double t0 = now_s();
    test_bad_input();
    test_good_runs();
    test_fail_on_purpose();
    test_end_status();
    test_kill_a_rank();
    test_hung_rank();
    test_stopped_rank();
    test_interrupt();
    test_launcher_killed();
    test_launcher_killed_starting();
    test_one_job_per_dir();
    printf("# %.1f s\n", now_s() - t0);

    // Keep the runs of a failed test for inspection; else remove everything.
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (test_failed) printf("# runs kept in %s\n", tmp);
    else if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return test_done();
}
