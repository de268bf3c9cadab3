// plan_cmd.c — `shardlab plan`: the bytes each GPU holds for a model and a layout, at any
// scale, from the formulas the labs are graded against (core/memplan.h), and --check, which
// runs the lab at that shape and compares what every rank logged with the plan, to the byte.
//
//     shardlab plan zero -n 8 --stage 3 --model gpt2 --mixed --gpu h100-80gb
//     shardlab plan ddp -n 2 --check
//
// The model is the labs' GPT (gpt.h: learned positions, LayerNorm, a 4C MLP, an output layer
// of its own) at any shape: the labs' default, GPT-2's four sizes (--model), or --layers,
// --dim, --heads, --seq and --vocab. The layout is the lab and its options, exactly as
// `shardlab run` takes them (the catalog checks them the same way); options that do not
// change memory (--steps, --lr, ...) are taken and passed on to --check's run.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "catalog.h"
#include "check.h"
#include "ckpt/policy.h"
#include "json.h"
#include "launch.h"
#include "mem.h"
#include "memplan.h"
#include "plan_cmd.h"

#define MAX_GIVEN 64
#define GIB (1024.0 * 1024 * 1024)
#define RESERVE_BYTES (1.0 * GIB)  // held back on a GPU: the CUDA context, NCCL's and cuBLAS' workspaces

static const char *PLAN_USAGE =
    "usage: shardlab plan LAB [-n N] [--model NAME] [--vocab V] [--gpu NAME] [--json] [--check] [LAB's options]\n"
    "\n"
    "The bytes each GPU (rank) holds for LAB's layout on N ranks, by category (params, grads,\n"
    "optim, acts, comm), after a step and at the most it holds at once, with the formula of\n"
    "each: the formulas `shardlab grade` checks every lab's run against, at any scale.\n"
    "\n"
    "  LAB            single, ddp, shard, ckpt, zero, fsdp or pp\n"
    "  -n N           ranks (GPUs), 1 to 65536 (default: 8; single: 1)\n"
    "  --model NAME   the labs' GPT at a preset shape: labs (the labs' default), gpt2,\n"
    "                 gpt2-medium, gpt2-large, gpt2-xl (GPT-2's depth, width, heads, 1024 tokens\n"
    "                 and 50257-token vocabulary); --layers, --dim, --heads, --seq override it\n"
    "  --vocab V      the vocabulary (the labs read bytes: 256)\n"
    "  --gpu NAME     the device to fit: h100-80gb (default), h200, a100-40gb, a100-80gb,\n"
    "                 rtx4090, or none\n"
    "  --json         the plan as one JSON object instead of the table (bytes by category,\n"
    "                 per pipeline stage; the device's capacity and whether it fits)\n"
    "  --check        run the lab at this shape for 2 steps (shardlab run, at most 8 ranks,\n"
    "                 vocabulary 256) and compare every rank's logged bytes with the plan:\n"
    "                 exit 0 if all are equal, 1 if not\n"
    "LAB's options are the ones `shardlab run LAB --help` lists: --batch, --accum, --mixed,\n"
    "--attn, --stage, --offload, --prefetch, --no-reshard, --sync, --policy, --micro,\n"
    "--schedule, --chunks, --split, --dp, ...; their defaults are the lab's.\n"
    "Exit status: 0 planned (and checked), 1 the check found a difference, 2 bad arguments.\n";

// ---- the model's presets and the devices -------------------------------------------------

static const char *const SHAPE[4] = {"layers", "dim", "heads", "seq"};
static const struct {
    const char *name;
    int shape[4];  // --layers, --dim, --heads, --seq
    int vocab;
} MODELS[] = {
    {"labs", {0}, GPT_VOCAB},  // the lab's defaults
    {"gpt2", {12, 768, 12, 1024}, 50257},
    {"gpt2-medium", {24, 1024, 16, 1024}, 50257},
    {"gpt2-large", {36, 1280, 20, 1024}, 50257},
    {"gpt2-xl", {48, 1600, 25, 1024}, 50257},
};

// Memory as nvidia-smi reports each card's total (MiB).
static const struct {
    const char *name, *what;
    double mib;
} GPUS[] = {
    {"h100-80gb", "H100 80GB", 81559},   {"h200", "H200 141GB", 143771},   {"a100-40gb", "A100 40GB", 40960},
    {"a100-80gb", "A100 80GB", 81920},   {"rtx4090", "RTX 4090 24GB", 24564}, {"none", NULL, 0},
};

// ---- the command line ----------------------------------------------------------------------

typedef struct {
    const CatLab *lab;
    int n, check, json, model, gpu;
    int vocab;                     // 0: the model's
    char *given[2 * MAX_GIVEN];    // the lab's options as typed ("--stage", "3", "--mixed", ...)
    int ngiven;
    char names[MAX_GIVEN][64];     // their names (--name=value typed as two)
} PlanArgs;

// The text of --name: as given (the last one counts; "" for a flag), else the catalog's default
// (NULL: none, or a flag off).
static int typed(const PlanArgs *a, const char *name) {
    for (int i = 0; i < a->ngiven; i += 2)
        if (strcmp(a->given[i] + 2, name) == 0) return 1;
    return 0;
}

static const char *opt(const PlanArgs *a, const char *name) {
    const char *found = NULL;
    for (int i = 0; i < a->ngiven; i += 2)
        if (strcmp(a->given[i] + 2, name) == 0) found = a->given[i + 1];
    if (found) return found;
    const CatOption *o = catalog_find(a->lab, name);
    return o && o->kind != OPT_FLAG ? o->dflt : NULL;
}

static int opt_int(const PlanArgs *a, const char *name, int fallback) {
    const char *t = opt(a, name);
    return t && *t && strcmp(t, "auto") != 0 ? atoi(t) : fallback;
}

static int opt_flag(const PlanArgs *a, const char *name) { return opt(a, name) != NULL; }

static int find(const char *const *names, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(names[k], name)) return k;
    return -1;
}

static void parse(PlanArgs *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    if (argc < 3) usage_error("shardlab plan", "expected a lab: single, ddp, shard, ckpt, zero, fsdp or pp");
    if (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) fputs(PLAN_USAGE, stdout), exit(0);
    a->lab = catalog_lab(argv[2]);
    static const char *const planned[] = {"single", "ddp", "shard", "ckpt", "zero", "fsdp", "pp"};
    if (!a->lab || find(planned, 7, a->lab->name) < 0)
        usage_error("shardlab plan", "%s '%s': the planner has formulas for single, ddp, shard, ckpt, zero, fsdp and pp",
                    a->lab ? "no memory formulas yet for" : "no lab called", argv[2]);
    a->n = a->lab->max_world == 1 ? 1 : 8;
    const char *models[sizeof MODELS / sizeof MODELS[0]], *gpus[sizeof GPUS / sizeof GPUS[0]];
    for (size_t k = 0; k < sizeof MODELS / sizeof MODELS[0]; k++) models[k] = MODELS[k].name;
    for (size_t k = 0; k < sizeof GPUS / sizeof GPUS[0]; k++) gpus[k] = GPUS[k].name;
    for (int i = 3; i < argc; i++) {
        const char *arg = argv[i], *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        char name[64];
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) fputs(PLAN_USAGE, stdout), exit(0);
        if (!strcmp(name, "--check") || !strcmp(name, "--json")) {
            *(name[2] == 'c' ? &a->check : &a->json) = 1;
            continue;
        }
        // The planner's own options, and the lab's (checked as the lab checks them).
        int mine = !strcmp(name, "-n") || !strcmp(name, "--model") || !strcmp(name, "--gpu") || !strcmp(name, "--vocab");
        const CatOption *o = !mine && strncmp(name, "--", 2) == 0 ? catalog_find(a->lab, name + 2) : NULL;
        if (!mine && !o)
            usage_error("shardlab plan", "%s is not an option of %s ('shardlab run %s --help' lists them)", name, a->lab->name,
                        a->lab->name);
        int takes = mine || o->kind != OPT_FLAG;
        const char *value = eq ? eq + 1 : takes && i + 1 < argc ? argv[++i] : NULL;
        if (takes && !value) usage_error("shardlab plan", "%s needs a value", name);
        if (!takes && eq) usage_error("shardlab plan", "%s takes no value (got '%s')", name, arg);
        char *end, why[256];
        long v = mine ? strtol(value, &end, 10) : 0;
        int number = mine && *value && !*end;
        if (!strcmp(name, "-n")) {
            if (!number || v < 1 || v > 65536) usage_error("shardlab plan", "-n takes 1 to 65536 ranks (got '%s')", value);
            if (a->lab->max_world && v > a->lab->max_world)
                usage_error("shardlab plan", "%s runs on at most %d rank (-n %ld)", a->lab->name, a->lab->max_world, v);
            a->n = (int)v;
        } else if (!strcmp(name, "--vocab")) {
            if (!number || v < 1 || v > 1000000) usage_error("shardlab plan", "--vocab takes 1 to 1000000 (got '%s')", value);
            a->vocab = (int)v;
        } else if (!strcmp(name, "--model")) {
            if ((a->model = find(models, (int)(sizeof models / sizeof *models), value)) < 0)
                usage_error("shardlab plan", "--model takes labs, gpt2, gpt2-medium, gpt2-large or gpt2-xl (got '%s')", value);
        } else if (!strcmp(name, "--gpu")) {
            if ((a->gpu = find(gpus, (int)(sizeof gpus / sizeof *gpus), value)) < 0)
                usage_error("shardlab plan", "--gpu takes h100-80gb, h200, a100-40gb, a100-80gb, rtx4090 or none (got '%s')", value);
        } else {
            if (takes && catalog_check(o, value, 1, why, sizeof why) != 0) usage_error("shardlab plan", "%s", why);
            if (a->ngiven / 2 >= MAX_GIVEN - 1) usage_error("shardlab plan", "more than %d options", MAX_GIVEN);
            char *kept = a->names[a->ngiven / 2];
            snprintf(kept, sizeof a->names[0], "%s", name);
            a->given[a->ngiven++] = kept;
            a->given[a->ngiven++] = takes ? (char *)value : "";  // a flag's place: "" (never passed on)
        }
    }
}

// ---- the plan ---------------------------------------------------------------------------------

typedef struct {
    GptConfig m;
    int batch, accum, micro;  // the global batch, micro-batches a step, sequences a micro-batch
    int stages, chunks, dp;   // pp
    MemLayout l;
} Layout;

// The model and layout the options describe; exits 2 with one line on one shardlab cannot
// run (the checks the labs make before they start).
static void lay_out(const PlanArgs *a, Layout *x, int gpu) {
    memset(x, 0, sizeof *x);
    const char *lab = a->lab->name;
    int pp = !strcmp(lab, "pp"), preset = a->model;
    // The shape: as typed, else the preset's, else the lab's default (pp's depth "auto": -1,
    // worked out below).
    int *dims[4] = {&x->m.layers, &x->m.dim, &x->m.heads, &x->m.seq};
    for (int i = 0; i < 4; i++) {
        const char *lab_default = i == 0 ? a->lab->layers : NULL;
        if (typed(a, SHAPE[i])) *dims[i] = opt_int(a, SHAPE[i], -1);
        else if (preset) *dims[i] = MODELS[preset].shape[i];
        else if (lab_default) *dims[i] = strcmp(lab_default, "auto") ? atoi(lab_default) : -1;
        else *dims[i] = opt_int(a, SHAPE[i], -1);
    }
    x->m.vocab = a->vocab ? a->vocab : MODELS[preset].vocab;
    x->m.attn = gpt_attn_parse(opt(a, "attn") ? opt(a, "attn") : "flash");
    x->m.mixed = opt_flag(a, "mixed");
    if (x->m.dim % x->m.heads) usage_error("shardlab plan", "--heads %d does not divide --dim %d", x->m.heads, x->m.dim);
    x->batch = opt_int(a, "batch", 8), x->accum = opt_int(a, "accum", 1);
    int N = a->n;
    if (pp) {
        x->dp = opt_int(a, "dp", 1), x->chunks = 1;
        const char *sched = opt(a, "schedule");
        if (sched && !strcmp(sched, "interleaved")) x->chunks = opt_int(a, "chunks", 2);
        if (N % x->dp) usage_error("shardlab plan", "--dp %d does not divide the %d ranks", x->dp, N);
        x->stages = N / x->dp;
        int K = x->stages * x->chunks, micro = opt_int(a, "micro", 4);
        if (x->m.layers < 0) x->m.layers = K > 2 ? K : 2;  // pp's depth: one block per model chunk
        if (K > x->m.layers)
            usage_error("shardlab plan", "%d stage%s x %d chunk%s need at least %d blocks (--layers %d)", x->stages,
                        x->stages == 1 ? "" : "s", x->chunks, x->chunks == 1 ? "" : "s", K, x->m.layers);
        if (opt(a, "split")) usage_error("shardlab plan", "--split: the planner lays the blocks out as even as can be");
        if (x->batch % (x->dp * micro))
            usage_error("shardlab plan", "--batch %d does not split into %d pipeline(s) x %d micro-batches", x->batch, x->dp, micro);
        x->micro = x->batch / (x->dp * micro);
    } else {
        if (x->m.layers < 0) x->m.layers = 2;
        int per = !strcmp(lab, "single") ? 1 : N;
        if (x->batch % (per * x->accum))
            usage_error("shardlab plan", "--batch %d does not split into %d rank(s) x %d micro-batches (--accum)", x->batch, per,
                        x->accum);
        x->micro = x->batch / (per * x->accum);
    }
    x->l = (MemLayout){
        .lab = lab, .world = N, .micro = pp ? 1 : x->micro, .mixed = x->m.mixed, .gpu = gpu,
        .stage = !strcmp(lab, "fsdp") ? 3 : opt_int(a, "stage", 1), .offload = opt_flag(a, "offload"),
        .prefetch = opt_flag(a, "prefetch"), .reshard = !opt_flag(a, "no-reshard"),
        .buckets = !opt(a, "sync") || strcmp(opt(a, "sync"), "per-tensor") != 0, .ckpt_acts = NAN,
    };
    if (!strcmp(lab, "ckpt")) {
        CkptPolicy p;
        char why[200];
        if (ckpt_policy_named(&p, opt(a, "policy") ? opt(a, "policy") : "every", x->m.layers, why, sizeof why) != 0)
            usage_error("shardlab plan", "%s", why);
        x->l.ckpt_acts = ckpt_acts_bytes(&x->m, x->micro, &p);
    }
}

// Pipeline stage s's parameters (the chunks s, s + p, ...).
static double stage_params(const Layout *x, int s) {
    double psi = 0;
    int K = x->stages * x->chunks;
    for (int k = s; k < K; k += x->stages) {
        int first, last;
        memplan_pp_chunk(x->m.layers, K, k, &first, &last);
        for (int l = first; l <= last; l++) psi += (double)gpt_layer_size(&x->m, l);
    }
    return psi;
}

// The plan of rank r (pp: of the stage it holds).
static void plan_rank(const Layout *x, int stage, MemPlan *p) {
    MemLayout l = x->l;
    if (!strcmp(l.lab, "pp")) l.stage_params = stage_params(x, stage);
    char why[160];
    if (memplan(&x->m, &l, p, why, sizeof why) != 0) usage_error("shardlab plan", "%s", why);
}

// 163037184 as "163,037,184".
static const char *grouped(char *buf, size_t n, double v) {
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%.0f", v), o = 0;
    for (int i = 0; i < len && o + 2 < (int)n; i++) {
        if (i && (len - i) % 3 == 0 && digits[i - 1] != '-') buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = 0;
    return buf;
}

static const char *bytes(char *buf, size_t n, double b) {
    if (isnan(b)) return snprintf(buf, n, "-"), buf;
    return format_bytes(buf, n, b);
}

static double peak_total(const MemPlan *p) {
    double t = 0;
    for (int k = 0; k < MEM_CATEGORIES; k++)
        if (!isnan(p->peak[k])) t += p->peak[k];
    return t;
}

// The plan as JSON: {"lab", "ranks", "model": {layers, dim, heads, seq, vocab, attn, mixed,
// params}, "batch", "micro_batch", "stages": [{"stage", "params", "after": {cat: bytes},
// "peak": {...}, "peak_total", "fits"}], "gpu": {name, bytes, reserve} or null}; a category
// without a formula is null.
static void print_json(const PlanArgs *a, const Layout *x) {
    StrBuf sb;
    sb_init(&sb);
    sb_printf(&sb, "{\"lab\":\"%s\",\"ranks\":%d,\"model\":{\"name\":\"%s\",\"layers\":%d,\"dim\":%d,\"heads\":%d,"
                   "\"seq\":%d,\"vocab\":%d,\"attn\":\"%s\",\"mixed\":%s,\"params\":%.0f},\"batch\":%d,\"micro_batch\":%d,"
                   "\"stages\":[",
              x->l.lab, a->n, MODELS[a->model].name, x->m.layers, x->m.dim, x->m.heads, x->m.seq, x->m.vocab,
              gpt_attn_name(x->m.attn), x->m.mixed ? "true" : "false", (double)gpt_num_params(&x->m), x->batch, x->micro);
    int stages = !strcmp(x->l.lab, "pp") ? x->stages : 1;
    double cap = GPUS[a->gpu].mib * 1024 * 1024;
    for (int s = 0; s < stages; s++) {
        MemPlan p;
        plan_rank(x, s, &p);
        sb_printf(&sb, "%s{\"stage\":%d,\"params\":%.0f", s ? "," : "", s,
                  !strcmp(x->l.lab, "pp") ? stage_params(x, s) : (double)gpt_num_params(&x->m));
        for (int at_peak = 0; at_peak < 2; at_peak++) {
            sb_printf(&sb, ",\"%s\":{", at_peak ? "peak" : "after");
            for (int k = 0; k < MEM_CATEGORIES; k++) {
                double v = at_peak ? p.peak[k] : p.after[k];
                sb_printf(&sb, "%s\"%s\":", k ? "," : "", mem_category_name((MemCategory)k));
                if (isnan(v)) sb_printf(&sb, "null");
                else sb_printf(&sb, "%.0f", v);
            }
            sb_printf(&sb, "}");
        }
        sb_printf(&sb, ",\"peak_total\":%.0f,\"fits\":", peak_total(&p));
        if (GPUS[a->gpu].what) sb_printf(&sb, "%s}", peak_total(&p) + RESERVE_BYTES <= cap ? "true" : "false");
        else sb_printf(&sb, "null}");
    }
    sb_printf(&sb, "],\"gpu\":");
    if (GPUS[a->gpu].what) sb_printf(&sb, "{\"name\":\"%s\",\"bytes\":%.0f,\"reserve\":%.0f}", GPUS[a->gpu].name, cap, RESERVE_BYTES);
    else sb_printf(&sb, "null");
    sb_printf(&sb, "}\n");
    fputs(sb.data, stdout);
    sb_free(&sb);
}

static void print_plan(const PlanArgs *a, const Layout *x) {
    const char *lab = x->l.lab;
    char b1[32], b2[32];
    double psi = (double)gpt_num_params(&x->m);
    printf("shardlab plan: %s on %d rank%s", lab, a->n, a->n == 1 ? "" : "s");
    if (!strcmp(lab, "zero")) printf(", stage %d%s", x->l.stage, x->l.offload ? ", offload" : "");
    if (!strcmp(lab, "fsdp")) printf("%s%s", x->l.prefetch ? ", prefetch" : "", x->l.reshard ? "" : ", no reshard");
    if (!strcmp(lab, "ckpt")) printf(", policy %s", opt(a, "policy") ? opt(a, "policy") : "every");
    if (!strcmp(lab, "pp")) printf(", %d stage%s x %d chunk%s, %d pipeline%s", x->stages, x->stages == 1 ? "" : "s", x->chunks,
                                   x->chunks == 1 ? "" : "s", x->dp, x->dp == 1 ? "" : "s");
    int sharded = !strcmp(lab, "zero") || !strcmp(lab, "fsdp");
    if (!x->m.mixed) printf(", fp32: e = 4 bytes a weight, K = 8 bytes of optimizer state a parameter\n");
    else if (sharded) printf(", --mixed: bf16 weights and gradients (e = 2), fp32 masters with AdamW's m and v (K = 12)\n");
    else printf(", --mixed: bf16 operands into the matrix products, fp32 weights (e = 4, K = 8)\n");
    printf("  model  the labs' GPT%s%s: L %d blocks, C %d, NH %d heads, T %d tokens, V %d; Psi = %s parameters\n",
           a->model ? " at " : "", a->model ? MODELS[a->model].name : "", x->m.layers, x->m.dim, x->m.heads, x->m.seq,
           x->m.vocab, grouped(b1, sizeof b1, psi));
    if (a->model)
        printf("         (its output layer is its own: V C = %s more than GPT-2's, which ties it to the embedding)\n",
               grouped(b1, sizeof b1, (double)x->m.vocab * x->m.dim));
    printf("  batch  %d sequences a step; B = %d sequence%s in each rank's micro-batch (%s attention)\n", x->batch, x->micro,
           x->micro == 1 ? "" : "s", gpt_attn_name(x->m.attn));
    int stages = !strcmp(lab, "pp") ? x->stages : 1;
    for (int s = 0; s < stages; s++) {
        MemPlan p;
        plan_rank(x, s, &p);
        if (stages > 1 && x->dp == 1) printf("\n  stage %d (rank %d): Psi_s = %s\n", s, s, grouped(b1, sizeof b1, stage_params(x, s)));
        else if (stages > 1)
            printf("\n  stage %d (ranks %d..%d): Psi_s = %s\n", s, s * x->dp, s * x->dp + x->dp - 1, grouped(b1, sizeof b1, stage_params(x, s)));
        else printf("\n");
        printf("  %-7s %13s %13s   %s\n", "per GPU", "after a step", "at the peak", "formula");
        for (int k = 0; k < MEM_CATEGORIES; k++) {
            const char *f = p.after_formula[k] ? p.after_formula[k] : "";
            const char *pf = p.peak_formula[k] && strcmp(p.peak_formula[k], "as after a step") ? p.peak_formula[k] : NULL;
            printf("  %-7s %13s %13s   %s\n", mem_category_name((MemCategory)k), bytes(b1, sizeof b1, p.after[k]),
                   bytes(b2, sizeof b2, p.peak[k]), f);
            if (pf) printf("  %-7s %13s %13s     peak: %s\n", "", "", "", pf);
        }
        printf("  %-7s %13s %13s   the peaks summed (an upper bound: they need not coincide)%s\n", "total", "",
               bytes(b2, sizeof b2, peak_total(&p)), isnan(p.after[MEM_ACTS]) ? "; without acts and comm" : "");
        if (GPUS[a->gpu].what) {
            double cap = GPUS[a->gpu].mib * 1024 * 1024, need = peak_total(&p) + RESERVE_BYTES;
            printf("  on one %s (%.0f MiB as nvidia-smi counts it): %s: the peak and 1 GiB held back for the CUDA\n"
                   "  context and the libraries need %s, %.0f%% of it\n",
                   GPUS[a->gpu].what, GPUS[a->gpu].mib, need <= cap ? "fits" : "does NOT fit", bytes(b1, sizeof b1, need),
                   100 * need / cap);
        }
    }
    printf("\nExact for shardlab's labs (--check runs one and compares); a framework adds on top: its caching\n"
           "allocator's reserved but unused blocks and their fragmentation (often 5-30%% of the peak), the\n"
           "kernels' workspaces (cuBLAS, attention: tens to hundreds of MiB), the CUDA context (0.3-0.5 GiB\n"
           "a process) and NCCL's buffers (tens to hundreds of MiB with many peers).\n");
}

// ---- --check: the lab at this shape, against the plan ------------------------------------------

// Rank r's first and last step events in dir, parsed (NULL where missing).
static void step_events(const char *dir, int r, JsonValue **first, JsonValue **last) {
    *first = *last = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
    StrBuf sb;
    sb_init(&sb);
    char *text = sb_read_file(&sb, path, 64u << 20) == 0 ? sb.data : NULL;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char err[64];
        JsonValue *ev = json_parse(line, len, err, sizeof err);
        const JsonValue *kind = ev ? json_get(ev, "ev") : NULL;
        if (kind && kind->type == JSON_STRING && !strcmp(kind->string, "step")) {
            if (!*first) *first = ev, ev = NULL;
            else json_free(*last), *last = ev, ev = NULL;
        }
        json_free(ev);
        line = nl ? nl + 1 : NULL;
    }
    sb_free(&sb);
    if (*first && !*last) *last = *first;
}

static double field(const JsonValue *obj, const char *key) {
    const JsonValue *v = obj ? json_get(obj, key) : NULL;
    return v && v->type == JSON_NUMBER ? v->number : NAN;
}

static int check(const PlanArgs *a) {
    char dir[] = "/tmp/shardlab-plan-XXXXXX";
    if (!mkdtemp(dir)) die("shardlab plan", "cannot make a directory in /tmp: %s", strerror(errno));
    char run_dir[sizeof dir + 8], log_path[sizeof dir + 16];
    snprintf(run_dir, sizeof run_dir, "%s/run", dir);
    snprintf(log_path, sizeof log_path, "%s/output", dir);
    char *args[2 * MAX_GIVEN + 4];
    int n = 0;
    for (int i = 0; i < a->ngiven; i += 2) {
        args[n++] = a->given[i];
        if (a->given[i + 1][0] || catalog_find(a->lab, a->given[i] + 2)->kind != OPT_FLAG) args[n++] = a->given[i + 1];
    }
    args[n++] = "--steps", args[n++] = "2", args[n] = NULL;  // the last --steps counts
    int out = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    LaunchOpts o = {.exe = "/proc/self/exe", .argv0 = "shardlab", .out_fd = out};
    printf("\ncheck: shardlab run %s -n %d", a->lab->name, a->n);
    for (int i = 0; i < n; i++) printf(" %s", args[i]);
    printf(" ...\n");
    fflush(stdout);
    pid_t pid = launch_run(&o, a->lab->name, a->n, args, run_dir);
    int status = -1;
    if (pid > 0) waitpid(pid, &status, 0);
    if (out >= 0) close(out);
    if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        StrBuf said;
        sb_init(&said);
        sb_read_file(&said, log_path, 1 << 20);
        printf("check: the run did not finish; its output ends:\n%s\n", said.len ? said.data + (said.len > 1500 ? said.len - 1500 : 0) : "(nothing)");
        sb_free(&said);
        printf("check: run kept in %s\n", dir);
        return 1;
    }
    // The run's device decides the workspace on a GPU: the plan again, for it.
    char meta_path[sizeof run_dir + 16];
    snprintf(meta_path, sizeof meta_path, "%s/meta.json", run_dir);
    StrBuf meta_text;
    sb_init(&meta_text);
    char err[64];
    JsonValue *meta = sb_read_file(&meta_text, meta_path, 1 << 20) == 0 ? json_parse(meta_text.data, meta_text.len, err, sizeof err) : NULL;
    const JsonValue *device = meta ? json_get(meta, "device") : NULL;
    int gpu = device && device->type == JSON_STRING && !strcmp(device->string, "cuda");
    Layout x;
    lay_out(a, &x, gpu);
    int equal = 0, figures = 0;
    for (int r = 0; r < a->n; r++) {
        JsonValue *first, *last;
        step_events(run_dir, r, &first, &last);
        const JsonValue *stage = first ? json_get(first, "stage") : NULL;
        MemPlan p;
        plan_rank(&x, stage && stage->type == JSON_NUMBER ? (int)stage->number : 0, &p);
        for (int k = 0; k < MEM_CATEGORIES; k++)
            for (int at_peak = 0; at_peak < 2; at_peak++) {
                double want = at_peak ? p.peak[k] : p.after[k];
                if (isnan(want)) continue;
                double got = field(json_get(at_peak ? last : first, at_peak ? "peak_by" : "mem"), mem_category_name((MemCategory)k));
                figures++, equal += got == want;
                if (got != want || r == 0)
                    printf("  rank %d %-6s %-12s planned %14.0f  logged %14.0f  %s\n", r, mem_category_name((MemCategory)k),
                           at_peak ? "at the peak" : "after a step", want, got, got == want ? "equal" : "DIFFERENT");
            }
        json_free(first), json_free(last);
    }
    json_free(meta), sb_free(&meta_text);
    printf("check: %d of %d figures equal to the byte (every rank, every category, after the first step and at the\n"
           "       peak) on %s%s\n", equal, figures, gpu ? "cuda" : "cpu", equal == figures ? "" : ": the plan and the lab differ");
    if (equal == figures) {
        char cmd[sizeof dir + 16];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "shardlab plan: could not remove %s\n", dir);
    } else {
        printf("check: run kept in %s\n", run_dir);
    }
    return equal == figures && figures > 0 ? 0 : 1;
}

int plan_main(int argc, char **argv) {
    PlanArgs a;
    parse(&a, argc, argv);
    Layout x;
    lay_out(&a, &x, 1);  // planned for a GPU: its kernels' workspace counted
    if (a.json && a.check) usage_error("shardlab plan", "--json and --check: one at a time");
    if (a.check && a.n > 8) usage_error("shardlab plan", "--check runs the lab on this machine: at most 8 ranks (-n %d)", a.n);
    if (a.check && a.vocab && a.vocab != GPT_VOCAB)
        usage_error("shardlab plan", "--check: the labs read bytes, vocabulary %d (--vocab %d)", GPT_VOCAB, a.vocab);
    if (a.check && a.model)
        usage_error("shardlab plan", "--check runs at the labs' small shapes: give --layers, --dim, --heads, --seq, not --model");
    if (a.json) print_json(&a, &x);
    else print_plan(&a, &x);
    return a.check ? check(&a) : 0;
}
