// launcher_view.c — what `shardlab run` shows of a run (launcher.h): rank 0's log as it
// comes with a status line from its step events, or the dashboard, and the lines the
// launcher says itself.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "command/runs/runread.h"
#include "command/runs/runschema.h"
#include "common/harness/check.h"
#include "common/runfiles/runlog.h"
#include "launcher.h"

// ---------------------------------------------------------------------------------------
// Showing progress: rank 0's log, and a status line from its step events
// ---------------------------------------------------------------------------------------

void launcher_clear_status(Launch *L) {
    if (L->shown[0]) fputs("\r\033[K", stdout), L->shown[0] = 0;
}

// Reads whole lines of rank 0's file from *off on (or everything, at the end) and hands them
// to fn, which returns how much of them it took: the rest is offered again next time.
typedef size_t (*LinesFn)(Launch *L, char *text, size_t n, int final);
static void read_lines(Launch *L, const char *ext, off_t *off, int final, LinesFn fn) {
    static char buf[1 << 16];
    char path[sizeof L->run_dir + 32];
    launcher_rank_file(L, 0, ext, path, sizeof path);
    int fd = file_open_regular(path);  // (json.h: never a FIFO's wait)
    if (fd < 0) return;
    ssize_t got;
    while ((got = pread(fd, buf, sizeof buf - 1, *off)) > 0) {
        size_t n = (size_t)got;
        while (!final && n > 0 && buf[n - 1] != '\n') n--;  // half a line: wait for the rest
        if (n == 0 && (size_t)got == sizeof buf - 1) n = (size_t)got;  // unless it is enormous
        if (n == 0) break;
        buf[n] = 0;
        size_t took = fn(L, buf, n, final);
        *off += (off_t)took;
        if (took < n) break;
    }
    close(fd);
}

// Rank 0's output, as it comes, but for the lines the launcher says itself, so the user
// reads each once: a lab's usage error (check.h), which watch() passes on as its own (exit 2),
// and the error line of a rank 0 that failed, which watch() quotes in its one line. Either is
// held back until rank 0 has exited (an error line for at most ERROR_HOLD_US: die() exits
// right after it, but a lab may print such a line and go on).
static size_t echo_text(Launch *L, char *text, size_t n, int final) {
    size_t took = 0;
    while (took < n) {
        char *nl = memchr(text + took, '\n', n - took);
        size_t len = nl ? (size_t)(nl - (text + took)) + 1 : n - took;
        if (check_is_usage_line(text + took, len)) {
            if (!L->done[0] && !final) break;  // rank 0 has not exited yet: wait and see
            // The launcher said a rank's usage error as its own: rank 0's is the same line (the
            // ranks parse the same arguments), whether rank 0 got to exit 2 or was stopped first.
            if (L->usage_said) {
                took += len;
                continue;
            }
        } else if (memmem(text + took, len, ": error: ", 9)) {
            int64_t now = runlog_now_us();
            if (!L->error_held_us) L->error_held_us = now;
            if (!L->done[0] && !final && now - L->error_held_us < ERROR_HOLD_US) break;
            size_t body = len - (text[took + len - 1] == '\n');
            L->error_held_us = 0;
            if (L->error_said && body == strlen(L->errline[0]) && memcmp(text + took, L->errline[0], body) == 0) {
                took += len;
                continue;
            }
        }
        launcher_clear_status(L);
        fwrite(text + took, 1, len, stdout);
        took += len;
    }
    return took;
}

// Rank 0's start and step events, for the status line (spans: many, not needed).
static void read_event(void *arg, LogTailKind kind, const char *line, size_t n) {
    Launch *L = arg;
    if (kind != LOGTAIL_LINE) return;
    int start = runschema_line_is(line, n, "start");
    if (!start && !runschema_line_is(line, n, "step")) return;
    char err[128];
    JsonValue *v = json_parse(line, n, err, sizeof err);
    const JsonValue *steps = v ? json_get(json_get(v, "config"), "steps") : NULL;
    const JsonValue *step = v ? json_get(v, "step") : NULL, *loss = v ? json_get(v, "loss") : NULL;
    const JsonValue *ms = v ? json_get(json_get(v, "ms"), "step") : NULL;
    if (start && steps && steps->type == JSON_NUMBER) L->steps_total = (long)steps->number;
    if (!start && step && loss && ms && step->type == JSON_NUMBER && loss->type == JSON_NUMBER && ms->type == JSON_NUMBER)
        L->step = (long)step->number, L->loss = loss->number, L->ms_step = ms->number;
    json_free(v);
}

void launcher_show_progress(Launch *L, int final) {
    read_lines(L, "log", &L->echo_off, final, echo_text);
    if (L->status_line) {
        char path[sizeof L->run_dir + 32];
        launcher_rank_file(L, 0, "jsonl", path, sizeof path);
        logtail_poll(&L->events, path, LOGTAIL_MAX_LINE, 0, runlog_now_us(), read_event, L);
        char line[256], total[32] = "";
        long secs = (long)((runlog_now_us() - L->t0_us) / 1000000);
        if (L->steps_total > 0) snprintf(total, sizeof total, "/%ld", L->steps_total);
        if (L->step > 0)
            snprintf(line, sizeof line, "[shardlab] %s · %d ranks · step %ld%s · loss %.4f · %.1f ms/step · %ld:%02ld elapsed",
                     L->lab, L->n, L->step, total, L->loss, L->ms_step, secs / 60, secs % 60);
        else snprintf(line, sizeof line, "[shardlab] %s · %d ranks · starting · %ld:%02ld elapsed", L->lab, L->n, secs / 60, secs % 60);
        if (final) {
            launcher_clear_status(L);
        } else if (strcmp(line, L->shown) != 0) {  // redraw only what changed
            printf("\r\033[K%s", line);
            snprintf(L->shown, sizeof L->shown, "%s", line);
        }
    }
    fflush(stdout);
}

// ---------------------------------------------------------------------------------------
// The dashboard
// ---------------------------------------------------------------------------------------

// A line for the user's terminal (stderr): now, or when the dashboard gives the terminal back.
void launcher_say(Launch *L, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (L->tui) {
        char line[1024];
        vsnprintf(line, sizeof line, fmt, ap);
        sb_printf(&L->said, "%s", line);
    } else {
        vfprintf(stderr, fmt, ap);
    }
    va_end(ap);
}

// Whether a rank has exited already (left for watch() to reap: WNOWAIT).
static int a_rank_exited(const Launch *L) {
    for (int r = 0; r < L->n; r++) {
        siginfo_t info = {0};
        if (!L->done[r] && waitid(P_PID, (id_t)L->pid[r], &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == L->pid[r])
            return 1;
    }
    return 0;
}

void launcher_open_tui(Launch *L) {
    if (!L->want_tui) return;
    char err[512];
    TuiOptions o = {.attached = 1, .color = -1};
    // The ranks create their files within moments; the dashboard needs one to start from. A
    // rank that exits first (a bad option, a batch that does not divide: every rank refuses
    // it before its run log exists) leaves nothing to show: watch() says its one line.
    for (int tries = 0; tries < 250; tries++) {
        char path[sizeof L->run_dir + 32];
        launcher_rank_file(L, 0, "jsonl", path, sizeof path);
        if (launcher_file_size(path) > L->jsonl_start[0]) break;
        if (a_rank_exited(L)) return;
        usleep(POLL_US);
    }
    if (!(L->tui = tui_open(L->run_dir, &o, err, sizeof err))) {
        fprintf(stderr, "shardlab: no dashboard (%s); showing rank 0's output instead\n", err);
        L->status_line = isatty(STDOUT_FILENO);
    }
}

// The dashboard gives the terminal back; the run goes on with rank 0's output and the status
// line, starting with everything rank 0 printed so far.
void launcher_close_tui(Launch *L) {
    if (!L->tui) return;
    tui_close(L->tui);
    L->tui = NULL;
    if (L->said.len) fputs(L->said.data, stderr), sb_reset(&L->said);
    L->status_line = isatty(STDOUT_FILENO);
}

int launcher_under_make(void) {
    const char *level = getenv("MAKELEVEL");
    return level && *level;
}

// A lab's usage error about the model's depth ("4 stages need at least 4 blocks ... (--layers
// 2)") is one option away from running: name it as the user would type it, in make's ARGS
// when make started us (it sets MAKELEVEL for its commands), else as a lab option.
void launcher_hint_layers(Launch *L, const char *msg) {
    const char *at = strstr(msg, "at least ");
    int blocks;
    if (!strstr(msg, "(--layers ") || !at || sscanf(at, "at least %d blocks", &blocks) != 1) return;
    if (launcher_under_make()) launcher_say(L, "HINT: a model of %d blocks: ARGS=\"--layers %d\"\n", blocks, blocks);
    else launcher_say(L, "HINT: a model of %d blocks: --layers %d\n", blocks, blocks);
}
