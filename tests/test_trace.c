// test_trace.c — `shardlab trace`: every lab's run as a timeline Perfetto and chrome://tracing
// open, and the run directories a student may hand in, which must never crash it.
//
// Usage: test_trace LABS SHARDLAB
//   LABS      the optimized lab programs (build/labs): they write the runs, in seconds
//   SHARDLAB  the sanitized build/san/shardlab: `shardlab trace` runs under ASan/UBSan
//
// What it proves:
//   1. every lab's run (single; collectives; ddp at 2 and at 8 ranks; zero stage 3 saving a
//      checkpoint; fsdp; tp; pp; ckpt; shard) becomes one JSON object (json.h reads it) with a
//      traceEvents array and displayTimeUnit "ms"; every complete event ("X") has ts >= 0,
//      dur >= 0, a pid that is a rank, a name, a category and args with its step; the trace
//      starts at 0 (the run's first span);
//   2. nothing is lost or made up: one complete event per span event of the rank logs, one
//      memory counter per step event, one loss counter per step with a finite loss;
//   3. the viewers can draw it: every rank a named process; a "compute" thread where the lab
//      computes, a "communication" thread where it communicates (and none in single), a
//      "checkpoint I/O" thread where it saved; no two spans of one thread overlap (the
//      viewers draw only spans that nest: overlapping ones go to a second thread);
//   4. the ranks share one clock, as the logs do: in ddp, every bucket's all-reduce is in
//      flight on all ranks at once (the latest start <= the earliest end): an all-reduce
//      cannot end on one rank before every other rank has joined it;
//   5. strings are escaped (quotes, backslashes, control characters, UTF-8 in a span's name
//      and a lab's own field), and a NaN loss gives no counter instead of invalid JSON;
//   6. untrusted input: a garbage line, a 2 MiB line, a line cut off, a missing rank file are
//      skipped with a count and a message naming the file and line (exit 0); a missing or
//      broken meta.json, no directory, a file instead of one, no rank log at all, a FIFO in
//      place of a log get one clear line and exit 1, at once; bad arguments exit 2 with one
//      line; -o - writes the trace to stdout; an unwritable -o is exit 1. ASan/UBSan stay quiet.
//
// Broken variant: without the process_name events (trace.c, write_rank), check 3 fails
// ("every rank is a named process"); a trace whose ranks each start at 0 fails check 4.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static const char *labs_dir, *shardlab;
static int sanitizer_reports;
static char first_report[600];

#define MAX_WORLD 8

// `shardlab trace` with up to three more arguments; its status, its output in tmp/<tag>.{out,err}.
static int trace(const char *tag, const char *a1, const char *a2, const char *a3) {
    char *argv[] = {"/usr/bin/timeout", "60", (char *)shardlab, "trace", (char *)a1, (char *)a2, (char *)a3, NULL};
    int rc = run(argv, tag);
    char *err = captured(tag, "err");
    if (strstr(err, "AddressSanitizer") || strstr(err, "runtime error")) {
        if (!sanitizer_reports++) snprintf(first_report, sizeof first_report, "%s: %s", tag, one_line(err));
    }
    free(err);
    return rc;
}

// The lines of rank-<r>.jsonl that are events of kind ev (by their first field).
static int count_events(const char *dir, int r, const char *ev) {
    char path[700];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
    char *text = read_file(path, NULL);
    int n = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        n += runschema_line_is(line, len, ev);
        line = nl ? nl + 1 : line + len;
    }
    free(text);
    return n;
}

// The span events of rank-<r>.jsonl of a collective between replicas: group "replicate"
// (fsdp --replicate) or "dp" (tp --dp).
// The span events of rank r's log whose group is one of groups[] (NULL-ended).
static int group_spans(const char *dir, int r, const char *const *groups) {
    char path[700];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
    char *text = read_file(path, NULL);
    int n = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (runschema_line_is(line, len, "span")) {
            char *end = line + len, saved = *end;
            *end = 0;
            int in = 0;
            for (int g = 0; groups[g]; g++) {
                char want[48];
                snprintf(want, sizeof want, "\"group\":\"%s\"", groups[g]);
                in |= strstr(line, want) != NULL;
            }
            n += in;
            *end = saved;
        }
        line = nl ? nl + 1 : line + len;
    }
    free(text);
    return n;
}

// The steps of rank-<r>.jsonl with a finite loss.
static int finite_losses(const char *dir, int r) {
    Events *ev = calloc(1, sizeof *ev);
    load_rank_events(dir, r, ev);
    int n = 0;
    for (int i = 0; i < ev->n; i++)
        if (!strcmp(kind(ev->lines[i]), "step") && isfinite(num(ev->lines[i], "loss"))) n++;
    free_events(ev);
    free(ev);
    return n;
}

// ---------------------------------------------------------------------------------------
// What a trace says

typedef struct {
    int pid, tid;
    double ts, dur;
} Slice;

typedef struct {
    int ok;                       // a JSON object with traceEvents and displayTimeUnit "ms"
    char problem[400];            // the first event that is not as it should be
    int bad;                      // events that are not
    int spans[MAX_WORLD], memory[MAX_WORLD], loss[MAX_WORLD];
    int named[MAX_WORLD];         // process_name "rank N"
    int compute[MAX_WORLD], comm[MAX_WORLD], io[MAX_WORLD], across[MAX_WORLD];  // thread names seen
    int across_spans[MAX_WORLD];  // complete events in the category "communication across replicas"
    int kv[MAX_WORLD], kv_spans[MAX_WORLD];  // the same for "attention's K/V between ranks"
    double min_ts;
    int overlaps;                 // spans of one thread that overlap
    char overlap[200];
    JsonValue *doc;
} Facts;

static void bad_event(Facts *f, size_t i, const char *why) {
    if (!f->bad++) snprintf(f->problem, sizeof f->problem, "event %zu: %s", i, why);
}

static int by_thread(const void *a, const void *b) {
    const Slice *x = a, *y = b;
    if (x->pid != y->pid) return x->pid - y->pid;
    if (x->tid != y->tid) return x->tid - y->tid;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static Facts read_trace(const char *path, int world) {
    Facts f = {.min_ts = INFINITY};
    size_t len;
    char *text = read_file(path, &len), err[256];
    f.doc = text ? json_parse(text, len, err, sizeof err) : NULL;
    free(text);
    const JsonValue *events = json_get(f.doc, "traceEvents"), *unit = json_get(f.doc, "displayTimeUnit");
    f.ok = events && events->type == JSON_ARRAY && unit && unit->type == JSON_STRING && !strcmp(unit->string, "ms");
    if (!f.doc) snprintf(f.problem, sizeof f.problem, "%s: %s", path, text ? err : "cannot read it");
    if (!f.ok) return f;
    Slice *slices = calloc(events->count + 1, sizeof *slices);
    size_t n = 0;
    for (size_t i = 0; i < events->count; i++) {
        const JsonValue *e = json_at(events, i), *ph = json_get(e, "ph"), *name = json_get(e, "name"),
                        *args = json_get(e, "args");
        double pid = num(e, "pid");
        if (!ph || ph->type != JSON_STRING || !name || name->type != JSON_STRING || !args || args->type != JSON_OBJECT) {
            bad_event(&f, i, "no ph, name or args");
            continue;
        }
        if (!(pid >= 0 && pid < world && pid == floor(pid))) {
            bad_event(&f, i, "pid is not a rank of the run");
            continue;
        }
        int r = (int)pid;
        const JsonValue *argname = json_get(args, "name");
        if (!strcmp(ph->string, "X")) {
            double ts = num(e, "ts"), dur = num(e, "dur"), tid = num(e, "tid");
            const JsonValue *cat = json_get(e, "cat"), *step = json_get(args, "step");
            if (!(ts >= 0) || !(dur >= 0) || !(tid >= 1) || !cat || cat->type != JSON_STRING || !step ||
                step->type != JSON_NUMBER) {
                bad_event(&f, i, "a complete event without ts >= 0, dur >= 0, a tid, a cat or its step");
                continue;
            }
            f.spans[r]++;
            f.across_spans[r] += !strcmp(cat->string, "communication across replicas");
            f.kv_spans[r] += !strcmp(cat->string, "attention's K/V between ranks");
            if (ts < f.min_ts) f.min_ts = ts;
            slices[n++] = (Slice){r, (int)tid, ts, dur};
        } else if (!strcmp(ph->string, "M")) {
            char want[32];
            snprintf(want, sizeof want, "rank %d", r);
            if (!strcmp(name->string, "process_name") && argname && argname->type == JSON_STRING &&
                !strcmp(argname->string, want))
                f.named[r]++;
            if (!strcmp(name->string, "thread_name") && argname && argname->type == JSON_STRING) {
                f.compute[r] += !strcmp(argname->string, "compute");
                f.comm[r] += !strcmp(argname->string, "communication");
                f.io[r] += !strcmp(argname->string, "checkpoint I/O");
                f.across[r] += !strcmp(argname->string, "communication across replicas");
                f.kv[r] += !strcmp(argname->string, "attention's K/V between ranks");
            }
        } else if (!strcmp(ph->string, "C")) {
            double ts = num(e, "ts");
            if (!(ts >= 0) || args->count == 0) {
                bad_event(&f, i, "a counter without ts >= 0 or values");
                continue;
            }
            for (size_t k = 0; k < args->count; k++)
                if (args->items[k].type != JSON_NUMBER) bad_event(&f, i, "a counter value that is not a number");
            f.memory[r] += !strcmp(name->string, "memory");
            f.loss[r] += !strcmp(name->string, "loss");
        } else {
            bad_event(&f, i, "a phase the trace does not write");
        }
    }
    qsort(slices, n, sizeof *slices, by_thread);
    for (size_t i = 1; i < n; i++) {
        const Slice *a = &slices[i - 1], *b = &slices[i];
        if (a->pid == b->pid && a->tid == b->tid && b->ts < a->ts + a->dur && !f.overlaps++)
            snprintf(f.overlap, sizeof f.overlap, "rank %d thread %d: a span at %.0f starts before the one at %.0f ends (%.0f)",
                     a->pid, a->tid, b->ts, a->ts, a->ts + a->dur);
    }
    free(slices);
    return f;
}

// ---------------------------------------------------------------------------------------
// 1-4. Every lab

typedef struct {
    const char *lab;
    int n;
    const char *args[24];
    int saves;   // writes a checkpoint: a checkpoint I/O thread
    int across;  // has replicas (fsdp --replicate, tp --dp): a thread of the collectives between them
    int kv;      // context parallelism: threads of attention's K/V between ranks
} LabRun;

#define TINY "--steps", "2", "--batch", "4", "--seq", "16", "--dim", "32", "--layers", "2", "--heads", "2"

static const LabRun RUNS[] = {
    {"single", 1, {TINY}, 0, 0, 0},
    {"collectives", 2, {"--max-bytes", "4K", "--iters", "2", "--warmup", "1"}, 0, 0, 0},
    {"ddp", 2, {TINY}, 0, 0, 0},
    {"ddp", 8, {"--steps", "2", "--batch", "8", "--seq", "16", "--dim", "32", "--layers", "2", "--heads", "2"}, 0, 0, 0},
    {"zero", 2, {TINY, "--stage", "3", "--save-every", "2"}, 1, 0, 0},
    {"fsdp", 2, {TINY}, 0, 0, 0},
    {"fsdp", 4, {TINY, "--replicate", "2"}, 0, 1, 0},
    {"tp", 2, {TINY}, 0, 0, 0},
    {"tp", 4, {TINY, "--dp", "2"}, 0, 1, 0},
    {"pp", 2, {TINY, "--micro", "2"}, 0, 0, 0},
    {"ckpt", 2, {TINY, "--policy", "every", "--compare", "0"}, 0, 0, 0},
    {"shard", 2, {TINY}, 0, 0, 0},
    {"cp", 2, {TINY}, 0, 0, 1},
    {"cp", 3, {TINY, "--layout", "contiguous", "--kv", "all-gather"}, 0, 0, 1},
};
#define NRUNS ((int)(sizeof RUNS / sizeof RUNS[0]))
static char run_dirs[NRUNS][600];

// In ddp, each (step, bucket) all-reduce on every rank: the latest start is before the
// earliest end. Returns the all-reduces checked, or -1 with why.
static int check_one_clock(const Facts *f, int world, char *why, size_t n) {
    enum { MAX_KEYS = 256 };
    typedef struct {
        double step, bucket, t0, t1;
        int ranks;
    } Key;
    Key keys[MAX_KEYS];
    int nk = 0;
    const JsonValue *events = json_get(f->doc, "traceEvents");
    for (size_t i = 0; i < events->count; i++) {
        const JsonValue *e = json_at(events, i), *args = json_get(e, "args");
        if (strcmp(json_get(e, "ph")->string, "X") || strcmp(json_get(e, "name")->string, "all_reduce")) continue;
        double step = num(args, "step"), bucket = num(args, "bucket"), t0 = num(e, "ts"), t1 = t0 + num(e, "dur");
        if (!(bucket >= 0)) continue;
        int k = 0;
        while (k < nk && !(keys[k].step == step && keys[k].bucket == bucket)) k++;
        if (k == nk) {
            if (nk == MAX_KEYS) continue;
            keys[nk++] = (Key){step, bucket, t0, t1, 0};
        }
        keys[k].t0 = fmax(keys[k].t0, t0), keys[k].t1 = fmin(keys[k].t1, t1), keys[k].ranks++;
    }
    for (int k = 0; k < nk; k++)
        if (keys[k].ranks != world || keys[k].t0 > keys[k].t1)
            return snprintf(why, n, "step %.0f bucket %.0f: %d of %d ranks, latest start %.0f, earliest end %.0f",
                            keys[k].step, keys[k].bucket, keys[k].ranks, world, keys[k].t0, keys[k].t1), -1;
    return nk;
}

static void check_labs(void) {
    for (int i = 0; i < NRUNS; i++) {
        const LabRun *L = &RUNS[i];
        char bin[700], tag[40], out[700];
        snprintf(bin, sizeof bin, "%s/%s", labs_dir, L->lab);
        snprintf(tag, sizeof tag, "%s-%d%s", L->lab, L->n, L->across ? "-replicas" : "");
        snprintf(run_dirs[i], sizeof run_dirs[i], "%s/%s", tmp, tag);
        int rc = run_ranks(bin, L->n, tag, run_dirs[i], (char *const *)L->args, NULL);
        if (!EXPECT(rc == 0, "%s -n %d runs (exit %d)", L->lab, L->n, rc)) continue;
        // The default place: RUN_DIR/trace.json, and a line saying where and what opens it.
        rc = trace(tag, run_dirs[i], NULL, NULL);
        char *said = captured(tag, "out");
        snprintf(out, sizeof out, "%s/trace.json", run_dirs[i]);
        EXPECT(rc == 0 && strstr(said, out) && strstr(said, "ui.perfetto.dev") && strstr(said, "chrome://tracing") &&
                   count_lines(said) == 1,
               "%s: shardlab trace writes RUN_DIR/trace.json and says so in one line (exit %d: %s)", tag, rc,
               one_line(said));
        free(said);
        Facts f = read_trace(out, L->n);
        if (!EXPECT(f.ok && !f.bad, "%s: the trace is JSON, an object with traceEvents and displayTimeUnit \"ms\", every "
                    "event well formed (%s)", tag, f.problem)) {
            json_free(f.doc);
            continue;
        }
        EXPECT(f.min_ts == 0, "%s: the trace starts at 0, the run's first span (%.0f)", tag, f.min_ts);
        int spans_ok = 1, named = 1, threads = 1, counters = 1;
        char why[300] = "";
        for (int r = 0; r < L->n; r++) {
            int logged = count_events(run_dirs[i], r, "span"), steps = count_events(run_dirs[i], r, "step");
            if (f.spans[r] != logged && spans_ok)
                spans_ok = 0, snprintf(why, sizeof why, "rank %d: %d complete events, %d span events", r, f.spans[r], logged);
            named &= f.named[r] == 1;
            int computes = strcmp(L->lab, "collectives") != 0, talks = strcmp(L->lab, "single") != 0;
            threads &= (f.compute[r] == 1) == computes && (f.comm[r] == 1) == talks && (f.io[r] == 1) == L->saves &&
                       (f.across[r] == 1) == L->across && (f.kv[r] >= 1) == L->kv;
            static const char *const across_groups[] = {"replicate", "dp", NULL}, *const kv_groups[] = {"cp", NULL};
            int logged_across = group_spans(run_dirs[i], r, across_groups), logged_kv = group_spans(run_dirs[i], r, kv_groups);
            if ((f.kv_spans[r] != logged_kv || (logged_kv > 0) != L->kv) && spans_ok)
                spans_ok = 0, snprintf(why, sizeof why, "rank %d: %d events of attention's K/V, %d spans of group cp", r,
                                       f.kv_spans[r], logged_kv);
            if ((f.across_spans[r] != logged_across || (logged_across > 0) != L->across) && spans_ok)
                spans_ok = 0, snprintf(why, sizeof why, "rank %d: %d events across replicas, %d spans of group replicate or dp",
                                       r, f.across_spans[r], logged_across);
            counters &= f.memory[r] == steps && f.loss[r] == finite_losses(run_dirs[i], r) && (steps > 0 || !computes);
        }
        EXPECT(spans_ok, "%s: one complete event per span event of the rank logs, those of a group between replicas (and "
               "only those) in \"communication across replicas\", those of group cp in \"attention's K/V between ranks\" %s",
               tag, why);
        EXPECT(named, "%s: every rank is a named process (\"rank N\")", tag);
        EXPECT(threads, "%s: threads: compute%s%s%s%s", tag, strcmp(L->lab, "collectives") ? "" : " (none: it only talks)",
               strcmp(L->lab, "single") ? ", communication" : " (no communication: one rank)", L->saves ? ", checkpoint I/O" : "",
               L->across ? ", communication across replicas" : L->kv ? ", attention's K/V between ranks" : "");
        EXPECT(counters, "%s: a memory counter per step event, a loss counter per finite loss, on every rank", tag);
        EXPECT(!f.overlaps, "%s: no two spans of one thread overlap (the viewers draw only nested ones) %s", tag, f.overlap);
        if (!strcmp(L->lab, "ddp")) {
            int k = check_one_clock(&f, L->n, why, sizeof why);
            EXPECT(k > 0, "%s: every bucket's all-reduce is in flight on all %d ranks at once on the trace's clock "
                   "(%d checked) %s", tag, L->n, k, k < 0 ? why : "");
        }
        json_free(f.doc);
    }
}

// ---------------------------------------------------------------------------------------
// 5. Strings escaped, a NaN loss left out

static const char *copy_run(const char *from, const char *name) {
    static char to[4][700];
    static int which;
    char *dst = to[which++ % 4], cmd[1600];
    snprintf(dst, sizeof to[0], "%s/%s", tmp, name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && rm -f '%s/trace.json'", dst, from, dst, dst);
    if (system(cmd) != 0) printf("# %s failed\n", cmd);
    return dst;
}

static void check_escaping(void) {
    const char *dir = copy_run(run_dirs[0], "escape");  // single
    char path[800];
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    write_text(path, "a",
               "{\"ev\":\"span\",\"rank\":0,\"step\":99,\"name\":\"q\\\"b\\\\s\\n\\t\\u0001\\u00e9\",\"mb\":-1,\"layer\":-1,"
               "\"t0_us\":1,\"t1_us\":2,\"bytes\":0,\"note\":\"</script>\\\"x\"}\n"
               "{\"ev\":\"step\",\"rank\":0,\"step\":99,\"loss\":\"NaN\",\"lr\":0.001,\"tokens\":8,\"ms\":{\"step\":1,"
               "\"work\":1,\"compute\":1,\"comm\":0},\"bytes\":{\"sent\":0,\"recv\":0},\"mem\":{\"params\":40,\"grads\":40,"
               "\"optim\":80,\"acts\":8,\"comm\":0,\"peak\":200},\"param_hash\":\"0123456789abcdef\"}\n");
    char out[800];
    snprintf(out, sizeof out, "%s/t.json", dir);
    int rc = trace("escape", dir, "-o", out);
    Facts f = read_trace(out, 1);
    const JsonValue *events = json_get(f.doc, "traceEvents"), *found = NULL;
    for (size_t i = 0; events && i < events->count; i++) {
        const JsonValue *name = json_get(json_at(events, i), "name");
        if (name && name->type == JSON_STRING && !strcmp(name->string, "q\"b\\s\n\t\x01\xc3\xa9")) found = json_at(events, i);
    }
    const JsonValue *note = json_get(json_get(found, "args"), "note");
    EXPECT(rc == 0 && f.ok && !f.bad && found && note && note->type == JSON_STRING && !strcmp(note->string, "</script>\"x"),
           "a span named with quotes, a backslash, control characters and UTF-8, and a lab's own string field, come "
           "back the same through the trace's JSON (exit %d, %s)", rc, f.problem);
    EXPECT(f.memory[0] == count_events(dir, 0, "step") && f.loss[0] == count_events(dir, 0, "step") - 1,
           "a step with a NaN loss has its memory counter and no loss counter (%d memory, %d loss)", f.memory[0], f.loss[0]);
    // The span at t0 1 us (1970) is the run's first: the trace starts there, at 0.
    EXPECT(f.min_ts == 0, "the trace starts at the earliest span of the run, wherever it is");
    json_free(f.doc);
}

// ---------------------------------------------------------------------------------------
// 6. Untrusted input

static int said_once(const char *tag, const char *want1, const char *want2) {
    char *err = captured(tag, "err");
    int ok = strstr(err, want1) && (!want2 || strstr(err, want2)) && count_lines(err) == 1;
    if (!ok) printf("# %s said: %s\n", tag, one_line(err));
    free(err);
    return ok;
}

static void check_untrusted(void) {
    const char *ddp = run_dirs[2];  // ddp at 2 ranks
    int spans0 = count_events(ddp, 0, "span") + count_events(ddp, 1, "span");
    char path[800], out[800];

    const char *dir = copy_run(ddp, "garbage");
    snprintf(path, sizeof path, "%s/rank-1.jsonl", dir);
    char *text = read_file(path, NULL);
    int before = text ? count_lines(text) : 0;
    free(text);
    write_text(path, "a", "this is not JSON {\"ev\":\"span\"\n");
    int rc = trace("garbage", dir, NULL, NULL);
    snprintf(out, sizeof out, "%s/trace.json", dir);
    Facts f = read_trace(out, 2);
    char line[64];
    snprintf(line, sizeof line, "rank-1.jsonl line %d", before + 1);
    EXPECT(rc == 0 && said_once("garbage", "1 line(s) skipped", line) && f.ok && f.spans[0] + f.spans[1] == spans0,
           "a garbage line: skipped and counted, named by file and line (%s), the rest traced (exit %d)", line, rc);
    json_free(f.doc);

    dir = copy_run(ddp, "long-line");
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    FILE *fp = fopen(path, "a");
    fputs("{\"ev\":\"span\",\"rank\":0,\"name\":\"", fp);
    for (int i = 0; i < (2 << 20); i++) fputc('x', fp);
    fputs("\"}\n", fp);
    fclose(fp);
    rc = trace("long-line", dir, NULL, NULL);
    snprintf(out, sizeof out, "%s/trace.json", dir);
    f = read_trace(out, 2);
    EXPECT(rc == 0 && said_once("long-line", "longer than 1048576 bytes", "rank-0.jsonl") && f.ok &&
               f.spans[0] + f.spans[1] == spans0,
           "a 2 MiB line: skipped and counted (longer than the logs' limit), the rest traced (exit %d)", rc);
    json_free(f.doc);

    dir = copy_run(ddp, "cut");
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    write_text(path, "a", "{\"ev\":\"span\",\"rank\":0,\"st");
    rc = trace("cut", dir, NULL, NULL);
    EXPECT(rc == 0 && said_once("cut", "no end", "rank-0.jsonl"), "a last line cut off: skipped and counted (exit %d)", rc);

    dir = copy_run(ddp, "no-rank-1");
    snprintf(path, sizeof path, "%s/rank-1.jsonl", dir);
    unlink(path);
    rc = trace("no-rank-1", dir, NULL, NULL);
    snprintf(out, sizeof out, "%s/trace.json", dir);
    f = read_trace(out, 2);
    EXPECT(rc == 0 && said_once("no-rank-1", "1 rank log(s) unread", "rank-1.jsonl: missing") && f.ok && f.named[1] == 1 &&
               f.spans[1] == 0 && f.spans[0] == count_events(dir, 0, "span"),
           "a rank's log missing: named in the message, its process still there and empty, the others traced (exit %d)", rc);
    json_free(f.doc);

    struct {
        const char *tag, *meta, *want;
    } metas[] = {
        {"no-meta", NULL, "meta.json: missing"},
        {"meta-not-json", "{\"lab\":", "meta.json: not valid JSON"},
        {"meta-schema", "{\"lab\":\"ddp\"}", "meta.json: missing field"},
        {"meta-world", "{\"lab\":\"ddp\",\"argv\":[],\"world_size\":100000,\"device\":\"cpu\",\"backend\":\"shm\","
                       "\"config\":{},\"start_time\":\"x\",\"start_unix_us\":1}", "world_size 100000"},
    };
    for (size_t i = 0; i < sizeof metas / sizeof metas[0]; i++) {
        dir = copy_run(ddp, metas[i].tag);
        snprintf(path, sizeof path, "%s/meta.json", dir);
        if (metas[i].meta) write_text(path, "w", metas[i].meta);
        else unlink(path);
        rc = trace(metas[i].tag, dir, NULL, NULL);
        snprintf(out, sizeof out, "%s/trace.json", dir);
        EXPECT(rc == 1 && said_once(metas[i].tag, metas[i].want, dir) && access(out, F_OK) != 0,
               "%s: one line naming the run and the problem (\"%s\"), exit 1, no trace written (exit %d)", metas[i].tag,
               metas[i].want, rc);
    }

    snprintf(path, sizeof path, "%s/no-such-run", tmp);
    rc = trace("no-dir", path, NULL, NULL);
    EXPECT(rc == 1 && said_once("no-dir", "no such directory", path), "a directory that is not there: one line, exit 1 (%d)", rc);
    snprintf(path, sizeof path, "%s/meta.json", ddp);
    rc = trace("file-dir", path, NULL, NULL);
    EXPECT(rc == 1 && said_once("file-dir", "not a directory", NULL), "a file for a directory: one line, exit 1 (%d)", rc);

    dir = copy_run(ddp, "no-logs");
    for (int r = 0; r < 2; r++) snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r), unlink(path);
    rc = trace("no-logs", dir, NULL, NULL);
    EXPECT(rc == 1 && said_once("no-logs", "no rank's log could be read", NULL), "no rank log at all: one line, exit 1 (%d)", rc);

    // A FIFO with no writer where a log goes: refused at once (the open never waits), not hung on.
    dir = copy_run(ddp, "fifo");
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
        unlink(path);
        mkfifo(path, 0644);
    }
    double t0 = now_s();
    rc = trace("fifo", dir, NULL, NULL);
    EXPECT(rc == 1 && now_s() - t0 < 20 && said_once("fifo", "not a regular file", NULL),
           "FIFOs in place of the logs: refused at once, one line, exit 1 (exit %d after %.1f s)", rc, now_s() - t0);

    // Arguments.
    struct {
        const char *tag, *a1, *a2, *a3;
    } bad[] = {
        {"args-none", NULL, NULL, NULL},
        {"args-option", ddp, "--bogus", NULL},
        {"args-two", ddp, ddp, NULL},
        {"args-o", ddp, "-o", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = trace(bad[i].tag, bad[i].a1, bad[i].a2, bad[i].a3);
        EXPECT(rc == 2 && said_once(bad[i].tag, "shardlab trace", NULL), "%s: one line, exit 2 (%d)", bad[i].tag, rc);
    }
    rc = trace("help", "--help", NULL, NULL);
    char *help = captured("help", "out");
    EXPECT(rc == 0 && strstr(help, "usage: shardlab trace RUN_DIR [-o FILE]") && strstr(help, "ui.perfetto.dev"),
           "--help: the usage, exit 0");
    free(help);

    // -o -: the trace on stdout, the line on stderr; -o somewhere unwritable: exit 1.
    rc = trace("stdout", ddp, "-o", "-");
    snprintf(path, sizeof path, "%s/stdout.out", tmp);
    f = read_trace(path, 2);
    EXPECT(rc == 0 && f.ok && f.spans[0] + f.spans[1] == spans0 && said_once("stdout", "standard output", NULL),
           "-o -: the trace on stdout, where it came from on stderr (exit %d)", rc);
    json_free(f.doc);
    snprintf(path, sizeof path, "%s/no-such-dir/t.json", tmp);
    rc = trace("unwritable", ddp, "-o", path);
    EXPECT(rc == 1 && said_once("unwritable", "cannot write", path), "-o into no directory: one line, exit 1 (%d)", rc);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_trace LABS SHARDLAB\n");
        return 2;
    }
    labs_dir = argv[1], shardlab = argv[2];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-trace-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    check_labs();
    check_escaping();
    check_untrusted();
    EXPECT(sanitizer_reports == 0, "shardlab trace ran clean under ASan/UBSan every time (%d reports) %s", sanitizer_reports,
           first_report);
    tmp_finish(test_failed);
    return test_done();
}
