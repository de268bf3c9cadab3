// memory.c — mem.formula: the bytes each rank holds per category, after a step and at the most
// it held at once, against each method's formula (ZeRO's stages, FSDP's schedule, a pipeline
// stage's layers, ckpt's policy), recomputed from the run's config.
#include <math.h>
#include <string.h>

#include "gpt.h"
#include "grade.h"
#include "grade_internal.h"

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
        double s = grade_unit_shard(m, l, N, align);
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
    for (int l = 0; l < U; l++) unit[l] = grade_unit_shard(m, l, N, align) * N;
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

void check_mem(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    GptConfig m;
    if (!grade_model_or_say(run, &m, c)) return;
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
