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
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "catalog.h"
#include "check.h"
#include "logtail.h"
#include "runlog.h"
#include "runs_internal.h"
#include "runschema.h"

#define MAX_CACHED_RUNS 64
#define MAX_LINES_PER_RUN 2000000
#define POLL_EVERY_US 50000
#define STOPPED_S 120               // logs still this long, and no end: the run stopped
#define SUMMARY_QUIET_S 2           // ... this long with summary.json (run_status)

// ---------------------------------------------------------------------------------------
// The launchers this server started

// The launchers this server started, by run: reaped one by one (never waitpid(-1): the grader
// forks a reference run and waits for it, and must get its own child's status), and kept
// after they exit, so that a run whose launcher is gone counts as ended (runs_ended).
typedef struct {
    pid_t pid;
    int exited, status;   // its wait status, once exited
    int err_fd;           // its stderr, read as it comes (-1: at its end, closed)
    char line[512];       // the line it is writing there now
    size_t len;
    char said[1024];      // its lines that name a failure, joined, else its last line
    int failures;         // how many lines said holds
    char id[256];
} Launched;
static Launched *launched;
static int nlaunched, caplaunched;
static pthread_mutex_t launched_lock = PTHREAD_MUTEX_INITIALIZER;

void launched_add(pid_t pid, const char *id, int err_fd) {
    pthread_mutex_lock(&launched_lock);
    if (nlaunched == caplaunched)
        launched = realloc_check(launched, (size_t)(caplaunched = caplaunched ? 2 * caplaunched : 64) * sizeof *launched);
    launched[nlaunched] = (Launched){.pid = pid, .err_fd = err_fd};
    snprintf(launched[nlaunched].id, sizeof launched[nlaunched].id, "%s", id);
    nlaunched++;
    pthread_mutex_unlock(&launched_lock);
}

// 1 if this server started the run's launcher and it has exited.
static int launched_exited(const char *id) {
    int exited = 0;
    pthread_mutex_lock(&launched_lock);
    for (int i = 0; i < nlaunched; i++)
        if (strcmp(launched[i].id, id) == 0) exited = launched[i].exited;
    pthread_mutex_unlock(&launched_lock);
    return exited;
}

// What the launcher wrote on its stderr since the last look (its descriptor does not block),
// kept line by line: the lines that name a failure ("rank 0 failed (exit 1): ...", "cannot
// write ...: No space left on device", die()'s ": error: "), joined, else the last line. Its
// end (the launcher and its ranks gone) closes the descriptor.
static void read_launcher_err(Launched *l) {
    char buf[4096];
    ssize_t k;
    while (l->err_fd >= 0 && (k = read(l->err_fd, buf, sizeof buf)) != 0) {
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            break;
        }
        for (ssize_t i = 0; i < k; i++) {
            if (buf[i] != '\n') {
                if (l->len < sizeof l->line - 1) l->line[l->len++] = buf[i];
                continue;
            }
            l->line[l->len] = 0;
            int failure = strstr(l->line, "error") || strstr(l->line, "failed") || strstr(l->line, "cannot");
            size_t used = l->failures ? strlen(l->said) : 0;
            if (l->len && !strncmp(l->line, "HINT: ", 6)) {  // (what to try, not what happened)
            } else if (l->len && failure) {
                snprintf(l->said + used, sizeof l->said - used, "%s%s", used ? "; " : "", l->line);
                l->failures++;
            } else if (l->len && !l->failures) {
                snprintf(l->said, sizeof l->said, "%s", l->line);
            }
            l->len = 0;
        }
    }
    if (l->err_fd >= 0) close(l->err_fd);
    l->err_fd = -1;
}

void runs_reap(void) {
    pthread_mutex_lock(&launched_lock);
    for (int i = 0; i < nlaunched; i++) {
        Launched *l = &launched[i];
        read_launcher_err(l);  // (before the wait: a pipe it fills must not hold it up)
        if (!l->exited && waitpid(l->pid, &l->status, WNOHANG) == l->pid) l->exited = 1, read_launcher_err(l);
    }
    pthread_mutex_unlock(&launched_lock);
}

// 1 if this server started the run's launcher and it said the run failed (exit 1: a rank
// failed, or the launcher itself; 2: bad options), with what it said in msg ("shardlab run
// exited with status 1: ..."). A launcher stopped by a signal (killed, or 128 + the signal it
// passed on to its ranks) said nothing of the kind: its run is "stopped".
static int launched_failed(const char *id, char *msg, size_t n) {
    int failed = 0;
    pthread_mutex_lock(&launched_lock);
    for (int i = 0; i < nlaunched; i++) {
        const Launched *l = &launched[i];
        if (strcmp(l->id, id) != 0 || !l->exited) continue;
        failed = WIFEXITED(l->status) && WEXITSTATUS(l->status) != 0 && WEXITSTATUS(l->status) < 128;
        if (!failed) continue;
        snprintf(msg, n, "shardlab run exited with status %d", WEXITSTATUS(l->status));
        if (l->said[0]) snprintf(msg + strlen(msg), n - strlen(msg), ": %s", l->said);
    }
    pthread_mutex_unlock(&launched_lock);
    return failed;
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
// "stopped": it is over without that: rank 0 wrote summary.json, the launcher this server
// started has exited (a rank or the launcher died), or the logs have been still for
// STOPPED_S (a run under mpirun that was killed). "running" otherwise. Before saying
// "stopped" the logs are read to their end: what the ranks wrote last is not lost. Rank 0
// writes summary.json as it finishes, when the other ranks may not have written their end
// yet: with it, the logs must have been still for SUMMARY_QUIET_S, not STOPPED_S (else a
// stream could end, and a run be called stopped, a moment before rank 1's last event).
const char *run_status(Run *r) {
    if (strcmp(r->status, "running") != 0) return r->status;
    char path[4600];
    snprintf(path, sizeof path, "%s/summary.json", r->dir);
    time_t still = time(NULL) - run_last_write(r->dir, r->world);
    if (!launched_exited(r->id) && still <= (access(path, F_OK) == 0 ? SUMMARY_QUIET_S : STOPPED_S)) return "running";
    r->polled_us = 0;  // (a poll now, whenever the last one was)
    poll_run(r);
    // The launcher this server started failed, and the logs do not say it all (a disk too
    // full to hold the ranks' errors, a run directory it could not hold): its own words, as
    // an error event of the run's list (in memory: the run's files are the ranks'), and the
    // run ended in error.
    char said[1200];
    if (strcmp(r->status, "running") == 0 && launched_failed(r->id, said, sizeof said)) {
        StrBuf ev;
        sb_init(&ev);
        sb_printf(&ev, "{\"ev\":\"error\",\"by\":\"launcher\",\"msg\":");
        sb_json_string(&ev, said);
        sb_printf(&ev, "}");
        add_line(r, ev.data, ev.len);
        sb_free(&ev);
        snprintf(r->status, sizeof r->status, "error");
    }
    if (strcmp(r->status, "running") == 0) snprintf(r->status, sizeof r->status, "stopped");  // (for good)
    return r->status;
}

// A run is a directory under w->runs (a freshly started one may not have its logs yet).
int run_exists(Web *w, const char *id, char *dir, size_t n) {
    if (!id[0] || strchr(id, '/') || strstr(id, "..") || strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                                  "0123456789._-") != strlen(id))
        return 0;
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
        if (launched[i].err_fd >= 0) close(launched[i].err_fd);
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
    return ended;
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
    DIR *d = opendir(w->runs);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof e->id) continue;
        char probe[4600];
        snprintf(probe, sizeof probe, "%s/%s/rank-0.jsonl", w->runs, de->d_name);
        struct stat st;
        if (stat(probe, &st) != 0) continue;
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
    sb_printf(out, "]}");
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
