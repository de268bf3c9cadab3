// methods.c — the checks that belong to one method each: the pipeline's schedule, activation
// recomputation, and the collectives themselves (data sharding's: coverage.c).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "14-activation-checkpointing/policy.h"
#include "common/harness/check.h"
#include "common/model/gpt.h"
#include "grade_internal.h"

// ---- pipelines: the order each stage ran its micro-batches in ----------------------------
//
// A stage's fwd and bwd span events (one per micro-batch and model chunk) say the order it
// ran them in; the graders need nothing else. In flight: the most micro-batches a stage had
// run forward and not yet backward (their activations held). The bubble: the order replayed
// with a forward costing 1 and a backward 2, each waiting for its neighbour stage (forward:
// the stage before; backward: the stage after), gives a makespan M; the bubble is the idle
// share 1 - 3m/M, which is (p-1)/(m+p-1) for GPipe and 1F1B alike.

typedef struct {
    int bwd, mb;
} PipeOp;

typedef struct {
    PipeOp *ops;
    int n;
} StageOrder;

static int cmp_t0(const void *a, const void *b) {
    double x = ev_num(*(const JsonValue *const *)a, "t0_us"), y = ev_num(*(const JsonValue *const *)b, "t0_us");
    return (x > y) - (x < y);
}

// Rank r's fwd/bwd ops at `step`, in the order they started.
static StageOrder stage_order(const GradeRun *run, int r, int64_t step) {
    size_t all;
    const JsonValue **of_step = grade_spans(run, r, step, &all);
    const JsonValue **sp = calloc_check(all + 1, sizeof *sp);
    int n = 0;
    for (size_t i = 0; i < all; i++) {
        const JsonValue *ev = of_step[i];
        if (ev_num(ev, "mb") < 0) continue;
        if (!strcmp(ev_str(ev, "name"), "fwd") || !strcmp(ev_str(ev, "name"), "bwd")) sp[n++] = ev;
    }
    // qsort is not stable; spans that start in the same microsecond keep file order because
    // a stage runs one op at a time and logs it when it ends, so t0 differs between them.
    qsort(sp, (size_t)n, sizeof *sp, cmp_t0);
    StageOrder o = {calloc_check((size_t)n + 1, sizeof(PipeOp)), n};
    for (int i = 0; i < n; i++) o.ops[i] = (PipeOp){!strcmp(ev_str(sp[i], "name"), "bwd"), (int)ev_num(sp[i], "mb")};
    free(sp);
    return o;
}

// The pipeline config, or a reason it is not graded (then returns 0).
static int pipe_config(const GradeRun *run, GradeCheck *c, int *p, int *m) {
    int dp = grade_cfg_int(run, "dp", 1);
    *m = grade_cfg_int(run, "micro", 0);
    *p = dp >= 1 ? run->world / dp : 0;
    if (*p < 1 || *p * dp != run->world || *m < 1 || *m > 4096) {
        MEASURED("stages %d, micro-batches %d", *p, *m);
        EXPECTED("a world of p x dp ranks and m >= 1 micro-batches");
        REASON("the config does not describe a pipeline of this world");
        return 0;
    }
    return 1;
}

static int stage_of(const GradeRun *run, int r, int p) {
    size_t n;
    const JsonValue **s = grade_steps(run, r, &n);
    double st = n ? ev_num(s[0], "stage") : NAN;
    return st >= 0 && st < p ? (int)st : r % p;
}

void check_in_flight(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    int p, m;
    if (!pipe_config(run, c, &p, &m)) return;
    const char *sched = grade_cfg_str(run, "schedule", "");
    int gpipe = !strcmp(sched, "gpipe");
    EXPECTED("%s: %s", sched, gpipe ? "m on every stage" : "min(m, p - s) on stage s");
    for (int r = 0; r < run->world; r++) {
        int s = stage_of(run, r, p), bound = gpipe ? m : (p - s < m ? p - s : m);
        for (int64_t step = run->first_step; step <= run->last_step; step++) {
            StageOrder o = stage_order(run, r, step);
            int held = 0, most = 0, fwd = 0, bwd = 0;
            for (int i = 0; i < o.n; i++) {
                held += o.ops[i].bwd ? -1 : 1;
                fwd += !o.ops[i].bwd, bwd += o.ops[i].bwd;
                if (held > most) most = held;
            }
            free(o.ops);
            if (fwd != m || bwd != m) {
                MEASURED("rank %d, step %lld: %d forward and %d backward micro-batches", r, (long long)step, fwd, bwd);
                REASON("a stage must run each of the m = %d micro-batches forward and backward once", m);
                return;
            }
            if (most != bound) {
                MEASURED("stage %d (rank %d), step %lld: %d micro-batches in flight", s, r, (long long)step, most);
                EXPECTED("%d (%s)", bound, gpipe ? "GPipe: all m" : "1F1B: min(m, p - s)");
                REASON("the stage did not interleave forwards and backwards as the schedule says");
                return;
            }
        }
    }
    MEASURED("as the schedule says on all %d stages, every step", p);
    c->pass = 1;
}

// Replays the stages' orders with costs F = 1, B = 2; returns the makespan, or -1 if the order
// can never finish (a stage waits for something that comes after it).
static double replay(StageOrder *st, int p, int m) {
    double *done_f = malloc_check(sizeof(double) * (size_t)(p * m)), *done_b = malloc_check(sizeof(double) * (size_t)(p * m));
    for (int i = 0; i < p * m; i++) done_f[i] = done_b[i] = -1;
    int *at = calloc_check((size_t)p, sizeof(int));
    double *free_at = calloc_check((size_t)p, sizeof(double)), makespan = 0;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < p; s++) {
            while (at[s] < st[s].n) {
                PipeOp op = st[s].ops[at[s]];
                if (op.mb < 0 || op.mb >= m) goto stuck;
                double dep;
                if (!op.bwd) dep = s == 0 ? 0 : done_f[(s - 1) * m + op.mb];
                else dep = s == p - 1 ? done_f[s * m + op.mb] : done_b[(s + 1) * m + op.mb];
                if (dep < 0 || (op.bwd && done_f[s * m + op.mb] < 0)) break;  // not ready yet
                double t = (dep > free_at[s] ? dep : free_at[s]) + (op.bwd ? 2 : 1);
                (op.bwd ? done_b : done_f)[s * m + op.mb] = t;
                free_at[s] = t;
                if (t > makespan) makespan = t;
                at[s]++, progress = 1;
            }
        }
    }
    for (int s = 0; s < p; s++)
        if (at[s] < st[s].n) goto stuck;
    free(done_f), free(done_b), free(at), free(free_at);
    return makespan;
stuck:
    free(done_f), free(done_b), free(at), free(free_at);
    return -1;
}

void check_bubble(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    int p, m;
    if (!pipe_config(run, c, &p, &m)) return;
    double formula = (double)(p - 1) / (m + p - 1);
    EXPECTED("(p-1)/(m+p-1) = %.4f (p = %d, m = %d; forward 1, backward 2)", formula, p, m);
    int pipelines = run->world / p;
    for (int64_t step = run->first_step; step <= run->last_step; step++)
        for (int pipe = 0; pipe < pipelines; pipe++) {
            StageOrder *st = calloc_check((size_t)p, sizeof *st);
            for (int r = 0; r < run->world; r++) {
                size_t n;
                const JsonValue **s = grade_steps(run, r, &n);
                double pl = n ? ev_num(s[0], "pipeline") : NAN;
                if ((isnan(pl) ? r / p : (int)pl) != pipe) continue;
                int stage = stage_of(run, r, p);
                free(st[stage].ops);
                st[stage] = stage_order(run, r, step);
            }
            double makespan = replay(st, p, m);
            for (int s = 0; s < p; s++) free(st[s].ops);
            free(st);
            double bubble = makespan > 0 ? 1 - 3.0 * m / makespan : NAN;
            if (makespan < 0) {
                MEASURED("step %lld: the logged order cannot run", (long long)step);
                REASON("a stage runs a micro-batch before the stage it depends on has produced it");
                return;
            }
            if (!(fabs(bubble - formula) < 1e-9)) {
                MEASURED("step %lld, pipeline %d: bubble %.4f", (long long)step, pipe, bubble);
                REASON("the logged order idles the stages more than the schedule should");
                return;
            }
        }
    MEASURED("%.4f on every step", formula);
    c->pass = 1;
}

// ---- activation checkpointing ---------------------------------------------------------------

void check_recompute_bitwise(Ctx *x, GradeCheck *c) {
    const GradeRun *ref = ctx_reference(x, REF_CKPT_NONE, c->reason, sizeof c->reason);
    EXPECTED("loss and param_hash bitwise those of %s", x->ref_label[REF_CKPT_NONE]);
    if (!ref) {
        MEASURED("no reference");
        return;
    }
    size_t n, nr;
    const JsonValue **s = grade_steps(x->run, 0, &n), **t = grade_steps(ref, 0, &nr);
    for (size_t i = 0; i < n; i++) {
        const JsonValue *u = NULL;
        for (size_t j = 0; j < nr && !u; j++)
            if (ev_num(t[j], "step") == ev_num(s[i], "step")) u = t[j];
        if (!u) {
            MEASURED("step %.0f is not in the reference", ev_num(s[i], "step"));
            REASON("the reference run does not cover this run's steps");
            return;
        }
        if (ev_num(s[i], "loss") != ev_num(u, "loss") || strcmp(ev_str(s[i], "param_hash"), ev_str(u, "param_hash"))) {
            MEASURED("step %.0f: loss %.8g, param_hash %s vs %.8g, %s", ev_num(s[i], "step"), ev_num(s[i], "loss"),
                     ev_str(s[i], "param_hash"), ev_num(u, "loss"), ev_str(u, "param_hash"));
            REASON("recomputing a block did not reproduce what the forward pass computed");
            return;
        }
    }
    MEASURED("bitwise equal at all %zu steps", n);
    c->pass = 1;
}

// The run's policy, or -1 with a reason.
static int run_policy(const GradeRun *run, const GptConfig *m, CkptPolicy *p, GradeCheck *c) {
    const char *name = grade_cfg_str(run, "policy", "");
    char why[200];
    if (ckpt_policy_named(p, name, m->layers, why, sizeof why) != 0) {
        MEASURED("policy \"%s\"", name);
        REASON("the config's policy is not none, every, sqrt or 1..L");
        return -1;
    }
    return 0;
}

double grade_ckpt_acts(const GradeRun *run) {
    GptConfig m = grade_model(run);
    CkptPolicy p;
    GradeCheck scratch = {0}, *c = &scratch;
    int B = grade_cfg_count(run, "batch", 0, 1 << 16), per = run->world * grade_cfg_count(run, "accum", 1, 1 << 16);
    if (!grade_model_ok(&m) || !B || per < 1 || B % per || run_policy(run, &m, &p, c) < 0)
        return NAN;
    return ckpt_acts_bytes(&m, B / per, &p);
}

void check_recompute_count(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    GptConfig m = grade_model(run);
    CkptPolicy p;
    if (!grade_model_ok(&m) || run_policy(run, &m, &p, c) < 0) {
        if (!c->reason[0]) REASON("the config's model (seq, dim, layers, heads) is not one shardlab builds");
        return;
    }
    int micro = grade_cfg_int(run, "accum", 1);
    int want = p.recomputed * micro;
    EXPECTED("%d recomputed blocks per rank per step (policy %s: %d per micro-batch, %d micro-batches)", want, p.name,
             p.recomputed, micro);
    for (int r = 0; r < run->world; r++)
        for (int64_t step = run->first_step; step <= run->last_step; step++) {
            int got = 0;
            size_t n;
            const JsonValue **sp = grade_spans(run, r, step, &n);
            for (size_t i = 0; i < n; i++) got += !strcmp(ev_str(sp[i], "name"), "recompute");
            if (got != want) {
                MEASURED("rank %d, step %lld: %d recompute spans", r, (long long)step, got);
                REASON("the backward pass recomputed %s blocks than the policy checkpoints", got < want ? "fewer" : "more");
                return;
            }
        }
    MEASURED("%d per rank per step", want);
    c->pass = 1;
}

// ---- collectives: the lab's answer check on every row ----------------------------------------
//
// Each row's #wrong is computed by every rank against the serial answer, on data where any
// misplaced or double-counted chunk changes a value (collectives.c). The grader reads them
// all, on every rank, and wants every collective of the config present.

void check_collectives(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    const JsonValue *colls = json_get(run->config, "colls");
    EXPECTED("#wrong = 0 on every row of every collective, on every rank");
    if (!grade_cfg_num(run, "check", 1)) {
        MEASURED("run with --check 0");
        REASON("nothing was verified: run the lab with its check on");
        return;
    }
    if (!colls || colls->type != JSON_ARRAY || colls->count == 0) {
        MEASURED("no \"colls\" in the config");
        REASON("the config does not say which collectives ran");
        return;
    }
    int rows = 0;
    for (int r = 0; r < run->world; r++)
        for (size_t k = 0; k < colls->count; k++) {
            const JsonValue *name = json_at(colls, k);
            if (!name || name->type != JSON_STRING) continue;
            size_t len = name->string_len;
            int seen = 0;
            for (size_t i = 0; i < run->ranks[r].n; i++) {
                const JsonValue *ev = run->ranks[r].ev[i];
                const char *cn = ev_str(ev, "name"), *dot = strrchr(cn, '.');
                if (strcmp(ev_str(ev, "ev"), "check") || strncmp(cn, name->string, len) || cn[len] != '.' || !dot ||
                    strcmp(dot, ".wrong"))
                    continue;
                seen++;
                if (ev_num(ev, "value") != 0) {
                    MEASURED("rank %d, %s: %.0f wrong elements", r, cn, ev_num(ev, "value"));
                    REASON("%s returned a wrong answer (a chunk sent to, or added at, the wrong place)", name->string);
                    return;
                }
            }
            if (!seen) {
                MEASURED("rank %d: no rows for %s", r, name->string);
                REASON("a collective the config lists never reported its answer check");
                return;
            }
            rows += seen;
        }
    MEASURED("%d rows over %d ranks, 0 wrong elements", rows, run->world);
    c->pass = 1;
}
