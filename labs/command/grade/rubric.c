// rubric.c — the checks, and which lab is graded on which.
//
// Each check reads the run (load.c) and, where it needs one, a reference run the grader
// starts with its own binaries (grade.c). None of them trusts the lab's own "check" events
// or its config's derived fields: the expected value is recomputed here from the formula,
// with the instructor's copy of labs/ (common/model/gpt.h's layer sizes, 14-activation-checkpointing/policy.h's policies,
// common/harness/tp_layout.h's slices; the sampler's epoch order is the grader's own, coverage.c), from
// files that hold no student's part: a student's change cannot move both sides of a
// comparison, even when shardlab grades a run with the student's own build.
//
// The rubric per lab (points in brackets; every lab also has run.complete [1]):
//   single       loss.reference [3]  mem.formula [1]
//   collectives  collectives.correct [4]
//   ddp          replicas.equal [2]  loss.reference [3]  grads.reference [2]  mem.formula [1]  comm.bytes [2]
//   zero         the same as ddp (replicas.equal skipped at stage 3: no replicas)
//   fsdp         loss.reference [3]  grads.reference [2]  mem.formula [1]  comm.bytes [2]
//   tp           loss.reference [3]  grads.reference [2]  comm.bytes [2]
//   pp           loss.reference [3]  grads.reference [2]  mem.formula [1]  schedule.in_flight [2]  schedule.bubble [2]
//   ckpt         replicas.equal [2]  loss.reference [3]  recompute.bitwise [3]  recompute.count [1]  mem.formula [1]
//   shard        replicas.equal [2]  loss.reference [3]  data.coverage [3]
//   cp           replicas.equal [2]  loss.reference [3]  grads.reference [2]  mem.formula [1]  comm.bytes [2]
//                layout.positions [1]
//   ep           the same as cp, experts.routing [2] in place of layout.positions (replicas.equal:
//                the replicated parameters' hash; each rank's experts are its own)
// Here: run.complete, replicas.equal, loss.reference and grads.reference, and the table. The
// others live with their formula: mem.formula in memory.c, comm.bytes in comm.c, schedule.*,
// recompute.* and collectives.correct in methods.c, data.coverage in coverage.c, layout.positions
// and experts.routing in comm.c.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"
#include "common/model/gpt.h"
#include "grade.h"
#include "grade_internal.h"

// The tolerances (labs/command/grade/README.md). A distributed run adds the same fp32 numbers as the
// single-rank run in another order (all-reduce, micro-batches), nothing else. Started from the
// same state, the two stay within 1e-7 in the loss for ten steps (measured on every graded
// configuration, from step 1 and from replay points up to step 800 of 1000); a lost, doubled or
// misplaced gradient moves the loss by 1e-3 within a few steps and the gradient norm by far
// more. Left to run, training amplifies the last-bit differences like any chaotic system
// (measured: 1e-6 at step 250 of the default ddp run, 1.7e-3 by step 700), so after the first
// steps exact agreement is only asked where the reference restarts from the run's own state:
// the ten steps after each replay point. Everywhere else the two curves must tell the same
// story: each tenth of the run's mean within 2% of the reference's (the gradient norm's within
// 20%; measured: 0.03% and 0.2% for correct runs, 12% and 55% for a run on another seed), or
// within 0.02 nats (0.05 for the gradient norm) where the curve is so low that 2% is less:
// shard's 64 items learnt by heart in 1000 steps end at a loss of 0.12, where two correct runs
// were 0.003 nats (2.5%) apart; another seed is 0.3 nats away.
// With --mixed the products' operands are rounded to bf16, so a last-bit difference in a
// weight now and then rounds it to the neighbouring bf16, 2^-8 away: the same correct run drifts
// from its reference faster (measured over 20 steps of the default shape: ddp and tp 4e-5 in
// the loss and 7e-5 in the gradient norm from single --mixed; zero --mixed at N=2 5.8e-5 and
// 2.8e-4 from ZeRO stage 0 on one rank), so the first steps and the replays are held to
// LOSS_TOL_MIXED and GRAD_NORM_RTOL_MIXED, still an order below what a lost gradient does.
#define STRICT_STEPS GRADE_REPLAY_STEPS
#define LOSS_TOL 1e-5
#define GRAD_NORM_RTOL 1e-4
#define LOSS_TOL_MIXED 2e-4
#define GRAD_NORM_RTOL_MIXED 1e-3
#define CURVE_BINS 10
#define LOSS_CURVE_RTOL 0.02
#define LOSS_CURVE_ATOL 0.02
#define GRAD_CURVE_RTOL 0.2
#define GRAD_CURVE_ATOL 0.05

GptConfig grade_model(const GradeRun *run) {
    GptConfig m = {.vocab = grade_cfg_int(run, "vocab", 256)};
    m.seq = grade_cfg_int(run, "seq", 0), m.dim = grade_cfg_int(run, "dim", 0);
    m.layers = grade_cfg_int(run, "layers", 0), m.heads = grade_cfg_int(run, "heads", 0);
    // A run from before --attn ran naive attention; a value that is neither name is refused
    // before any formula uses it (grade_model_ok).
    m.attn = gpt_attn_parse(grade_cfg_str(run, "attn", "naive"));
    m.mixed = grade_cfg_int(run, "mixed", 0) != 0;  // (bf16 operands: the pass's workspace is larger)
    // --moe (0 for a dense run, and for one from before the option).
    m.experts = grade_cfg_int(run, "moe", 0), m.topk = grade_cfg_int(run, "topk", 0);
    m.expert_dim = grade_cfg_int(run, "expert_dim", 0);
    m.capacity = grade_cfg_num(run, "capacity", 0), m.aux_weight = grade_cfg_num(run, "aux_weight", 0);
    return m;
}

int grade_model_ok(const GptConfig *m) {
    if (m->experts != 0) {  // the layer's own ranges (moe.h), fp32 only, as the lab takes them
        MoeConfig x = {.C = m->dim, .E = m->experts, .K = m->topk, .H = m->expert_dim, .capacity = m->capacity};
        if (m->experts < 0 || m->dim < 1 || *moe_config_check(&x) || m->mixed || m->expert_dim > 65536 ||
            !(m->aux_weight >= 0 && m->aux_weight <= 100))
            return 0;
    }
    return m->attn >= 0 && m->seq >= 1 && m->dim >= 1 && m->layers >= 1 && m->layers <= 256 && m->heads >= 1 && m->vocab >= 1 &&
           m->dim % m->heads == 0 && m->seq <= 65536 && m->dim <= 65536;
}

int grade_model_or_say(const GradeRun *run, GptConfig *m, GradeCheck *c) {
    *m = grade_model(run);
    if (grade_model_ok(m)) return 1;
    MEASURED("-");
    EXPECTED("-");
    REASON("the config's model (seq, dim, layers, heads) is not one shardlab builds");
    return 0;
}

// ---- run.complete -----------------------------------------------------------------------

static void check_complete(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    if (run->problem[0]) {
        MEASURED("not gradable");
        EXPECTED("every rank's log whole, status ok");
        REASON("%s", run->problem);
        return;
    }
    EXPECTED("every rank's log whole, status ok");
    c->pass = 1;
    if (run->diverged_step) {  // whole logs of a run the lab stopped: graded on what it did
        MEASURED("%d rank%s, steps %lld..%lld of %lld: the lab stopped where the training diverged (%s); "
                 "loss.reference and grads.reference grade that",
                 run->world, run->world == 1 ? "" : "s", (long long)run->first_step, (long long)run->last_step,
                 (long long)run->steps, run->diverged);
        return;
    }
    if (run->steps == 0)  // a lab that trains nothing (collectives): no steps to name
        MEASURED("%d rank%s, every rank ended ok", run->world, run->world == 1 ? "" : "s");
    else
        MEASURED("%d rank%s, steps %lld..%lld, every rank ended ok", run->world, run->world == 1 ? "" : "s",
                 (long long)run->first_step, (long long)run->steps);
}

// ---- replicas.equal: param_hash identical on every rank after every step -----------------

static void check_replicas(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    size_t n0;
    const JsonValue **s0 = grade_steps(run, 0, &n0);
    EXPECTED("param_hash identical on all %d ranks after each of %zu steps", run->world, n0);
    for (int r = 1; r < run->world; r++) {
        size_t n;
        const JsonValue **s = grade_steps(run, r, &n);
        for (size_t i = 0; i < n && i < n0; i++)
            if (strcmp(ev_str(s[i], "param_hash"), ev_str(s0[i], "param_hash")) != 0) {
                MEASURED("rank %d differs from rank 0 after step %.0f (%s vs %s)", r, ev_num(s[i], "step"),
                         ev_str(s[i], "param_hash"), ev_str(s0[i], "param_hash"));
                REASON("the replicas drifted apart: the ranks did not apply the same update");
                return;
            }
    }
    MEASURED("identical on %d ranks after every step", run->world);
    c->pass = 1;
}

// ---- loss.reference and grads.reference: against the single-rank run ------------------

// Rank 0's step event of `step` (the loader checked that steps come in order), or NULL.
static const JsonValue *step_event(const GradeRun *run, int64_t step) {
    size_t n;
    const JsonValue **s = grade_steps(run, 0, &n);
    int64_t i = step - run->first_step;
    return n && i >= 0 && (size_t)i < n ? s[i] : NULL;
}

// The worst difference of a step field between the run and ref over steps from..to (relative:
// divided by the reference's magnitude). Returns the steps compared, or -1 at the first step
// the reference lacks (*at says which).
typedef struct {
    double worst, got, want;
    int64_t at;
} Diff;
static int64_t worst_diff(const GradeRun *run, const GradeRun *ref, const char *field, int relative, int64_t from,
                          int64_t to, Diff *d) {
    int64_t compared = 0;
    for (int64_t step = from; step <= to; step++) {
        const JsonValue *a = step_event(run, step), *b = step_event(ref, step);
        if (!a) continue;
        if (!b) return d->at = step, -1;
        double x = ev_num(a, field), y = ev_num(b, field);
        double e = fabs(x - y) / (relative ? fmax(fabs(y), 1e-30) : 1);
        if (!(e <= d->worst)) d->worst = isnan(e) ? INFINITY : e, d->at = step, d->got = x, d->want = y;
        compared++;
    }
    return compared;
}

static void check_against_ref(Ctx *x, GradeCheck *c, const char *field, int relative, double tol, double curve_rtol,
                              double curve_atol) {
    const GradeRun *run = x->run;
    const char *what = !strcmp(field, "loss") ? "the loss" : "the gradient norm";
    if (run->diverged_step) {  // nothing to compare after a NaN: say where it came
        EXPECTED("%s finite at every step, as the single-rank run's on the same global batch", what);
        MEASURED("the training diverged: %s; the run stopped at step %lld of %lld", run->diverged,
                 (long long)run->last_step, (long long)run->steps);
        REASON("a NaN or infinite value: the sums went wrong before it, or the learning rate is too high for this "
               "model (the hint in the run's error event says what to try)");
        return;
    }
    const GradeRun *ref = ctx_reference(x, REF_SINGLE, c->reason, sizeof c->reason);
    EXPECTED("within %g%s of %s over steps 1..%d and the %d steps after each of the run's replay points; "
             "each tenth of the curve's mean within %g%% (or %g)",
             tol, relative ? " (relative)" : "", x->ref_label[REF_SINGLE], STRICT_STEPS, GRADE_REPLAY_STEPS,
             100 * curve_rtol, curve_atol);
    if (!ref) {
        MEASURED("no reference");
        return;
    }
    const char *wrong = !strcmp(field, "loss") ? "the loss is not the single-rank run's on the same global batch"
                                               : "the gradients are not those of the global batch's mean loss";

    // 1. The first steps, from the same initial weights.
    Diff first = {0};
    if (run->first_step == 1 &&
        worst_diff(run, ref, field, relative, 1, STRICT_STEPS < run->last_step ? STRICT_STEPS : run->last_step, &first) < 0) {
        MEASURED("the reference has no step %lld", (long long)first.at);
        REASON("the reference run does not cover this run's steps");
        return;
    }
    if (!(first.worst <= tol)) {
        MEASURED("%s %.9g vs %.9g at step %lld (off by %.3g)", what, first.got, first.want, (long long)first.at, first.worst);
        REASON("%s", wrong);
        return;
    }

    // 2. After each replay point, from the run's own state.
    int nrep;
    const GradeReplay *rep = ctx_replays(x, &nrep);
    Diff later = {0};
    char spans[160] = "";
    for (int i = 0; i < nrep; i++) {
        if (!rep[i].ok) {
            MEASURED("no replay from step %lld", (long long)rep[i].from);
            REASON("the replay from the run's state after step %lld: %s", (long long)rep[i].from, rep[i].problem);
            return;
        }
        if (worst_diff(run, &rep[i].ref, field, relative, rep[i].from + 1, rep[i].to, &later) < 0) {
            MEASURED("the replay from step %lld has no step %lld", (long long)rep[i].from, (long long)later.at);
            REASON("the replay stopped early (its log: %s/ref-replay-%08lld)", run->dir, (long long)rep[i].from);
            return;
        }
        if (!(later.worst <= tol)) {
            MEASURED("%s %.9g vs %.9g at step %lld, replayed from the run's state after step %lld (off by %.3g)", what,
                     later.got, later.want, (long long)later.at, (long long)rep[i].from, later.worst);
            REASON("%s", wrong);
            return;
        }
        if (strlen(spans) < sizeof spans - 40)
            snprintf(spans + strlen(spans), sizeof spans - strlen(spans), "%s%lld-%lld", i ? ", " : "",
                     (long long)rep[i].from + 1, (long long)rep[i].to);
    }

    // 3. The whole curve in tenths (parts of 10 steps for a run under 100): the same story,
    //    whatever chaos did to single steps.
    int64_t len = run->last_step - run->first_step + 1;
    int bins = len >= CURVE_BINS * 10 ? CURVE_BINS : (int)(len / 10 > 1 ? len / 10 : 1);
    double curve = 0, curve_abs = 0;
    for (int b = 0; b < bins; b++) {
        int64_t lo = run->first_step + len * b / bins, hi = run->first_step + len * (b + 1) / bins - 1;
        double sa = 0, sb = 0;
        for (int64_t step = lo; step <= hi; step++) {
            const JsonValue *ea = step_event(run, step), *eb = step_event(ref, step);
            if (!ea || !eb) {
                MEASURED("the reference has no step %lld", (long long)step);
                REASON("the reference run does not cover this run's steps");
                return;
            }
            sa += ev_num(ea, field), sb += ev_num(eb, field);
        }
        double n = (double)(hi - lo + 1), e = fabs(sa - sb) / fmax(fabs(sb), 1e-30);
        if (!(e <= curve_rtol || fabs(sa - sb) / n <= curve_atol)) {
            MEASURED("%s's mean over steps %lld-%lld is %.6g, the reference's %.6g (%.3g%% apart)", what, (long long)lo,
                     (long long)hi, sa / n, sb / n, 100 * e);
            REASON("the run does not train like the single-rank run on the same global batch");
            return;
        }
        if (e > curve) curve = e;
        if (fabs(sa - sb) / n > curve_abs) curve_abs = fabs(sa - sb) / n;
    }
    if (nrep)
        MEASURED("worst %.3g over steps 1-%d, %.3g over %d replay%s (steps %s); the curve within %.3g%% (%.3g)",
                 first.worst, STRICT_STEPS, later.worst, nrep, nrep == 1 ? "" : "s", spans, 100 * curve, curve_abs);
    else
        MEASURED("worst %.3g over steps 1-%d; the curve within %.3g%% (%.3g)%s", first.worst, STRICT_STEPS, 100 * curve,
                 curve_abs, len > STRICT_STEPS ? " (no replay points: later steps compared as a curve only)" : "");
    c->pass = 1;
}

static void check_loss(Ctx *x, GradeCheck *c) {
    int mixed = grade_cfg_int(x->run, "mixed", 0) != 0;
    check_against_ref(x, c, "loss", 0, mixed ? LOSS_TOL_MIXED : LOSS_TOL, LOSS_CURVE_RTOL, LOSS_CURVE_ATOL);
}
static void check_grads(Ctx *x, GradeCheck *c) {
    int mixed = grade_cfg_int(x->run, "mixed", 0) != 0;
    check_against_ref(x, c, "grad_norm", 1, mixed ? GRAD_NORM_RTOL_MIXED : GRAD_NORM_RTOL, GRAD_CURVE_RTOL,
                      GRAD_CURVE_ATOL);
}
// ---- the rubric table ---------------------------------------------------------------------

typedef void (*CheckFn)(Ctx *x, GradeCheck *c);
typedef struct {
    const char *name;
    int points;
    CheckFn fn;
    const char *what;
} CheckDef;

static const CheckDef DEFS[] = {
    {"run.complete", 1, check_complete, "every rank ran every step and ended ok; the logs are whole"},
    {"replicas.equal", 2, check_replicas, "replicas hold bitwise the same parameters after every step"},
    {"loss.reference", 3, check_loss, "the loss equals the single-rank run's on the same global batch"},
    {"grads.reference", 2, check_grads, "the gradient norm equals the single-rank run's (gradients averaged right)"},
    {"mem.formula", 1, check_mem, "memory per rank and category equals the method's, after a step and at the peak"},
    {"comm.bytes", 2, check_comm, "bytes sent per step equal the algorithm's count, and nothing else is sent"},
    {"schedule.in_flight", 2, check_in_flight, "micro-batches in flight per stage equal the schedule's bound"},
    {"schedule.bubble", 2, check_bubble, "the bubble of the logged order equals (p-1)/(m+p-1)"},
    {"recompute.bitwise", 3, check_recompute_bitwise, "recomputation changes no bit of the result (vs --policy none)"},
    {"recompute.count", 1, check_recompute_count, "each step recomputes exactly the blocks the policy checkpoints"},
    {"data.coverage", 3, check_coverage, "each rank read and trained on exactly its part of every global batch"},
    {"collectives.correct", 4, check_collectives, "every collective's result is right, every size"},
    {"layout.positions", 1, check_positions, "each rank holds the tokens its layout gives it (zig-zag: chunks r, 2n-1-r)"},
    {"experts.routing", 2, check_routing, "every rank logs the pass's routing; K experts a token; the capacity rule's drops"},
};

typedef struct {
    const char *lab;
    const char *checks[GRADE_MAX_CHECKS];
} LabRubric;

static const LabRubric RUBRICS[] = {
    {"single", {"run.complete", "loss.reference", "mem.formula"}},
    {"collectives", {"run.complete", "collectives.correct"}},
    {"ddp", {"run.complete", "replicas.equal", "loss.reference", "grads.reference", "mem.formula", "comm.bytes"}},
    {"zero", {"run.complete", "replicas.equal", "loss.reference", "grads.reference", "mem.formula", "comm.bytes"}},
    {"fsdp", {"run.complete", "loss.reference", "grads.reference", "mem.formula", "comm.bytes"}},
    {"tp", {"run.complete", "loss.reference", "grads.reference", "comm.bytes"}},
    {"pp", {"run.complete", "loss.reference", "grads.reference", "mem.formula", "schedule.in_flight", "schedule.bubble"}},
    {"ckpt", {"run.complete", "replicas.equal", "loss.reference", "recompute.bitwise", "recompute.count", "mem.formula"}},
    {"shard", {"run.complete", "replicas.equal", "loss.reference", "data.coverage"}},
    {"cp", {"run.complete", "replicas.equal", "loss.reference", "grads.reference", "mem.formula", "comm.bytes",
            "layout.positions"}},
    {"ep", {"run.complete", "replicas.equal", "loss.reference", "grads.reference", "mem.formula", "comm.bytes",
            "experts.routing"}},
};

// Why a check does not apply to this run's configuration (NULL if it does). Known from the
// config alone, so a run that failed is graded out of the same points as one that passed.
static const char *not_applicable(const char *check, const GradeRun *run) {
    if (!strcmp(check, "replicas.equal") && !strcmp(run->lab, "zero") && grade_cfg_num(run, "stage", 0) == 3)
        return "ZeRO-3 keeps no replica: each rank holds its own shard of the parameters";
    if (!strcmp(check, "comm.bytes") && !strcmp(run->lab, "tp") &&
        (grade_cfg_num(run, "vocab_parallel", 0) || grade_cfg_num(run, "dp", 1) != 1))
        return "graded for one tensor-parallel group (--sp or not), without --vocab-parallel or --dp";
    if (!strncmp(check, "schedule.", 9) && grade_cfg_num(run, "chunks", 1) != 1)
        return "graded for one model chunk per stage (gpipe, 1f1b); the interleaved schedule is not";
    if (!strcmp(check, "schedule.in_flight") && strcmp(grade_cfg_str(run, "schedule", ""), "gpipe") &&
        strcmp(grade_cfg_str(run, "schedule", ""), "1f1b"))
        return "only GPipe's and 1F1B's bounds are graded";
    return NULL;
}

void grade_rubric(Grade *g, const char *dir, const char *lab, const char *config, const GradeRefs *refs) {
    memset(g, 0, sizeof *g);
    snprintf(g->run_dir, sizeof g->run_dir, "%s", dir);
    GradeRun run;
    grade_run_load(&run, dir);
    if (lab && strcmp(run.lab, lab) != 0 && !run.problem[0])
        snprintf(run.problem, sizeof run.problem, "meta.json: lab \"%s\", this configuration runs %s", run.lab, lab);
    if (!lab) lab = run.lab[0] ? run.lab : "unknown";
    snprintf(g->lab, sizeof g->lab, "%s", lab);
    snprintf(g->label, sizeof g->label, "%s", g->lab);
    const LabRubric *rub = NULL;
    for (size_t i = 0; i < sizeof RUBRICS / sizeof RUBRICS[0]; i++)
        if (!strcmp(RUBRICS[i].lab, lab)) rub = &RUBRICS[i];
    Ctx x = {.run = &run, .refs = refs};
    // A run that stopped before its meta.json: the caller's config says which checks apply.
    char err[64];
    JsonValue *hint = config && !run.meta ? json_parse(config, strlen(config), err, sizeof err) : NULL;
    GradeRun hinted = {.config = hint};
    snprintf(hinted.lab, sizeof hinted.lab, "%s", lab);
    const char *only_complete[GRADE_MAX_CHECKS] = {"run.complete"};
    const char *const *names = rub ? rub->checks : only_complete;
    if (!rub && !run.problem[0])
        snprintf(run.problem, sizeof run.problem, "meta.json: lab \"%s\" is not one shardlab grades", lab);
    for (int i = 0; i < GRADE_MAX_CHECKS && names[i]; i++) {
        const CheckDef *d = NULL;
        for (size_t k = 0; k < sizeof DEFS / sizeof DEFS[0]; k++)
            if (!strcmp(DEFS[k].name, names[i])) d = &DEFS[k];
        GradeCheck *c = &g->checks[g->n++];
        snprintf(c->name, sizeof c->name, "%s", d->name);
        c->what = d->what;
        c->max = d->points;
        const char *skip = run.meta ? not_applicable(d->name, &run) : hint ? not_applicable(d->name, &hinted) : NULL;
        if (skip) {
            c->skipped = c->pass = 1, c->max = 0;
            snprintf(c->reason, sizeof c->reason, "%s", skip);
        } else if (i > 0 && run.problem[0]) {
            snprintf(c->measured, sizeof c->measured, "-");
            snprintf(c->expected, sizeof c->expected, "-");
            snprintf(c->reason, sizeof c->reason, "not graded: the run is not gradable (see run.complete)");
        } else {
            d->fn(&x, c);
        }
        if (c->pass && !c->skipped) c->reason[0] = 0;
        if (c->pass) c->points = c->max;
        else g->failed++;
        g->points += c->points;
        g->max += c->max;
    }
    json_free(hint);
    ctx_free(&x);
    grade_run_free(&run);
}
