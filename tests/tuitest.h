// tuitest.h — driving the terminal dashboard in tmux, for test_tui.c and test_tui_replay.c.
//
// Defines: shardlab, labs_dir, server, screen, have_tmux, now_s(), path_in_tmp(),
//          last_step_logged(), StepRec, read_steps(),
//          run_shardlab(), tmux(), kill_server(), capture(), on_screen(), wait_screen(),
//          wait_text(), show_screen(), line_at(), find_line(), step_shown(), row_step(),
//          start_view(), wait_rc(), wait_rows(), tui_test_setup(), tui_test_finish().
//
// A private tmux server (tmux -L shardlab-test-<pid>) gives the dashboard a 120x36 terminal;
// a test types keys into it (send-keys) and reads the screen back (capture-pane), always
// polling with a deadline. Each pane runs a small script that starts shardlab, then writes
// its exit status to <name>.rc and sleeps, so the screen stays readable after it exits.
#ifndef SHARDLAB_TUITEST_H
#define SHARDLAB_TUITEST_H

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static char shardlab[PATH_MAX], labs_dir[PATH_MAX];
static char server[64];      // the private tmux server's socket name
static char *screen;         // the last capture of a pane (malloc'd)
static int have_tmux;

// ---- helpers: time, files, processes --------------------------------------------------

static inline void path_in_tmp(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tmp, name); }

// The highest "step" of rank r's step events in dir (0 if none yet).
static inline long last_step_logged(const char *dir, int r) {
    char path[700], want[64];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
    snprintf(want, sizeof want, "{\"ev\":\"step\",\"rank\":%d,\"step\":", r);
    char *text = read_file(path, NULL);
    long last = 0;
    for (char *p = text; p && (p = strstr(p, want)); p += strlen(want)) last = atol(p + strlen(want));
    free(text);
    return last;
}

// The step events of rank r in dir: step, loss and param_hash, in file order.
typedef struct {
    long step;
    double loss;
    char hash[17];
} StepRec;

static inline int read_steps(const char *dir, int r, StepRec *out, int max) {
    char path[700], err[256];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
    char *text = read_file(path, NULL);
    int n = 0;
    for (char *line = text, *nl; line && (nl = strchr(line, '\n')); line = nl + 1) {
        if (strncmp(line, "{\"ev\":\"step\"", 12) != 0) continue;
        JsonValue *v = json_parse(line, (size_t)(nl - line), err, sizeof err);
        const JsonValue *h = v ? json_get(v, "param_hash") : NULL;
        if (v && n < max && h && h->type == JSON_STRING) {
            out[n].step = numi(v, "step");
            out[n].loss = num(v, "loss");
            snprintf(out[n].hash, sizeof out[n].hash, "%s", h->string);
            n++;
        }
        json_free(v);
    }
    free(text);
    return n;
}

// Runs `shardlab <args...>` (NULL-terminated) with output captured to tmp/<tag>.out/.err.
static inline int run_shardlab(const char *tag, ...) {
    char *argv[32] = {shardlab};
    int argc = 1;
    va_list ap;
    va_start(ap, tag);
    for (char *a; argc < 31 && (a = va_arg(ap, char *));) argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    return run(argv, tag);
}

// ---- helpers: the tmux server ---------------------------------------------------------

// Runs `tmux -u -L <server> -f /dev/null <args>`, its output discarded; returns its status.
static inline int tmux(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int tmux(const char *fmt, ...) {
    char args[2048], cmd[2300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "tmux -u -L %s -f /dev/null %s >/dev/null 2>&1", server, args);
    return system(cmd);
}

static inline void kill_server(void) {
    if (have_tmux) tmux("kill-server");
}

// The pane's screen now, into `screen`.
static inline const char *capture(const char *name) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "tmux -u -L %s -f /dev/null capture-pane -p -t %s 2>/dev/null", server, name);
    FILE *p = popen(cmd, "r");
    StrBuf sb;
    sb_init(&sb);
    sb_append(&sb, "", 0);
    char buf[4096];
    for (size_t got; p && (got = fread(buf, 1, sizeof buf, p)) > 0;) sb_append(&sb, buf, got);
    if (p) pclose(p);
    free(screen);
    screen = sb.data;
    return screen;
}

static inline int on_screen(const char *text) { return screen && strstr(screen, text) != NULL; }

// Polls the pane until `text` is on it (want = 1) or is not (want = 0), for up to timeout s.
static inline int wait_screen(const char *name, const char *text, int want, double timeout) {
    for (double t0 = now_s();; usleep(50000)) {
        capture(name);
        if (on_screen(text) == want) return 1;
        if (now_s() - t0 > timeout) return 0;
    }
}

static inline int wait_text(const char *name, const char *text, double timeout) { return wait_screen(name, text, 1, timeout); }

// The last screen, each line prefixed with "#   |", after a failed check.
static inline void show_screen(const char *why) {
    printf("# the screen (%s):\n", why);
    for (const char *p = screen ? screen : ""; *p;) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        printf("#   |%.*s\n", n, p);
        p += n + (nl ? 1 : 0);
    }
}

// Line i (0-based) of text into out ("" past the end).
static inline const char *line_at(const char *text, int i, char *out, size_t n) {
    const char *p = text ? text : "";
    for (; i > 0 && p; i--) p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL;
    const char *nl = p ? strchr(p, '\n') : NULL;
    snprintf(out, n, "%.*s", p ? (nl ? (int)(nl - p) : (int)strlen(p)) : 0, p ? p : "");
    return out;
}

// The index of the first line of text starting with prefix, or -1.
static inline int find_line(const char *text, const char *prefix) {
    int i = 0;
    for (const char *p = text; p && *p; i++) {
        if (strncmp(p, prefix, strlen(prefix)) == 0) return i;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return -1;
}

// The step the header shows ("step N/..." on its second row), or -1.
static inline long step_shown(void) {
    const char *p = screen ? strstr(screen, "\n step ") : NULL;
    return p ? atol(p + 7) : -1;
}

// The step in rank r's row of the overview ("r0       90    22.38 [..."), or -1.
static inline long row_step(int r) {
    char prefix[16], line[1024];
    snprintf(prefix, sizeof prefix, " r%d ", r);
    int i = find_line(screen, prefix);
    if (i < 0) return -1;
    int rr;
    long step;
    double ms;
    line_at(screen, i, line, sizeof line);
    return sscanf(line, " r%d %ld %lf", &rr, &step, &ms) == 3 && rr == r ? step : -1;
}

// Starts a tmux session `name` (120x36) running `shardlab <args>` with `env` exported
// (a shell fragment: NAME='value' ...). The exit status goes to tmp/<name>.rc.
static inline void start_view(const char *name, const char *env, const char *args) {
    char script[PATH_MAX], rc[PATH_MAX], text[4 * PATH_MAX + 256];
    snprintf(script, sizeof script, "%s/%s.sh", tmp, name);
    snprintf(rc, sizeof rc, "%s/%s.rc", tmp, name);
    // trap: Ctrl-C in the pane reaches the shell too (one process group); it must live on to
    // write shardlab's exit status. shardlab itself gets the default action back at exec.
    snprintf(text, sizeof text,
             "export LC_ALL=C.UTF-8 SHARDLAB_LABS='%s' %s\n"
             "trap : INT\n"
             "'%s' %s\n"
             "echo $? > '%s'\n"
             "exec sleep 600\n",
             labs_dir, env ? env : "", shardlab, args, rc);
    write_text(script, "w", text);
    tmux("new-session -d -x 120 -y 36 -s %s '/bin/sh %s'", name, script);
}

// shardlab's exit status in session `name`, once it has exited (up to timeout s), else -1.
static inline int wait_rc(const char *name, double timeout) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s.rc", tmp, name);
    for (double t0 = now_s(); now_s() - t0 < timeout; usleep(50000)) {
        char *text = read_file(path, NULL);
        int rc = text && *text ? atoi(text) : -1;
        free(text);
        if (rc >= 0) return rc;
    }
    return -1;
}

// Waits until the view shows every rank's row with a step of at least `min_step`.
static inline int wait_rows(const char *name, int world, long min_step, double timeout) {
    for (double t0 = now_s(); now_s() - t0 < timeout; usleep(50000)) {
        capture(name);
        int ok = step_shown() >= min_step;
        for (int r = 0; r < world; r++) ok &= row_step(r) >= 1;
        if (ok) return 1;
    }
    return 0;
}


// ---- setup and teardown, shared by the two programs ---------------------------------------

// usage: PROG SHARDLAB LABS_DIR. Makes tmp and tmp/runs (written to runs, n bytes), a clean
// environment, the server's name; says whether tmux is there (one "not ok" line if not).
static inline int tui_test_setup(int argc, char **argv, const char *prog, char *runs, size_t n) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SHARDLAB LABS_DIR\n", prog);
        return -1;
    }
    if (!realpath(argv[1], shardlab) || !realpath(argv[2], labs_dir)) {
        fprintf(stderr, "%s: %s or %s not found\n", prog, argv[1], argv[2]);
        return -1;
    }
    snprintf(tmp, sizeof tmp, "/tmp/%s-XXXXXX", prog);
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return -1;
    }
    snprintf(runs, n, "%s/runs", tmp);
    mkdir(runs, 0755);
    setenv("SHARDLAB_RUNS", runs, 1);
    setenv("SHARDLAB_LABS", labs_dir, 1);
    setenv("LC_ALL", "C.UTF-8", 1);
    unsetenv("NO_COLOR"), unsetenv("SHARDLAB_ROOT"), unsetenv("PAGER"), unsetenv("TMUX");
    unsetenv("SHARDLAB_TIMEOUT_S"), unsetenv("SHARDLAB_TEST_HANG");
    snprintf(server, sizeof server, "shardlab-test-%d", (int)getpid());
    have_tmux = system("tmux -V >/dev/null 2>&1") == 0;
    // Proves: the terminal tests can run; without tmux this is the one "not ok" line, and
    // only what needs no terminal runs.
    EXPECT(have_tmux, "tmux is installed (the terminal tests need it: apt-get install tmux; CI installs it)");
    atexit(kill_server);
    return 0;
}

static inline int tui_test_finish(double t0) {
    printf("# %.1f s\n", now_s() - t0);
    kill_server();
    have_tmux = 0;
    free(screen);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (test_failed) printf("# runs kept in %s\n", tmp);
    else if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return test_done();
}

#endif
