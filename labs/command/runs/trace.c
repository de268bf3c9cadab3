// trace.c — see trace.h: a run directory read into spans and step counters, rank by rank,
// then written as Chrome trace-event JSON (the timeline Perfetto and chrome://tracing draw).
#include "trace.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/comm/dist.h"
#include "common/harness/check.h"
#include "logtail.h"
#include "runread.h"
#include "runschema.h"

#define TRACE_MAX_FILE (256u << 20)  // a rank log larger than this is refused, as the grader does
#define TRACE_MAX_LANES 8            // threads per kind of work; deeper overlap shares the last one
#define TRACE_MAX_EXTRA 32           // fields a lab added to a span that go into its args

// ---------------------------------------------------------------------------------------
// Which thread a span goes to: the kind of work its name says

// A collective between replicas (fsdp --replicate's sums, tp --dp's all-reduces: the span's
// group) is a kind of its own: on a cluster it is the traffic that crosses the network. So is
// context parallelism's K/V exchange (group "cp": the ring's blocks, or --kv all-gather's),
// attention's own traffic, which the ring means to hide behind attention's compute.
typedef enum { WORK_COMPUTE, WORK_COMM, WORK_IO, WORK_ACROSS, WORK_KV, WORK_KINDS } WorkKind;
static const char *const WORK_NAMES[WORK_KINDS] = {"compute", "communication", "checkpoint I/O",
                                                   "communication across replicas", "attention's K/V between ranks"};

static WorkKind work_kind(const char *name) {
    for (int c = DIST_ALL_REDUCE; c <= DIST_BARRIER; c++)  // the collectives, as dist.h names them
        if (strcmp(name, dist_coll_name((DistColl)c)) == 0) return WORK_COMM;
    if (strcmp(name, "save") == 0 || strcmp(name, "load") == 0) return WORK_IO;  // dcp.c, dcp_load.c
    return WORK_COMPUTE;  // fwd, bwd, recompute, optim, and whatever else a lab times
}

// A thread id per kind and lane: compute 1-8, communication 9-16, checkpoint I/O 17-24, across
// replicas 25-32, K/V 33-40 (the viewers sort threads by it too).
static int thread_id(WorkKind k, int lane) { return 1 + (int)k * TRACE_MAX_LANES + lane; }

// ---------------------------------------------------------------------------------------
// What is kept of a rank's log

typedef struct {
    int64_t t0, t1;  // wall clock, microseconds since the epoch
    WorkKind kind;
    int lane;
    char *name;
    char *args;      // the members of the event's args object, as JSON
} Span;

typedef struct {
    int64_t step;
    char *mem;                // the "memory" counter's members, as JSON (NULL: none)
    double peak, host, loss;  // NaN: not there, or not finite
} Point;

typedef struct {
    int64_t step, t1;  // the latest end of a span of that step
} StepEnd;

typedef struct {
    int r;
    char file[32];      // "rank-3.jsonl"
    long line;
    size_t max_kept;    // this rank's share of TRACE_MAX_SPANS
    Span *spans;
    size_t nspans, capspans;
    Point *points;
    size_t npoints, cappoints;
    StepEnd *ends;
    size_t nends, capends;
    int lanes[WORK_KINDS];  // threads used by each kind
    TraceStats *st;
} RankTrace;

static void *grow(void *items, size_t *cap, size_t n, size_t size) {
    if (n < *cap) return items;
    *cap = *cap ? 2 * *cap : 256;
    return realloc_check(items, *cap * size);
}

static char *copy_text(const char *s, size_t n) {
    char *out = malloc_check(n + 1);
    memcpy(out, s, n);
    out[n] = 0;
    return out;
}

static void first_problem(TraceStats *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void first_problem(TraceStats *st, const char *fmt, ...) {
    if (st->problem[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->problem, sizeof st->problem, fmt, ap);
    va_end(ap);
}

static void skip_line(RankTrace *x, const char *why) {
    x->st->skipped_lines++;
    first_problem(x->st, "%s line %ld: %s", x->file, x->line, why);
}

// A number a lab wrote, as JSON: whole numbers in full (byte counts pass 1e9), others to
// round-trip precision. The caller has checked that it is finite.
static void put_number(StrBuf *b, double v) {
    if (v == floor(v) && fabs(v) <= 0x1p53) sb_printf(b, "%.0f", v);
    else sb_printf(b, "%.17g", v);
}

// Whether obj's member i has a key an earlier member has too (json_get would read that one).
static int repeated_key(const JsonValue *obj, size_t i) {
    for (size_t j = 0; j < i; j++)
        if (strcmp(obj->keys[j], obj->keys[i]) == 0) return 1;
    return 0;
}

// ---------------------------------------------------------------------------------------
// Reading one line of rank-<r>.jsonl

// The step's end so far: spans of a step come together, so consecutive ones share an entry.
static void note_step_end(RankTrace *x, int64_t step, int64_t t1) {
    if (x->nends && x->ends[x->nends - 1].step == step) {
        if (t1 > x->ends[x->nends - 1].t1) x->ends[x->nends - 1].t1 = t1;
        return;
    }
    x->ends = grow(x->ends, &x->capends, x->nends, sizeof *x->ends);
    x->ends[x->nends++] = (StepEnd){step, t1};
}

static void add_span(RankTrace *x, const JsonValue *ev) {
    // (runschema_check_event has checked these: integers within 2^53, t0_us <= t1_us)
    int64_t step = (int64_t)json_get(ev, "step")->number, t0 = (int64_t)json_get(ev, "t0_us")->number,
            t1 = (int64_t)json_get(ev, "t1_us")->number, layer = (int64_t)json_get(ev, "layer")->number,
            mb = (int64_t)json_get(ev, "mb")->number;
    note_step_end(x, step, t1);  // also for a span left out: its step's counters still need the time
    if (x->nspans == x->max_kept) {
        x->st->spans_dropped++;
        return;
    }
    const JsonValue *name = json_get(ev, "name");
    StrBuf a;
    sb_init(&a);
    double bytes = json_get(ev, "bytes")->number;
    WorkKind kind = work_kind(name->string);
    const JsonValue *group = json_get(ev, "group");
    if (kind == WORK_COMM && group && group->type == JSON_STRING && strcmp(name->string, "send") && strcmp(name->string, "recv") &&
        (!strcmp(group->string, "replicate") || !strcmp(group->string, "dp")))
        kind = WORK_ACROSS;
    if (kind == WORK_COMM && group && group->type == JSON_STRING && !strcmp(group->string, "cp")) kind = WORK_KV;
    sb_printf(&a, "\"step\":%lld", (long long)step);
    if (bytes > 0 || kind != WORK_COMPUTE) sb_printf(&a, ",\"bytes\":%.0f", bytes);  // (compute moves none)
    if (layer >= 0) sb_printf(&a, ",\"layer\":%lld", (long long)layer);  // -1: none (labs/DESIGN.md, Events)
    if (mb >= 0) sb_printf(&a, ",\"mb\":%lld", (long long)mb);
    // What the lab added (bucket, algo, op, group, unit, stage...): strings, finite numbers and
    // booleans; nested values are left out.
    static const char *const schema[] = {"ev", "rank", "step", "name", "mb", "layer", "t0_us", "t1_us", "bytes"};
    int extra = 0;
    for (size_t i = 0; i < ev->count && extra < TRACE_MAX_EXTRA; i++) {
        const char *key = ev->keys[i];
        const JsonValue *v = &ev->items[i];
        int known = 0;
        for (size_t k = 0; k < sizeof schema / sizeof schema[0]; k++) known |= strcmp(key, schema[k]) == 0;
        if (known || repeated_key(ev, i)) continue;
        if (strcmp(key, "issued_us") == 0) {  // when the program asked: how long it queued
            if (v->type == JSON_NUMBER && v->number >= 0 && v->number <= (double)t0)
                sb_printf(&a, ",\"queued_us\":%lld", (long long)(t0 - (int64_t)v->number)), extra++;
            continue;
        }
        if (strcmp(key, "waited_from_us") == 0) {  // how long the rank waited for it, not computing
            if (v->type == JSON_NUMBER && v->number > 0 && v->number <= (double)t1)
                sb_printf(&a, ",\"waited_us\":%lld", (long long)(t1 - (int64_t)v->number)), extra++;
            continue;
        }
        if (v->type != JSON_STRING && v->type != JSON_BOOL && !(v->type == JSON_NUMBER && isfinite(v->number)))
            continue;
        sb_printf(&a, ",");
        sb_json_string(&a, key);
        sb_printf(&a, ":");
        if (v->type == JSON_STRING) sb_json_string(&a, v->string);
        else if (v->type == JSON_BOOL) sb_printf(&a, "%s", v->boolean ? "true" : "false");
        else put_number(&a, v->number);
        extra++;
    }
    x->spans = grow(x->spans, &x->capspans, x->nspans, sizeof *x->spans);
    x->spans[x->nspans++] = (Span){.t0 = t0, .t1 = t1, .kind = kind,
                                   .name = copy_text(name->string, name->string_len), .args = a.data};
}

static void add_point(RankTrace *x, const JsonValue *ev) {
    if (x->npoints == x->max_kept) {
        x->st->spans_dropped++;
        return;
    }
    Point p = {.step = (int64_t)json_get(ev, "step")->number, .peak = NAN, .host = NAN, .loss = NAN};
    double loss;
    if (json_number(json_get(ev, "loss"), &loss) && isfinite(loss)) p.loss = loss;
    else x->st->nonfinite++;  // a diverged step: the loss line stops before it
    const JsonValue *mem = json_get(ev, "mem");
    StrBuf m;
    sb_init(&m);
    for (size_t i = 0; i < mem->count; i++) {
        const JsonValue *v = &mem->items[i];
        if (v->type != JSON_NUMBER || !isfinite(v->number) || v->number < 0 || repeated_key(mem, i)) continue;
        if (strcmp(mem->keys[i], "peak") == 0) p.peak = v->number;        // the total's high-water mark
        else if (strcmp(mem->keys[i], "host") == 0) p.host = v->number;   // not device memory
        else {
            sb_printf(&m, "%s", m.len ? "," : "");
            sb_json_string(&m, mem->keys[i]);
            sb_printf(&m, ":%.0f", v->number);
        }
    }
    p.mem = m.data;
    x->points = grow(x->points, &x->cappoints, x->npoints, sizeof *x->points);
    x->points[x->npoints++] = p;
}

static void on_line(void *ctx, LogTailKind kind, const char *line, size_t n) {
    RankTrace *x = ctx;
    x->line++;
    char err[256], why[300];
    if (kind == LOGTAIL_TOO_LONG) {
        snprintf(why, sizeof why, "longer than %d bytes: not an event", LOGTAIL_MAX_LINE);
        skip_line(x, why);
        return;
    }
    if (kind != LOGTAIL_LINE) {
        skip_line(x, "half a line, given up");
        return;
    }
    JsonValue *ev = json_parse(line, n, err, sizeof err);
    if (!ev) {
        snprintf(why, sizeof why, "not JSON (%s)", err);
        skip_line(x, why);
        return;
    }
    if (!runschema_check_event(ev, err, sizeof err)) {
        skip_line(x, err);
    } else if (json_get(ev, "rank")->number != x->r) {
        snprintf(why, sizeof why, "an event of rank %.0f in rank %d's file", json_get(ev, "rank")->number, x->r);
        skip_line(x, why);
    } else if (strcmp(ev->items[0].string, "span") == 0) {
        add_span(x, ev);
    } else if (strcmp(ev->items[0].string, "step") == 0) {
        add_point(x, ev);
    }
    json_free(ev);
}

// ---------------------------------------------------------------------------------------
// A rank's log read whole: its spans, their threads, its counters' times

static int by_start(const void *a, const void *b) {
    const Span *x = a, *y = b;
    if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
    return x->t1 > y->t1 ? -1 : x->t1 < y->t1;  // the longer first
}

static int by_step(const void *a, const void *b) {
    const StepEnd *x = a, *y = b;
    return x->step < y->step ? -1 : x->step > y->step;
}

// The viewers draw a thread's spans only when they nest; spans of one kind that overlap in
// time (a collective still in flight when the next starts) go to the first thread of their
// kind that is free by then.
static void assign_lanes(RankTrace *x) {
    qsort(x->spans, x->nspans, sizeof *x->spans, by_start);
    int64_t free_at[WORK_KINDS][TRACE_MAX_LANES] = {{0}};
    for (size_t i = 0; i < x->nspans; i++) {
        Span *s = &x->spans[i];
        int *n = &x->lanes[s->kind], lane = 0;
        while (lane < *n && free_at[s->kind][lane] > s->t0) lane++;
        if (lane == *n && *n < TRACE_MAX_LANES) (*n)++;
        if (lane == TRACE_MAX_LANES) {  // deeper than that: the lane that frees first
            lane = 0;
            for (int l = 1; l < TRACE_MAX_LANES; l++)
                if (free_at[s->kind][l] < free_at[s->kind][lane]) lane = l;
        }
        s->lane = lane;
        free_at[s->kind][lane] = s->t1;
    }
}

// The end of step's last span on this rank, or -1 if it has none.
static int64_t step_end(const RankTrace *x, int64_t step) {
    size_t lo = 0, hi = x->nends;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->ends[mid].step < step) lo = mid + 1;
        else hi = mid;
    }
    return lo < x->nends && x->ends[lo].step == step ? x->ends[lo].t1 : -1;
}

static void read_rank(RankTrace *x, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, x->file);
    struct stat info;
    if (stat(path, &info) == 0 && (uint64_t)info.st_size > TRACE_MAX_FILE) {
        x->st->ranks_missing++;
        first_problem(x->st, "%s: larger than %u MiB, left out", x->file, TRACE_MAX_FILE >> 20);
        return;
    }
    LogTail tail = {0};
    if (logtail_poll(&tail, path, LOGTAIL_MAX_LINE, 0, 0, on_line, x) < 0) {
        x->st->ranks_missing++;
        first_problem(x->st, "%s: %s", x->file, errno == ENOENT ? "missing (that rank never started)" : file_error(errno));
        logtail_free(&tail);
        return;
    }
    if (tail.partial_len > 0) {
        x->line++;
        skip_line(x, "the last line has no end (cut mid-line, or still being written)");
    }
    logtail_free(&tail);
    assign_lanes(x);
    // Each step's latest span end (a step's spans may come in more than one run of lines).
    qsort(x->ends, x->nends, sizeof *x->ends, by_step);
    size_t k = 0;
    for (size_t i = 0; i < x->nends; i++) {
        if (k && x->ends[k - 1].step == x->ends[i].step) {
            if (x->ends[i].t1 > x->ends[k - 1].t1) x->ends[k - 1].t1 = x->ends[i].t1;
        } else {
            x->ends[k++] = x->ends[i];
        }
    }
    x->nends = k;
}

static void free_rank(RankTrace *x) {
    for (size_t i = 0; i < x->nspans; i++) free(x->spans[i].name), free(x->spans[i].args);
    for (size_t i = 0; i < x->npoints; i++) free(x->points[i].mem);
    free(x->spans), free(x->points), free(x->ends);
}

// ---------------------------------------------------------------------------------------
// Writing the trace

static void begin_event(StrBuf *out, TraceStats *st) { sb_printf(out, "%s\n", st->events++ ? "," : ""); }

static void metadata(StrBuf *out, TraceStats *st, int pid, int tid, const char *what, const char *key,
                     const char *text, int number) {
    begin_event(out, st);
    st->metadata++;
    sb_printf(out, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{\"%s\":", pid, tid, what, key);
    if (text) sb_json_string(out, text);
    else sb_printf(out, "%d", number);
    sb_printf(out, "}}");
}

static void counter(StrBuf *out, TraceStats *st, int pid, int64_t ts, const char *name, const char *members) {
    begin_event(out, st);
    st->counters++;
    sb_printf(out, "{\"ph\":\"C\",\"pid\":%d,\"ts\":%lld,\"name\":\"%s\",\"args\":{%s}}", pid, (long long)ts, name,
              members);
}

static void write_rank(StrBuf *out, TraceStats *st, const RankTrace *x, int64_t origin) {
    char text[64];
    snprintf(text, sizeof text, "rank %d", x->r);
    metadata(out, st, x->r, 0, "process_name", "name", text, 0);
    metadata(out, st, x->r, 0, "process_sort_index", "sort_index", NULL, x->r);
    for (int k = 0; k < WORK_KINDS; k++)
        for (int l = 0; l < x->lanes[k]; l++) {
            if (l) snprintf(text, sizeof text, "%s (%d)", WORK_NAMES[k], l + 1);
            metadata(out, st, x->r, thread_id(k, l), "thread_name", "name", l ? text : WORK_NAMES[k], 0);
            metadata(out, st, x->r, thread_id(k, l), "thread_sort_index", "sort_index", NULL, thread_id(k, l));
        }
    for (size_t i = 0; i < x->nspans; i++) {
        const Span *s = &x->spans[i];
        begin_event(out, st);
        st->spans++;
        sb_printf(out, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%lld,\"dur\":%lld,\"name\":", x->r,
                  thread_id(s->kind, s->lane), (long long)(s->t0 - origin), (long long)(s->t1 - s->t0));
        sb_json_string(out, s->name);
        sb_printf(out, ",\"cat\":\"%s\",\"args\":{%s}}", WORK_NAMES[s->kind], s->args);
    }
    StrBuf m;
    sb_init(&m);
    for (size_t i = 0; i < x->npoints; i++) {
        const Point *p = &x->points[i];
        int64_t t = step_end(x, p->step);
        if (t < 0) {
            st->steps_untimed++;
            continue;
        }
        t -= origin;
        if (p->mem) counter(out, st, x->r, t, "memory", p->mem);
        if (!isnan(p->peak)) sb_reset(&m), sb_printf(&m, "\"peak\":%.0f", p->peak), counter(out, st, x->r, t, "peak memory", m.data);
        if (!isnan(p->host)) sb_reset(&m), sb_printf(&m, "\"host\":%.0f", p->host), counter(out, st, x->r, t, "host memory", m.data);
        if (!isnan(p->loss)) {
            sb_reset(&m);
            sb_printf(&m, "\"loss\":");
            sb_json_number(&m, p->loss);
            counter(out, st, x->r, t, "loss", m.data);
        }
    }
    sb_free(&m);
}

// meta.json, read and checked: NULL with the reason in err.
static JsonValue *read_meta(const char *dir, char *err, size_t errlen) {
    char path[4200], why[256];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    StrBuf b;
    sb_init(&b);
    int rc = sb_read_file(&b, path, 1 << 24);
    JsonValue *meta = NULL;
    if (rc < 0)
        snprintf(err, errlen, "meta.json: %s", errno == ENOENT ? "missing (rank 0 writes it when a run starts: is this a run directory?)"
                                                               : file_error(errno));
    else if (rc > 0) snprintf(err, errlen, "meta.json: larger than 16 MiB, not a file shardlab wrote");
    else if (!(meta = json_parse(b.data ? b.data : "", b.len, why, sizeof why)))
        snprintf(err, errlen, "meta.json: not valid JSON (%s)", why);
    else if (!runschema_check_meta(meta, why, sizeof why)) snprintf(err, errlen, "meta.json: %s", why), json_free(meta), meta = NULL;
    sb_free(&b);
    return meta;
}

int trace_run(const char *dir, StrBuf *out, TraceStats *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    struct stat info;
    if (stat(dir, &info) != 0)
        return snprintf(err, errlen, "%s", errno == ENOENT ? "no such directory" : strerror(errno)), -1;
    if (!S_ISDIR(info.st_mode)) return snprintf(err, errlen, "not a directory"), -1;
    JsonValue *meta = read_meta(dir, err, errlen);
    if (!meta) return -1;
    double world = json_get(meta, "world_size")->number;
    if (world < 1 || world > RUN_MAX_RANKS) {
        snprintf(err, errlen, "meta.json: world_size %.0f is not a number of ranks (1 to %d)", world, RUN_MAX_RANKS);
        json_free(meta);
        return -1;
    }
    st->world = (int)world;
    RankTrace *ranks = calloc_check((size_t)st->world, sizeof *ranks);
    size_t share = TRACE_MAX_SPANS / (size_t)st->world;
    for (int r = 0; r < st->world; r++) {
        RankTrace *x = &ranks[r];
        x->r = r, x->st = st, x->max_kept = share ? share : 1;
        snprintf(x->file, sizeof x->file, "rank-%d.jsonl", r);
        read_rank(x, dir);
    }
    if (st->ranks_missing == st->world) {
        snprintf(err, errlen, "no rank's log could be read (%s)", st->problem);
        for (int r = 0; r < st->world; r++) free_rank(&ranks[r]);
        free(ranks), json_free(meta);
        return -1;
    }
    // The trace starts at the run's earliest span (each rank's spans are sorted by start; a
    // step's end may come from a span past the rank's share, which a log in any order can
    // place before them all).
    int64_t origin = INT64_MAX;
    for (int r = 0; r < st->world; r++) {
        if (ranks[r].nspans && ranks[r].spans[0].t0 < origin) origin = ranks[r].spans[0].t0;
        for (size_t i = 0; i < ranks[r].nends; i++)
            if (ranks[r].ends[i].t1 < origin) origin = ranks[r].ends[i].t1;
    }
    if (origin == INT64_MAX) origin = 0;
    sb_printf(out, "{\"traceEvents\":[");
    for (int r = 0; r < st->world; r++) write_rank(out, st, &ranks[r], origin);
    // The run's name: a directory's name is any bytes, JSON wants UTF-8; shardlab's are ASCII.
    const char *base = strrchr(dir, '/');
    base = base && base[1] ? base + 1 : dir;
    char name[256];
    size_t n = 0;
    for (; base[n] && base[n] != '/' && n + 1 < sizeof name; n++)
        name[n] = (unsigned char)base[n] >= 0x20 && (unsigned char)base[n] < 0x7f ? base[n] : '?';
    name[n] = 0;
    sb_printf(out, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"run\":");
    sb_json_string(out, name);
    sb_printf(out, ",\"lab\":");
    sb_json_string(out, json_get(meta, "lab")->string);
    sb_printf(out, ",\"world_size\":%d,\"clock\":\"each rank's wall clock, microseconds after origin_unix_us\","
                   "\"origin_unix_us\":%lld,\"skipped_lines\":%ld,\"ranks_missing\":%ld,\"left_out\":%ld}}\n",
              st->world, (long long)origin, st->skipped_lines, st->ranks_missing, st->spans_dropped);
    for (int r = 0; r < st->world; r++) free_rank(&ranks[r]);
    free(ranks);
    json_free(meta);
    return 0;
}
