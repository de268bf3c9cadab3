// load.c — a run directory read whole for grading, and everything that makes it ungradable.
//
// A grader must not be fooled by a run that stopped early, a log cut mid-line, a rank's file
// missing or edited into nonsense: each of those is a clear reason in run->problem, never a
// crash. A run is gradable when meta.json and summary.json are valid (runschema.h), and every
// rank 0..world-1 has a log whose every line is an event of the schema, with a start, the
// step events first_step..steps in order, and an end with status "ok".
//
// One exception: a run whose training diverged (a step with a NaN or infinite loss, lr or
// gradient norm: the lab writes that step and stops: labs/DESIGN.md, Events). Its logs are whole up to
// there, so it is gradable on the steps every rank logged (last_step), with no summary; the
// divergence itself is what loss.reference and grads.reference report.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "command/runs/logtail.h"
#include "command/runs/runschema.h"
#include "common/harness/args.h"
#include "common/harness/catalog.h"
#include "common/harness/check.h"
#include "grade.h"

#define GRADE_MAX_FILE (256u << 20)  // a rank log larger than this is refused, not read
#define GRADE_MAX_WORLD 64

static int problem(GradeRun *run, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int problem(GradeRun *run, const char *fmt, ...) {
    if (run->problem[0]) return -1;  // keep the first
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(run->problem, sizeof run->problem, fmt, ap);
    va_end(ap);
    return -1;
}

// A whole JSON file; NULL with a problem recorded if it is missing, too large or not JSON.
static JsonValue *load_json(GradeRun *run, const char *name) {
    char path[sizeof run->dir + 64], err[256];
    snprintf(path, sizeof path, "%s/%s", run->dir, name);
    StrBuf sb;
    sb_init(&sb);
    int rc = sb_read_file(&sb, path, 1 << 24);
    if (rc < 0) {
        problem(run, "%s: %s", name, errno == ENOENT ? "missing (the run did not get that far)" : file_error(errno));
        sb_free(&sb);
        return NULL;
    }
    if (rc > 0) {
        problem(run, "%s: larger than 16 MiB, not a file shardlab wrote", name);
        sb_free(&sb);
        return NULL;
    }
    JsonValue *v = json_parse(sb.data ? sb.data : "", sb.len, err, sizeof err);
    sb_free(&sb);
    if (!v) problem(run, "%s: not valid JSON (%s)", name, err);
    return v;
}

static void add_event(GradeRank *rk, JsonValue *ev) {
    if (rk->n == rk->cap) {
        rk->cap = rk->cap ? 2 * rk->cap : 256;
        rk->ev = realloc_check(rk->ev, rk->cap * sizeof *rk->ev);
    }
    rk->ev[rk->n++] = ev;
}

// The first non-finite value of a step event, as "grad_norm is NaN" (0 if every one is finite).
static int nonfinite_in(const JsonValue *step, char *what, size_t n) {
    static const char *const fields[] = {"loss", "grad_norm", "lr"};
    for (int i = 0; i < 3; i++) {
        double x;
        if (json_number(json_get(step, fields[i]), &x) && !isfinite(x)) {
            snprintf(what, n, "%s is %s", fields[i], isnan(x) ? "NaN" : x > 0 ? "infinite" : "-infinite");
            return 1;
        }
    }
    return 0;
}

// rank-<r>.jsonl: every line an event of the schema (the first bad one is the problem). How
// the rank ended (its error, its end, how many steps) goes to `ending`: that is a problem
// only if the run did not diverge (grade_run_load decides).
// One line of a rank's file (logtail.h): an event of the schema, of this rank, or a problem.
typedef struct {
    GradeRun *run;
    int r;
    const char *name;
} LineCtx;

static void load_line(void *arg, LogTailKind kind, const char *line, size_t n) {
    LineCtx *x = arg;
    GradeRank *rk = &x->run->ranks[x->r];
    rk->lines++;
    char err[256];
    JsonValue *ev = NULL;
    if (kind == LOGTAIL_TOO_LONG) snprintf(err, sizeof err, "longer than %d bytes: not an event", LOGTAIL_MAX_LINE);
    else if ((ev = json_parse(line, n, err, sizeof err)) && !runschema_check_event(ev, err, sizeof err))
        json_free(ev), ev = NULL;
    if (ev && json_get(ev, "rank")->number != x->r) {
        snprintf(err, sizeof err, "an event of rank %.0f in rank %d's file", json_get(ev, "rank")->number, x->r);
        json_free(ev), ev = NULL;
    }
    if (!ev) {
        if (!rk->bad++) problem(x->run, "%s line %ld: %s", x->name, rk->lines, err);
    } else {
        add_event(rk, ev);
    }
}

static void load_rank(GradeRun *run, int r, char *ending, size_t ending_len) {
    GradeRank *rk = &run->ranks[r];
    char name[64], path[sizeof run->dir + 64];
    snprintf(name, sizeof name, "rank-%d.jsonl", r);
    snprintf(path, sizeof path, "%s/%s", run->dir, name);
    struct stat info;
    if (stat(path, &info) == 0 && info.st_size > GRADE_MAX_FILE) {
        problem(run, "%s: larger than 256 MiB, refused", name);
        return;
    }
    LogTail tail = {0};
    LineCtx x = {run, r, name};
    if (logtail_poll(&tail, path, LOGTAIL_MAX_LINE, 0, 0, load_line, &x) < 0) {
        problem(run, "%s: %s", name, errno == ENOENT ? "missing: that rank never started" : file_error(errno));
        return;
    }
    if (tail.partial_len > 0) {  // the file ends mid-line: that line is no event
        rk->lines++;
        if (!rk->bad++) problem(run, "%s line %ld: the last line has no end (the file was cut mid-line)", name, rk->lines);
    }
    logtail_free(&tail);

    // What the events say: start, steps in order, an ok end.
    rk->steps = calloc_check(rk->n + 1, sizeof *rk->steps);
    long starts = 0, second_start = 0;
    for (size_t i = 0; i < rk->n; i++) {
        const JsonValue *ev = rk->ev[i];
        const char *kind = json_get(ev, "ev")->string;
        if (!strcmp(kind, "start") && starts++ == 1) second_start = (long)i + 1;
        if (!strcmp(kind, "start") && !rk->start) rk->start = ev;
        else if (!strcmp(kind, "step")) rk->steps[rk->nsteps++] = ev;
        else if (!strcmp(kind, "end")) rk->end = ev;
        else if (!strcmp(kind, "error") && !ending[0])
            snprintf(ending, ending_len, "%s: rank %d failed: %s", name, r, json_get(ev, "msg")->string);
    }
    for (size_t i = 0; i < rk->nsteps; i++) {
        char what[96];
        int64_t st = (int64_t)json_get(rk->steps[i], "step")->number;
        if (nonfinite_in(rk->steps[i], what, sizeof what)) {
            if (!run->diverged_step || st < run->diverged_step) {
                run->diverged_step = st;
                snprintf(run->diverged, sizeof run->diverged, "rank %d: %s at step %lld", r, what, (long long)st);
            }
            break;
        }
    }
    // The spans grouped by step once, so a check reads one step's without scanning the log.
    int64_t last = run->steps > 0 ? run->steps : 0;
    rk->span_at = calloc_check((size_t)last + 2, sizeof *rk->span_at);
    for (size_t i = 0; i < rk->n; i++) {
        double st = json_get(rk->ev[i], "step") ? json_get(rk->ev[i], "step")->number : -1;
        if (!strcmp(json_get(rk->ev[i], "ev")->string, "span") && st <= last) rk->span_at[(size_t)st + 1]++;
    }
    for (int64_t s = 0; s <= last; s++) rk->span_at[s + 1] += rk->span_at[s];
    rk->spans = calloc_check(rk->span_at[last + 1] + 1, sizeof *rk->spans);
    size_t *fill = calloc_check((size_t)last + 1, sizeof *fill);
    for (size_t i = 0; i < rk->n; i++) {
        double st = json_get(rk->ev[i], "step") ? json_get(rk->ev[i], "step")->number : -1;
        if (!strcmp(json_get(rk->ev[i], "ev")->string, "span") && st <= last)
            rk->spans[rk->span_at[(size_t)st] + fill[(size_t)st]++] = rk->ev[i];
    }
    free(fill);

    // Two runs in one directory (started into it one after the other, or at once, before
    // shardlab locked run directories): their events interleave or follow each other, and
    // neither run can be told from the other.
    if (starts > 1)
        problem(run, "%s: %ld start events (the second is event %ld): more than one run wrote into this directory; grade "
                "each run from a directory of its own", name, starts, second_start);
    if (!rk->start) problem(run, "%s: no start event", name);
    if (r == 0 && rk->nsteps > 0) run->first_step = (int64_t)json_get(rk->steps[0], "step")->number;
    for (size_t i = 0; i < rk->nsteps; i++) {
        int64_t want = run->first_step + (int64_t)i, got = (int64_t)json_get(rk->steps[i], "step")->number;
        if (got != want) {
            problem(run, "%s: step %lld where step %lld should be (steps out of order, repeated or missing)", name,
                    (long long)got, (long long)want);
            break;
        }
    }
    int64_t expect = run->steps - run->first_step + 1;
    if ((int64_t)rk->nsteps > expect)
        problem(run, "%s: %zu step events, the config's steps %lld..%lld are %lld", name, rk->nsteps,
                (long long)run->first_step, (long long)run->steps, (long long)expect);
    char why[300] = "";
    if ((int64_t)rk->nsteps < expect)
        snprintf(why, sizeof why, "%s: %zu step events, the config's steps %lld..%lld are %lld", name, rk->nsteps,
                 (long long)run->first_step, (long long)run->steps, (long long)expect);
    else if (!rk->end) snprintf(why, sizeof why, "%s: no end event: the rank stopped before finishing", name);
    else if (strcmp(json_get(rk->end, "status")->string, "ok") != 0)
        snprintf(why, sizeof why, "%s: the rank ended with status \"%s\"", name, json_get(rk->end, "status")->string);
    if (why[0] && !ending[0]) snprintf(ending, ending_len, "%s", why);
}

int grade_run_load(GradeRun *run, const char *dir) {
    static const JsonValue empty = {.type = JSON_OBJECT};
    memset(run, 0, sizeof *run);
    run->config = &empty;
    run->first_step = 1;
    if (strlen(dir) + 64 > sizeof run->dir)  // (its files' paths would not fit: never cut one)
        return problem(run, "the run directory's path is %zu bytes long, more than the %zu a grader takes", strlen(dir),
                       sizeof run->dir - 64);
    snprintf(run->dir, sizeof run->dir, "%s", dir);
    char err[256];
    run->meta = load_json(run, "meta.json");
    if (!run->meta) return -1;
    if (!runschema_check_meta(run->meta, err, sizeof err)) return problem(run, "meta.json: %s", err);
    run->config = json_get(run->meta, "config");
    snprintf(run->lab, sizeof run->lab, "%s", json_get(run->meta, "lab")->string);
    double world = json_get(run->meta, "world_size")->number;
    if (world < 1 || world > GRADE_MAX_WORLD)
        return problem(run, "meta.json: world_size %.0f is not a world shardlab runs (1 to %d)", world, GRADE_MAX_WORLD);
    run->world = (int)world;
    // Every lab trains for config "steps" but collectives, which logs rows, not steps.
    // (within the labs' bound, catalog.c: the logs are read into arrays of that length)
    const JsonValue *steps = json_get(run->config, "steps");
    char text[64], why[300];
    if (!strcmp(run->lab, "collectives")) run->steps = 0;
    else if (!steps || steps->type != JSON_NUMBER || steps->number < 1)
        return problem(run, "meta.json: the config has no \"steps\" of at least 1");
    else if (snprintf(text, sizeof text, "%.17g", steps->number),
             catalog_check_option(NULL, "steps", text, why, sizeof why) != 0)
        return problem(run, "meta.json: the config's \"steps\" %s is not a run's length (%s)", text, why);
    else run->steps = (int64_t)steps->number;

    run->ranks = calloc_check((size_t)run->world, sizeof *run->ranks);
    char (*ending)[640] = calloc_check((size_t)run->world, sizeof *ending);
    for (int r = 0; r < run->world; r++) load_rank(run, r, ending[r], sizeof ending[r]);
    // How the ranks ended. A diverged run: every rank got at least to the step before the
    // divergence (the others stop one way or another once a rank has stopped).
    run->last_step = run->steps;
    for (int r = 0; r < run->world; r++) {
        const GradeRank *rk = &run->ranks[r];
        int64_t last = run->first_step + (int64_t)rk->nsteps - 1;
        if (!run->diverged_step) {
            if (ending[r][0]) problem(run, "%s", ending[r]);
        } else if (last < run->diverged_step - 1) {
            problem(run, "rank-%d.jsonl: the rank stopped after step %lld, before the training diverged (%s)", r,
                    (long long)last, run->diverged);
        } else if (last < run->last_step) {
            run->last_step = last;
        }
    }
    free(ending);
    // Ranks agree on the lab and the world they ran in.
    for (int r = 0; r < run->world; r++) {
        const JsonValue *s = run->ranks[r].start;
        if (!s) continue;
        if (strcmp(json_get(s, "lab")->string, run->lab) != 0 || json_get(s, "world")->number != run->world)
            problem(run, "rank-%d.jsonl: its start event says lab %s, world %.0f; meta.json says %s, %d", r,
                    json_get(s, "lab")->string, json_get(s, "world")->number, run->lab, run->world);
    }
    if (run->diverged_step) return run->problem[0] ? -1 : 0;  // it stopped: no summary
    run->summary = load_json(run, "summary.json");
    // The training labs' summary has the schema's fields; collectives' has its table.
    const JsonValue *status = run->summary ? json_get(run->summary, "status") : NULL;
    if (run->summary && run->steps && !runschema_check_summary(run->summary, err, sizeof err))
        problem(run, "%s", err);
    else if (run->summary && (!status || status->type != JSON_STRING || strcmp(status->string, "ok") != 0))
        problem(run, "summary.json: the status is not \"ok\"");
    return run->problem[0] ? -1 : 0;
}

void grade_run_free(GradeRun *run) {
    for (int r = 0; run->ranks && r < run->world; r++) {
        for (size_t i = 0; i < run->ranks[r].n; i++) json_free(run->ranks[r].ev[i]);
        free(run->ranks[r].ev);
        free(run->ranks[r].steps);
        free(run->ranks[r].spans);
        free(run->ranks[r].span_at);
    }
    free(run->ranks);
    json_free(run->meta);
    json_free(run->summary);
    memset(run, 0, sizeof *run);
}

const JsonValue **grade_steps(const GradeRun *run, int r, size_t *n) {
    if (r < 0 || r >= run->world || !run->ranks) {
        *n = 0;
        return NULL;
    }
    *n = run->ranks[r].nsteps;
    return run->ranks[r].steps;
}

const JsonValue **grade_spans(const GradeRun *run, int r, int64_t step, size_t *n) {
    *n = 0;
    if (r < 0 || r >= run->world || !run->ranks || !run->ranks[r].span_at || step < 0 ||
        step > (run->steps > 0 ? run->steps : 0))
        return NULL;
    const GradeRank *rk = &run->ranks[r];
    *n = rk->span_at[step + 1] - rk->span_at[step];
    return rk->spans + rk->span_at[step];
}

double grade_cfg_num(const GradeRun *run, const char *key, double dflt) {
    const JsonValue *v = json_get(run->config, key);
    if (v && v->type == JSON_BOOL) return v->boolean;
    return v && v->type == JSON_NUMBER && isfinite(v->number) ? v->number : dflt;
}

int grade_cfg_int(const GradeRun *run, const char *key, int dflt) {
    const JsonValue *v = json_get(run->config, key);
    if (v && v->type == JSON_BOOL) return v->boolean;
    return v && v->type == JSON_NUMBER && v->number == floor(v->number) && fabs(v->number) <= INT_MAX ? (int)v->number
                                                                                                     : dflt;
}

int grade_cfg_count(const GradeRun *run, const char *key, int dflt, int max) {
    const JsonValue *v = json_get(run->config, key);
    if (!v) return dflt;
    return v->type == JSON_NUMBER && v->number >= 1 && v->number <= max && v->number == floor(v->number) ? (int)v->number
                                                                                                         : 0;
}

const char *grade_cfg_str(const GradeRun *run, const char *key, const char *dflt) {
    const JsonValue *v = json_get(run->config, key);
    return v && v->type == JSON_STRING ? v->string : dflt;
}
