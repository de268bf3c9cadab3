// planner.c — see planner.h.
#include "planner.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt/policy.h"

static const char *const SHAPE[4] = {"layers", "dim", "heads", "seq"};

#define GPT2_NOTE "its output layer is its own: V C parameters more than GPT-2's, which ties it to the embedding"
#define LLAMA_NOTE "Llama's MLP is SwiGLU (three matrices 8/3 C wide), its positions rotary, its norms without biases"
const PlannerModel planner_models[] = {
    {"labs", {0}, GPT_VOCAB, NULL, NULL},  // the lab's defaults
    {"gpt2", {12, 768, 12, 1024}, 50257, GPT2_NOTE, NULL},
    {"gpt2-medium", {24, 1024, 16, 1024}, 50257, GPT2_NOTE, NULL},
    {"gpt2-large", {36, 1280, 20, 1024}, 50257, GPT2_NOTE, NULL},
    {"gpt2-xl", {48, 1600, 25, 1024}, 50257, GPT2_NOTE, NULL},
    {"llama-7b", {32, 4096, 32, 4096}, 32000, LLAMA_NOTE, "Llama 2 7B: about 6.74 billion"},
    {"llama-70b", {80, 8192, 64, 4096}, 32000, LLAMA_NOTE "; 70B's 64 heads share 8 keys and values",
     "Llama 2 70B: about 69.0 billion"},
};
const int planner_nmodels = (int)(sizeof planner_models / sizeof planner_models[0]);

const PlannerGpu planner_gpus[] = {
    {"h100-80gb", "H100 80GB", 81559},   {"h200", "H200 141GB", 143771},   {"a100-40gb", "A100 40GB", 40960},
    {"a100-80gb", "A100 80GB", 81920},   {"rtx4090", "RTX 4090 24GB", 24564}, {"none", NULL, 0},
};
const int planner_ngpus = (int)(sizeof planner_gpus / sizeof planner_gpus[0]);

__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return -1;
}

// ---- the options ----------------------------------------------------------------------------

// Whether --name was given.
static int typed(const Planner *a, const char *name) {
    for (int i = 0; i < a->ngiven; i += 2)
        if (strcmp(a->given[i] + 2, name) == 0) return 1;
    return 0;
}

// The text of --name: as given (the last one counts; "" for a flag), else the catalog's default
// (NULL: none, or a flag off).
const char *planner_option(const Planner *a, const char *name) {
    const char *found = NULL;
    for (int i = 0; i < a->ngiven; i += 2)
        if (strcmp(a->given[i] + 2, name) == 0) found = a->given[i + 1];
    if (found) return found;
    const CatOption *o = catalog_find(a->lab, name);
    return o && o->kind != OPT_FLAG ? o->dflt : NULL;
}

static int planner_option_int(const Planner *a, const char *name, int fallback) {
    const char *t = planner_option(a, name);
    return t && *t && strcmp(t, "auto") != 0 ? atoi(t) : fallback;
}

static int opt_flag(const Planner *a, const char *name) { return planner_option(a, name) != NULL; }

static int find(const char *const *names, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(names[k], name)) return k;
    return -1;
}

int planner_parse(Planner *a, int argc, char *const argv[], char *why, size_t nwhy) {
    memset(a, 0, sizeof *a);
    if (argc < 1) return fail(why, nwhy, "expected a lab: single, ddp, shard, ckpt, zero, fsdp, pp or tp");
    a->lab = catalog_lab(argv[0]);
    static const char *const planned[] = {"single", "ddp", "shard", "ckpt", "zero", "fsdp", "pp", "tp"};
    if (!a->lab || find(planned, 8, a->lab->name) < 0)
        return fail(why, nwhy, "%s '%s': the planner has formulas for single, ddp, shard, ckpt, zero, fsdp, pp and tp",
                    a->lab ? "no memory formulas yet for" : "no lab called", argv[0]);
    a->n = a->lab->max_world == 1 ? 1 : 8;
    const char *models[16], *gpus[16];
    for (int k = 0; k < planner_nmodels; k++) models[k] = planner_models[k].name;
    for (int k = 0; k < planner_ngpus; k++) gpus[k] = planner_gpus[k].name;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        char name[64];
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        if (!strcmp(name, "--check") || !strcmp(name, "--json")) {
            *(name[2] == 'c' ? &a->check : &a->json) = 1;
            continue;
        }
        // The planner's own options, and the lab's (checked as the lab checks them).
        int mine = !strcmp(name, "-n") || !strcmp(name, "--model") || !strcmp(name, "--gpu") || !strcmp(name, "--vocab");
        const CatOption *o = !mine && strncmp(name, "--", 2) == 0 ? catalog_find(a->lab, name + 2) : NULL;
        if (!mine && !o)
            return fail(why, nwhy, "%s is not an option of %s ('shardlab run %s --help' lists them)", name, a->lab->name,
                        a->lab->name);
        int takes = mine || o->kind != OPT_FLAG;
        const char *value = eq ? eq + 1 : takes && i + 1 < argc ? argv[++i] : NULL;
        if (takes && !value) return fail(why, nwhy, "%s needs a value", name);
        if (!takes && eq) return fail(why, nwhy, "%s takes no value (got '%s')", name, arg);
        char *end;
        long v = mine ? strtol(value, &end, 10) : 0;
        int number = mine && *value && !*end;
        if (!strcmp(name, "-n")) {
            if (!number || v < 1 || v > 65536) return fail(why, nwhy, "-n takes 1 to 65536 ranks (got '%s')", value);
            if (a->lab->max_world && v > a->lab->max_world)
                return fail(why, nwhy, "%s runs on at most %d rank (-n %ld)", a->lab->name, a->lab->max_world, v);
            a->n = (int)v;
        } else if (!strcmp(name, "--vocab")) {
            if (!number || v < 1 || v > 1000000) return fail(why, nwhy, "--vocab takes 1 to 1000000 (got '%s')", value);
            a->vocab = (int)v;
        } else if (!strcmp(name, "--model")) {
            if ((a->model = find(models, planner_nmodels, value)) < 0)
                return fail(why, nwhy, "--model takes labs, gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-7b or llama-70b (got '%s')", value);
        } else if (!strcmp(name, "--gpu")) {
            if ((a->gpu = find(gpus, planner_ngpus, value)) < 0)
                return fail(why, nwhy, "--gpu takes h100-80gb, h200, a100-40gb, a100-80gb, rtx4090 or none (got '%s')", value);
        } else {
            if (takes && catalog_check(o, value, 1, why, nwhy) != 0) return -1;
            if (a->ngiven / 2 >= PLANNER_MAX_GIVEN - 1) return fail(why, nwhy, "more than %d options", PLANNER_MAX_GIVEN);
            char *kept = a->names[a->ngiven / 2];
            snprintf(kept, sizeof a->names[0], "%s", name);
            a->given[a->ngiven++] = kept;
            a->given[a->ngiven++] = takes ? (char *)value : "";  // a flag's place: "" (never passed on)
        }
    }
    return 0;
}

// ---- the plan ------------------------------------------------------------------------------------

// The checks the labs make before they start, on the layout the words describe.
int planner_lay_out(Planner *a, int gpu, char *why, size_t nwhy) {
    Planner *x = a;
    memset(&x->m, 0, sizeof x->m);
    const char *lab = a->lab->name;
    int pp = !strcmp(lab, "pp"), preset = a->model;
    // The shape: as typed, else the preset's, else the lab's default (pp's depth "auto": -1,
    // worked out below).
    int *dims[4] = {&x->m.layers, &x->m.dim, &x->m.heads, &x->m.seq};
    for (int i = 0; i < 4; i++) {
        const char *lab_default = i == 0 ? a->lab->layers : NULL;
        if (typed(a, SHAPE[i])) *dims[i] = planner_option_int(a, SHAPE[i], -1);
        else if (preset) *dims[i] = planner_models[preset].shape[i];
        else if (lab_default) *dims[i] = strcmp(lab_default, "auto") ? atoi(lab_default) : -1;
        else *dims[i] = planner_option_int(a, SHAPE[i], -1);
    }
    x->m.vocab = a->vocab ? a->vocab : planner_models[preset].vocab;
    x->m.attn = gpt_attn_parse(planner_option(a, "attn") ? planner_option(a, "attn") : "flash");
    x->m.mixed = opt_flag(a, "mixed");
    if (x->m.dim % x->m.heads) return fail(why, nwhy, "--heads %d does not divide --dim %d", x->m.heads, x->m.dim);
    x->batch = planner_option_int(a, "batch", 8), x->accum = planner_option_int(a, "accum", 1);
    int N = a->n;
    if (pp) {
        x->dp = planner_option_int(a, "dp", 1), x->chunks = 1;
        const char *sched = planner_option(a, "schedule");
        if (sched && !strcmp(sched, "interleaved")) x->chunks = planner_option_int(a, "chunks", 2);
        if (N % x->dp) return fail(why, nwhy, "--dp %d does not divide the %d ranks", x->dp, N);
        x->stages = N / x->dp;
        int K = x->stages * x->chunks, micro = planner_option_int(a, "micro", 4);
        if (x->m.layers < 0) x->m.layers = K > 2 ? K : 2;  // pp's depth: one block per model chunk
        if (K > x->m.layers)
            return fail(why, nwhy, "%d stage%s x %d chunk%s need at least %d blocks (--layers %d)", x->stages,
                        x->stages == 1 ? "" : "s", x->chunks, x->chunks == 1 ? "" : "s", K, x->m.layers);
        if (sched && !strcmp(sched, "interleaved") && micro % x->stages)  // (as pp's lay_out_pipe)
            return fail(why, nwhy, "interleaved 1F1B sends micro-batches round the ranks in groups of %d: --micro %d must "
                        "be a multiple of the %d stages", x->stages, micro, x->stages);
        if (planner_option(a, "split")) return fail(why, nwhy, "--split: the planner lays the blocks out as even as can be");
        if (x->batch % (x->dp * micro))
            return fail(why, nwhy, "--batch %d does not split into %d pipeline(s) x %d micro-batches", x->batch, x->dp, micro);
        x->micro = x->batch / (x->dp * micro);
    } else if (!strcmp(lab, "tp")) {
        // The D x t mesh, as the tp lab checks it (tp.c's check_mesh).
        x->dp = planner_option_int(a, "dp", 1);
        if (N % x->dp) return fail(why, nwhy, "--dp %d does not divide the %d ranks (N = D x t)", x->dp, N);
        int t = N / x->dp;
        if (x->m.layers < 0) x->m.layers = 2;
        if (x->m.heads % t) return fail(why, nwhy, "%d tensor-parallel ranks do not divide --heads %d", t, x->m.heads);
        if (planner_option(a, "vocab-parallel") && x->m.vocab % t)
            return fail(why, nwhy, "--vocab-parallel: %d tensor-parallel ranks do not divide the vocabulary of %d", t, x->m.vocab);
        if (x->batch % (x->dp * x->accum))
            return fail(why, nwhy, "--batch %d does not split into %d replica(s) x %d micro-batches (--accum)", x->batch, x->dp,
                        x->accum);
        x->micro = x->batch / (x->dp * x->accum);
        if (planner_option(a, "sp") && ((long)x->micro * x->m.seq) % t)
            return fail(why, nwhy, "--sp: %d tensor-parallel ranks do not divide the %d token rows of a micro-batch", t,
                        x->micro * x->m.seq);
    } else {
        if (x->m.layers < 0) x->m.layers = 2;
        int per = !strcmp(lab, "single") ? 1 : N;
        if (x->batch % (per * x->accum))
            return fail(why, nwhy, "--batch %d does not split into %d rank(s) x %d micro-batches (--accum)", x->batch, per,
                        x->accum);
        x->micro = x->batch / (per * x->accum);
    }
    x->l = (MemLayout){
        .lab = lab, .world = N, .micro = x->micro, .mixed = x->m.mixed, .gpu = gpu,
        .stage = !strcmp(lab, "fsdp") ? 3 : planner_option_int(a, "stage", 1), .offload = opt_flag(a, "offload"),
        .prefetch = opt_flag(a, "prefetch"), .reshard = !opt_flag(a, "no-reshard"),
        .buckets = !planner_option(a, "sync") || strcmp(planner_option(a, "sync"), "per-tensor") != 0, .ckpt_acts = NAN,
        .tp = !strcmp(lab, "tp") ? N / x->dp : 0, .sp = planner_option(a, "sp") != NULL,
        .vp = planner_option(a, "vocab-parallel") != NULL,
    };
    if (!strcmp(lab, "ckpt")) {
        CkptPolicy p;
        const char *policy = planner_option(a, "policy");
        if (ckpt_policy_named(&p, policy ? policy : "every", x->m.layers, why, nwhy) != 0) return -1;
        x->l.ckpt_acts = ckpt_acts_bytes(&x->m, x->micro, &p);
    }
    return 0;
}

// 163037184 as "163,037,184".
const char *planner_grouped(char *buf, size_t n, double v) {
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%.0f", v), o = 0;
    for (int i = 0; i < len && o + 2 < (int)n; i++) {
        if (i && (len - i) % 3 == 0 && digits[i - 1] != '-') buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = 0;
    return buf;
}

int planner_stages(const Planner *p) { return !strcmp(p->l.lab, "pp") ? p->stages : 1; }

double planner_stage_params(const Planner *p, int s) {
    if (strcmp(p->l.lab, "pp") != 0) return (double)gpt_num_params(&p->m);
    double psi = 0;
    int K = p->stages * p->chunks;
    for (int k = s; k < K; k += p->stages) {  // the chunks s, s + p, ...
        int first, last;
        memplan_pp_chunk(p->m.layers, K, k, &first, &last);
        for (int l = first; l <= last; l++) psi += (double)gpt_layer_size(&p->m, l);
    }
    return psi;
}

void planner_stage(const Planner *p, int s, MemPlan *out) {
    MemLayout l = p->l;
    if (!strcmp(l.lab, "pp")) {
        l.stage_params = planner_stage_params(p, s);
        // Its chunks' activations for one micro-batch each, and what the schedule holds of
        // them at its fullest moment: m micro-batches under GPipe, min(m, p - s) under 1F1B,
        // a mix of (micro-batch, chunk) pairs when interleaved (memplan_pp_held walks it).
        const char *sched = planner_option(p, "schedule");
        int m = planner_option_int(p, "micro", 4), first, last, K = p->stages * p->chunks;
        int kind = !sched || !strcmp(sched, "1f1b") ? 1 : !strcmp(sched, "gpipe") ? 0 : 2;
        double *chunk_acts = malloc_check((size_t)p->chunks * sizeof *chunk_acts);
        for (int j = 0; j < p->chunks; j++) {
            memplan_pp_chunk(p->m.layers, K, s + j * p->stages, &first, &last);
            chunk_acts[j] = (double)gpt_acts_layers_bytes(&p->m, p->micro, first, last);
        }
        l.interleaved = kind == 2;
        l.held_acts = memplan_pp_held(kind, p->stages, p->chunks, m, s, chunk_acts, &l.in_flight);
        free(chunk_acts);
    }
    char why[160];
    if (memplan(&p->m, &l, out, why, sizeof why) != 0) die("this is a bug in shardlab's planner", "%s", why);
}

double planner_peak_total(const MemPlan *mp) {
    double t = 0;
    for (int k = 0; k < MEM_CATEGORIES; k++)
        if (!isnan(mp->peak[k])) t += mp->peak[k];
    return t;
}

int planner_fits(const Planner *p, const MemPlan *mp) {
    const PlannerGpu *g = &planner_gpus[p->gpu];
    if (!g->what) return -1;
    return planner_peak_total(mp) + PLANNER_RESERVE_BYTES <= g->mib * 1024 * 1024;
}

// {"lab", "ranks", "model": {name, layers, dim, heads, seq, vocab, attn, mixed, params},
// "batch", "micro_batch", "stages": [{"stage", "params", "after": {category: bytes}, "peak":
// {...}, "peak_total", "fits"}], "gpu": {name, bytes, reserve} or null}; a category without a
// formula is null, "fits" without a device too.
void planner_json(const Planner *p, StrBuf *sb) {
    sb_printf(sb, "{\"lab\":\"%s\",\"ranks\":%d,\"model\":{\"name\":\"%s\",\"layers\":%d,\"dim\":%d,\"heads\":%d,"
                  "\"seq\":%d,\"vocab\":%d,\"attn\":\"%s\",\"mixed\":%s,\"params\":%.0f},\"batch\":%d,\"micro_batch\":%d,"
                  "\"stages\":[",
              p->l.lab, p->n, planner_models[p->model].name, p->m.layers, p->m.dim, p->m.heads, p->m.seq, p->m.vocab,
              gpt_attn_name(p->m.attn), p->m.mixed ? "true" : "false", (double)gpt_num_params(&p->m), p->batch, p->micro);
    for (int s = 0; s < planner_stages(p); s++) {
        MemPlan mp;
        planner_stage(p, s, &mp);
        sb_printf(sb, "%s{\"stage\":%d,\"params\":%.0f", s ? "," : "", s, planner_stage_params(p, s));
        for (int at_peak = 0; at_peak < 2; at_peak++) {
            sb_printf(sb, ",\"%s\":{", at_peak ? "peak" : "after");
            for (int k = 0; k < MEM_CATEGORIES; k++) {
                double v = at_peak ? mp.peak[k] : mp.after[k];
                sb_printf(sb, "%s\"%s\":", k ? "," : "", mem_category_name((MemCategory)k));
                if (isnan(v)) sb_printf(sb, "null");
                else sb_printf(sb, "%.0f", v);
            }
            sb_printf(sb, "}");
        }
        int fits = planner_fits(p, &mp);
        sb_printf(sb, ",\"peak_total\":%.0f,\"fits\":%s}", planner_peak_total(&mp), fits < 0 ? "null" : fits ? "true" : "false");
    }
    const PlannerGpu *g = &planner_gpus[p->gpu];
    sb_printf(sb, "],\"gpu\":");
    if (g->what) sb_printf(sb, "{\"name\":\"%s\",\"bytes\":%.0f,\"reserve\":%.0f}", g->name, g->mib * 1024 * 1024, PLANNER_RESERVE_BYTES);
    else sb_printf(sb, "null");
    sb_printf(sb, "}\n");
}
