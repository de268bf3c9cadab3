// planner.c — see planner.h.
#include "planner.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "14-activation-checkpointing/policy.h"
#include "common/harness/check.h"
#include "common/harness/cp_layout.h"

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

// --psi's count: a number (7500000000, 7.5e9) or one with a suffix K, M, B or T (thousand,
// million, billion, trillion, as papers write 7.5B), whole, from 1 to 10^15. 0, or -1.
static int parse_count(const char *text, double *out) {
    char *end;
    double v = strtod(text, &end);
    if (end == text || isspace((unsigned char)text[0])) return -1;
    if (*end) {
        const char *units = "KMBT", *u = end[1] ? NULL : strchr(units, toupper((unsigned char)*end));
        if (!u || !*u) return -1;
        v *= pow(1000, (double)(u - units + 1));
        if (fabs(v - round(v)) <= 1e-9 * v) v = round(v);  // (7.3B's 7.3 is not exact in binary)
    }
    if (!isfinite(v) || v < 1 || v > 1e15 || v != floor(v)) return -1;
    *out = v;
    return 0;
}

static int find(const char *const *names, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(names[k], name)) return k;
    return -1;
}

int planner_parse(Planner *a, int argc, char *const argv[], char *why, size_t nwhy) {
    memset(a, 0, sizeof *a);
    if (argc < 1) return fail(why, nwhy, "expected a lab: single, ddp, shard, ckpt, zero, fsdp, pp, tp or cp");
    a->lab = catalog_lab(argv[0]);
    static const char *const planned[] = {"single", "ddp", "shard", "ckpt", "zero", "fsdp", "pp", "tp", "cp"};
    if (!a->lab || find(planned, 9, a->lab->name) < 0)
        return fail(why, nwhy, "%s '%s': the planner has formulas for single, ddp, shard, ckpt, zero, fsdp, pp, tp and cp",
                    a->lab ? "no memory formulas yet for" : "no lab called", argv[0]);
    a->n = a->lab->max_world == 1 ? 1 : 8;
    int gpu_given = 0;
    const char *models[16], *gpus[16];
    for (int k = 0; k < planner_nmodels; k++) models[k] = planner_models[k].name;
    for (int k = 0; k < planner_ngpus; k++) gpus[k] = planner_gpus[k].name;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        char name[64];
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        if (!strcmp(name, "--check") || !strcmp(name, "--json") || !strcmp(name, "--longest")) {
            if (eq) return fail(why, nwhy, "%s takes no value (got '%s')", name, arg);
            *(name[2] == 'c' ? &a->check : name[2] == 'j' ? &a->json : &a->longest) = 1;
            continue;
        }
        // The planner's own options, and the lab's (checked as the lab checks them).
        int mine = !strcmp(name, "-n") || !strcmp(name, "--model") || !strcmp(name, "--gpu") || !strcmp(name, "--vocab") ||
                   !strcmp(name, "--psi") || !strcmp(name, "--budget");
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
        } else if (!strcmp(name, "--psi")) {
            if (parse_count(value, &a->psi) != 0)
                return fail(why, nwhy, "--psi takes a whole number of parameters from 1 to 10^15: 7500000000, 7.5e9 or 7.5B "
                            "(got '%s')", value);
        } else if (!strcmp(name, "--model")) {
            if ((a->model = find(models, planner_nmodels, value)) < 0)
                return fail(why, nwhy, "--model takes labs, gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-7b or llama-70b (got '%s')", value);
        } else if (!strcmp(name, "--gpu")) {
            if ((a->gpu = find(gpus, planner_ngpus, value)) < 0)
                return fail(why, nwhy, "--gpu takes h100-80gb, h200, a100-40gb, a100-80gb, rtx4090 or none (got '%s')", value);
            gpu_given = 1;
        } else if (!strcmp(name, "--budget")) {
            uint64_t b;
            if (catalog_bytes(value, &b) != 0 || b < (1u << 20) || b > (1ull << 50))
                return fail(why, nwhy, "--budget takes the bytes a rank may hold, from 1M to 1048576G, e.g. 512M or 80G "
                            "(got '%s')", value);
            a->budget = (double)b;
        } else {
            if (takes && catalog_check(o, value, 1, why, nwhy) != 0) return -1;
            if (a->ngiven / 2 >= PLANNER_MAX_GIVEN - 1) return fail(why, nwhy, "more than %d options", PLANNER_MAX_GIVEN);
            char *kept = a->names[a->ngiven / 2];
            snprintf(kept, sizeof a->names[0], "%s", name);
            a->given[a->ngiven++] = kept;
            a->given[a->ngiven++] = takes ? (char *)value : "";  // a flag's place: "" (never passed on)
        }
    }
    if (a->budget > 0 && gpu_given) return fail(why, nwhy, "--budget stands in for a GPU: give --gpu or --budget, not both");
    if (a->budget > 0) a->gpu = find(gpus, planner_ngpus, "none");
    return 0;
}

// ---- the plan ------------------------------------------------------------------------------------

// A global batch that does not split into `parts` shares (ranks, pipelines, replicas: `part`)
// of `micro` micro-batches each (micro_opt: --accum or --micro), and what would: the next
// batch that does, and, when the shares are whole, fewer micro-batches that divide them. -1.
static int batch_fail(char *why, size_t nwhy, int batch, int parts, const char *part, int micro, const char *micro_opt,
                      int may_change_micro) {
    const CatOption *o = catalog_find(NULL, "batch");
    long unit = (long)parts * micro, next = (batch + unit - 1) / unit * unit, most = o ? (long)o->max : 65536;
    char fix[200];
    if (next > most) snprintf(fix, sizeof fix, "no --batch up to %ld does: lower -n or %s", most, micro_opt);
    else snprintf(fix, sizeof fix, "try --batch %ld, the next multiple of %d x %d", next, parts, micro);
    if (may_change_micro && micro > 1 && batch % parts == 0) {
        int share = batch / parts, d = micro - 1;
        while (share % d) d--;
        size_t k = strlen(fix);
        snprintf(fix + k, sizeof fix - k, ", or %s %d", micro_opt, d);
    }
    return fail(why, nwhy, "--batch %d does not split into %d %s%s x %d micro-batch%s (%s %d): %s", batch, parts, part,
                parts == 1 ? "" : "s", micro, micro == 1 ? "" : "es", micro_opt, micro, fix);
}

// The checks the labs make before they start, on the layout the words describe.
int planner_lay_out(Planner *a, int gpu, char *why, size_t nwhy) {
    Planner *x = a;
    memset(&x->m, 0, sizeof x->m);
    const char *lab = a->lab->name;
    int pp = !strcmp(lab, "pp"), preset = a->model;
    if (a->psi) {
        // A count, not a shape: nothing that would give the model one, and no lab that needs it.
        static const char *const shaping[] = {"layers", "dim", "heads", "seq"};
        for (int i = 0; i < 4; i++)
            if (typed(a, shaping[i]))
                return fail(why, nwhy, "--psi gives the parameter count without a shape: leave out --%s (or --psi)", shaping[i]);
        if (preset || a->vocab)
            return fail(why, nwhy, "--psi gives the parameter count without a shape: leave out --%s (or --psi)",
                        preset ? "model" : "vocab");
        if (pp || !strcmp(lab, "tp") || !strcmp(lab, "ckpt") || !strcmp(lab, "cp"))
            return fail(why, nwhy, "--psi: %s splits the model by its shape; give --model or --layers, --dim, --heads, --seq",
                        lab);
    }
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
    if ((int64_t)x->batch * x->m.seq > CATALOG_MAX_BATCH_TOKENS)
        return fail(why, nwhy, "--batch %d x --seq %d is %lld tokens a step, more than %d: lower --batch or --seq",
                    x->batch, x->m.seq, (long long)x->batch * x->m.seq, CATALOG_MAX_BATCH_TOKENS);
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
            return batch_fail(why, nwhy, x->batch, x->dp, "pipeline", micro, "--micro", !sched || strcmp(sched, "interleaved"));
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
        if (x->batch % (x->dp * x->accum)) return batch_fail(why, nwhy, x->batch, x->dp, "replica", x->accum, "--accum", 1);
        x->micro = x->batch / (x->dp * x->accum);
        if (planner_option(a, "sp") && ((long)x->micro * x->m.seq) % t)
            return fail(why, nwhy, "--sp: %d tensor-parallel ranks do not divide the %d token rows of a micro-batch", t,
                        x->micro * x->m.seq);
    } else if (!strcmp(lab, "cp")) {
        // D groups of n context-parallel ranks, as the cp lab checks them (cp.c's check_options).
        x->dp = planner_option_int(a, "dp", 1);
        if (x->m.layers < 0) x->m.layers = 2;
        if (N % x->dp) return fail(why, nwhy, "--dp %d does not divide the %d ranks (N = D groups x n)", x->dp, N);
        int n = N / x->dp;
        const char *layout = planner_option(a, "layout") ? planner_option(a, "layout") : "zigzag";
        CpLayout cl;
        if (cp_layout_init(&cl, cp_layout_parse(layout), x->m.seq, n) != 0)
            return fail(why, nwhy, "--seq %d is too short for %s over %d ranks (%d chunks of at least one token): use "
                        "--seq %d or more, or --layout contiguous", x->m.seq, layout, n, cl.chunks, cl.chunks);
        if (x->m.attn != GPT_ATTN_FLASH)
            return fail(why, nwhy, "--attn naive: ring attention merges blocks by their log-sum-exps; use --attn flash");
        if (x->batch % (x->dp * x->accum)) return batch_fail(why, nwhy, x->batch, x->dp, "group", x->accum, "--accum", 1);
        x->micro = x->batch / (x->dp * x->accum);
        // The rank planned: the one holding the most tokens (the first such), whose peak is the highest.
        x->cp_most = cp_layout_max_count(&cl);
        for (x->cp_rank = 0; cp_layout_count(&cl, x->cp_rank) != x->cp_most; x->cp_rank++) {}
        x->cp_tokens = x->cp_most;
    } else {
        if (x->m.layers < 0) x->m.layers = 2;
        // fsdp --replicate R: an R x S mesh, as the fsdp lab checks it (batchsplit.c).
        x->replicate = !strcmp(lab, "fsdp") ? planner_option_int(a, "replicate", 1) : 1;
        if (x->replicate < 1 || N % x->replicate) {
            int below = x->replicate < 1 ? 1 : x->replicate, above = below;
            while (N % below) below--;
            while (above < N && N % above) above++;
            char fix[64];
            if (above > N || above == below) snprintf(fix, sizeof fix, "use --replicate %d", below);
            else snprintf(fix, sizeof fix, "use --replicate %d or %d", below, above);
            return fail(why, nwhy, "--replicate %d does not divide the %d ranks (N = R replicas x S shards): %s",
                        x->replicate, N, fix);
        }
        int per = !strcmp(lab, "single") ? 1 : N;
        // A bare count plans no activations: the batch matters only when it is given.
        if (a->psi && !typed(a, "batch") && !typed(a, "accum")) x->batch = x->accum = x->micro = 0;
        else if (x->batch % (per * x->accum)) return batch_fail(why, nwhy, x->batch, per, "rank", x->accum, "--accum", 1);
        else x->micro = x->batch / (per * x->accum);
    }
    x->l = (MemLayout){
        .lab = lab, .world = N, .micro = x->micro, .mixed = x->m.mixed, .gpu = gpu,
        .stage = !strcmp(lab, "fsdp") ? 3 : planner_option_int(a, "stage", 1), .offload = opt_flag(a, "offload"),
        .prefetch = opt_flag(a, "prefetch"), .reshard = !opt_flag(a, "no-reshard"),
        .buckets = !planner_option(a, "sync") || strcmp(planner_option(a, "sync"), "per-tensor") != 0, .ckpt_acts = NAN,
        .tp = !strcmp(lab, "tp") ? N / x->dp : 0, .sp = planner_option(a, "sp") != NULL,
        .vp = planner_option(a, "vocab-parallel") != NULL, .psi = a->psi, .replicate = x->replicate,
    };
    if (!strcmp(lab, "cp")) {
        x->l.cp = N / x->dp, x->l.cp_rank = x->cp_rank;
        x->l.cp_layout = cp_layout_parse(planner_option(a, "layout") ? planner_option(a, "layout") : "zigzag");
        x->l.cp_kv = planner_option(a, "kv") && !strcmp(planner_option(a, "kv"), "all-gather") ? CP_KV_ALL_GATHER : CP_KV_RING;
    }
    // (as the zero lab refuses it)
    if (!strcmp(lab, "zero") && x->l.offload && x->l.stage == 0)
        return fail(why, nwhy, "--offload moves the sharded optimizer to the host: it needs --stage 1, 2 or 3 (stage 0 is DDP)");
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

double planner_params(const Planner *p) { return p->psi ? p->psi : (double)gpt_num_params(&p->m); }

double planner_params_padded(const Planner *p) {
    const char *lab = p->l.lab;
    if (strcmp(lab, "zero") != 0 && strcmp(lab, "fsdp") != 0) return planner_params(p);
    int R = p->replicate > 1 ? p->replicate : 1, N = p->n / R, align = (p->m.mixed ? 2 : 1) * R;  // HSDP: a shard group
    if (p->psi) return memplan_shard(p->psi, N, align) * N;
    double padded = 0;
    for (int u = 0; u < gpt_layer_count(&p->m); u++) padded += memplan_unit_shard(&p->m, u, N, align) * N;
    return padded;
}

double planner_stage_params(const Planner *p, int s) {
    if (strcmp(p->l.lab, "pp") != 0) return planner_params(p);
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
    double t = NAN;
    for (int k = 0; k < MEM_CATEGORIES; k++)
        if (!isnan(mp->peak[k])) t = (isnan(t) ? 0 : t) + mp->peak[k];
    return t;
}

int planner_fits(const Planner *p, const MemPlan *mp) {
    const PlannerGpu *g = &planner_gpus[p->gpu];
    double peak = planner_peak_total(mp);
    if (isnan(peak)) return -1;
    if (p->budget > 0) return peak <= p->budget;  // what the rank holds, all of it (no CUDA context to hold back)
    if (!g->what) return -1;
    return peak + PLANNER_RESERVE_BYTES <= g->mib * 1024 * 1024;
}

// ---- --longest ---------------------------------------------------------------------------------

// The plan at --seq T: 1 if every stage fits, 0 if one does not, -1 if the layout refuses T
// (too short for its chunks, a split it needs).
static int fits_at(Planner *p, int T) {
    snprintf(p->longest_text, sizeof p->longest_text, "%d", T);
    char why[300];
    if (planner_lay_out(p, 1, why, sizeof why) != 0) return -1;
    for (int s = 0; s < planner_stages(p); s++) {
        MemPlan mp;
        planner_stage(p, s, &mp);
        if (planner_fits(p, &mp) != 1) return 0;
    }
    return 1;
}

// The longest T in (lo, mid] the layout takes, and whether it fits (-1: none within 256 of mid).
static int valid_below(Planner *p, int lo, int mid, int *fit) {
    for (int t = mid; t > lo && t > mid - 256; t--)
        if ((*fit = fits_at(p, t)) >= 0) return t;
    return -1;
}

int planner_longest(Planner *p, char *why, size_t nwhy) {
    if (typed(p, "seq")) return fail(why, nwhy, "--longest finds --seq: leave --seq out");
    if (p->psi) return fail(why, nwhy, "--longest needs a shape, whose activations grow with --seq: give --model or --layers, "
                            "--dim, --heads, not --psi");
    if (!planner_gpus[p->gpu].what && !(p->budget > 0))
        return fail(why, nwhy, "--longest fits the sequence to a device: give --gpu NAME or --budget SIZE, not --gpu none");
    if (p->ngiven / 2 >= PLANNER_MAX_GIVEN - 1) return fail(why, nwhy, "more than %d options", PLANNER_MAX_GIVEN);
    // --seq among the lab's options, as if typed, so that --check runs the lab at it too.
    char *name = p->names[p->ngiven / 2];
    snprintf(name, sizeof p->names[0], "--seq");
    p->given[p->ngiven++] = name;
    p->given[p->ngiven++] = p->longest_text;
    // Every valid T <= lo fits; no valid T >= hi does (the peak grows with T).
    int lo = 0, hi = CATALOG_MAX_SEQ + 1, best = 0, fit;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2, t = valid_below(p, lo, mid, &fit);
        if (t < 0 || fit) {
            if (t > 0) best = t;
            lo = mid;
        } else {
            hi = t;
        }
    }
    p->longest_seq = best;
    if (best && fits_at(p, best) != 1) return fail(why, nwhy, "this is a bug in shardlab's planner: --seq %d fit, then not", best);
    for (int t = 1; !best && t <= 256 && fits_at(p, t) < 0; t++) {}  // none fits: the plan shown is the shortest's
    return 0;
}

double planner_state(const MemPlan *mp) { return mp->after[MEM_PARAMS] + mp->after[MEM_GRADS] + mp->after[MEM_OPTIM]; }

// ---- the ZeRO paper's names, and the texts a plan is read with ---------------------------------

// Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
// (2020), figure 1 and table 1: P for partitioned, os the optimizer states, g the gradients,
// p the parameters. Their formulas with 2 for e, as the paper's mixed precision has it.
static const char *const ZERO_NAMES[4] = {"baseline DDP", "P_os", "P_os+g", "P_os+g+p"};
static const char *const ZERO_FORMULAS[4] = {"(e + e + K) Psi'", "e Psi' + e Psi' + K Psi'/N", "e Psi' + (e + K) Psi'/N",
                                             "(e + e + K) Psi'/N"};

const char *planner_zero_name(int stage) { return stage >= 0 && stage <= 3 ? ZERO_NAMES[stage] : "?"; }
const char *planner_zero_formula(int stage) { return stage >= 0 && stage <= 3 ? ZERO_FORMULAS[stage] : "?"; }

void planner_zero_stages(const Planner *p, MemPlan out[4]) {
    for (int st = 0; st < 4; st++) {
        MemLayout l = p->l;
        l.stage = st, l.offload = 0;
        char why[160];
        if (memplan(&p->m, &l, &out[st], why, sizeof why) != 0) die("this is a bug in shardlab's planner", "%s", why);
    }
}

const char *planner_precision(const Planner *p) {
    int sharded = !strcmp(p->l.lab, "zero") || !strcmp(p->l.lab, "fsdp");
    if (!p->m.mixed) return "fp32: e = 4 bytes a weight (and a gradient), K = 8 bytes of optimizer state a parameter";
    if (sharded) return "--mixed: bf16 weights and gradients (e = 2), fp32 masters with AdamW's m and v (K = 12)";
    return "--mixed: bf16 operands into the matrix products, fp32 weights (e = 4, K = 8)";
}

const char *const planner_note =
    "Exact for shardlab's labs (--check runs one and compares); a framework adds on top: its caching allocator's "
    "reserved but unused blocks and their fragmentation (a tenth of the peak or more is common), the kernels' workspaces "
    "(cuBLAS, attention: tens to hundreds of MiB), the CUDA context (0.3-0.5 GiB a process) and NCCL's buffers (tens "
    "to hundreds of MiB with many peers).";

__attribute__((format(printf, 4, 5))) static int term(PlannerTerm *out, int n, int max, const char *fmt, ...) {
    if (n >= max) return n;
    va_list ap;
    va_start(ap, fmt);
    char line[sizeof out->term + sizeof out->text];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const char *colon = strchr(line, '|');  // "term|text"
    snprintf(out[n].term, sizeof out[n].term, "%.*s", colon ? (int)(colon - line) : 0, line);
    snprintf(out[n].text, sizeof out[n].text, "%.*s", (int)sizeof out[n].text - 1, colon ? colon + 1 : line);
    return n + 1;
}

int planner_terms(const Planner *p, PlannerTerm *out, int max) {
    const char *lab = p->l.lab;
    int n = 0, sharded = !strcmp(lab, "zero") || !strcmp(lab, "fsdp"), mixed = p->m.mixed;
    char b1[32], b2[32];
    if (p->psi) n = term(out, n, max, "Psi|the model's parameters: %s, given by --psi without a shape (so no activations "
                         "and no peaks: the model state alone, as the ZeRO paper counts it)", planner_grouped(b1, sizeof b1, p->psi));
    else n = term(out, n, max, "Psi|the model's parameters: %s", planner_grouped(b1, sizeof b1, planner_params(p)));
    if (sharded) {
        double padded = planner_params_padded(p);
        int R = p->replicate > 1 ? p->replicate : 1;
        char of[48];
        if (R > 1) snprintf(of, sizeof of, " of a multiple of %d (R%s)", (mixed ? 2 : 1) * R, mixed ? ", even" : "");
        else snprintf(of, sizeof of, "%s", mixed ? " of an even length" : "");
        n = term(out, n, max, "Psi'|Psi %s padded to split into %s = %d equal shards%s%s: %s, with %s elements of "
                 "padding; what ZeRO and FSDP cut", p->psi ? "" : "with each unit (the embedding, each block, the head)",
                 R > 1 ? "S" : "N", p->n / R, of, p->psi ? " (--psi's count is one unit)" : "",
                 planner_grouped(b1, sizeof b1, padded), planner_grouped(b2, sizeof b2, padded - planner_params(p)));
        if (R > 1)
            n = term(out, n, max, "R, S|--replicate (HSDP): R = %d replicas of a shard group of S = %d ranks, N = R S; each "
                     "group holds the whole model, sharded S ways", R, p->n / R);
    }
    if (!strcmp(lab, "pp")) n = term(out, n, max, "Psi_s|the parameters of stage s's layers");
    if (!strcmp(lab, "cp"))
        n = term(out, n, max, "T', M, n|the tokens of each sequence on the rank planned (the one holding the most: rank %d "
                 "of its group), M = %d the most any rank holds, n = %d ranks a group", p->cp_rank, p->cp_most, p->l.cp);
    if (!strcmp(lab, "tp"))
        n = term(out, n, max, "Psi_rep, Psi_split|the parameters every tensor-parallel rank keeps whole, and those split "
                 "t = %d ways", p->l.tp);
    n = term(out, n, max, "N|ranks (GPUs): %d", p->n);
    n = term(out, n, max, "e, K|bytes a weight (and a gradient), bytes of optimizer state a parameter: e = %d, K = %d",
             sharded && mixed ? 2 : 4, sharded && mixed ? 12 : 8);
    if (!p->psi) {
        n = term(out, n, max, "L C NH T V|blocks, width, attention heads, tokens a sequence, vocabulary");
        if (p->micro) {
            n = term(out, n, max, "B|sequences in one rank's micro-batch: %d", p->micro);
            n = term(out, n, max, "S, W|S%s: the floats of a pass's scratch (its largest layer's temporaries; on a GPU the "
                     "kernels' workspace too); W = 4 (S + B T C): the pass's workspace in bytes, with the residual gradient",
                     p->replicate > 1 ? " in W (not the shard group's S)" : "");
        }
    }
    n = term(out, n, max, "GiB, GB|GiB = 2^30 bytes (and MiB = 2^20), as nvidia-smi counts; GB = 10^9 bytes, the ZeRO "
             "paper's unit");
    return n;
}

const char *planner_gb(char *buf, size_t n, double bytes) {
    static const char *const units[] = {"B", "kB", "MB", "GB"};
    int u = 0;
    double v = bytes;
    while (u < 3 && fabs(v) >= 999.5) v /= 1000, u++;  // GB at the most: the paper's 1T model takes 16000 GB
    if (u == 0 || fabs(v) >= 99.95) snprintf(buf, n, "%.0f %s", v, units[u]);
    else snprintf(buf, n, fabs(v) >= 9.995 ? "%.1f %s" : "%.2f %s", v, units[u]);
    return buf;
}

// A byte count, or null for NaN (no formula).
static void bytes_or_null(StrBuf *sb, double v) {
    if (isnan(v)) sb_printf(sb, "null");
    else sb_printf(sb, "%.0f", v);
}

// Every option the lab takes, shared and its own, by name: as given, else the default; a
// number as a number ("auto" and sizes as text), a flag true or false, no default null.
static void options_json(const Planner *p, StrBuf *sb) {
    const CatLab *lab = p->lab;
    int first = 1;
    sb_printf(sb, "{");
    for (int pass = 0; pass < 2; pass++) {
        const CatOption *opts = pass ? lab->options : catalog_train;
        int nopts = pass ? lab->noptions : lab->trains ? catalog_ntrain : 0;
        for (int i = 0; i < nopts; i++, first = 0) {
            const CatOption *o = &opts[i];
            const char *v = planner_option(p, o->name);
            // A bare count has no shape, and no batch unless one was given.
            static const char *const unplanned[] = {"layers", "dim", "heads", "seq", "batch", "accum"};
            if (p->psi && find(unplanned, p->batch ? 4 : 6, o->name) >= 0) v = NULL;
            sb_printf(sb, "%s", first ? "" : ",");
            sb_json_string(sb, o->name);
            sb_printf(sb, ":");
            char *end = NULL;
            double x = v && *v ? strtod(v, &end) : NAN;
            int number = (o->kind == OPT_INT || o->kind == OPT_U64 || o->kind == OPT_DOUBLE) && end && !*end && isfinite(x);
            if (o->kind == OPT_FLAG) sb_printf(sb, "%s", v ? "true" : "false");
            else if (!v) sb_printf(sb, "null");
            else if (number && o->kind == OPT_DOUBLE) sb_printf(sb, "%.15g", x);
            else if (number && strspn(v, "0123456789") == strlen(v)) sb_printf(sb, "%s", v);  // (a seed may pass 2^53)
            else sb_json_string(sb, v);
        }
    }
    sb_printf(sb, "}");
}

// What the lab's options make of the layout: ZeRO's stage (by the paper's name too) and
// offload, FSDP's, DDP's buckets, the tensor-parallel mesh, the pipeline, the policy.
static void layout_json(const Planner *p, StrBuf *sb) {
    const MemLayout *l = &p->l;
    const char *lab = l->lab;
    const char *b[2] = {"false", "true"};
    if (!strcmp(lab, "zero"))
        sb_printf(sb, "{\"stage\":%d,\"name\":\"%s\",\"offload\":%s}", l->stage, planner_zero_name(l->stage), b[l->offload]);
    else if (!strcmp(lab, "fsdp"))
        sb_printf(sb, "{\"stage\":3,\"name\":\"%s\",\"prefetch\":%s,\"reshard\":%s,\"replicate\":%d}", planner_zero_name(3),
                  b[l->prefetch], b[l->reshard], l->replicate > 1 ? l->replicate : 1);
    else if (!strcmp(lab, "ddp")) sb_printf(sb, "{\"buckets\":%s}", b[l->buckets]);
    else if (!strcmp(lab, "tp"))
        sb_printf(sb, "{\"tp\":%d,\"dp\":%d,\"sp\":%s,\"vocab_parallel\":%s}", l->tp, p->dp, b[l->sp], b[l->vp]);
    else if (!strcmp(lab, "cp")) {
        sb_printf(sb, "{\"cp\":%d,\"dp\":%d,\"layout\":\"%s\",\"kv\":\"%s\",\"rank\":%d,\"tokens_per_rank\":%d}", l->cp,
                  p->dp, cp_layout_name(l->cp_layout), l->cp_kv == CP_KV_ALL_GATHER ? "all-gather" : "ring", l->cp_rank,
                  p->cp_tokens);
    } else if (!strcmp(lab, "pp")) {
        const char *sched = planner_option(p, "schedule");
        sb_printf(sb, "{\"stages\":%d,\"chunks\":%d,\"dp\":%d,\"schedule\":", p->stages, p->chunks, p->dp);
        sb_json_string(sb, sched ? sched : "1f1b");
        sb_printf(sb, ",\"micro_batches\":%d}", atoi(planner_option(p, "micro") ? planner_option(p, "micro") : "4"));
    } else if (!strcmp(lab, "ckpt")) {
        sb_printf(sb, "{\"policy\":");
        sb_json_string(sb, planner_option(p, "policy") ? planner_option(p, "policy") : "every");
        sb_printf(sb, "}");
    } else sb_printf(sb, "{}");
}

// {"lab", "ranks", "model": {name, layers, dim, heads, seq, vocab, attn, mixed, params,
// params_padded}, "batch", "micro_batch", "precision": {e, K}, "layout": {...}, "options":
// {...}, "stages": [{"stage", "params", "after": {category: bytes}, "peak": {...},
// "state_after", "host", "peak_total", "fits"}], "zero_stages": [{"stage", "name", "formula",
// "params", "grads", "optim", "state"}] (zero; else null), "gpu": {name, bytes, reserve} or
// null}; a category without a formula is null, "fits" without a device too. With --psi the
// model's name and shape are null, and so are the batch, the activations and the peaks unless
// a batch was given.
void planner_json(const Planner *p, StrBuf *sb) {
    int shaped = !p->psi;
    sb_printf(sb, "{\"lab\":\"%s\",\"ranks\":%d,\"model\":{\"name\":", p->l.lab, p->n);
    if (shaped)
        sb_printf(sb, "\"%s\",\"layers\":%d,\"dim\":%d,\"heads\":%d,\"seq\":%d,\"vocab\":%d", planner_models[p->model].name,
                  p->m.layers, p->m.dim, p->m.heads, p->m.seq, p->m.vocab);
    else sb_printf(sb, "null,\"layers\":null,\"dim\":null,\"heads\":null,\"seq\":null,\"vocab\":null");
    sb_printf(sb, ",\"attn\":\"%s\",\"mixed\":%s,\"params\":%.0f,\"params_padded\":%.0f},\"batch\":", gpt_attn_name(p->m.attn),
              p->m.mixed ? "true" : "false", planner_params(p), planner_params_padded(p));
    if (p->batch) sb_printf(sb, "%d,\"micro_batch\":%d", p->batch, p->micro);
    else sb_printf(sb, "null,\"micro_batch\":null");
    int sharded_mixed = p->m.mixed && (!strcmp(p->l.lab, "zero") || !strcmp(p->l.lab, "fsdp"));
    sb_printf(sb, ",\"precision\":{\"e\":%d,\"K\":%d},\"layout\":", sharded_mixed ? 2 : 4, sharded_mixed ? 12 : 8);
    layout_json(p, sb);
    sb_printf(sb, ",\"options\":");
    options_json(p, sb);
    sb_printf(sb, ",\"stages\":[");
    for (int s = 0; s < planner_stages(p); s++) {
        MemPlan mp;
        planner_stage(p, s, &mp);
        sb_printf(sb, "%s{\"stage\":%d,\"params\":%.0f", s ? "," : "", s, planner_stage_params(p, s));
        for (int at_peak = 0; at_peak < 2; at_peak++) {
            sb_printf(sb, ",\"%s\":{", at_peak ? "peak" : "after");
            for (int k = 0; k < MEM_CATEGORIES; k++) {
                sb_printf(sb, "%s\"%s\":", k ? "," : "", mem_category_name((MemCategory)k));
                bytes_or_null(sb, at_peak ? mp.peak[k] : mp.after[k]);
            }
            sb_printf(sb, "}");
        }
        int fits = planner_fits(p, &mp);
        sb_printf(sb, ",\"state_after\":%.0f,\"host\":%.0f,\"peak_total\":", planner_state(&mp), mp.host);
        bytes_or_null(sb, planner_peak_total(&mp));
        sb_printf(sb, ",\"fits\":%s}", fits < 0 ? "null" : fits ? "true" : "false");
    }
    sb_printf(sb, "],\"zero_stages\":");
    if (!strcmp(p->l.lab, "zero")) {
        MemPlan st[4];
        planner_zero_stages(p, st);
        for (int k = 0; k < 4; k++)
            sb_printf(sb, "%s{\"stage\":%d,\"name\":\"%s\",\"formula\":\"%s\",\"params\":%.0f,\"grads\":%.0f,\"optim\":%.0f,"
                          "\"state\":%.0f}", k ? "," : "[", k, planner_zero_name(k), planner_zero_formula(k),
                      st[k].after[MEM_PARAMS], st[k].after[MEM_GRADS], st[k].after[MEM_OPTIM], planner_state(&st[k]));
        sb_printf(sb, "]");
    } else {
        sb_printf(sb, "null");
    }
    const PlannerGpu *g = &planner_gpus[p->gpu];
    sb_printf(sb, ",\"gpu\":");
    if (g->what) sb_printf(sb, "{\"name\":\"%s\",\"bytes\":%.0f,\"reserve\":%.0f}", g->name, g->mib * 1024 * 1024, PLANNER_RESERVE_BYTES);
    else sb_printf(sb, "null");
    sb_printf(sb, ",\"budget\":");
    bytes_or_null(sb, p->budget > 0 ? p->budget : NAN);
    // --longest: the --seq planned above (model.seq), or null when not even the shortest fits.
    if (p->longest) sb_printf(sb, p->longest_seq ? ",\"longest_seq\":%d" : ",\"longest_seq\":null", p->longest_seq);
    sb_printf(sb, "}\n");
}
