// rubric.c — the checks, and which lab is graded on which.
//
// Each check reads the run (load.c) and, where it needs one, a reference run the grader
// starts with its own binaries (grade.c). None of them trusts the lab's own "check" events
// or its config's derived fields: the expected value is recomputed here from the formula,
// with the instructor's copy of labs/ (core/gpt.h's layer sizes, shard/dataset.h's sampler,
// ckpt/activation_checkpointing.h's policies, core/tp_layout.h's slices), so a student's
// change to them cannot move both sides of a comparison.
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
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/activation_checkpointing.h"
#include "check.h"
#include "shard/dataset.h"
#include "dist.h"
#include "gpt.h"
#include "grade.h"
#include "grade_internal.h"
#include "tp/tensor_parallel.h"

// The tolerances (README, "Grading"). A distributed run adds the same fp32 numbers as the
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
    return m;
}

int grade_model_ok(const GptConfig *m) {
    return m->attn >= 0 && m->seq >= 1 && m->dim >= 1 && m->layers >= 1 && m->layers <= 256 && m->heads >= 1 && m->vocab >= 1 &&
           m->dim % m->heads == 0 && m->seq <= 65536 && m->dim <= 65536;
}

// ZeRO's and FSDP's units: unit u padded to N equal shards of s = ceil(count / N) elements, s
// rounded up to `align` (sharded.h). The shard's length, and Psi'/N, the sum of them.
static double unit_shard(const GptConfig *m, int u, int N, int align) {
    size_t s = (gpt_layer_size(m, u) + (size_t)N - 1) / (size_t)N;
    return (double)((s + (size_t)align - 1) / (size_t)align * (size_t)align);
}
static double padded_shard_sum(const GptConfig *m, int N, int align) {
    double sum = 0;
    for (int u = 0; u < gpt_layer_count(m); u++) sum += unit_shard(m, u, N, align);
    return sum;
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

// ---- mem.formula: what each rank holds after a step, and the most it held at once ----------
//
// Two readings per category (params, grads, optim, acts, comm) and rank: "mem", after the
// first step (the steady state, the papers' formulas), and "peak_by" of the last step, the
// most the category ever held at once since the start-up (mem.h). Both to the byte: a full
// gradient or a gathered unit held longer than the algorithm allows shows at the peak only,
// freed again before the step ends. The peaks, walked from each method's schedule:
//   acts (single, ddp, zero, fsdp, ckpt, shard)  the saved activations of a micro-batch, plus
//            the pass's workspace W = 4 (S + B' T C): gpt_pass_scratch_floats() S and the residual
//            gradient, B' sequences a micro-batch
//   ddp      params, grads, optim as after a step (4, 4, 8 Psi); comm: the bucket buffers
//   zero     params: + the unit being gathered (stage 3) and its fp32 copy (bf16), the largest
//            unit n; grads: + the fp32 gradient of the unit in backward (4 n, not stage 0-1
//            fp32, which write into the gradients) and its bf16 copy for the reduce-scatter
//            (stages 2-3), or the optimizer's fp32 copy of a bf16 slice, whichever is more;
//            comm: the reduce-scatter's output shard (stages 2-3)
//   fsdp     params: + the gathered units of the fullest moment of the schedule: the running
//            unit, the next with --prefetch, every unit gathered so far with --no-reshard (and
//            the running unit's fp32 copy in bf16); grads, comm as ZeRO-3
//   pp       params, grads, optim as after a step; its activations in flight are
//            schedule.in_flight's to grade, and its messages in flight depend on timing
// A check that has no formula for a category (tp is not graded here) leaves it out.

enum { CAT_PARAMS, CAT_GRADS, CAT_OPTIM, CAT_ACTS, CAT_COMM, NCAT };
static const char *const CAT_NAMES[NCAT] = {"params", "grads", "optim", "acts", "comm"};

typedef struct {
    double after[NCAT], peak[NCAT];  // NaN: not graded
    const char *formula, *peak_formula[NCAT];
} MemModel;

// The units of ZeRO and FSDP: sum and largest of the shards s_u and padded units N s_u.
typedef struct {
    double shards, padded, max_shard, max_padded;
} Units;
static Units units_of(const GptConfig *m, int N, int align) {
    Units u = {0};
    for (int l = 0; l < gpt_layer_count(m); l++) {
        double s = unit_shard(m, l, N, align);
        u.shards += s, u.padded += s * N;
        u.max_shard = fmax(u.max_shard, s), u.max_padded = fmax(u.max_padded, s * N);
    }
    return u;
}

// FSDP's gathered weights at the fullest moment (elements, e bytes each) plus the running
// unit's fp32 copy (w bytes per element; bf16 only): at each unit's forward and backward,
// what the schedule holds gathered (tests/test_fsdp.c walks it the same way).
static double fsdp_gathered_peak(const GptConfig *m, int N, int align, double e, double w, int prefetch, int reshard) {
    int U = gpt_layer_count(m);
    double worst = 0, unit[258];  // grade_model_ok(): at most 256 blocks, + the embedding and the head
    for (int l = 0; l < U; l++) unit[l] = unit_shard(m, l, N, align) * N;
    for (int u = 0; u < U; u++) {
        double held = unit[u] + (prefetch && u + 1 < U ? unit[u + 1] : 0);  // forward of u
        if (!reshard)
            for (int v = 0; v < u; v++) held += unit[v];
        worst = fmax(worst, e * held + w * unit[u]);
        held = unit[u] + (prefetch && u > 0 ? unit[u - 1] : 0);  // backward of u, from the head down
        if (!reshard)
            for (int v = 0; v < u; v++) held += prefetch && v == u - 1 ? 0 : unit[v];
        worst = fmax(worst, e * held + w * unit[u]);
    }
    return worst;
}

// This run's model for rank r (0 with the reason in c when the config describes none).
static int mem_model(const GradeRun *run, const GptConfig *m, int r, MemModel *mm, GradeCheck *c) {
    for (int k = 0; k < NCAT; k++) mm->after[k] = mm->peak[k] = NAN, mm->peak_formula[k] = "as after a step";
    int N = run->world, accum = grade_cfg_count(run, "accum", 1, 1 << 16), B = grade_cfg_count(run, "batch", 0, 1 << 16);
    int mixed = grade_cfg_int(run, "mixed", 0);
    double e = mixed ? 2 : 4, psi = (double)gpt_num_params(m);
    const char *lab = run->lab;
    int pp = !strcmp(lab, "pp"), per = !strcmp(lab, "single") ? 1 : N;  // ranks that split the batch
    if (!pp && (!accum || !B || B % (per * accum))) {
        MEASURED("batch %d, accum %d over %d rank%s", B, accum, per, per == 1 ? "" : "s");
        REASON("the config's batch does not split into micro-batches over the ranks");
        return 0;
    }
    int micro = pp ? 1 : B / (per * accum);
    double acts = (double)gpt_acts_bytes(m, micro);
    // On a GPU the pass's workspace also holds the kernels' own (gpt_pass_scratch_floats).
    const JsonValue *device = json_get(run->meta, "device");
    int gpu = device && device->type == JSON_STRING && !strcmp(device->string, "cuda");
    double W = 4.0 * ((double)gpt_pass_scratch_floats(m, micro, gpu) + (double)micro * m->seq * m->dim);
    mm->after[CAT_ACTS] = acts, mm->peak[CAT_ACTS] = acts + W;
    mm->peak_formula[CAT_ACTS] = "the saved activations + the pass's workspace W = 4 (S + B' T C)";
    mm->after[CAT_COMM] = mm->peak[CAT_COMM] = 0;
    if (!strcmp(lab, "zero") || !strcmp(lab, "fsdp")) {
        int fsdp = !strcmp(lab, "fsdp"), st = fsdp ? 3 : grade_cfg_int(run, "stage", -1);
        int offload = grade_cfg_int(run, "offload", 0);
        if (st < 0 || st > 3) {
            MEASURED("stage %d", st);
            REASON("the config's ZeRO stage is not 0-3");
            return 0;
        }
        Units u = units_of(m, N, mixed ? 2 : 1);
        double k = mixed ? 12 : 8, slice = st == 0 ? u.max_padded : u.max_shard;
        mm->after[CAT_PARAMS] = e * (st == 3 ? u.shards : u.padded);
        mm->after[CAT_GRADS] = e * (st >= 2 ? u.shards : u.padded);
        mm->after[CAT_OPTIM] = offload ? 0 : k * (st == 0 ? u.padded : u.shards);
        mm->formula = "ZeRO: e Psi' or e Psi'/N per the stage, K Psi'/N for the optimizer";
        if (fsdp) {
            mm->peak[CAT_PARAMS] = mm->after[CAT_PARAMS] +
                                   fsdp_gathered_peak(m, N, mixed ? 2 : 1, e, mixed ? 4 : 0,
                                                      grade_cfg_int(run, "prefetch", 0),
                                                      grade_cfg_int(run, "reshard_after_forward", 1));
            mm->peak_formula[CAT_PARAMS] = "the shards + the gathered units of the schedule's fullest moment (one; two "
                                           "with --prefetch; all so far with --no-reshard)";
        } else {
            mm->peak[CAT_PARAMS] = mm->after[CAT_PARAMS] + ((st == 3 ? e : 0) + (mixed ? 4 : 0)) * u.max_padded;
            mm->peak_formula[CAT_PARAMS] = st == 3 ? "the shards + one gathered unit (the largest)"
                                         : mixed   ? "e Psi' + the fp32 copy of the largest unit"
                                                   : "as after a step";
        }
        double backward = !mixed && st <= 1 ? 0 : (4 + (mixed && st >= 2 ? e : 0)) * u.max_padded;
        double update = mixed && !offload ? 4 * slice : 0;
        mm->peak[CAT_GRADS] = mm->after[CAT_GRADS] + fmax(backward, update);
        mm->peak_formula[CAT_GRADS] = st >= 2 ? "the shards + one unit's full gradient (the largest), never more"
                                    : mixed   ? "e Psi' + the fp32 gradient of the largest unit"
                                              : "as after a step";
        mm->peak[CAT_OPTIM] = mm->after[CAT_OPTIM];
        mm->peak[CAT_COMM] = st >= 2 ? e * u.max_shard : 0;
        if (st >= 2) mm->peak_formula[CAT_COMM] = "one reduce-scatter's output shard";
    } else if (pp) {
        // This stage's units: chunk c of the config's chunk_layers lives on stage c mod p. Rank
        // r = s D + d is stage s of pipeline d (its step events say which).
        int dp = (int)fmax(1, grade_cfg_int(run, "dp", 1)), p = N / dp, stage = r / dp;
        size_t ns;
        const JsonValue **steps = grade_steps(run, r, &ns);
        double logged = ns ? ev_num(steps[0], "stage") : NAN;
        if (logged >= 0 && logged < p) stage = (int)logged;
        const JsonValue *chunks = json_get(run->config, "chunk_layers");
        double psi_s = 0;
        int covered = 0;
        for (size_t k = 0; chunks && k < chunks->count; k++) {
            const JsonValue *range = json_at(chunks, k);
            double lo = NAN, hi = NAN;
            if (range && range->type == JSON_ARRAY && range->count == 2) lo = ev_num_at(range, 0), hi = ev_num_at(range, 1);
            if (!(lo == covered && hi >= lo && hi < gpt_layer_count(m))) {
                MEASURED("chunk_layers %zu is not the next run of layers", k);
                EXPECTED("chunks covering layers 0..%d in order", gpt_layer_count(m) - 1);
                REASON("the config's chunk_layers do not split the model into consecutive runs of layers");
                return 0;
            }
            for (int l = (int)lo; l <= (int)hi; l++)
                if ((int)(k % (size_t)p) == stage) psi_s += (double)gpt_layer_size(m, l);
            covered = (int)hi + 1;
        }
        if (covered != gpt_layer_count(m)) {
            MEASURED("chunk_layers cover layers 0..%d", covered - 1);
            EXPECTED("layers 0..%d", gpt_layer_count(m) - 1);
            REASON("the config's chunk_layers leave layers out");
            return 0;
        }
        mm->after[CAT_PARAMS] = mm->after[CAT_GRADS] = 4 * psi_s, mm->after[CAT_OPTIM] = 8 * psi_s;
        mm->after[CAT_ACTS] = mm->peak[CAT_ACTS] = mm->after[CAT_COMM] = mm->peak[CAT_COMM] = NAN;
        mm->formula = "4 Psi_s, 4 Psi_s, 8 Psi_s (this stage's layers)";
    } else {
        mm->after[CAT_PARAMS] = mm->after[CAT_GRADS] = 4 * psi, mm->after[CAT_OPTIM] = 8 * psi;
        mm->formula = "4 Psi, 4 Psi, 8 Psi (a full replica)";
        if (!strcmp(lab, "ddp") && strcmp(grade_cfg_str(run, "sync", "overlap"), "per-tensor") != 0) {
            mm->after[CAT_COMM] = mm->peak[CAT_COMM] = 4 * psi;
            mm->peak_formula[CAT_COMM] = "the bucket buffers, 4 Psi";
        }
        if (!strcmp(lab, "ckpt")) {
            double kept = grade_ckpt_acts(run);
            mm->after[CAT_ACTS] = kept, mm->peak[CAT_ACTS] = kept + W;
            mm->formula = "16 Psi; acts per the policy";
            mm->peak_formula[CAT_ACTS] = "the policy's activations + the pass's workspace W = 4 (S + B' T C)";
        }
    }
    for (int k = 0; k < CAT_ACTS; k++)
        if (isnan(mm->peak[k])) mm->peak[k] = mm->after[k];
    return 1;
}

static void check_mem(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    GptConfig m = grade_model(run);
    if (!grade_model_ok(&m)) {
        MEASURED("-");
        EXPECTED("-");
        REASON("the config's model (seq, dim, layers, heads) is not one shardlab builds");
        return;
    }
    for (int r = 0; r < run->world; r++) {
        MemModel mm;
        if (!mem_model(run, &m, r, &mm, c)) return;
        size_t n;
        const JsonValue **s = grade_steps(run, r, &n);
        const JsonValue *first = n ? json_get(s[0], "mem") : NULL, *peak = n ? json_get(s[n - 1], "peak_by") : NULL;
        if (r == 0) {
            MEASURED("rank 0 after a step: %.0f, %.0f, %.0f bytes; at the peak: %.0f, %.0f, %.0f", ev_num(first, "params"),
                     ev_num(first, "grads"), ev_num(first, "optim"), ev_num(peak, "params"), ev_num(peak, "grads"),
                     ev_num(peak, "optim"));
            EXPECTED("%.0f, %.0f, %.0f: %s; every category's peak as its schedule holds it", mm.after[CAT_PARAMS],
                     mm.after[CAT_GRADS], mm.after[CAT_OPTIM], mm.formula);
        }
        for (int k = 0; k < NCAT; k++) {
            double got = ev_num(first, CAT_NAMES[k]);
            if (isnan(mm.after[k]) || got == mm.after[k]) continue;
            MEASURED("rank %d %s after step %lld: %.0f bytes", r, CAT_NAMES[k], (long long)run->first_step, got);
            EXPECTED("%.0f bytes: %s", mm.after[k], k < CAT_ACTS ? mm.formula : "the lab's formula");
            REASON("the memory this rank holds is not the method's: it keeps too much or too little");
            return;
        }
        for (int k = 0; k < NCAT; k++) {
            double got = ev_num(peak, CAT_NAMES[k]);
            if (isnan(mm.peak[k]) || got == mm.peak[k]) continue;
            MEASURED("rank %d %s at its peak (steps %lld-%lld): %.0f bytes", r, CAT_NAMES[k], (long long)run->first_step,
                     (long long)run->last_step, got);
            EXPECTED("%.0f bytes: %s", mm.peak[k], mm.peak_formula[k]);
            if (isnan(got)) REASON("the step events have no peak_by: the most memory held at once cannot be graded");
            else if (got > mm.peak[k])
                REASON("at some moment of a step the rank held more %s than the method ever needs at once (freed "
                       "again before the step ended): a buffer kept too long, or one too many", CAT_NAMES[k]);
            else
                REASON("the rank never held as much %s at once as the method's schedule does: a buffer it should "
                       "hold (a prefetched unit, a full gradient) was not there", CAT_NAMES[k]);
            return;
        }
    }
    c->pass = 1;
}

// ---- comm.bytes --------------------------------------------------------------------------
//
// Every byte a step sends is accounted for: the algorithm's collectives, counted from the
// span events, and then everything else the rank sent in the step (its step event's
// bytes.sent): the scalar sums of the loss and the gradient norm, one all-gather of a float
// pair per rank, 8 (N-1) bytes a rank. An extra collective, or a chunk sent twice, shows as
// bytes the algorithm does not send, even when every number it computes is right.

// Rank r's step event of `step` (NULL if missing), and what it says it sent.
static const JsonValue *rank_step(const GradeRun *run, int r, int64_t step) {
    size_t n;
    const JsonValue **s = grade_steps(run, r, &n);
    int64_t i = step - run->first_step;
    return i >= 0 && (size_t)i < n ? s[i] : NULL;
}
static double step_sent(const GradeRun *run, int r, int64_t step) { return ev_num2(rank_step(run, r, step), "bytes", "sent"); }

// The scalar sums of a step (dist_sum_over_ranks: an all-gather of one float pair per rank).
#define SUM_BYTES(p) (8.0 * ((p) - 1))

// The bytes a ring collective of n floats sends from group rank r of p (dist.h's chunks):
// an all-reduce every chunk but its own in the reduce-scatter and all but r+1's in the
// all-gather.
typedef enum { RING_ALL_REDUCE, RING_REDUCE_SCATTER, RING_ALL_GATHER } RingKind;
static double ring_bytes(RingKind kind, size_t n, int p, int r) {
    if (p == 1) return 0;
    size_t off, mine, next;
    dist_chunk(n, p, r, &off, &mine);
    dist_chunk(n, p, (r + 1) % p, &off, &next);
    size_t words = kind == RING_ALL_REDUCE ? (n - mine) + (n - next) : kind == RING_REDUCE_SCATTER ? n - mine : n - next;
    return 4.0 * (double)words;
}

// DDP: every gradient element all-reduced exactly once per step. A bucket's all-reduce of n
// floats sends 2(N-1) n floats summed over the ranks with the ring, N(N-1) n with the direct
// algorithm; so the buckets' bytes, summed over ranks, say how many elements each reduced.
// Besides the buckets, a step sends the loss's sum, nothing else.
static int comm_ddp(Ctx *x, GradeCheck *c, int64_t step, double psi) {
    const GradeRun *run = x->run;
    int N = run->world;
    double total[1024] = {0}, buckets = 0, sent = 0, other_reduce = 0;
    const char *algo[1024] = {0};
    int nb = 0;
    for (int r = 0; r < N; r++) {
        size_t n;
        const JsonValue **sp = grade_spans(run, r, step, &n);
        for (size_t i = 0; i < n; i++) {
            const JsonValue *ev = sp[i];
            if (strcmp(ev_str(ev, "name"), "all_reduce") != 0) continue;
            double b = ev_num(ev, "bucket");
            if (!(b >= 0 && b < 1024)) {  // an all-reduce that is no gradient bucket
                other_reduce += ev_num(ev, "bytes");
                continue;
            }
            int k = (int)b;
            total[k] += ev_num(ev, "bytes");
            algo[k] = ev_str(ev, "algo");
            if (k + 1 > nb) nb = k + 1;
        }
        sent += step_sent(run, r, step);
    }
    double elements = 0;
    for (int k = 0; k < nb; k++) {
        double f = algo[k] && !strcmp(algo[k], "direct") ? (double)N * (N - 1) : 2.0 * (N - 1);
        elements += total[k] / (4 * f);
        buckets += total[k];
    }
    if (elements != psi) {
        MEASURED("step %lld: the buckets' all-reduces sent %.0f bytes over the ranks: %.1f gradient elements' worth (%d "
                 "buckets)", (long long)step, buckets, elements, nb);
        EXPECTED("Psi = %.0f: each gradient once; ring 2(N-1)/N x 4 bytes per element per rank", psi);
        REASON("the gradient all-reduces did not move each gradient element exactly once");
        return 0;
    }
    if (sent - buckets != N * SUM_BYTES(N)) {
        MEASURED("step %lld: %.0f bytes sent over the ranks besides the gradient buckets'%s", (long long)step,
                 sent - buckets, other_reduce ? " (all-reduces that are no bucket's among them)" : "");
        EXPECTED("%.0f: the loss's sum, one float pair per rank all-gathered (8 (N-1) bytes a rank)", N * SUM_BYTES(N));
        REASON("the ranks sent more than the algorithm needs: a collective too many, or bytes sent twice");
        return 0;
    }
    MEASURED("every step: Psi = %.0f elements in %d buckets, and the loss's sum", psi, nb);
    EXPECTED("Psi = %.0f; ring 2(N-1)/N x 4 Psi bytes per rank", psi);
    return 1;
}

// FSDP --prefetch: each unit's all-gather is asked for before the unit before it (in the
// order of the pass) starts computing, so that it travels while that unit computes. From the
// spans: for the compute span of unit u (forward: its successor v = u+1 is next; backward:
// v = u-1, unless --no-reshard kept v's weights from the forward pass), the all-gather that
// brought v's weights for v's compute span of the same pass and micro-batch (the last one of
// unit v issued before that span started) must have been issued before u's span started.
// Program order, not timing: a gather asked for only when it is v's turn is not prefetched.
static int fsdp_prefetched(const GradeRun *run, GradeCheck *c, int r, int64_t step, int U, int reshard) {
    size_t n;
    const JsonValue **sp = grade_spans(run, r, step, &n);
    for (size_t i = 0; i < n; i++) {
        const char *name = ev_str(sp[i], "name");
        int fwd = !strcmp(name, "fwd");
        if (!fwd && (strcmp(name, "bwd") != 0 || !reshard)) continue;
        int u = (int)ev_num(sp[i], "layer"), v = fwd ? u + 1 : u - 1;
        if (v < 0 || v >= U) continue;
        double next_t0 = NAN, issued = NAN;  // (none found: NaN, which fails below)
        for (size_t k = 0; k < n; k++)  // v's compute span of this pass and micro-batch
            if (!strcmp(ev_str(sp[k], "name"), name) && ev_num(sp[k], "layer") == v &&
                ev_num(sp[k], "mb") == ev_num(sp[i], "mb"))
                next_t0 = ev_num(sp[k], "t0_us");
        for (size_t k = 0; k < n; k++) {  // the gather that brought v's weights for it
            double t = ev_num(sp[k], "issued_us");
            if (!strcmp(ev_str(sp[k], "name"), "all_gather") && ev_num(sp[k], "unit") == v && t <= next_t0 &&
                !(t <= issued))
                issued = t;
        }
        if (!(issued <= ev_num(sp[i], "t0_us"))) {
            MEASURED("rank %d, step %lld: unit %d's all-gather was asked for after unit %d's %s had started", r,
                     (long long)step, v, u, fwd ? "forward" : "backward");
            EXPECTED("--prefetch: the next unit's all-gather issued before the current unit computes, forward and "
                     "backward");
            REASON("--prefetch did not prefetch: the next unit's weights were asked for only when it was its turn, so "
                   "nothing travelled while a unit computed");
            return 0;
        }
    }
    return 1;
}

// ZeRO and FSDP: every rank sends (N-1) shards of every unit per reduce-scatter or
// all-gather of it (ring or direct alike), and a step does `passes` of them per unit and
// micro-batch; besides, the loss's sum and (sharded optimizer) the gradient norm's.
static int comm_sharded(Ctx *x, GradeCheck *c, int64_t step, const GptConfig *m) {
    const GradeRun *run = x->run;
    int N = run->world, mixed = grade_cfg_int(run, "mixed", 0), K = grade_cfg_count(run, "accum", 1, 1 << 16);
    int fsdp = !strcmp(run->lab, "fsdp"), reshard = grade_cfg_int(run, "reshard_after_forward", 1);
    int stage = fsdp ? 3 : grade_cfg_int(run, "stage", 0), passes, sums = stage == 0 ? 1 : 2;
    if (!K) {
        MEASURED("accum %g", grade_cfg_num(run, "accum", NAN));
        REASON("the config's accum is not a number of micro-batches");
        return 0;
    }
    if (fsdp) passes = reshard ? 3 * K : 2 * K;
    else passes = stage == 3 ? 3 * K : stage == 2 ? K + 1 : 2;
    double want = passes * (double)(N - 1) * (mixed ? 2 : 4) * padded_shard_sum(m, N, mixed ? 2 : 1);
    for (int r = 0; r < N; r++) {
        double sent = 0;
        size_t n;
        const JsonValue **sp = grade_spans(run, r, step, &n);
        for (size_t i = 0; i < n; i++) {
            const char *name = ev_str(sp[i], "name");
            if ((!strcmp(name, "all_gather") || !strcmp(name, "reduce_scatter")) && ev_num(sp[i], "unit") >= 0)
                sent += ev_num(sp[i], "bytes");
        }
        if (sent != want) {
            MEASURED("rank %d, step %lld: %.0f bytes in all-gathers and reduce-scatters", r, (long long)step, sent);
            EXPECTED("%.0f = %d x (N-1) x %d x Psi'/N", want, passes, mixed ? 2 : 4);
            REASON("the units were not gathered and reduced the number of times the method says");
            return 0;
        }
        double other = step_sent(run, r, step) - sent;
        if (other != sums * SUM_BYTES(N)) {
            MEASURED("rank %d, step %lld: %.0f bytes sent besides the units' all-gathers and reduce-scatters", r,
                     (long long)step, other);
            EXPECTED("%.0f: the loss's sum%s, a float pair per rank all-gathered (8 (N-1) bytes each)",
                     sums * SUM_BYTES(N), sums == 2 ? " and the gradient norm's" : "");
            REASON("the rank sent more than the algorithm needs: a collective too many, or bytes sent twice");
            return 0;
        }
        if (fsdp && grade_cfg_num(run, "prefetch", 0) && !fsdp_prefetched(run, c, r, step, gpt_layer_count(m), reshard))
            return 0;
    }
    MEASURED("%.0f bytes per rank per step in the units' collectives%s", want,
             fsdp && grade_cfg_num(run, "prefetch", 0) ? ", each all-gather prefetched" : "");
    EXPECTED("%d x (N-1) x %d x Psi'/N = %.0f", passes, mixed ? 2 : 4, want);
    return 1;
}

// Megatron TP (one tensor-parallel group: no --dp, no --vocab-parallel). Per micro-batch and
// block, f and g: without --sp, 2 all-reduces forward (g) and 2 backward (f) of B' T C floats;
// with --sp each becomes an all-gather and a reduce-scatter of the same B' T C floats (f:
// all-gather forward, reduce-scatter backward; g: reduce-scatter forward, all-gather
// backward): the same bytes in twice the calls. With --sp the replicated parameters saw only
// the rank's rows: once per step their gradients are all-reduced over the group, one call per
// layer. Besides: the gradient norm's sum and, with --sp, the loss's.
static int comm_tp(Ctx *x, GradeCheck *c, int64_t step, const GptConfig *m) {
    const GradeRun *run = x->run;
    int t = run->world, K = grade_cfg_count(run, "accum", 1, 1 << 16), B = grade_cfg_count(run, "batch", 0, 1 << 16);
    int sp = grade_cfg_int(run, "sp", 0), L = m->layers, calls = 4 * L * K;
    if (!K || !B || B % K) {
        MEASURED("batch %d, accum %d", B, K);
        REASON("the config's batch does not split into its micro-batches");
        return 0;
    }
    size_t n = (size_t)(B / K) * (size_t)m->seq * (size_t)m->dim;
    // --mixed --sp: f's and g's all-gathers move bf16 where the rows split into pairs
    // (tensor_parallel.h, tp_gathers_bf16): half their bytes.
    double gather = sp && grade_cfg_int(run, "mixed", 0) && n % (2 * (size_t)t) == 0 ? 0.5 : 1;
    for (int r = 0; r < t; r++) {
        double fg_sent = 0, fg_want = 0, rep_sent = 0, rep_want = 0;
        int ar = 0, rs = 0, ag = 0, reps = 0;
        size_t nsp;
        const JsonValue **spans = grade_spans(run, r, step, &nsp);
        for (size_t i = 0; i < nsp; i++) {
            const JsonValue *ev = spans[i];
            const char *name = ev_str(ev, "name"), *op = ev_str(ev, "op");
            if (strcmp(ev_str(ev, "group"), "tp") != 0) continue;
            if (!strcmp(op, "replicated_grads")) reps++, rep_sent += ev_num(ev, "bytes");
            if (strcmp(op, "f") != 0 && strcmp(op, "g") != 0) continue;
            fg_sent += ev_num(ev, "bytes");
            ar += !strcmp(name, "all_reduce"), rs += !strcmp(name, "reduce_scatter"), ag += !strcmp(name, "all_gather");
        }
        if (sp) {
            fg_want = calls * (gather * ring_bytes(RING_ALL_GATHER, n, t, r) + ring_bytes(RING_REDUCE_SCATTER, n, t, r));
            for (int l = 0; l < gpt_layer_count(m); l++)
                rep_want += ring_bytes(RING_ALL_REDUCE, tp_replicated_floats(m, 0, l), t, r);
        } else {
            fg_want = calls * ring_bytes(RING_ALL_REDUCE, n, t, r);
        }
        int kinds_ok = sp ? ar == 0 && rs == calls && ag == calls : ar == calls && rs == 0 && ag == 0;
        if (!kinds_ok || fg_sent != fg_want) {
            MEASURED("rank %d, step %lld: f and g made %d all-reduces, %d reduce-scatters, %d all-gathers, %.0f bytes", r,
                     (long long)step, ar, rs, ag, fg_sent);
            if (sp)
                EXPECTED("--sp: 4 L K = %d all-gathers (of bf16s with --mixed) and %d reduce-scatters of B' T C values, "
                         "%.0f bytes", calls, calls, fg_want);
            else
                EXPECTED("4 L K = %d all-reduces of B' T C floats, %.0f bytes", calls, fg_want);
            REASON(sp ? "sequence parallelism's f and g are an all-gather and a reduce-scatter each, exactly where "
                        "Megatron's all-reduces were"
                      : "the activations were not all-reduced exactly where Megatron's f and g operators are");
            return 0;
        }
        if (sp && (reps != gpt_layer_count(m) || rep_sent != rep_want)) {
            MEASURED("rank %d, step %lld: %d all-reduces of the replicated parameters' gradients, %.0f bytes", r,
                     (long long)step, reps, rep_sent);
            EXPECTED("--sp: one per layer, L + 2 = %d, %.0f bytes", gpt_layer_count(m), rep_want);
            REASON("with --sp each rank's replicated parameters saw only its rows: their gradients are summed over the "
                   "group once per step");
            return 0;
        }
        double sums = (t > 1) * SUM_BYTES(t) * (sp ? 2 : 1), other = step_sent(run, r, step) - fg_sent - rep_sent;
        if (other != sums) {
            MEASURED("rank %d, step %lld: %.0f bytes sent besides f and g%s", r, (long long)step, other,
                     sp ? " and the replicated gradients" : "");
            EXPECTED("%.0f: the gradient norm's sum%s, a float pair per rank all-gathered (8 (t-1) bytes each)", sums,
                     sp ? " and the loss's" : "");
            REASON("the rank sent more than the algorithm needs: a collective too many, or bytes sent twice");
            return 0;
        }
    }
    MEASURED(sp ? "--sp: 4 L K = %d all-gathers and reduce-scatters per rank per step, the replicated gradients once"
                : "4 L K = %d all-reduces per rank per step", calls);
    EXPECTED(sp ? "4 L K all-gathers and 4 L K reduce-scatters of B' T C floats" : "4 L K all-reduces of B' T C floats");
    return 1;
}

static void check_comm(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    GptConfig m = grade_model(run);
    if (!grade_model_ok(&m)) {
        REASON("the config's model is not one shardlab builds");
        return;
    }
    if (run->world == 1) {
        MEASURED("a world of one: nothing to send");
        EXPECTED("0 bytes");
        c->pass = 1;
        return;
    }
    for (int64_t step = run->first_step; step <= run->last_step; step++) {
        int ok = !strcmp(run->lab, "ddp")  ? comm_ddp(x, c, step, (double)gpt_num_params(&m))
                 : !strcmp(run->lab, "tp") ? comm_tp(x, c, step, &m)
                                           : comm_sharded(x, c, step, &m);
        if (!ok) return;
    }
    c->pass = 1;
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
