// labtest.h — running lab binaries from a test and reading back what they wrote.
//
// Defines: tmp, read_file(), run(), run_env(), captured(), one_line(), Events,
//          load_rank_events(), load_events(), free_events(), kind(), failed_checks_in(), num(), step_events(),
//          load_json_file(), rubric_text(), write_text(), splice_file(), count_lines(), run_procs(),
//          procs_left(), now_s(),
//          run_ranks(), tmp_finish(), sh().
//
// A test sets tmp (a private temporary directory) first. run() starts a program with its
// stdout and stderr captured to tmp/<tag>.out and tmp/<tag>.err; load_events() parses a run
// directory's event log, checking every line against the schema (command/runs/runschema.h).
#ifndef SHARDLAB_LABTEST_H
#define SHARDLAB_LABTEST_H

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "command/runs/runschema.h"
#include "common/runfiles/json.h"

static char tmp[256];


static inline char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

// Start argv with stdout and stderr captured to files in tmp, and `env` (NULL, or
// "NAME=value" strings ending with NULL) added to the environment; returns the pid.
static inline pid_t spawn_env(char *const argv[], const char *tag, char *const env[]) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; env && env[i]; i++) putenv(env[i]);
        char out[512], err[512];
        snprintf(out, sizeof out, "%s/%s.out", tmp, tag);
        snprintf(err, sizeof err, "%s/%s.err", tmp, tag);
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

// Wait for pid; its exit status, or 128 + the signal that killed it.
static inline int wait_status(pid_t pid) {
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static inline int run_env(char *const argv[], const char *tag, char *const env[]) {
    return wait_status(spawn_env(argv, tag, env));
}

// Run argv with stdout and stderr captured to files in tmp; returns the exit status.
static inline int run(char *const argv[], const char *tag) { return run_env(argv, tag, NULL); }

// A shell command, printf-style (the paths in it quoted by the caller): its exit status, or 128
// if it did not exit.
static inline int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    fflush(stdout);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static inline char *captured(const char *tag, const char *stream) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s", tmp, tag, stream);
    char *s = read_file(path, NULL);
    return s ? s : calloc(1, 1);
}

// The text with its newlines shown as " | ", so a test message stays on one line. Four
// buffers in turn, so one message can show two texts.
static inline const char *one_line(const char *text) {
    static char buf[4][1024];
    static int which;
    char *out = buf[which++ % 4];
    size_t n = 0;
    for (const char *p = text; *p && n + 4 < sizeof buf[0]; p++) {
        if (*p != '\n') out[n++] = *p;
        else if (p[1]) memcpy(out + n, " | ", 3), n += 3;
    }
    out[n] = 0;
    return out;
}

typedef struct {
    JsonValue *lines[20000];
    int n;
    int bad_lines;
    char first_problem[600];
} Events;

// Parse and schema-check every line of rank-<rank>.jsonl.
static inline void load_rank_events(const char *dir, int rank, Events *ev) {
    char path[512];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, rank);
    size_t len;
    char *text = read_file(path, &len);
    ev->n = ev->bad_lines = 0;
    ev->first_problem[0] = 0;
    if (!text) {
        snprintf(ev->first_problem, sizeof ev->first_problem, "cannot read %s", path);
        ev->bad_lines = 1;
        return;
    }
    for (char *line = text; *line && ev->n < 20000;) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        char err[256];
        JsonValue *v = json_parse(line, n, err, sizeof err);
        if (!v || !runschema_check_event(v, err, sizeof err)) {
            if (!ev->bad_lines++) snprintf(ev->first_problem, sizeof ev->first_problem, "line %d: %s", ev->n + 1, err);
            json_free(v);
        } else {
            ev->lines[ev->n++] = v;
        }
        if (!nl) {
            if (!ev->bad_lines++) snprintf(ev->first_problem, sizeof ev->first_problem, "last line has no newline");
            break;
        }
        line = nl + 1;
    }
    free(text);
}

static inline void load_events(const char *dir, Events *ev) { load_rank_events(dir, 0, ev); }

static inline void free_events(Events *ev) {
    for (int i = 0; i < ev->n; i++) json_free(ev->lines[i]);
    ev->n = 0;
}

static inline const char *kind(const JsonValue *v) { return json_get(v, "ev")->string; }

// The check events that failed in ranks 0..world-1 of a run directory: how many, and the first
// as "rank R: NAME" into first[n] ("" if none). A lab's self-check warns and goes on (runlog.h),
// so a run that exits 0 may still have failed one: a test that trusts a run reads this too.
static inline int failed_checks_in(const char *dir, int world, char *first, size_t n) {
    int failed = 0;
    first[0] = 0;
    for (int r = 0; r < world; r++) {
        Events ev;
        load_rank_events(dir, r, &ev);
        for (int i = 0; i < ev.n; i++) {
            const JsonValue *e = ev.lines[i], *ok = json_get(e, "ok");
            if (strcmp(kind(e), "check") || (ok && ok->type == JSON_BOOL && ok->boolean)) continue;
            if (!failed++) snprintf(first, n, "rank %d: %s", r, json_get(e, "name")->string);
        }
        free_events(&ev);
    }
    return failed;
}
static inline double num(const JsonValue *v, const char *key) {
    const JsonValue *x = json_get(v, key);
    return x && x->type == JSON_NUMBER ? x->number : NAN;
}

// Every check of every configuration of grade.json g, "label name RESULT points/max; ...".
static inline void rubric_text(const JsonValue *g, char *out, size_t n) {
    out[0] = 0;
    const JsonValue *grades = g ? json_get(g, "grades") : NULL;
    for (size_t i = 0; grades && i < grades->count; i++) {
        const JsonValue *one = json_at(grades, i), *checks = json_get(one, "checks");
        for (size_t k = 0; checks && k < checks->count; k++) {
            const JsonValue *c = json_at(checks, k);
            size_t used = strlen(out);
            snprintf(out + used, n - used, "%s%s %s %s %.0f/%.0f", used ? "; " : "", json_get(one, "label")->string,
                     json_get(c, "name")->string, json_get(c, "result")->string, num(c, "points"), num(c, "max"));
        }
    }
}
// The same as a whole number: -1 when it is missing or no int (a NaN cast to int is
// undefined, and the sanitized tests stop on it).
static inline int numi(const JsonValue *v, const char *key) {
    double x = num(v, key);
    return x >= -2147483648.0 && x <= 2147483647.0 ? (int)x : -1;
}

// The step events' losses and hashes, in order.
static inline int step_events(const Events *ev, const JsonValue **out, int max) {
    int n = 0;
    for (int i = 0; i < ev->n && n < max; i++)
        if (strcmp(kind(ev->lines[i]), "step") == 0) out[n++] = ev->lines[i];
    return n;
}

static inline JsonValue *load_json_file(const char *dir, const char *name) {
    char path[1200], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return NULL;
    JsonValue *v = json_parse(text, len, err, sizeof err);
    free(text);
    return v;
}

// ---- writing files, counting lines, finding a run's processes, the clock ----------------

// Seconds on a monotonic clock.
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void write_text(const char *path, const char *mode, const char *text) {
    FILE *f = fopen(path, mode);
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

// Writes text to path with the old_len bytes at `at` (a pointer into text) replaced by
// new_text; frees text. Returns 1.
static inline int splice_file(const char *path, char *text, const char *at, size_t old_len, const char *new_text) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fwrite(text, 1, (size_t)(at - text), f);
    fputs(new_text, f);
    fputs(at + old_len, f);
    fclose(f);
    free(text);
    return 1;
}

static inline int count_lines(const char *text) {
    int n = 0;
    for (const char *p = text; *p; p++) n += *p == '\n';
    return n;
}

// Processes whose environment holds SHARDLAB_RUN_DIR=<dir> (and RANK=<rank> if rank >= 0):
// the ranks of that run still alive. Their pids go to pids[0..max).
static inline int run_procs(const char *dir, int rank, pid_t *pids, int max) {
    char want_dir[700], want_rank[32], path[300], buf[1 << 15];
    snprintf(want_dir, sizeof want_dir, "SHARDLAB_RUN_DIR=%s", dir);
    snprintf(want_rank, sizeof want_rank, "RANK=%d", rank);
    int k = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue;
        buf[n] = 0;
        int in_run = 0, is_rank = rank < 0;
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1) {
            in_run |= strcmp(buf + i, want_dir) == 0;
            is_rank |= strcmp(buf + i, want_rank) == 0;
        }
        if (in_run && is_rank) {
            if (k < max) pids[k] = (pid_t)atoi(e->d_name);
            k++;
        }
    }
    if (d) closedir(d);
    return k;
}

static inline int procs_left(const char *dir) {
    pid_t pids[64];
    return run_procs(dir, -1, pids, 64);
}

// Start n ranks of `bin` with args (and --run-dir dir if dir is not NULL), as a launcher
// would: RANK, WORLD_SIZE and a MASTER_PORT of their own in the environment, plus env1 (or
// SHARDLAB_TIMEOUT_S=60). Returns the worst exit status. Output goes to tmp/<tag>.r<k>.{out,err}.
static inline int run_ranks(const char *bin, int n, const char *tag, const char *dir, char *const args[], const char *env1) {
    static int port_seq;
    char port[32];
    snprintf(port, sizeof port, "MASTER_PORT=%d", 30000 + (int)(getpid() % 20000) + 13 * port_seq++);
    pid_t pids[8];
    char envs[8][4][64];
    for (int k = 0; k < n; k++) {
        char *argv[40];
        int a = 0;
        argv[a++] = (char *)bin;
        if (dir) argv[a++] = "--run-dir", argv[a++] = (char *)dir;
        for (int i = 0; args[i]; i++) argv[a++] = args[i];
        argv[a] = NULL;
        snprintf(envs[k][0], 64, "RANK=%d", k);
        snprintf(envs[k][1], 64, "WORLD_SIZE=%d", n);
        snprintf(envs[k][2], 64, "%s", port);
        snprintf(envs[k][3], 64, "%s", env1 ? env1 : "SHARDLAB_TIMEOUT_S=60");
        char *env[] = {envs[k][0], envs[k][1], envs[k][2], envs[k][3], NULL};
        char t[64];
        snprintf(t, sizeof t, "%s.r%d", tag, k);
        pids[k] = spawn_env(argv, t, env);
    }
    int worst = 0;
    for (int k = 0; k < n; k++) {
        int s = wait_status(pids[k]);
        if (s > worst) worst = s;
    }
    return worst;
}

// At the end of a test: tmp removed if nothing failed, else kept (and named) as evidence.
static inline void tmp_finish(int failed) {
    if (failed) {
        printf("# kept %s\n", tmp);
        return;
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("# could not remove %s\n", tmp);
}

#endif
