// runread.c — see runread.h. The schema it reads is labs/DESIGN.md, Events.
#include "runread.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/harness/check.h"
#include "common/runfiles/json.h"
#include "runschema.h"

// ---------------------------------------------------------------------------------------
// Small helpers: numbers from JSON that may be anything
// ---------------------------------------------------------------------------------------

static double num(const JsonValue *v, double otherwise) {
    return v && v->type == JSON_NUMBER && isfinite(v->number) ? v->number : otherwise;
}

// A float the lab measured: a number, or NaN and the infinities as the schema writes them.
static double flt(const JsonValue *v, double otherwise) {
    double x;
    return json_number(v, &x) ? x : otherwise;
}

// An integer field, clamped to what int64 holds (a double outside that range would make the
// conversion undefined).
static int64_t int_of(const JsonValue *v, int64_t otherwise) {
    double x = num(v, NAN);
    if (isnan(x)) return otherwise;
    if (x >= 9.2e18) return INT64_MAX;
    if (x <= -9.2e18) return INT64_MIN;
    return (int64_t)x;
}

static void copy_str(char *out, size_t n, const JsonValue *v) {
    if (v && v->type == JSON_STRING) snprintf(out, n, "%s", v->string);
}

static void note_problem(RunView *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_problem(RunView *v, const char *fmt, ...) {
    if (v->problem[0]) return;  // the first is the one worth reading
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->problem, sizeof v->problem, fmt, ap);
    va_end(ap);
}

// ---------------------------------------------------------------------------------------
// Ranks, spans and the loss curve
// ---------------------------------------------------------------------------------------

static RunRank *rank_at(RunView *v, int r) {
    if (r < 0 || r >= RUN_MAX_RANKS) return NULL;
    if (r >= v->nranks) {
        int n = r + 1;
        v->ranks = realloc_check(v->ranks, (size_t)n * sizeof *v->ranks);
        memset(v->ranks + v->nranks, 0, (size_t)(n - v->nranks) * sizeof *v->ranks);
        for (int i = v->nranks; i < n; i++)
            v->ranks[i].pending.step = v->ranks[i].done.step = v->ranks[i].prev.step = -1;
        v->nranks = n;
    }
    return &v->ranks[r];
}

static void spans_clear(RunSpans *s, int64_t step) {
    s->n = 0, s->dropped = 0, s->step = step;
}

static void spans_add(RunSpans *s, const RunSpan *sp) {
    if (s->n == RUN_MAX_SPANS) {
        s->dropped++;
        return;
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 32;
        s->items = realloc_check(s->items, s->cap * sizeof *s->items);
    }
    s->items[s->n++] = *sp;
}

static void spans_swap(RunSpans *a, RunSpans *b) {
    RunSpans t = *a;
    *a = *b, *b = t;
}

static int mem_index(RunView *v, const char *name) {
    for (int i = 0; i < v->nmem; i++)
        if (strcmp(v->mem_names[i], name) == 0) return i;
    if (v->nmem == RUN_MAX_MEM || strlen(name) >= sizeof v->mem_names[0]) return -1;
    snprintf(v->mem_names[v->nmem], sizeof v->mem_names[0], "%s", name);
    return v->nmem++;
}

static void loss_add(RunView *v, int64_t step, double loss, double ms) {
    // Steps only move forward; a repeated or earlier step (a rank restarted into the same
    // directory) replaces the curve from there on.
    while (v->nloss > 0 && v->loss[v->nloss - 1].step >= step) v->nloss--;
    if (v->nloss == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 256;
        v->loss = realloc_check(v->loss, v->cap * sizeof *v->loss);
        v->ms = realloc_check(v->ms, v->cap * sizeof *v->ms);
    }
    v->loss[v->nloss] = (RunPoint){step, loss};
    v->ms[v->nloss++] = ms;
}

// ---------------------------------------------------------------------------------------
// One event
// ---------------------------------------------------------------------------------------

// What a run's config says about its length and batch (meta.json, or a start event when
// meta.json is not there yet).
static void take_config(RunView *v, const JsonValue *config) {
    if (!v->steps_total) v->steps_total = int_of(json_get(config, "steps"), 0);
    int64_t b = int_of(json_get(config, "batch"), 0), t = int_of(json_get(config, "seq"), 0);
    if (!v->batch_tokens && b > 0 && t > 0 && b < (1 << 30) && t < (1 << 30)) v->batch_tokens = b * t;
}

static void on_start(RunView *v, RunRank *rk, const JsonValue *ev) {
    rk->started = 1;
    copy_str(rk->device, sizeof rk->device, json_get(ev, "device"));
    copy_str(rk->backend, sizeof rk->backend, json_get(ev, "backend"));
    int64_t world = int_of(json_get(ev, "world"), 0);
    if (!v->world && world >= 1 && world <= RUN_MAX_RANKS) v->world = (int)world;
    if (!v->lab[0]) copy_str(v->lab, sizeof v->lab, json_get(ev, "lab"));
    if (!v->device[0]) copy_str(v->device, sizeof v->device, json_get(ev, "device"));
    if (!v->backend[0]) copy_str(v->backend, sizeof v->backend, json_get(ev, "backend"));
    take_config(v, json_get(ev, "config"));
    const JsonValue *floor = json_get(ev, "loss_floor");
    if (floor && floor->type == JSON_NUMBER) v->has_floor = 1, v->loss_floor = floor->number;
}

static void on_step(RunView *v, RunRank *rk, int r, const JsonValue *ev) {
    RunStep s = {0};
    s.step = int_of(json_get(ev, "step"), 0);
    s.loss = flt(json_get(ev, "loss"), NAN);
    s.lr = flt(json_get(ev, "lr"), 0);
    s.tokens = int_of(json_get(ev, "tokens"), 0);
    const JsonValue *ms = json_get(ev, "ms"), *bytes = json_get(ev, "bytes"), *mem = json_get(ev, "mem");
    s.ms_step = num(json_get(ms, "step"), 0);
    s.ms_compute = num(json_get(ms, "compute"), 0);
    s.ms_comm = num(json_get(ms, "comm"), 0);
    s.sent = num(json_get(bytes, "sent"), 0);
    s.recv = num(json_get(bytes, "recv"), 0);
    s.peak = num(json_get(mem, "peak"), 0);
    // The schema's five categories first, in their order, then any the lab added.
    static const char *fixed[] = {"params", "grads", "optim", "acts", "comm"};
    for (int i = 0; i < 5; i++) mem_index(v, fixed[i]);
    for (size_t i = 0; mem && i < mem->count; i++) {
        if (strcmp(mem->keys[i], "peak") == 0 || mem->items[i].type != JSON_NUMBER) continue;
        int k = mem_index(v, mem->keys[i]);
        if (k >= 0) s.mem[k] = num(&mem->items[i], 0);
    }
    copy_str(s.hash, sizeof s.hash, json_get(ev, "param_hash"));
    rk->last = s, rk->has_step = 1;
    // The spans of this step were logged before its step event: they are now complete.
    if (rk->pending.step == s.step) {
        spans_swap(&rk->prev, &rk->done);
        spans_swap(&rk->done, &rk->pending);
        spans_clear(&rk->pending, -1);
    }
    if (r == 0) loss_add(v, s.step, s.loss, s.ms_step);
}

static void on_span(RunRank *rk, const JsonValue *ev) {
    RunSpan sp = {0};
    copy_str(sp.name, sizeof sp.name, json_get(ev, "name"));
    copy_str(sp.group, sizeof sp.group, json_get(ev, "group"));
    int64_t step = int_of(json_get(ev, "step"), 0);
    int64_t mb = int_of(json_get(ev, "mb"), -1), layer = int_of(json_get(ev, "layer"), -1);
    sp.mb = mb < -1 || mb > 1 << 30 ? -1 : (int)mb;
    sp.layer = layer < -1 || layer > 1 << 30 ? -1 : (int)layer;
    int64_t chunk = int_of(json_get(ev, "chunk"), -1);
    sp.chunk = chunk < -1 || chunk > 1 << 20 ? -1 : (int)chunk;
    sp.t0_us = int_of(json_get(ev, "t0_us"), 0);
    sp.t1_us = int_of(json_get(ev, "t1_us"), 0);
    sp.bytes = num(json_get(ev, "bytes"), 0);
    // Untrusted like the rest: a wait that starts after the span ends, or is absent, is none.
    int64_t waited = int_of(json_get(ev, "waited_from_us"), 0);
    sp.waited_from_us = waited > 0 && waited <= sp.t1_us ? waited : 0;
    if (rk->done.step == step) spans_add(&rk->done, &sp);  // a late span of a finished step
    else {
        if (rk->pending.step != step) spans_clear(&rk->pending, step);
        spans_add(&rk->pending, &sp);
    }
}

// The collectives lab reports each size's bus bandwidth as a check "<coll>.<bytes>.busbw"
// (labs/03-collectives/collectives.c): rank 0's are the measurements its chart draws. A size measured again
// replaces the old figure.
static void busbw_add(RunView *v, const char *name, double gbps) {
    size_t n = strlen(name);
    const char *tail = ".busbw", *dot;
    if (n < 8 || strcmp(name + n - 6, tail) != 0 || !isfinite(gbps) || gbps < 0) return;
    for (dot = name + n - 7; dot > name && *dot != '.'; dot--)
        if (*dot < '0' || *dot > '9') return;
    size_t len = (size_t)(dot - name);
    if (*dot != '.' || len == 0 || dot + 1 == name + n - 6 || len >= sizeof v->busbw->coll) return;
    RunBusbw m = {.bytes = strtod(dot + 1, NULL), .gbps = gbps};
    memcpy(m.coll, name, len);
    if (!(m.bytes > 0) || !isfinite(m.bytes)) return;
    for (size_t i = 0; i < v->nbusbw; i++)
        if (strcmp(v->busbw[i].coll, m.coll) == 0 && v->busbw[i].bytes == m.bytes) {
            v->busbw[i] = m;
            return;
        }
    if (v->nbusbw == RUN_MAX_BUSBW) return;
    if (v->nbusbw == v->busbw_cap) {
        v->busbw_cap = v->busbw_cap ? 2 * v->busbw_cap : 64;
        v->busbw = realloc_check(v->busbw, v->busbw_cap * sizeof *v->busbw);
    }
    v->busbw[v->nbusbw++] = m;
}

static void on_check(RunView *v, RunRank *rk, int r, const JsonValue *ev) {
    rk->checks++;
    const JsonValue *name = json_get(ev, "name");
    if (r == 0 && name && name->type == JSON_STRING) busbw_add(v, name->string, num(json_get(ev, "value"), NAN));
    const JsonValue *ok = json_get(ev, "ok");
    if (ok && ok->type == JSON_BOOL && ok->boolean) return;
    if (!rk->checks_failed++) {
        snprintf(rk->failed_check, sizeof rk->failed_check, "%s: %.6g (expected %.6g)",
                 name && name->type == JSON_STRING ? name->string : "?", num(json_get(ev, "value"), NAN),
                 num(json_get(ev, "expect"), NAN));
    }
}

void runview_feed_line(RunView *v, int r, const char *line, size_t len) {
    RunRank *rk = rank_at(v, r);
    if (!rk) return;
    rk->lines++;
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ')) len--;
    if (len == 0) return;  // a blank line is nothing, not an error
    char err[160];
    JsonValue *ev = json_parse(line, len, err, sizeof err);
    if (ev && !runschema_check_event(ev, err, sizeof err)) json_free(ev), ev = NULL;
    int64_t who = ev ? int_of(json_get(ev, "rank"), -1) : -1;
    if (ev && who != r) {
        snprintf(err, sizeof err, "its \"rank\" is %lld", (long long)who);
        json_free(ev), ev = NULL;
    }
    if (!ev) {
        rk->malformed++, v->malformed++;
        note_problem(v, "rank-%d.jsonl line %ld: %s", r, rk->lines, err);
        return;
    }
    const char *kind = ev->items[0].string;
    if (strcmp(kind, "start") == 0) on_start(v, rk, ev);
    else if (strcmp(kind, "step") == 0) on_step(v, rk, r, ev);
    else if (strcmp(kind, "span") == 0) on_span(rk, ev);
    else if (strcmp(kind, "check") == 0) on_check(v, rk, r, ev);
    else if (strcmp(kind, "end") == 0) {
        rk->ended = 1;
        copy_str(rk->status, sizeof rk->status, json_get(ev, "status"));
        rk->end_steps = int_of(json_get(ev, "steps"), 0);
    } else if (strcmp(kind, "error") == 0 && !rk->error[0]) {
        copy_str(rk->error, sizeof rk->error, json_get(ev, "msg"));
        if (!rk->error[0]) snprintf(rk->error, sizeof rk->error, "(an error event with an empty message)");
    }
    json_free(ev);
}

// ---------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------

// The run directory's small JSON file `name` (meta.json, summary.json), parsed. Returns 0 if
// there is no such file (yet), else 1 with *out the value or NULL and the reason in err.
// Files over 1 MiB are not ours.
static int load_json(const RunView *v, const char *name, JsonValue **out, char *err, size_t errlen) {
    char path[sizeof v->dir + 32];
    snprintf(path, sizeof path, "%s/%s", v->dir, name);
    int fd = file_open_regular(path);  // (json.h: a FIFO would block here)
    *out = NULL;
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        snprintf(err, errlen, "%s", file_error(errno));  // there, but refused: a problem to say once
        return 1;
    }
    snprintf(err, errlen, "larger than 1 MiB, not a file shardlab wrote");
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size <= (1 << 20)) {
        char *text = malloc_check((size_t)st.st_size + 1);
        ssize_t got = pread(fd, text, (size_t)st.st_size, 0);
        *out = json_parse(text, got > 0 ? (size_t)got : 0, err, errlen);
        free(text);
    }
    close(fd);
    return 1;
}

static int read_meta(RunView *v) {
    char err[160];
    JsonValue *m;
    if (!load_json(v, "meta.json", &m, err, sizeof err)) return 0;
    if (!m || !runschema_check_meta(m, err, sizeof err)) {
        // Written atomically (temp file + rename), so a bad one stays bad: say so once.
        if (!v->meta_bad) note_problem(v, "meta.json: %s", err);
        v->meta_bad = 1;
        json_free(m);
        return 0;
    }
    v->has_meta = 1, v->meta_bad = 0;
    copy_str(v->lab, sizeof v->lab, json_get(m, "lab"));
    copy_str(v->device, sizeof v->device, json_get(m, "device"));
    copy_str(v->backend, sizeof v->backend, json_get(m, "backend"));
    int64_t world = int_of(json_get(m, "world_size"), 0);
    if (world >= 1 && world <= RUN_MAX_RANKS) v->world = (int)world;
    else note_problem(v, "meta.json: world_size %lld is not 1..%d", (long long)world, RUN_MAX_RANKS);
    v->start_unix_us = int_of(json_get(m, "start_unix_us"), 0);
    const JsonValue *config = json_get(m, "config");
    take_config(v, config);
    const JsonValue *ref = json_get(config, "ref");
    if (ref && ref->type == JSON_STRING && ref->string[0] && !v->ref_dir[0]) {
        char rerr[200];
        if (runview_set_reference(v, ref->string, rerr, sizeof rerr) != 0)
            snprintf(v->ref_problem, sizeof v->ref_problem, "%s", rerr);
    }
    json_free(m);
    return 1;
}

static int read_summary(RunView *v) {
    char err[160];
    JsonValue *s;
    if (!load_json(v, "summary.json", &s, err, sizeof err)) return 0;
    // Labs that do not train (collectives) write their own fields: take what is there, and
    // insist only on an object with a status.
    const JsonValue *status = json_get(s, "status");
    v->has_summary = s && status && status->type == JSON_STRING ? 1 : -1;  // -1: not read again
    if (v->has_summary < 0) {
        note_problem(v, "summary.json: %s", s ? "no \"status\" string" : err);
    } else {
        copy_str(v->status, sizeof v->status, status);
        v->first_loss = flt(json_get(s, "first_loss"), NAN);
        v->final_loss = flt(json_get(s, "final_loss"), NAN);
        v->wall_s = num(json_get(s, "wall_s"), 0);
        v->tokens_per_s = num(json_get(s, "tokens_per_s"), 0);
        v->mem_peak = num(json_get(s, "mem_peak"), 0);
        v->summary_steps = int_of(json_get(s, "steps"), 0);
        v->memcpy_gbps = fmax(num(json_get(s, "memcpy_gbps"), 0), 0);
    }
    json_free(s);
    return 1;
}

// One line of rank r's file, as the tail cut it (logtail.h).
typedef struct {
    RunView *v;
    int r;
} LineCtx;

static void on_line(void *arg, LogTailKind kind, const char *line, size_t n) {
    LineCtx *x = arg;
    RunRank *rk = rank_at(x->v, x->r);
    if (kind == LOGTAIL_LINE) {
        runview_feed_line(x->v, x->r, line, n);
        return;
    }
    rk->lines++, rk->malformed++, x->v->malformed++;
    if (kind == LOGTAIL_TOO_LONG)
        note_problem(x->v, "rank-%d.jsonl line %ld: longer than %d bytes", x->r, rk->lines, LOGTAIL_MAX_LINE);
    else note_problem(x->v, "rank-%d.jsonl line %ld: cut off (no newline, and the file stopped growing)", x->r, rk->lines);
}

// Reads rank r's file from where we stopped. Returns 1 if it grew.
static int poll_rank(RunView *v, int r, int64_t now_us) {
    char path[sizeof v->dir + 32];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", v->dir, r);
    LineCtx x = {v, r};
    int grew = logtail_poll(&rank_at(v, r)->tail, path, LOGTAIL_MAX_LINE, RUN_PARTIAL_S, now_us, on_line, &x);
    if (grew < 0) {
        if (errno != ENOENT) note_problem(v, "rank-%d.jsonl: %s", r, file_error(errno));  // (the first problem stays)
        return 0;
    }
    rank_at(v, r)->present = 1;
    return grew;
}

// ---------------------------------------------------------------------------------------
// The public side
// ---------------------------------------------------------------------------------------

void runview_init(RunView *v) {
    memset(v, 0, sizeof *v);
}

int runview_open(RunView *v, const char *dir, char *err, size_t errlen) {
    runview_init(v);
    struct stat st;
    if (strlen(dir) >= sizeof v->dir - 64) return snprintf(err, errlen, "%s: path too long", dir), -1;
    if (stat(dir, &st) != 0) return snprintf(err, errlen, "%s: %s", dir, strerror(errno)), -1;
    if (!S_ISDIR(st.st_mode)) return snprintf(err, errlen, "%s: not a directory", dir), -1;
    snprintf(v->dir, sizeof v->dir, "%s", dir);
    char path[sizeof v->dir + 32];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    int is_run = access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    is_run |= access(path, F_OK) == 0;
    if (!is_run)
        return snprintf(err, errlen, "%s: not a run directory (no meta.json, no rank-0.jsonl)", dir), -1;
    runview_poll(v, 0);  // now_us 0: a half line found now starts its clock at the next poll
    return 0;
}

int runview_poll(RunView *v, int64_t now_us) {
    int changed = 0;
    if (!v->has_meta && !v->meta_bad) changed |= read_meta(v);
    int n = runview_world(v);
    // Before the world is known, look for files one past the last we have.
    if (!v->world) n = v->nranks + 1;
    for (int r = 0; r < n && r < RUN_MAX_RANKS; r++) changed |= poll_rank(v, r, now_us);
    if (!v->has_summary) changed |= read_summary(v);
    if (changed) v->last_change_us = now_us;
    return changed;
}

int runview_set_reference(RunView *v, const char *dir, char *err, size_t errlen) {
    RunView ref;
    if (runview_open(&ref, dir, err, errlen) != 0) return -1;
    if (ref.nloss == 0) {
        snprintf(err, errlen, "%s: the reference run has no step events", dir);
        runview_free(&ref);
        return -1;
    }
    snprintf(v->ref_dir, sizeof v->ref_dir, "%s", dir);
    free(v->ref);
    v->ref = ref.loss, v->nref = ref.nloss;
    ref.loss = NULL;
    v->ref_problem[0] = 0;
    runview_free(&ref);
    return 0;
}

void runview_free(RunView *v) {
    for (int r = 0; r < v->nranks; r++) {
        RunRank *rk = &v->ranks[r];
        free(rk->pending.items), free(rk->done.items), free(rk->prev.items);
        logtail_free(&rk->tail);
    }
    free(v->ranks), free(v->loss), free(v->ms), free(v->ref), free(v->busbw);
    runview_init(v);
}

int runview_world(const RunView *v) {
    return v->world ? v->world : v->nranks;
}

int runview_ended(const RunView *v) {
    if (!v->world) return 0;
    for (int r = 0; r < v->world; r++)
        if (r >= v->nranks || !v->ranks[r].ended) return 0;
    return 1;
}

double runview_ms_per_step(const RunView *v, int window) {
    size_t k = v->nloss < (size_t)window ? v->nloss : (size_t)window;
    double sum = 0;
    for (size_t i = v->nloss - k; i < v->nloss; i++) sum += v->ms[i];
    return k ? sum / (double)k : 0;
}

double runview_tokens_per_s(const RunView *v, int window) {
    double ms = runview_ms_per_step(v, window);
    double tokens = (double)v->batch_tokens;
    if (tokens <= 0 && v->nranks > 0 && v->ranks[0].has_step) tokens = (double)v->ranks[0].last.tokens;
    return ms > 0 ? tokens / (ms / 1000.0) : 0;
}

int64_t runview_timeline_step(const RunView *v) {
    int64_t step = -1;
    for (int r = 0; r < runview_world(v) && r < v->nranks; r++) {
        const RunRank *rk = &v->ranks[r];
        if (rk->done.step < 0) continue;
        if (step < 0 || rk->done.step < step) step = rk->done.step;
    }
    return step;
}

const RunSpans *runview_spans(const RunView *v, int r, int64_t step) {
    if (r < 0 || r >= v->nranks || step < 0) return NULL;
    const RunRank *rk = &v->ranks[r];
    if (rk->done.step == step) return &rk->done;
    if (rk->prev.step == step) return &rk->prev;
    return NULL;
}
