// rubric.c — the checks, and which lab is graded on which.
//
// Each check reads the run (load.c) and, where it needs one, a reference run the grader
// starts with its own binaries (grade.c). None of them trusts the lab's own "check" events
// or its config's derived fields: the expected value is recomputed here from the formula,
// with the instructor's copy of core/ (gpt.h's layer sizes, dataset.h's sampler,
// activation_checkpointing.h's policies), so a student's change to core cannot move both
// sides of a comparison.
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

#include "activation_checkpointing.h"
#include "check.h"
#include "dataset.h"
#include "gpt.h"
#include "grade.h"
#include "grade_internal.h"

// The tolerances. Losses: the distributed run adds the same fp32 numbers in another order
// (all-reduce, micro-batches), nothing else. Over the first STRICT_STEPS steps that stays
// below 1e-7 (measured on every graded configuration), so 1e-5 there; a lost or doubled
// gradient moves the loss by 1e-3 within a few steps. Later, training itself amplifies those
// last-bit differences (measured over 200 steps of ddp, zero and tp at the default settings:
// up to 5.5e-5 in the loss and 2.7e-3 in the gradient norm around the loss spike near step
// 39), so later steps are held to a looser bound that a real mistake still breaks. Gradient
// norms are logged with 6 significant digits, hence a relative 1e-4 at first.
#define STRICT_STEPS 10
#define LOSS_TOL 1e-5
#define LOSS_TOL_LATER 1e-3
#define GRAD_NORM_RTOL 1e-4
#define GRAD_NORM_RTOL_LATER 3e-2

GptConfig grade_model(const GradeRun *run) {
    GptConfig m = {.vocab = (int)grade_cfg_num(run, "vocab", 256)};
    m.seq = (int)grade_cfg_num(run, "seq", 0), m.dim = (int)grade_cfg_num(run, "dim", 0);
    m.layers = (int)grade_cfg_num(run, "layers", 0), m.heads = (int)grade_cfg_num(run, "heads", 0);
    return m;
}

int grade_model_ok(const GptConfig *m) {
    return m->seq >= 1 && m->dim >= 1 && m->layers >= 1 && m->layers <= 256 && m->heads >= 1 && m->vocab >= 1 &&
           m->dim % m->heads == 0 && m->seq <= 65536 && m->dim <= 65536;
}

// Psi' of ZeRO and FSDP: every unit padded to N equal shards of s = ceil(count / N) elements,
// s rounded up to `align` (sharded.h).
static double padded_shard_sum(const GptConfig *m, int N, int align) {
    double sum = 0;
    for (int u = 0; u < gpt_layer_count(m); u++) {
        size_t n = gpt_layer_size(m, u), s = (n + (size_t)N - 1) / (size_t)N;
        s = (s + (size_t)align - 1) / (size_t)align * (size_t)align;
        sum += (double)s;
    }
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
    MEASURED("%d rank%s, steps %lld..%lld, every rank ended ok", run->world, run->world == 1 ? "" : "s",
             (long long)run->first_step, (long long)run->steps);
    EXPECTED("every rank's log whole, status ok");
    c->pass = 1;
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

// The worst difference between a step field of rank 0 and the reference's at the same
// steps, over the steps from..to; relative: divided by the reference's magnitude. Returns the
// steps compared.
static size_t worst_diff(const GradeRun *run, const GradeRun *ref, const char *field, int relative, int64_t from,
                         int64_t to, double *worst, int64_t *at, double *got, double *want) {
    size_t n, nr, compared = 0;
    const JsonValue **s = grade_steps(run, 0, &n), **t = grade_steps(ref, 0, &nr);
    *worst = 0, *at = 0, *got = *want = NAN;
    for (size_t i = 0; i < n; i++) {
        double step = ev_num(s[i], "step");
        if (step < from || step > to) continue;
        for (size_t j = 0; j < nr; j++) {
            if (ev_num(t[j], "step") != step) continue;
            double a = ev_num(s[i], field), b = ev_num(t[j], field);
            double d = fabs(a - b) / (relative ? fmax(fabs(b), 1e-30) : 1);
            if (!(d <= *worst)) *worst = isnan(d) ? INFINITY : d, *at = (int64_t)step, *got = a, *want = b;
            compared++;
            break;
        }
    }
    return compared;
}

static void check_against_ref(Ctx *x, GradeCheck *c, const char *field, int relative, double tol, double tol_later) {
    const GradeRun *ref = ctx_reference(x, REF_SINGLE, c->reason, sizeof c->reason);
    EXPECTED("within %g%s of %s over steps 1..%d, %g after", tol, relative ? " (relative)" : "", x->ref_label[REF_SINGLE],
             STRICT_STEPS, tol_later);
    if (!ref) {
        MEASURED("no reference");
        return;
    }
    double worst[2], got[2], want[2];
    int64_t at[2];
    size_t n = worst_diff(x->run, ref, field, relative, 1, STRICT_STEPS, &worst[0], &at[0], &got[0], &want[0]);
    n += worst_diff(x->run, ref, field, relative, STRICT_STEPS + 1, INT64_MAX, &worst[1], &at[1], &got[1], &want[1]);
    if (n < x->run->ranks[0].nsteps) {
        MEASURED("%zu of %zu steps in the reference", n, x->run->ranks[0].nsteps);
        REASON("the reference run does not cover this run's steps");
        return;
    }
    for (int k = 0; k < 2; k++)
        if (!(worst[k] <= (k ? tol_later : tol))) {
            MEASURED("%s %.8g vs %.8g at step %lld (off by %.3g)", field, got[k], want[k], (long long)at[k], worst[k]);
            REASON("%s", !strcmp(field, "loss") ? "the loss curve is not the single-rank one on the same global batch"
                                                 : "the gradients are not those of the global batch's mean loss");
            return;
        }
    MEASURED("worst difference %.3g over the first steps, %.3g after, %zu steps", worst[0], worst[1], n);
    c->pass = 1;
}

static void check_loss(Ctx *x, GradeCheck *c) { check_against_ref(x, c, "loss", 0, LOSS_TOL, LOSS_TOL_LATER); }
static void check_grads(Ctx *x, GradeCheck *c) {
    check_against_ref(x, c, "grad_norm", 1, GRAD_NORM_RTOL, GRAD_NORM_RTOL_LATER);
}

// ---- mem.formula: params, grads, optim of every rank after the first step ---------------

static void check_mem(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    GptConfig m = grade_model(run);
    if (!grade_model_ok(&m)) {
        MEASURED("-");
        EXPECTED("-");
        REASON("the config's model (seq, dim, layers, heads) is not one shardlab builds");
        return;
    }
    int N = run->world, mixed = (int)grade_cfg_num(run, "mixed", 0), e = mixed ? 2 : 4;
    double psi = (double)gpt_num_params(&m);
    for (int r = 0; r < N; r++) {
        double want[4];  // params, grads, optim (and acts)
        const char *formula;
        if (!strcmp(run->lab, "zero") || !strcmp(run->lab, "fsdp")) {
            int st = !strcmp(run->lab, "fsdp") ? 3 : (int)grade_cfg_num(run, "stage", -1);
            double shard = padded_shard_sum(&m, N, mixed ? 2 : 1), full = shard * N, k = mixed ? 12 : 8;
            want[0] = e * (st == 3 ? shard : full);
            want[1] = e * (st >= 2 ? shard : full);
            want[2] = grade_cfg_num(run, "offload", 0) ? 0 : k * (st == 0 ? full : shard);
            formula = "ZeRO: e Psi' or e Psi'/N per the stage, K Psi'/N for the optimizer";
        } else if (!strcmp(run->lab, "pp")) {
            // This stage's units: chunk c of the config's chunk_layers lives on stage c mod p.
            int p = N / (int)fmax(1, grade_cfg_num(run, "dp", 1)), stage = r % p;
            const JsonValue *chunks = json_get(run->config, "chunk_layers");
            double psi_s = 0;
            int covered = 0;
            for (size_t k = 0; chunks && k < chunks->count; k++) {
                const JsonValue *range = json_at(chunks, k);
                double lo = NAN, hi = NAN;
                if (range && range->type == JSON_ARRAY && range->count == 2)
                    lo = ev_num_at(range, 0), hi = ev_num_at(range, 1);
                if (!(lo == covered && hi >= lo && hi < gpt_layer_count(&m))) {
                    MEASURED("chunk_layers %zu is not the next run of layers", k);
                    EXPECTED("chunks covering layers 0..%d in order", gpt_layer_count(&m) - 1);
                    REASON("the config's chunk_layers do not split the model into consecutive runs of layers");
                    return;
                }
                for (int l = (int)lo; l <= (int)hi; l++)
                    if ((int)(k % (size_t)p) == stage) psi_s += (double)gpt_layer_size(&m, l);
                covered = (int)hi + 1;
            }
            if (covered != gpt_layer_count(&m)) {
                MEASURED("chunk_layers cover layers 0..%d", covered - 1);
                EXPECTED("layers 0..%d", gpt_layer_count(&m) - 1);
                REASON("the config's chunk_layers leave layers out");
                return;
            }
            want[0] = want[1] = 4 * psi_s, want[2] = 8 * psi_s;
            formula = "4 Psi_s, 4 Psi_s, 8 Psi_s (this stage's layers)";
        } else {
            want[0] = want[1] = 4 * psi, want[2] = 8 * psi;
            formula = "4 Psi, 4 Psi, 8 Psi (a full replica)";
        }
        size_t n;
        const JsonValue **s = grade_steps(run, r, &n);
        // ckpt: also the activations its policy keeps (activation_checkpointing.h).
        static const char *cats[4] = {"params", "grads", "optim", "acts"};
        int ncat = 3;
        if (!strcmp(run->lab, "ckpt")) want[3] = grade_ckpt_acts(run), ncat = 4, formula = "16 Psi; acts per the policy";
        double got[4];
        for (int k = 0; k < ncat; k++) got[k] = n ? ev_num2(s[0], "mem", cats[k]) : NAN;
        if (r == 0) {
            MEASURED("rank 0: %.0f, %.0f, %.0f bytes%s", got[0], got[1], got[2], ncat == 4 ? " (and acts)" : "");
            EXPECTED("%.0f, %.0f, %.0f: %s", want[0], want[1], want[2], formula);
        }
        for (int k = 0; k < ncat; k++)
            if (got[k] != want[k]) {
                MEASURED("rank %d %s: %.0f bytes", r, cats[k], got[k]);
                EXPECTED("%.0f bytes: %s", want[k], formula);
                REASON("the memory this rank holds is not the method's: it keeps too much or too little");
                return;
            }
    }
    c->pass = 1;
}

// ---- comm.bytes --------------------------------------------------------------------------

// DDP: every gradient element all-reduced exactly once per step. A bucket's all-reduce of n
// floats sends 2(N-1) n floats summed over the ranks with the ring, N(N-1) n with the direct
// algorithm; so the buckets' bytes, summed over ranks, say how many elements each reduced.
static int comm_ddp(Ctx *x, GradeCheck *c, int64_t step, double psi) {
    const GradeRun *run = x->run;
    int N = run->world;
    double total[1024] = {0};
    const char *algo[1024] = {0};
    int nb = 0;
    for (int r = 0; r < N; r++) {
        size_t n;
        const JsonValue **sp = grade_spans(run, r, step, &n);
        for (size_t i = 0; i < n; i++) {
            const JsonValue *ev = sp[i];
            if (strcmp(ev_str(ev, "name"), "all_reduce") != 0) continue;
            double b = ev_num(ev, "bucket");
            if (!(b >= 0 && b < 1024)) continue;  // not a gradient bucket (the loss, a norm)
            int k = (int)b;
            total[k] += ev_num(ev, "bytes");
            algo[k] = ev_str(ev, "algo");
            if (k + 1 > nb) nb = k + 1;
        }
    }
    double elements = 0;
    for (int k = 0; k < nb; k++) {
        double f = algo[k] && !strcmp(algo[k], "direct") ? (double)N * (N - 1) : 2.0 * (N - 1);
        elements += total[k] / (4 * f);
    }
    if (elements != psi) {
        MEASURED("step %lld: %.1f gradient elements all-reduced (%d buckets)", (long long)step, elements, nb);
        EXPECTED("Psi = %.0f: each gradient once; ring 2(N-1)/N x 4 bytes per element per rank", psi);
        REASON("the gradient all-reduces did not move each gradient element exactly once");
        return 0;
    }
    MEASURED("every step: Psi = %.0f elements in %d buckets", psi, nb);
    EXPECTED("Psi = %.0f; ring 2(N-1)/N x 4 Psi bytes per rank", psi);
    return 1;
}

// ZeRO and FSDP: every rank sends (N-1) shards of every unit per reduce-scatter or
// all-gather of it (ring or direct alike), and a step does `passes` of them per unit.
static int comm_sharded(Ctx *x, GradeCheck *c, int64_t step, const GptConfig *m) {
    const GradeRun *run = x->run;
    int N = run->world, mixed = (int)grade_cfg_num(run, "mixed", 0);
    int passes;
    if (!strcmp(run->lab, "fsdp")) passes = grade_cfg_num(run, "reshard_after_forward", 1) ? 3 : 2;
    else passes = (int)grade_cfg_num(run, "stage", 0) == 3 ? 3 : 2;
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
    }
    MEASURED("%.0f bytes per rank per step", want);
    EXPECTED("%d x (N-1) x %d x Psi'/N = %.0f", passes, mixed ? 2 : 4, want);
    return 1;
}

// Megatron TP (no --sp, no --vocab-parallel, one tp group): per layer, the forward pass
// all-reduces the attention and MLP outputs (g) and the backward pass their input
// gradients (f): 4 L all-reduces of B T C floats; each sends 4 x 2(t-1)/t B T C bytes per
// rank with the ring, 4 (t-1) B T C with the direct algorithm.
static int comm_tp(Ctx *x, GradeCheck *c, int64_t step, const GptConfig *m) {
    const GradeRun *run = x->run;
    int t = run->world, B = (int)grade_cfg_num(run, "batch", 0);
    double n = (double)B * m->seq * m->dim;
    for (int r = 0; r < t; r++) {
        double sent = 0, want = 0;
        int calls = 0;
        size_t nsp;
        const JsonValue **sp = grade_spans(run, r, step, &nsp);
        for (size_t i = 0; i < nsp; i++) {
            const JsonValue *ev = sp[i];
            if (strcmp(ev_str(ev, "name"), "all_reduce") != 0 || strcmp(ev_str(ev, "group"), "tp") != 0) continue;
            calls++;
            sent += ev_num(ev, "bytes");
            want += !strcmp(ev_str(ev, "algo"), "direct") ? 4 * (t - 1) * n : 4 * 2.0 * (t - 1) / t * n;
        }
        if (calls != 4 * m->layers || sent != want) {
            MEASURED("rank %d, step %lld: %d all-reduces, %.0f bytes", r, (long long)step, calls, sent);
            EXPECTED("4L = %d all-reduces of B T C floats, %.0f bytes", 4 * m->layers, 4 * m->layers * 4 * 2.0 * (t - 1) / t * n);
            REASON("the activations were not all-reduced exactly where Megatron's f and g operators are");
            return 0;
        }
    }
    MEASURED("4L = %d all-reduces per rank per step", 4 * m->layers);
    EXPECTED("4L all-reduces of B T C floats");
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
    for (int64_t step = run->first_step; step <= run->steps; step++) {
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
    {"mem.formula", 1, check_mem, "params, grads and optimizer state per rank equal the method's formula"},
    {"comm.bytes", 2, check_comm, "bytes sent per step equal the algorithm's count"},
    {"schedule.in_flight", 2, check_in_flight, "micro-batches in flight per stage equal the schedule's bound"},
    {"schedule.bubble", 2, check_bubble, "the bubble of the logged order equals (p-1)/(m+p-1)"},
    {"recompute.bitwise", 3, check_recompute_bitwise, "recomputation changes no bit of the result (vs --policy none)"},
    {"recompute.count", 1, check_recompute_count, "each step recomputes exactly the blocks the policy checkpoints"},
    {"data.coverage", 3, check_coverage, "each global batch split over the ranks, no item twice in an epoch"},
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
        (grade_cfg_num(run, "sp", 0) || grade_cfg_num(run, "vocab_parallel", 0) || grade_cfg_num(run, "dp", 1) != 1))
        return "graded for plain tensor parallelism only (no --sp, --vocab-parallel or --dp)";
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
