// plan_cmd.c — `shardlab plan`: the bytes each GPU holds for a model and a layout, at any
// scale, from the formulas the labs are graded against (core/memplan.h), and --check, which
// runs the lab at that shape and compares what every rank logged with the plan, to the byte
// (core/plancheck.h: the web planner's "Check it" runs the same).
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
#include <unistd.h>

#include "catalog.h"
#include "check.h"
#include "json.h"
#include "launch.h"
#include "mem.h"
#include "memplan.h"
#include "plan_cmd.h"
#include "plancheck.h"
#include "planner.h"


static const char *PLAN_USAGE =
    "usage: shardlab plan LAB [-n N] [--model NAME] [--vocab V] [--gpu NAME] [--json] [--check] [LAB's options]\n"
    "\n"
    "The bytes each GPU (rank) holds for LAB's layout on N ranks, by category (params, grads,\n"
    "optim, acts, comm), after a step and at the most it holds at once, with the formula of\n"
    "each: the formulas `shardlab grade` checks every lab's run against, at any scale.\n"
    "\n"
    "  LAB            single, ddp, shard, ckpt, zero, fsdp, pp or tp\n"
    "  -n N           ranks (GPUs), 1 to 65536 (default: 8; single: 1)\n"
    "  --model NAME   the labs' GPT at a preset shape: labs (the labs' default), gpt2,\n"
    "                 gpt2-medium, gpt2-large, gpt2-xl (GPT-2's depth, width, heads, 1024 tokens\n"
    "                 and 50257-token vocabulary), llama-7b, llama-70b (Llama 2's, 4096 tokens,\n"
    "                 32000); --layers, --dim, --heads, --seq, --vocab override it\n"
    "  --vocab V      the vocabulary (the labs read bytes: 256)\n"
    "  --gpu NAME     the device to fit: h100-80gb (default), h200, a100-40gb, a100-80gb,\n"
    "                 rtx4090, or none\n"
    "  --json         the plan as one JSON object instead of the table (bytes by category,\n"
    "                 per pipeline stage; the device's capacity and whether it fits)\n"
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

static const char *bytes(char *buf, size_t n, double b) {
    if (isnan(b)) return snprintf(buf, n, "-"), buf;
    return format_bytes(buf, n, b);
}

static void print_plan(const Planner *a) {
    const Planner *x = a;
    const char *lab = x->l.lab;
    char b1[32], b2[32];
    double psi = (double)gpt_num_params(&x->m);
    printf("shardlab plan: %s on %d rank%s", lab, a->n, a->n == 1 ? "" : "s");
    if (!strcmp(lab, "zero")) printf(", stage %d%s", x->l.stage, x->l.offload ? ", offload" : "");
    if (!strcmp(lab, "fsdp")) printf("%s%s", x->l.prefetch ? ", prefetch" : "", x->l.reshard ? "" : ", no reshard");
    if (!strcmp(lab, "ckpt")) printf(", policy %s", planner_option(a, "policy") ? planner_option(a, "policy") : "every");
    if (!strcmp(lab, "tp"))
        printf(", t = %d tensor-parallel ranks x %d replica%s%s%s", x->l.tp, x->dp, x->dp == 1 ? "" : "s", x->l.sp ? ", --sp" : "",
               x->l.vp ? ", --vocab-parallel" : "");
    if (!strcmp(lab, "pp")) printf(", %d stage%s x %d chunk%s, %d pipeline%s", x->stages, x->stages == 1 ? "" : "s", x->chunks,
                                   x->chunks == 1 ? "" : "s", x->dp, x->dp == 1 ? "" : "s");
    int sharded = !strcmp(lab, "zero") || !strcmp(lab, "fsdp");
    if (!x->m.mixed) printf(", fp32: e = 4 bytes a weight, K = 8 bytes of optimizer state a parameter\n");
    else if (sharded) printf(", --mixed: bf16 weights and gradients (e = 2), fp32 masters with AdamW's m and v (K = 12)\n");
    else printf(", --mixed: bf16 operands into the matrix products, fp32 weights (e = 4, K = 8)\n");
    printf("  model  the labs' GPT%s%s: L %d blocks, C %d, NH %d heads, T %d tokens, V %d; Psi = %s parameters\n",
           a->model ? " at " : "", a->model ? planner_models[a->model].name : "", x->m.layers, x->m.dim, x->m.heads, x->m.seq,
           x->m.vocab, planner_grouped(b1, sizeof b1, psi));
    const PlannerModel *pm = &planner_models[a->model];
    if (pm->note) printf("         (%s%s%s)\n", pm->note, pm->size ? "; compare " : "", pm->size ? pm->size : "");
    printf("  batch  %d sequences a step; B = %d sequence%s in each rank's micro-batch (%s attention)\n", x->batch, x->micro,
           x->micro == 1 ? "" : "s", gpt_attn_name(x->m.attn));
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
        printf("  %-7s %13s %13s   the peaks summed (an upper bound: they need not coincide)%s\n", "total", "",
               bytes(b2, sizeof b2, planner_peak_total(&p)), isnan(p.after[MEM_ACTS]) ? "; without acts and comm" : "");
        if (planner_gpus[a->gpu].what) {
            double cap = planner_gpus[a->gpu].mib * 1024 * 1024, need = planner_peak_total(&p) + PLANNER_RESERVE_BYTES;
            printf("  on one %s (%.0f MiB as nvidia-smi counts it): %s: the peak and 1 GiB held back for the CUDA\n"
                   "  context and the libraries need %s, %.0f%% of it\n",
                   planner_gpus[a->gpu].what, planner_gpus[a->gpu].mib, need <= cap ? "fits" : "does NOT fit", bytes(b1, sizeof b1, need),
                   100 * need / cap);
        }
    }
    printf("\nExact for shardlab's labs (--check runs one and compares); a framework adds on top: its caching\n"
           "allocator's reserved but unused blocks and their fragmentation (a tenth of the peak or more is common), the\n"
           "kernels' workspaces (cuBLAS, attention: tens to hundreds of MiB), the CUDA context (0.3-0.5 GiB\n"
           "a process) and NCCL's buffers (tens to hundreds of MiB with many peers).\n");
}

// ---- --check: the lab at this shape, against the plan (core/plancheck.h) ----------------------

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
    if (a.check && plancheck_refuse(&a, why, sizeof why) != 0) usage_error("shardlab plan", "%s", why);
    if (a.json && !a.check) {
        StrBuf sb;
        sb_init(&sb);
        planner_json(&a, &sb);
        fputs(sb.data, stdout);
        sb_free(&sb);
        return 0;
    }
    if (!a.json) print_plan(&a);
    return a.check ? check(&a) : 0;  // (with --json: the check's JSON alone)
}
