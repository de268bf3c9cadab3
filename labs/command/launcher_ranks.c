// launcher_ranks.c — how `shardlab run` reads its ranks' endings (launcher.h): exit statuses
// in words, a rank's own error line, which rank caused a failure, and the end events of
// ranks that died without writing theirs.
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
// Watching the ranks
// ---------------------------------------------------------------------------------------

void launcher_describe_exit(int status, char *out, size_t n) {
    if (WIFSIGNALED(status)) {
        const char *abbrev = sigabbrev_np(WTERMSIG(status));
        snprintf(out, n, "was killed by signal %d (SIG%s)", WTERMSIG(status), abbrev ? abbrev : "?");
    } else {
        snprintf(out, n, "failed (exit %d)", WEXITSTATUS(status));
    }
}

int launcher_failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// What the rank said about its failure: the last line of its log that says ": error: "
// (die() writes one), else, if it exited on its own, its last line (a usage error, a
// sanitizer's summary). A rank killed by a signal said nothing about it.
void launcher_read_error_line(Launch *L, int r) {
    char path[sizeof L->run_dir + 32], *line = NULL, last[sizeof L->errline[r]] = "";
    size_t cap = 0;
    launcher_rank_file(L, r, "log", path, sizeof path);
    FILE *f = file_fopen_regular(path);
    if (!f) return;
    fseeko(f, L->log_start[r], SEEK_SET);
    for (ssize_t len; (len = getline(&line, &cap, f)) > 0;) {
        if (line[len - 1] == '\n') line[len - 1] = 0;
        if (strstr(line, ": error: ")) snprintf(L->errline[r], sizeof L->errline[r], "%s", line);
        if (line[0]) snprintf(last, sizeof last, "%s", line);
    }
    if (!L->errline[r][0] && WIFEXITED(L->wstatus[r])) snprintf(L->errline[r], sizeof L->errline[r], "%s", last);
    free(line);
    fclose(f);
}

// The cause of a failure is the first rank to fail, which is not always the first we reap:
// when rank 2 dies, ranks 0 and 1 stop too and may exit first. So from the first failure we
// reaped, we follow who blames whom. Returns the cause, or -1 to look again after a while
// (the blamed rank has not exited yet; we wait for it up to BLAME_WAIT_US).
int launcher_find_cause(Launch *L, int first, int64_t first_seen_us) {
    int cause = first;
    for (int hops = 0; hops < MAX_RANKS; hops++) {
        int b = run_blamed_rank(L->errline[cause]);  // runread.h
        if (b < 0 || b >= L->n || b == cause) break;
        if (!L->done[b]) return runlog_now_us() - first_seen_us < BLAME_WAIT_US ? -1 : cause;
        if (!launcher_failed(L->wstatus[b])) break;
        cause = b;
    }
    return cause;
}

int launcher_count_running(const Launch *L) {
    int k = 0;
    for (int r = 0; r < L->n; r++) k += !L->done[r];
    return k;
}

// What a rank's events say of its ending: whether it wrote its end, with what status (its
// last end event's), and its last step.
typedef struct {
    int ended;
    char status[32];
    long steps;
} Ending;

static void read_ending(void *arg, LogTailKind kind, const char *line, size_t n) {
    Ending *e = arg;
    if (kind != LOGTAIL_LINE) return;
    if (runschema_line_is(line, n, "end")) {
        char err[128];
        JsonValue *v = json_parse(line, n, err, sizeof err);
        const JsonValue *st = json_get(v, "status");
        e->ended = 1;
        snprintf(e->status, sizeof e->status, "%s", st && st->type == JSON_STRING ? st->string : "?");
        json_free(v);
    }
    const char *s = runschema_line_is(line, n, "step") ? memmem(line, n, "\"step\":", 7) : NULL;
    if (s) e->steps = strtol(s + 7, NULL, 10);  // (the line ends in '}': strtol stops inside it)
}

// A rank that died without an "end" event gets an error and an end event from us: it is
// dead, so nobody else writes to its file now.
int launcher_end_event_logs(Launch *L) {
    int unended = -1;
    for (int r = 0; r < L->n; r++) {
        char path[sizeof L->run_dir + 32];
        launcher_rank_file(L, r, "jsonl", path, sizeof path);
        LogTail tail = {.offset = L->jsonl_start[r]};  // this run's events only
        Ending e = {0, "", 0};
        logtail_poll(&tail, path, LOGTAIL_MAX_LINE, 0, 0, read_ending, &e);
        int newline = tail.partial_len == 0;  // (a rank killed mid-line left half an event)
        logtail_free(&tail);
        long steps = e.steps;
        int ended = e.ended, exited_0 = !launcher_failed(L->wstatus[r]);
        // Exit 0 is not the whole story: the run is the rank's only if its log says it ended ok.
        if (exited_0 && unended < 0 && (!ended || strcmp(e.status, "ok") != 0)) {
            unended = r;
            if (ended) snprintf(L->errline[r], sizeof L->errline[r], "exited with status 0, but its end event says status %s", e.status);
            else snprintf(L->errline[r], sizeof L->errline[r], "exited with status 0 without writing an end event");
        }
        if (ended) continue;
        char how[64];
        if (launcher_failed(L->wstatus[r])) launcher_describe_exit(L->wstatus[r], how, sizeof how);
        else snprintf(how, sizeof how, "exited with status 0");
        StrBuf sb, msg;
        sb_init(&sb), sb_init(&msg);
        sb_printf(&msg, "rank %d %s without writing an end event (written by shardlab run)%s%s", r, how,
                  L->errline[r][0] && !exited_0 ? ": " : "", exited_0 ? "" : L->errline[r]);
        sb_printf(&sb, "%s{\"ev\":\"error\",\"rank\":%d,\"msg\":", newline ? "" : "\n", r);
        sb_json_string(&sb, msg.data);
        sb_printf(&sb, "}\n{\"ev\":\"end\",\"rank\":%d,\"status\":\"error\",\"steps\":%ld}\n", r, steps);
        // A disk too full for the rank's own end is too full for ours: say so, and go on to
        // say how the run ended (the exit status says it failed).
        FILE *out = fopen(path, "a");
        int written = out && fwrite(sb.data, 1, sb.len, out) == sb.len;
        if (out) written &= fclose(out) == 0;
        if (!written) fprintf(stderr, "shardlab: cannot write rank %d's end event into %s: %s\n", r, path, strerror(errno));
        sb_free(&sb), sb_free(&msg);
    }
    return unended;
}

void launcher_remove_unstarted(Launch *L) {
    char path[sizeof L->run_dir + 32];
    snprintf(path, sizeof path, "%s/meta.json", L->run_dir);
    if (!L->dir_made || access(path, F_OK) == 0) return;
    for (int r = 0; r < L->n; r++) {
        launcher_rank_file(L, r, "log", path, sizeof path);
        unlink(path);
        launcher_rank_file(L, r, "jsonl", path, sizeof path);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/%s", L->run_dir, JOBLOCK_FILE);
    unlink(path);  // (ours: we made the directory, under a name no other job has)
    rmdir(L->run_dir);  // (not empty: something else is there, and it stays)
}
