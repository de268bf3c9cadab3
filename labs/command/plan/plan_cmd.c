// plan_cmd.c — `shardlab plan`: the bytes each GPU holds for a model and a layout, at any
// scale, from the formulas the labs are graded against (common/harness/memplan.h), and --check, which
// runs the lab at that shape and compares what every rank logged with the plan, to the byte
// (command/plan/plancheck.h: the web planner's "Check it" runs the same).
//
//     shardlab plan zero -n 8 --stage 3 --model gpt2 --mixed --gpu h100-80gb
//     shardlab plan zero -n 64 --psi 7.5B --mixed        (the ZeRO paper's figure 1)
//     shardlab plan ddp -n 2 --check
//
// The model is the labs' GPT (gpt.h: learned positions, LayerNorm, a 4C MLP, an output layer
// of its own) at any shape: the labs' default, GPT-2's four sizes (--model), or --layers,
// --dim, --heads, --seq and --vocab; or a bare parameter count (--psi), as the ZeRO paper
// counts a model: its state after a step alone. The layout is the lab and its options, exactly as
// `shardlab run` takes them (the catalog checks them the same way); options that do not
// change memory (--steps, --lr, ...) are taken and passed on to --check's run.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "command/launch.h"
#include "common/harness/catalog.h"
#include "common/harness/check.h"
#include "common/harness/cp_layout.h"
#include "common/harness/mem.h"
#include "common/harness/memplan.h"
#include "common/runfiles/json.h"
#include "plan_cmd.h"
#include "plancheck.h"
#include "planner.h"


static const char *PLAN_USAGE =
    "usage: shardlab plan LAB [-n N] [--model NAME | --psi P] [--vocab V] [--gpu NAME | --budget SIZE] [--longest]\n"
    "                     [--json] [--check] [LAB's options]\n"
    "\n"
    "The bytes each GPU (rank) holds for LAB's layout on N ranks, by category (params, grads,\n"
    "optim, acts, comm), after a step and at the most it holds at once, with the formula of\n"
    "each: the formulas `shardlab grade` checks every lab's run against, at any scale. Then the\n"
    "model state (params + grads + optim) in GiB (2^30 bytes) and GB (10^9, the ZeRO paper's\n"
    "unit); for zero, its four stages side by side, by the paper's names (P_os, P_os+g,\n"
    "P_os+g+p): `shardlab plan zero --psi 7.5B -n 64 --mixed` prints the ZeRO paper's figure 1.\n"
    "\n"
    "  LAB            single, ddp, shard, ckpt, zero, fsdp, pp, tp or cp\n"
    "  -n N           ranks (GPUs), 1 to 65536 (default: 8; single: 1)\n"
    "  --model NAME   the labs' GPT at a preset shape: labs (the labs' default), gpt2,\n"
    "                 gpt2-medium, gpt2-large, gpt2-xl (GPT-2's depth, width, heads, 1024 tokens\n"
    "                 and 50257-token vocabulary), llama-7b, llama-70b (Llama 2's, 4096 tokens,\n"
    "                 32000); --layers, --dim, --heads, --seq, --vocab override it\n"
    "  --vocab V      the vocabulary (the labs read bytes: 256)\n"
    "  --psi P        a model of P parameters without a shape (7500000000, 7.5e9 or 7.5B), as\n"
    "                 the ZeRO paper counts one: the model state alone, no activations and no\n"
    "                 peaks (single, ddp, shard, zero and fsdp; not with --model or a shape)\n"
    "  --gpu NAME     the device to fit: h100-80gb (default), h200, a100-40gb, a100-80gb,\n"
    "                 rtx4090, or none\n"
    "  --budget SIZE  the bytes a rank may hold, in place of a GPU (512M, 80G): all of it, with\n"
    "                 no CUDA context held back (a host's memory, or a share of a GPU)\n"
    "  --longest      the plan at the longest --seq, up to 131072, that fits the GPU or the\n"
    "                 budget on every rank (leave --seq out): how long a context each layout\n"
    "                 trains on, e.g. cp against single; with --check the lab runs at it\n"
    "  --json         the plan as one JSON object instead of the table (bytes by category,\n"
    "                 per pipeline stage; the model state; the layout, ZeRO's stage and\n"
    "                 offload among it; every option's value; zero's four stages; the device's\n"
    "                 capacity and whether it fits)\n"
    "  --check        run the lab at this shape for 2 steps (shardlab run: the labs' small\n"
    "                 shapes only, at most 8 ranks, vocabulary 256, 2 GiB over all ranks) and\n"
    "                 compare every rank's logged bytes with the plan: exit 0 if all are equal,\n"
    "                 1 if not; with --json, the comparison as one JSON object (what the web's\n"
    "                 planner answers to \"Check it\")\n"
    "LAB's options are the ones `shardlab run LAB --help` lists: --batch, --accum, --mixed,\n"
    "--attn, --stage, --offload, --prefetch, --no-reshard, --sync, --policy, --micro,\n"
    "--schedule, --chunks, --split, --dp, ...; their defaults are the lab's.\n"
    "Exit status: 0 planned (and checked), 1 the check found a difference, 2 bad arguments.\n";

// ---- the table ------------------------------------------------------------------------------

#define WIDTH 100  // columns a paragraph is wrapped to

static const char *bytes(char *buf, size_t n, double b) {
    if (isnan(b)) return snprintf(buf, n, "-"), buf;
    return format_bytes(buf, n, b);
}

// text after `lead` (printed first), wrapped at WIDTH, later lines indented as far as lead; an
// equation (e = 2) is never cut.
static void print_wrapped(const char *lead, const char *text) {
    int indent = (int)strlen(lead), col = indent;
    fputs(lead, stdout);
    for (const char *w = text; *w;) {
        while (*w == ' ') w++;
        int len = (int)strcspn(w, " ");
        while (!strncmp(w + len, " = ", 3)) len += 3 + (int)strcspn(w + len + 3, " ");
        if (!len) break;
        if (col > indent && col + 1 + len > WIDTH) printf("\n%*s", indent, ""), col = indent;
        else if (col > indent) putchar(' '), col++;
        printf("%.*s", len, w);
        col += len, w += len;
    }
    putchar('\n');
}

// ZeRO's four stages for this model on these ranks, side by side: the ZeRO paper's figure 1
// (and the row of its table 1 for this N) when the model is its 7.5B one on 64 GPUs.
static void print_zero_stages(const Planner *a) {
    MemPlan st[4];
    char b[5][32];
    planner_zero_stages(a, st);
    printf("\n  ZeRO's stages for this model on %d GPU%s: the model state each holds after a step, as the ZeRO paper's\n"
           "  figure 1 and table 1 count it%s\n", a->n, a->n == 1 ? "" : "s", a->l.offload ? " (without --offload, as the paper has it)" : "");
    printf("  %-17s %9s %9s %9s %9s %12s   %s\n", "stage", "params", "grads", "optim", "state", "state (GiB)", "the paper's formula");
    for (int k = 0; k < 4; k++)
        printf("  %d %-15s %9s %9s %9s %9s %12s   %s%s\n", k, planner_zero_name(k), planner_gb(b[0], 32, st[k].after[MEM_PARAMS]),
               planner_gb(b[1], 32, st[k].after[MEM_GRADS]), planner_gb(b[2], 32, st[k].after[MEM_OPTIM]),
               planner_gb(b[3], 32, planner_state(&st[k])), format_bytes(b[4], 32, planner_state(&st[k])),
               planner_zero_formula(k), k == a->l.stage ? "   <- this plan" : "");
}

static void print_plan(const Planner *a) {
    const Planner *x = a;
    const char *lab = x->l.lab;
    char b1[32], b2[32];
    printf("shardlab plan: %s on %d rank%s", lab, a->n, a->n == 1 ? "" : "s");
    if (!strcmp(lab, "zero"))
        printf(", stage %d (%s)%s", x->l.stage, planner_zero_name(x->l.stage), x->l.offload ? ", offload" : "");
    if (!strcmp(lab, "fsdp") && x->replicate > 1)
        printf(", hybrid sharded (HSDP): %d replicas x %d shards, ZeRO-3's %s within each replica%s%s", x->replicate,
               a->n / x->replicate, planner_zero_name(3), x->l.prefetch ? ", prefetch" : "", x->l.reshard ? "" : ", no reshard");
    else if (!strcmp(lab, "fsdp"))
        printf(", fully sharded (ZeRO-3's %s)%s%s", planner_zero_name(3), x->l.prefetch ? ", prefetch" : "", x->l.reshard ? "" : ", no reshard");
    if (!strcmp(lab, "ckpt")) printf(", policy %s", planner_option(a, "policy") ? planner_option(a, "policy") : "every");
    if (!strcmp(lab, "tp"))
        printf(", t = %d tensor-parallel ranks x %d replica%s%s%s", x->l.tp, x->dp, x->dp == 1 ? "" : "s", x->l.sp ? ", --sp" : "",
               x->l.vp ? ", --vocab-parallel" : "");
    if (!strcmp(lab, "cp"))
        printf(", %d group%s of n = %d context-parallel ranks, %s, K/V by %s; planned: rank %d, T' = %d of %d tokens", x->dp,
               x->dp == 1 ? "" : "s", x->l.cp, cp_layout_name(x->l.cp_layout), x->l.cp_kv == CP_KV_ALL_GATHER ? "all-gather" : "ring",
               x->cp_rank, x->cp_tokens, x->m.seq);
    if (!strcmp(lab, "pp")) printf(", %d stage%s x %d chunk%s, %d pipeline%s", x->stages, x->stages == 1 ? "" : "s", x->chunks,
                                   x->chunks == 1 ? "" : "s", x->dp, x->dp == 1 ? "" : "s");
    printf(", %s\n", planner_precision(a));
    // Psi, and Psi' where ZeRO or FSDP pads it.
    int sharded = !strcmp(lab, "zero") || !strcmp(lab, "fsdp");
    char padded[64] = "";
    if (sharded) snprintf(padded, sizeof padded, "; Psi' = %s", planner_grouped(b2, sizeof b2, planner_params_padded(a)));
    if (a->psi)
        printf("  model  Psi = %s parameters (--psi: a count without a shape)%s\n", planner_grouped(b1, sizeof b1, a->psi), padded);
    else
        printf("  model  the labs' GPT%s%s: L %d blocks, C %d, NH %d heads, T %d tokens, V %d; Psi = %s parameters%s\n",
               a->model ? " at " : "", a->model ? planner_models[a->model].name : "", x->m.layers, x->m.dim, x->m.heads, x->m.seq,
               x->m.vocab, planner_grouped(b1, sizeof b1, planner_params(a)), padded);
    const PlannerModel *pm = &planner_models[a->model];
    if (pm->note && !a->psi) printf("         (%s%s%s)\n", pm->note, pm->size ? "; compare " : "", pm->size ? pm->size : "");
    if (x->batch)
        printf("  batch  %d sequences a step; B = %d sequence%s in each rank's micro-batch (%s attention)\n", x->batch, x->micro,
               x->micro == 1 ? "" : "s", gpt_attn_name(x->m.attn));
    else printf("  batch  not planned: a parameter count alone has no activations (give a shape to plan them)\n");
    int stages = planner_stages(x);
    for (int s = 0; s < stages; s++) {
        MemPlan p;
        planner_stage(x, s, &p);
        if (stages > 1 && x->dp == 1) printf("\n  stage %d (rank %d): Psi_s = %s\n", s, s, planner_grouped(b1, sizeof b1, planner_stage_params(x, s)));
        else if (stages > 1)
            printf("\n  stage %d (ranks %d..%d): Psi_s = %s\n", s, s * x->dp, s * x->dp + x->dp - 1, planner_grouped(b1, sizeof b1, planner_stage_params(x, s)));
        else printf("\n");
        printf("  %-7s %13s %13s   %s\n", "per GPU", "after a step", "at the peak", "formula");
        for (int k = 0; k < MEM_CATEGORIES; k++) {
            const char *f = p.after_formula[k] ? p.after_formula[k] : "";
            const char *pf = p.peak_formula[k] && strcmp(p.peak_formula[k], "as after a step") ? p.peak_formula[k] : NULL;
            printf("  %-7s %13s %13s   %s\n", mem_category_name((MemCategory)k), bytes(b1, sizeof b1, p.after[k]),
                   bytes(b2, sizeof b2, p.peak[k]), f);
            if (pf) printf("  %-7s %13s %13s     peak: %s\n", "", "", "", pf);
        }
        double state = planner_state(&p), peak = planner_peak_total(&p);
        printf("  %-7s %13s %13s   params + grads + optim = %s: the model state the ZeRO paper counts\n", "state",
               bytes(b1, sizeof b1, state), "", planner_gb(b2, sizeof b2, state));
        if (p.host > 0)
            printf("  %-7s %13s %13s   12 Psi'/N in host memory, not on the GPU (--offload): fp32 masters, m and v\n", "host",
                   bytes(b1, sizeof b1, p.host), "");
        if (isnan(peak)) printf("  %-7s %13s %13s   the peaks: not planned without a shape\n", "total", "", "-");
        else
            printf("  %-7s %13s %13s   the peaks summed (an upper bound: they need not coincide)%s\n", "total", "",
                   bytes(b2, sizeof b2, peak), isnan(p.after[MEM_ACTS]) ? "; without acts and comm" : "");
        const PlannerGpu *g = &planner_gpus[a->gpu];
        if (a->budget > 0 && !isnan(peak)) {
            printf("  within --budget %s a rank: %s: the peak needs %s, %.0f%% of it\n", bytes(b1, sizeof b1, a->budget),
                   peak <= a->budget ? "fits" : "does NOT fit", bytes(b2, sizeof b2, peak), 100 * peak / a->budget);
        } else if (g->what && isnan(peak)) {
            printf("  on one %s (%.0f MiB as nvidia-smi counts it): the model state alone takes %s, %.0f%% of it; the\n"
                   "  activations, the transient buffers and 1 GiB for the CUDA context and the libraries come on top\n",
                   g->what, g->mib, bytes(b1, sizeof b1, state), 100 * state / (g->mib * 1024 * 1024));
        } else if (g->what) {
            double cap = g->mib * 1024 * 1024, need = peak + PLANNER_RESERVE_BYTES;
            printf("  on one %s (%.0f MiB as nvidia-smi counts it): %s: the peak and 1 GiB held back for the CUDA\n"
                   "  context and the libraries need %s, %.0f%% of it\n",
                   g->what, g->mib, need <= cap ? "fits" : "does NOT fit", bytes(b1, sizeof b1, need), 100 * need / cap);
        }
    }
    if (!strcmp(lab, "zero")) print_zero_stages(a);
    PlannerTerm terms[12];
    int nterms = planner_terms(a, terms, 12);
    printf("\n");
    for (int i = 0; i < nterms; i++) {
        char lead[64];
        snprintf(lead, sizeof lead, "  %-6s %-11.15s ", i ? "" : "where", terms[i].term);
        print_wrapped(lead, terms[i].text);
    }
    printf("\n");
    print_wrapped("", planner_note);
}

// --longest's answer, above the plan at it.
static void print_longest(const Planner *a) {
    char where[64], size[32];
    if (a->budget > 0) snprintf(where, sizeof where, "a budget of %s", bytes(size, sizeof size, a->budget));
    else snprintf(where, sizeof where, "one %s", planner_gpus[a->gpu].what);
    if (!a->longest_seq)
        printf("shardlab plan: --longest: no --seq fits %s; the plan at the shortest shows why\n\n", where);
    else if (a->longest_seq == CATALOG_MAX_SEQ)
        printf("shardlab plan: --longest: every --seq up to %d fits %s (the most the labs take); the plan at it:\n\n",
               CATALOG_MAX_SEQ, where);
    else
        printf("shardlab plan: --longest: --seq %d is the longest that fits %s on every rank; the plan at it:\n\n",
               a->longest_seq, where);
}

// ---- --check: the lab at this shape, against the plan (command/plan/plancheck.h) ----------------------

static void print_check(const PlanCheck *c) {
    if (c->status != 0) {
        printf("check: the run did not finish; its output ends:\n%s\n", c->output);
        if (c->kept[0]) printf("check: run kept in %s\n", c->kept);
        return;
    }
    for (int i = 0; i < c->nfigures; i++) {
        const PlanCheckFigure *f = &c->figures[i];
        if (isnan(f->planned) || (f->logged == f->planned && f->rank != 0)) continue;
        printf("  rank %d %-6s %-12s planned %14.0f  logged %14.0f  %s\n", f->rank, mem_category_name((MemCategory)f->category),
               f->at_peak ? "at the peak" : "after a step", f->planned, f->logged, f->logged == f->planned ? "equal" : "DIFFERENT");
    }
    printf("check: %d of %d figures equal to the byte (every rank, every category, after the first step and at the\n"
           "       peak) on %s%s\n", c->equal, c->compared, c->device, c->equal == c->compared ? "" : ": the plan and the lab differ");
    if (c->kept[0]) printf("check: run kept in %s\n", c->kept);
}

static int check(Planner *a) {
    static PlanCheck c;
    plancheck_prepare(a, &c);
    if (!a->json) printf("\ncheck: %s ...\n", c.command);
    fflush(stdout);
    LaunchOpts o = {.exe = "/proc/self/exe", .argv0 = "shardlab"};
    char why[300];
    int rc = plancheck_run(a, &o, 1, &c, why, sizeof why);
    if (rc < 0) die("shardlab plan", "%s", why);
    if (a->json) {
        StrBuf sb;
        sb_init(&sb);
        plancheck_json(a, &c, &sb);
        fputs(sb.data, stdout);
        sb_free(&sb);
        if (c.kept[0]) fprintf(stderr, "shardlab plan: check: run kept in %s\n", c.kept);
    } else {
        print_check(&c);
    }
    plancheck_free(&c);
    return rc;
}

int plan_main(int argc, char **argv) {
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(PLAN_USAGE, stdout), 0;
    static Planner a;
    char why[300];
    // Planned for a GPU: its kernels' workspace counted.
    if (planner_parse(&a, argc - 2, argv + 2, why, sizeof why) != 0 || planner_lay_out(&a, 1, why, sizeof why) != 0)
        usage_error("shardlab plan", "%s", why);
    if (a.longest && planner_longest(&a, why, sizeof why) != 0) usage_error("shardlab plan", "%s", why);
    if (a.check && plancheck_refuse(&a, why, sizeof why) != 0) usage_error("shardlab plan", "%s", why);
    if (a.json && !a.check) {
        StrBuf sb;
        sb_init(&sb);
        planner_json(&a, &sb);
        fputs(sb.data, stdout);
        sb_free(&sb);
        return 0;
    }
    if (!a.json && a.longest) print_longest(&a);
    if (!a.json) print_plan(&a);
    if (a.longest && !a.longest_seq) return 1;  // (the plan shown: the shortest, which does not fit either)
    return a.check ? check(&a) : 0;  // (with --json: the check's JSON alone)
}
