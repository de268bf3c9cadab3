// memory.c — mem.formula: the bytes each rank holds per category, after a step and at the most
// it held at once, against each method's formula (ZeRO's stages, FSDP's schedule, a pipeline
// stage's layers, ckpt's policy: common/harness/memplan.h), recomputed from the run's config.
#include <math.h>
#include <string.h>

#include "common/harness/cp_layout.h"
#include "common/harness/memplan.h"
#include "common/model/gpt.h"
#include "grade.h"
#include "grade_internal.h"

// ---- mem.formula: what each rank holds after a step, and the most it held at once ----------
//
// Two readings per category (params, grads, optim, acts, comm) and rank: "mem", after the
// first step (the steady state, the papers' formulas), and "peak_by" of the last step, the
// most the category ever held at once since the start-up (mem.h). Both to the byte, against
// common/harness/memplan.h's formulas (the ones `shardlab plan` prints): a full gradient or a gathered
// unit held longer than the algorithm allows shows at the peak only, freed again before the
// step ends. A check that has no formula for a category (tp is not graded here) leaves it out.

// This run's plan for rank r (0 with the reason in c when the config describes none).
static int mem_model(const GradeRun *run, const GptConfig *m, int r, MemPlan *mm, GradeCheck *c) {
    int N = run->world, accum = grade_cfg_count(run, "accum", 1, 1 << 16), B = grade_cfg_count(run, "batch", 0, 1 << 16);
    const char *lab = run->lab;
    int pp = !strcmp(lab, "pp"), cp = !strcmp(lab, "cp"), dp = (int)fmax(1, grade_cfg_int(run, "dp", 1));
    int per = !strcmp(lab, "single") ? 1 : cp ? dp : N;  // ranks that split the batch (cp: its groups)
    if (!pp && (!accum || !B || B % (per * accum))) {
        MEASURED("batch %d, accum %d over %d rank%s", B, accum, per, per == 1 ? "" : "s");
        REASON("the config's batch does not split into micro-batches over the ranks");
        return 0;
    }
    const JsonValue *device = json_get(run->meta, "device");
    MemLayout l = {
        .lab = lab,
        .world = N,
        .micro = pp ? 1 : B / (per * accum),
        .mixed = grade_cfg_int(run, "mixed", 0),
        .gpu = device && device->type == JSON_STRING && !strcmp(device->string, "cuda"),
        .stage = !strcmp(lab, "fsdp") ? 3 : grade_cfg_int(run, "stage", -1),
        .offload = grade_cfg_int(run, "offload", 0),
        .prefetch = grade_cfg_int(run, "prefetch", 0),
        .reshard = grade_cfg_int(run, "reshard_after_forward", 1),
        .replicate = grade_cfg_int(run, "replicate", 1),
        .buckets = strcmp(grade_cfg_str(run, "sync", "overlap"), "per-tensor") != 0,
        .ckpt_acts = !strcmp(lab, "ckpt") ? grade_ckpt_acts(run) : NAN,
        .cp = N / dp,
        .cp_rank = r % (N / dp > 0 ? N / dp : 1),
        .cp_layout = cp_layout_parse(grade_cfg_str(run, "layout", "zigzag")),
        .cp_kv = !strcmp(grade_cfg_str(run, "kv", "ring"), "all-gather") ? CP_KV_ALL_GATHER : CP_KV_RING,
    };
    if (pp) {
        // This stage's units: chunk c of the config's chunk_layers lives on stage c mod p. Rank
        // r = s D + d is stage s of pipeline d (its step events say which).
        int p = N / dp, stage = r / dp;
        size_t ns;
        const JsonValue **steps = grade_steps(run, r, &ns);
        double logged = ns ? ev_num(steps[0], "stage") : NAN;
        if (logged >= 0 && logged < p) stage = (int)logged;
        const JsonValue *chunks = json_get(run->config, "chunk_layers");
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
            for (int layer = (int)lo; layer <= (int)hi; layer++)
                if ((int)(k % (size_t)p) == stage) l.stage_params += (double)gpt_layer_size(m, layer);
            covered = (int)hi + 1;
        }
        if (covered != gpt_layer_count(m)) {
            MEASURED("chunk_layers cover layers 0..%d", covered - 1);
            EXPECTED("layers 0..%d", gpt_layer_count(m) - 1);
            REASON("the config's chunk_layers leave layers out");
            return 0;
        }
    }
    char why[160];
    if (memplan(m, &l, mm, why, sizeof why) != 0) {
        MEASURED("%s", why);
        REASON("the config does not describe a layout shardlab's memory formulas cover");
        return 0;
    }
    return 1;
}

void check_mem(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    GptConfig m;
    if (!grade_model_or_say(run, &m, c)) return;
    for (int r = 0; r < run->world; r++) {
        MemPlan mm;
        if (!mem_model(run, &m, r, &mm, c)) return;
        size_t n;
        const JsonValue **s = grade_steps(run, r, &n);
        const JsonValue *first = n ? json_get(s[0], "mem") : NULL, *peak = n ? json_get(s[n - 1], "peak_by") : NULL;
        if (r == 0) {
            MEASURED("rank 0 after a step: %.0f, %.0f, %.0f bytes; at the peak: %.0f, %.0f, %.0f", ev_num(first, "params"),
                     ev_num(first, "grads"), ev_num(first, "optim"), ev_num(peak, "params"), ev_num(peak, "grads"),
                     ev_num(peak, "optim"));
            EXPECTED("%.0f, %.0f, %.0f: %s; every category's peak as its schedule holds it", mm.after[MEM_PARAMS],
                     mm.after[MEM_GRADS], mm.after[MEM_OPTIM], mm.formula);
        }
        for (int k = 0; k < MEM_CATEGORIES; k++) {
            double got = ev_num(first, mem_category_name((MemCategory)k));
            if (isnan(mm.after[k]) || got == mm.after[k]) continue;
            MEASURED("rank %d %s after step %lld: %.0f bytes", r, mem_category_name((MemCategory)k), (long long)run->first_step, got);
            EXPECTED("%.0f bytes: %s", mm.after[k], k < MEM_ACTS ? mm.formula : "the lab's formula");
            REASON("the memory this rank holds is not the method's: it keeps too much or too little");
            return;
        }
        for (int k = 0; k < MEM_CATEGORIES; k++) {
            double got = ev_num(peak, mem_category_name((MemCategory)k));
            if (isnan(mm.peak[k]) || got == mm.peak[k]) continue;
            MEASURED("rank %d %s at its peak (steps %lld-%lld): %.0f bytes", r, mem_category_name((MemCategory)k), (long long)run->first_step,
                     (long long)run->last_step, got);
            EXPECTED("%.0f bytes: %s", mm.peak[k], mm.peak_formula[k]);
            if (isnan(got)) REASON("the step events have no peak_by: the most memory held at once cannot be graded");
            else if (got > mm.peak[k])
                REASON("at some moment of a step the rank held more %s than the method ever needs at once (freed "
                       "again before the step ended): a buffer kept too long, or one too many", mem_category_name((MemCategory)k));
            else
                REASON("the rank never held as much %s at once as the method's schedule does: a buffer it should "
                       "hold (a prefetched unit, a full gradient) was not there", mem_category_name((MemCategory)k));
            return;
        }
    }
    c->pass = 1;
}
