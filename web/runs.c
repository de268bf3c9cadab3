// runs.c — the runs, for the web server: the list, one run's description and its events from
// any index, whether it has ended, and the launchers this server started. The live stream of
// the events is runs_stream.c's; starting a lab, runs_start.c's; grading a run, runs_grade.c's.
// See web.h.
//
// A run's events live in rank-<r>.jsonl, one file per rank, each appended by its rank. The
// server gives every event of a run an index: it reads the files incrementally (a run is
// polled at most every 50 ms, by whichever request asks first) and appends the complete new
// lines of rank 0, then rank 1, ... to one list. An index so means the same event for as long
// as the server runs, which is what ?from=N and Last-Event-ID resume from. Lines that are not
// JSON objects are skipped (a dashboard must not crash on a damaged log).
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "command/runs/logtail.h"
#include "command/runs/runschema.h"
#include "common/harness/catalog.h"
#include "common/harness/check.h"
#include "common/runfiles/runlog.h"
#include "runs_internal.h"
#include "web_internal.h"

#define MAX_CACHED_RUNS 64
#define MAX_LINES_PER_RUN 2000000
#define POLL_EVERY_US 50000
#define STOPPED_S 120               // logs still this long, and no end: the run stopped
#define SUMMARY_QUIET_S 2           // ... this long with summary.json (run_status)
#define LAUNCHER_EXIT_S 10          // the most runs_ended() waits for a launcher after its ranks

// ---------------------------------------------------------------------------------------
// The launchers this server started

// The launchers this server started, by run: reaped one by one (never waitpid(-1): the grader
// forks a reference run and waits for it, and must get its own child's status), and kept
// after they exit, so that a run whose launcher is gone counts as ended (runs_ended). Each
// writes its stdout and stderr into a pipe the server drains as it reaps: its last words say
// why a run failed when its ranks could write nothing (a full disk), and the pipe never fills
// (its write end does not block: what does not fit is dropped, and rank 0's lines are in its
// log anyway).
#define LAUNCHER_SAID 4096
typedef struct {
    pid_t pid;
    int exited, wstatus;
    int out;         // the pipe's read end; -1 once the launcher has exited and it is drained
    double planned;  // bytes its ranks hold at their planned peak (plan.h: per rank x ranks)
    char said[LAUNCHER_SAID];  // the last of what it wrote
    size_t nsaid;
    int cut;                   // its first bytes were dropped to keep the last
    char id[256];
} Launched;
static Launched *launched;
static int nlaunched, caplaunched;
static pthread_mutex_t launched_lock = PTHREAD_MUTEX_INITIALIZER;

void launched_add(pid_t pid, const char *id, double planned, int out) {
    pthread_mutex_lock(&launched_lock);
    if (nlaunched == caplaunched)
        launched = realloc_check(launched, (size_t)(caplaunched = caplaunched ? 2 * caplaunched : 64) * sizeof *launched);
    launched[nlaunched] = (Launched){.pid = pid, .out = out, .planned = planned};
    snprintf(launched[nlaunched].id, sizeof launched[nlaunched].id, "%s", id);
    nlaunched++;
    pthread_mutex_unlock(&launched_lock);
}

// What the launcher wrote since the last drain, its last LAUNCHER_SAID - 1 bytes kept
// (launched_lock held). The pipe does not block: this reads what is there and returns.
static void launched_drain(Launched *l) {
    char buf[8192];
    for (ssize_t k; l->out >= 0 && (k = read(l->out, buf, sizeof buf)) > 0;) {
        size_t n = (size_t)k, cap = LAUNCHER_SAID - 1;
        if (n >= cap) memcpy(l->said, buf + n - cap, cap), l->nsaid = cap, l->cut = 1;
        else {
            if (l->nsaid + n > cap) {
                l->cut = 1;
                size_t drop = l->nsaid + n - cap;
                memmove(l->said, l->said + drop, l->nsaid - drop);
                l->nsaid -= drop;
            }
            memcpy(l->said + l->nsaid, buf, n);
            l->nsaid += n;
        }
        l->said[l->nsaid] = 0;
    }
}

// 1 if this server started the run's launcher and it has exited, with its wait status in *ws.
static int launched_exited(const char *id, int *ws) {
    int exited = 0;
    pthread_mutex_lock(&launched_lock);
    for (int i = 0; i < nlaunched; i++)
        if (strcmp(launched[i].id, id) == 0) exited = launched[i].exited, *ws = launched[i].wstatus;
    pthread_mutex_unlock(&launched_lock);
    return exited;
}

// 1 if this server started the run.
static int launched_has(const char *id) {
    int has = 0;
    pthread_mutex_lock(&launched_lock);
    for (int i = 0; i < nlaunched && !has; i++) has = strcmp(launched[i].id, id) == 0;
    pthread_mutex_unlock(&launched_lock);
    return has;
}

// A launcher that ended by itself with a failure (1: a rank failed, 2: a bad option, 127: it
// could not run), not one stopped by a signal (killed, or 128 + the signal it passed on).
static int launcher_failed(int ws) {
    return WIFEXITED(ws) && WEXITSTATUS(ws) != 0 && WEXITSTATUS(ws) < 128;
}

void runs_reap(void) {
    pthread_mutex_lock(&launched_lock);
    for (int i = 0; i < nlaunched; i++) {
        Launched *l = &launched[i];
        if (l->exited) continue;
        launched_drain(l);
        if (waitpid(l->pid, &l->wstatus, WNOHANG) == l->pid) {
            l->exited = 1;
            launched_drain(l);  // its last words, written before it exited, are in the pipe
            if (l->out >= 0) close(l->out), l->out = -1;
        }
    }
    pthread_mutex_unlock(&launched_lock);
}

int launched_running(char (*ids)[256], double *planned, int max) {
    runs_reap();
    int n = 0;
    pthread_mutex_lock(&launched_lock);
    for (int i = 0; i < nlaunched && n < max; i++)
        if (!launched[i].exited) {
            snprintf(ids[n], sizeof ids[n], "%s", launched[i].id);
            planned[n++] = launched[i].planned;
        }
    pthread_mutex_unlock(&launched_lock);
    return n;
}

// The launcher's own lines ("shardlab: ...", "HINT: ...") of what it wrote last, into out as
// a JSON object {"exit":N,"said":"..."} (N: its exit status, 128 + the signal that killed
// it), or nothing if this server did not start the run or the launcher goes on. Rank 0's
// output, which it echoes, is left out: the run's events and logs have it.
static void launched_json(const char *id, StrBuf *out) {
    pthread_mutex_lock(&launched_lock);
    for (int i = 0; i < nlaunched; i++) {
        Launched *l = &launched[i];
        if (strcmp(l->id, id) != 0 || !l->exited) continue;
        StrBuf own;
        sb_init(&own);
        sb_append(&own, "", 0);
        const char *p = l->said;
        if (l->cut) p += strcspn(p, "\n") + (p[strcspn(p, "\n")] != 0);  // (a first line cut short is not whole)
        for (const char *nl; *p; p = nl + (*nl != 0)) {
            nl = p + strcspn(p, "\n");
            if (strncmp(p, "shardlab", 8) == 0 || strncmp(p, "HINT:", 5) == 0) sb_append(&own, p, (size_t)(nl - p + (*nl != 0)));
        }
        int ws = l->wstatus;
        sb_printf(out, ",\"launcher\":{\"exit\":%d,\"said\":", WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws));
        sb_json_string(out, own.data);
        sb_printf(out, "}");
        sb_free(&own);
    }
    pthread_mutex_unlock(&launched_lock);
}

// ---------------------------------------------------------------------------------------
// A run, read: its events indexed, its status, and the cache of runs

static Run *cache[MAX_CACHED_RUNS];
static int ncached;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

// meta.json, summary.json: the first max bytes, or NULL; free() it.
static char *read_small(const char *path, size_t max) {
    StrBuf b;
    sb_init(&b);
    return sb_read_file(&b, path, max) < 0 ? NULL : b.data;
}

// The run's world size: meta.json's (*from_meta = 1), else the rank files there are so far.
static int world_of(const char *dir, int *from_meta) {
    char path[4600];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    char *m = read_small(path, 1 << 16), err[64];
    int world = 0;
    JsonValue *v = m ? json_parse(m, strlen(m), err, sizeof err) : NULL;
    const JsonValue *ws = json_get(v, "world_size");
    if (!ws) ws = json_get(v, "world");
    if (ws && ws->type == JSON_NUMBER && ws->number >= 1 && ws->number <= MAX_RUN_RANKS) world = (int)ws->number;
    json_free(v);
    free(m);
    if (from_meta) *from_meta = world > 0;
    if (world == 0)  // no meta.json yet: count the rank files
        for (int r = 0; r < MAX_RUN_RANKS; r++) {
            snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
            if (access(path, F_OK) != 0) break;
            world = r + 1;
        }
    return world ? world : 1;
}

static void add_line(Run *r, const char *s, size_t n) {
    if (n == 0 || r->n >= MAX_LINES_PER_RUN) return;
    char err[64];
    JsonValue *v = json_parse(s, n, err, sizeof err);
    int ok = v && v->type == JSON_OBJECT && json_get(v, "ev") && json_get(v, "ev")->type == JSON_STRING;
    if (ok && strcmp(json_get(v, "ev")->string, "end") == 0) {
        const JsonValue *rk = json_get(v, "rank"), *st = json_get(v, "status");
        if (rk && rk->type == JSON_NUMBER && rk->number >= 0 && rk->number < MAX_RUN_RANKS) r->ended[(int)rk->number] = 1;
        if (st && st->type == JSON_STRING && strcmp(st->string, "ok") != 0) snprintf(r->status, sizeof r->status, "error");
    }
    json_free(v);
    if (!ok) return;
    if (r->n == r->cap) r->lines = realloc_check(r->lines, (size_t)(r->cap = r->cap ? 2 * r->cap : 1024) * sizeof *r->lines);
    char *copy = malloc_check(n + 1);
    memcpy(copy, s, n);
    copy[n] = 0;
    r->lines[r->n++] = copy;
}

// A line of a rank's file (logtail.h): an event if it is one.
static void on_line(void *arg, LogTailKind kind, const char *line, size_t n) {
    if (kind == LOGTAIL_LINE) add_line(arg, line, n);
}

// What the rank files gained since the last poll (r->lock held).
void poll_run(Run *r) {
    int64_t now = runlog_now_us();
    if (now - r->polled_us < POLL_EVERY_US) return;
    r->polled_us = now;
    if (!r->world_known) r->world = world_of(r->dir, &r->world_known);
    for (int k = 0; k < r->world; k++) {
        char path[4600];
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", r->dir, k);
        // A line too long to be an event, or given up, is not one: add_line() skips what is not.
        logtail_poll(&r->tail[k], path, LOGTAIL_MAX_LINE, 0, now, on_line, r);
    }
    int all = 1;
    for (int k = 0; k < r->world; k++) all &= r->ended[k];
    if (all && strcmp(r->status, "running") == 0) snprintf(r->status, sizeof r->status, "ok");
}

// The newest change to the run's files (its directory, meta.json, the rank logs).
static time_t run_last_write(const char *dir, int world) {
    struct stat st;
    time_t newest = stat(dir, &st) == 0 ? st.st_mtime : 0;
    char path[4600];
    for (int k = -1; k < world; k++) {
        if (k < 0) snprintf(path, sizeof path, "%s/meta.json", dir);
        else snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, k);
        if (stat(path, &st) == 0 && st.st_mtime > newest) newest = st.st_mtime;
    }
    return newest;
}

// Whether a run goes on, and how it ended: the one answer the list, a run's description, its
// events and its stream all give (r locked). "ok" or "error": every rank logged its end.
// Else it is over when rank 0 wrote summary.json, the launcher this server started has
// exited (a rank or the launcher died), or the logs have been still for STOPPED_S (a run
// under mpirun that was killed): "error" if that launcher ended with a failure of its own
// (its ranks failed at start and could not log it, on a full disk say), "stopped" otherwise.
// "running" until then. Before saying it is over the logs are read to their end: what the
// ranks wrote last is not lost. Rank 0 writes summary.json as it finishes, when the other
// ranks may not have written their end yet: with it, the logs must have been still for
// SUMMARY_QUIET_S, not STOPPED_S (else a stream could end, and a run be called stopped, a
// moment before rank 1's last event).
const char *run_status(Run *r) {
    if (strcmp(r->status, "running") != 0) return r->status;
    char path[4600];
    snprintf(path, sizeof path, "%s/summary.json", r->dir);
    time_t still = time(NULL) - run_last_write(r->dir, r->world);
    int ws = 0, exited = launched_exited(r->id, &ws);
    if (!exited && still <= (access(path, F_OK) == 0 ? SUMMARY_QUIET_S : STOPPED_S)) return "running";
    r->polled_us = 0;  // (a poll now, whenever the last one was)
    poll_run(r);
    if (strcmp(r->status, "running") == 0)  // (for good)
        snprintf(r->status, sizeof r->status, "%s", exited && launcher_failed(ws) ? "error" : "stopped");
    return r->status;
}

// A run is a directory under w->runs (a freshly started one may not have its logs yet).
// Its id is a safe name (web_safe_name): the list shows no other (runs_list_json).
int run_exists(Web *w, const char *id, char *dir, size_t n) {
    if (!web_safe_name(id)) return 0;
    snprintf(dir, n, "%s/%s", w->runs, id);
    struct stat st;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

int runs_exists(Web *w, const char *id) {
    char dir[4400];
    return run_exists(w, id, dir, sizeof dir);
}

static void run_free(Run *r) {
    for (long k = 0; k < r->n; k++) free(r->lines[k]);
    free(r->lines);
    for (int k = 0; k < MAX_RUN_RANKS; k++) logtail_free(&r->tail[k]);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

// The cached run (created on first use), LOCKED (the caller unlocks r->lock), or NULL if there
// is no such run. The run is locked before the cache is let go, so a run is never forgotten
// (freed) between a reader finding it and locking it: forgetting needs both locks.
Run *get_run(Web *w, const char *id) {
    char dir[4400];
    if (!run_exists(w, id, dir, sizeof dir)) return NULL;
    pthread_mutex_lock(&cache_lock);
    Run *r = NULL;
    for (int i = 0; i < ncached && !r; i++)
        if (strcmp(cache[i]->id, id) == 0) r = cache[i];
    if (!r) {
        if (ncached == MAX_CACHED_RUNS) {  // forget a finished one nobody is reading
            for (int i = 0; i < ncached; i++)
                if (strcmp(cache[i]->status, "running") != 0 && pthread_mutex_trylock(&cache[i]->lock) == 0) {
                    Run *old = cache[i];
                    pthread_mutex_unlock(&old->lock);
                    run_free(old);
                    cache[i] = cache[--ncached];
                    break;
                }
        }
        if (ncached < MAX_CACHED_RUNS) {
            r = calloc_check(1, sizeof *r);
            snprintf(r->id, sizeof r->id, "%s", id);
            snprintf(r->dir, sizeof r->dir, "%s", dir);
            snprintf(r->status, sizeof r->status, "running");
            pthread_mutex_init(&r->lock, NULL);
            r->world = world_of(dir, &r->world_known);
            cache[ncached++] = r;
        }
    }
    if (r) pthread_mutex_lock(&r->lock);
    pthread_mutex_unlock(&cache_lock);
    return r;
}

void runs_free_all(void) {
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < ncached; i++) run_free(cache[i]);
    ncached = 0;
    pthread_mutex_unlock(&cache_lock);
    pthread_mutex_lock(&launched_lock);
    for (int i = 0; i < nlaunched; i++)
        if (launched[i].out >= 0) close(launched[i].out);  // (a run that goes on: its writes fail, and are not needed)
    free(launched);
    launched = NULL;
    nlaunched = caplaunched = 0;
    pthread_mutex_unlock(&launched_lock);
}

int runs_ended(Web *w, const char *id) {
    Run *r = get_run(w, id);  // (locked)
    if (!r) return -1;
    poll_run(r);
    int ended = strcmp(run_status(r), "running") != 0;
    pthread_mutex_unlock(&r->lock);
    if (!ended || !launched_has(id)) return ended;
    // The ranks' last lines come a moment before their launcher exits, and it holds the run
    // directory's lock until then: a grade or a --ref asked for in that moment would find the
    // run in use. So the run has ended once its launcher has too; it is waited for, briefly.
    int ws;
    for (int64_t t0 = runlog_now_us(); runlog_now_us() - t0 < LAUNCHER_EXIT_S * 1000000;) {
        runs_reap();
        if (launched_exited(id, &ws)) return 1;
        usleep(20 * 1000);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------
// GET /api/runs, /api/runs/<id>, /api/runs/<id>/events

typedef struct {
    char id[256];
    time_t mtime;
} Entry;

static int newest_first(const void *a, const void *b) {
    const Entry *x = a, *y = b;
    return x->mtime < y->mtime ? 1 : x->mtime > y->mtime ? -1 : strcmp(x->id, y->id);
}

// A whole number from a run's files if it is one from lo to hi, else dflt: the files are
// untrusted, and a double too large for the integer has no conversion.
static long whole_in(const JsonValue *v, long lo, long hi, long dflt) {
    if (!v || v->type != JSON_NUMBER || !(v->number >= (double)lo && v->number <= (double)hi)) return dflt;
    return (long)v->number;
}
// A run's entry in the list: its status (run_status: the same word its page and its stream
// say), and how far it got from the end of rank 0's log, without reading all of it.
static void list_status(Web *w, const char *id, const char *dir, StrBuf *out) {
    char status[16] = "running";
    Run *r = get_run(w, id);  // (locked)
    if (r) {
        poll_run(r);
        snprintf(status, sizeof status, "%s", run_status(r));
        pthread_mutex_unlock(&r->lock);
    }
    char path[4600];
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    char tail[8193] = "";
    int fd = file_open_regular(path);  // (json.h: a FIFO in its place would block here)
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0) {
        off_t from = st.st_size > 8192 ? st.st_size - 8192 : 0;
        ssize_t got = pread(fd, tail, 8192, from);
        tail[got > 0 ? got : 0] = 0;
    }
    if (fd >= 0) close(fd);
    long last_step = -1;
    double loss = 0;
    for (char *line = tail, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char err[32];
        JsonValue *v = json_parse(line, strlen(line), err, sizeof err);
        const JsonValue *ev = json_get(v, "ev");
        if (ev && ev->type == JSON_STRING && strcmp(ev->string, "step") == 0 && json_get(v, "step") && json_get(v, "loss")) {
            last_step = whole_in(json_get(v, "step"), 0, 1L << 40, -1);
            if (!json_number(json_get(v, "loss"), &loss)) loss = 0;
        }
        json_free(v);
    }
    sb_printf(out, "\"status\":\"%s\",\"last_step\":%ld,\"loss\":", status, last_step);
    sb_json_number(out, loss);
}

void runs_list_json(Web *w, StrBuf *out) {
    Entry *e = NULL;
    int n = 0, cap = 0;
    int unlisted = 0;
    DIR *d = opendir(w->runs);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char probe[4600], dir[4400];
        snprintf(probe, sizeof probe, "%s/%s/rank-0.jsonl", w->runs, de->d_name);
        struct stat st;
        // A run: rank 0's log, or a run this server started whose ranks have not written
        // one yet (or never could: a full disk). Listed from its start, as its page is.
        if (stat(probe, &st) != 0) {
            snprintf(probe, sizeof probe, "%s/%s", w->runs, de->d_name);
            if (!launched_has(de->d_name) || stat(probe, &st) != 0) continue;
        }
        // Only ids the pages serve: a directory whose name is not a safe name (quotes, a
        // newline, spaces, "..", over 200 characters) would be listed with an id that is 404
        // everywhere else. Anything may create directories here; the launcher never names a
        // run so. Counted, so the list can say some were left out, and why.
        if (!run_exists(w, de->d_name, dir, sizeof dir)) {
            unlisted++;
            continue;
        }
        if (n == cap) e = realloc_check(e, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *e);
        snprintf(e[n].id, sizeof e[n].id, "%s", de->d_name);
        e[n++].mtime = st.st_mtime;
    }
    if (d) closedir(d);
    if (n) qsort(e, (size_t)n, sizeof *e, newest_first);  // (no runs: e is NULL, which qsort may not be given)
    sb_printf(out, "{\"runs\":[");
    for (int i = 0; i < n && i < 50; i++) {
        char dir[4400], path[4600];
        snprintf(dir, sizeof dir, "%s/%s", w->runs, e[i].id);
        snprintf(path, sizeof path, "%s/meta.json", dir);
        char *m = read_small(path, 1 << 16), err[64];
        JsonValue *meta = m ? json_parse(m, strlen(m), err, sizeof err) : NULL;
        const JsonValue *lab = json_get(meta, "lab"), *cfg = json_get(meta, "config"), *start = json_get(meta, "start_time");
        const JsonValue *steps = json_get(cfg, "steps");
        // A run that never started has no meta.json: its lab is its name's first word (as the
        // launcher names runs), if that is a lab. What it is decides what the list shows: no
        // steps for one that did not start, nor for a lab that trains nothing (collectives).
        char named[64];
        snprintf(named, sizeof named, "%.*s", (int)strcspn(e[i].id, "-"), e[i].id);
        const char *lab_name = lab && lab->type == JSON_STRING ? lab->string : catalog_lab(named) ? named : "?";
        const CatLab *known = catalog_lab(lab_name);
        sb_printf(out, "%s{\"id\":", i ? "," : "");
        sb_json_string(out, e[i].id);
        sb_printf(out, ",\"lab\":");
        sb_json_string(out, lab_name);
        sb_printf(out, ",\"started\":%s,\"trains\":%s", meta ? "true" : "false", known && !known->trains ? "false" : "true");
        sb_printf(out, ",\"world\":%d,\"steps\":%ld,\"start\":", world_of(dir, NULL), whole_in(steps, 0, 1L << 40, 0));
        sb_json_string(out, start && start->type == JSON_STRING ? start->string : "");
        sb_printf(out, ",");
        list_status(w, e[i].id, dir, out);
        sb_printf(out, "}");
        json_free(meta);
        free(m);
    }
    sb_printf(out, "],\"unlisted\":%d}", unlisted);
    free(e);
}

int runs_info_json(Web *w, const char *id, StrBuf *out) {
    Run *r = get_run(w, id);  // (locked)
    if (!r) return -1;
    poll_run(r);
    char path[4600];
    snprintf(path, sizeof path, "%s/meta.json", r->dir);
    char *meta = read_small(path, 1 << 20), *summary = NULL, err[64];
    snprintf(path, sizeof path, "%s/summary.json", r->dir);
    summary = read_small(path, 1 << 20);
    JsonValue *mv = meta ? json_parse(meta, strlen(meta), err, sizeof err) : NULL;
    JsonValue *sv = summary ? json_parse(summary, strlen(summary), err, sizeof err) : NULL;
    const JsonValue *lab = json_get(mv, "lab"), *ref = json_get(json_get(mv, "config"), "ref");
    // A run started a moment ago has no meta.json yet: its name starts with its lab.
    char lab_name[64];
    snprintf(lab_name, sizeof lab_name, "%s", lab && lab->type == JSON_STRING ? lab->string : id);
    if (!(lab && lab->type == JSON_STRING)) lab_name[strcspn(lab_name, "-")] = 0;
    sb_printf(out, "{\"id\":");
    sb_json_string(out, id);
    sb_printf(out, ",\"lab\":");
    sb_json_string(out, lab_name);
    snprintf(path, sizeof path, "%s/grade.json", r->dir);
    int graded = access(path, F_OK) == 0;  // (the page asks for the grade only then: no 404 to log)
    // Whether the lab trains (the catalog's word, as in the list): the page of one that does
    // not (collectives) draws its measurements, not the loss, step time and memory panels.
    const CatLab *known = catalog_lab(lab_name);
    sb_printf(out, ",\"status\":\"%s\",\"world\":%d,\"events\":%ld,\"graded\":%s,\"trains\":%s,\"meta\":%s,\"summary\":%s,"
                   "\"ref\":",
              run_status(r), r->world, r->n, graded ? "true" : "false", known && !known->trains ? "false" : "true",
              mv ? meta : "null", sv ? summary : "null");
    // A reference run is named by its directory; it is linked only if it is one of ours.
    const char *base = ref && ref->type == JSON_STRING ? strrchr(ref->string, '/') : NULL;
    char refdir[4400];
    if (base && run_exists(w, base + 1, refdir, sizeof refdir)) sb_json_string(out, base + 1);
    else sb_printf(out, "null");
    launched_json(id, out);  // (how its launcher ended, when this server started it)
    sb_printf(out, "}");
    pthread_mutex_unlock(&r->lock);
    json_free(mv);
    json_free(sv);
    free(meta);
    free(summary);
    return 0;
}

static int line_matches(const char *line, const char *kind, int rank) {
    if (kind && !runschema_line_is(line, strlen(line), kind)) return 0;
    if (rank >= 0) {
        char want[32];
        snprintf(want, sizeof want, "\"rank\":%d,", rank);
        if (!strstr(line, want)) return 0;
    }
    return 1;
}

int runs_events_json(Web *w, const char *id, long from, const char *kind, int rank, StrBuf *out) {
    Run *r = get_run(w, id);  // (locked)
    if (!r) return -1;
    poll_run(r);
    if (from < 0) from = 0;
    long i = from, sent = 0;
    sb_printf(out, "{\"events\":[");
    for (; i < r->n && sent < 5000; i++)
        if (line_matches(r->lines[i], kind, rank)) sb_printf(out, "%s%s", sent++ ? "," : "", r->lines[i]);
    const char *status = run_status(r);
    int done = strcmp(status, "running") != 0 && i >= r->n;
    sb_printf(out, "],\"next\":%ld,\"done\":%s,\"status\":\"%s\"}", i, done ? "true" : "false", status);
    pthread_mutex_unlock(&r->lock);
    return 0;
}
