// whatif_cmd.c — `shardlab whatif RUN_DIR`: a finished run's step projected onto another
// interconnect and GPU.
//
//     shardlab whatif runs/ddp-20261126-... --link eth-100g --gpu h100
//
// What is exact, from the run: each rank's collectives of its last complete step, with the bytes
// each sent (the spans), and how much of its communication ran while it computed (the overlap
// it achieved). What is a model: the compute takes the step's FLOPs (6 Psi + 12 L T C a token,
// more where blocks are recomputed) over the GPU's dense peak times --mfu; a collective takes
// k alpha + bytes / beta on the link (k: the steps of a ring over the group, 2(n-1) for an
// all-reduce, n-1 for a reduce-scatter or all-gather, 1 for a send); the share of the
// communication the run hid stays hidden, up to the projected compute; a pipeline's step is
// replayed with those times (pipesim.h: its logged order of forwards and backwards, each
// message between stages on the link), its bubble the idle time in the replay. The step is
// the slowest rank's. --link-across puts the collectives between replicas (tp --dp's gradient
// all-reduces, fsdp --replicate's sums) on a second link, as when each replica is a node of
// its own: the mesh's inner axis on NVLink, its outer axis on the network.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "14-activation-checkpointing/policy.h"
#include "command/runs/runread.h"
#include "command/runs/spantime.h"
#include "common/comm/links.h"
#include "common/harness/catalog.h"
#include "common/harness/check.h"
#include "common/model/gpt.h"
#include "common/runfiles/json.h"
#include "pipesim.h"
#include "whatif_cmd.h"

static const char *WHATIF_USAGE =
    "usage: shardlab whatif RUN_DIR [--link NAME] [--link-across NAME] [--gpu NAME] [--mfu F] [--json]\n"
    "       shardlab whatif --links\n"
    "\n"
    "A finished training run's step projected onto an interconnect and a GPU: the step as\n"
    "compute, communication left exposed, and a pipeline's bubble, and the scaling efficiency\n"
    "against one GPU doing the whole batch. The bytes of every collective and the overlap the\n"
    "run achieved are the run's own; the rates are the tables' (--links prints them, sourced).\n"
    "\n"
    "  --link NAME  nvlink4 (default), nvlink3, pcie5, pcie4, ib-ndr, ib-hdr, eth-100g, eth-25g\n"
    "  --link-across NAME  the link between replicas, for the collectives that cross them (tp --dp's\n"
    "               gradient all-reduces, fsdp --replicate's sums): a node per replica (default: --link)\n"
    "  --gpu NAME   h100 (default), a100, rtx4090, or here: the compute as the run measured it\n"
    "  --mfu F      the share of the GPU's dense peak the kernels reach, 0 < F <= 1 (default 0.4)\n"
    "  --link-scale F  the link's times multiplied by F, as a lab's --link-scale does (default 1)\n"
    "  --json       the projection as one JSON object\n"
    "Exit status: 0 projected, 2 bad arguments or a run it cannot project.\n";

// Dense tensor-core peaks in TFLOPS: bf16 (--mixed), tf32 (--tf32) and plain fp32.
static const struct {
    const char *name, *what;
    double bf16, tf32, fp32;
    const char *source;
} GPUS[] = {
    {"h100", "H100 SXM", 989, 495, 67, "NVIDIA H100 datasheet (dense)"},
    {"a100", "A100 SXM", 312, 156, 19.5, "NVIDIA A100 datasheet (dense)"},
    {"rtx4090", "RTX 4090", 165, 82.6, 82.6, "NVIDIA Ada whitepaper (dense, fp32 accumulate)"},
};
#define NGPUS ((int)(sizeof GPUS / sizeof GPUS[0]))

static int find_gpu(const char *name) {
    for (int i = 0; i < NGPUS; i++)
        if (!strcmp(GPUS[i].name, name)) return i;
    return -1;
}

static void print_tables(void) {
    printf("links (per direction; alpha: one message step, an order of magnitude)\n");
    for (int i = 0; i < nlinks; i++)
        printf("  %-9s %-36s %7.2f GB/s  alpha %4.0f us   %s\n", links[i].name, links[i].what, links[i].gbps, links[i].alpha_us,
               links[i].source);
    printf("GPUs (dense peak TFLOPS)\n");
    for (int i = 0; i < NGPUS; i++)
        printf("  %-9s %-10s bf16 %5.0f  tf32 %5.1f  fp32 %5.1f   %s\n", GPUS[i].name, GPUS[i].what, GPUS[i].bf16, GPUS[i].tf32,
               GPUS[i].fp32, GPUS[i].source);
}

// ---- the run ----------------------------------------------------------------------------------

typedef struct {
    char lab[32];
    int world, group;      // N; the ranks a collective spans (tp: t; pp: its --dp; else N)
    int dp;                // tp: the data-parallel replicas (a span of group "dp" spans them); fsdp: --replicate (group "replicate")
    GptConfig m;
    double tokens;         // of a global batch
    double recompute;      // ckpt: the compute grows by 1 + r / (3L)
    double bubble;         // pp: the schedule's (p-1)/(v m + p-1) of the step
    int stages, chunks, micro;  // pp: p, v and m
    int mixed, tf32;
} Run;

static double cfg_num(const JsonValue *config, const char *key, double fallback) {
    const JsonValue *v = config ? json_get(config, key) : NULL;
    return v && v->type == JSON_NUMBER && isfinite(v->number) ? v->number : fallback;
}

static int cfg_bool(const JsonValue *config, const char *key) {
    const JsonValue *v = config ? json_get(config, key) : NULL;
    return v && v->type == JSON_BOOL && v->boolean;
}

// The run's lab, world and model from its meta.json. 0, or -1 with why.
static int read_run(const char *dir, Run *run, char *why, size_t n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    StrBuf text;
    sb_init(&text);
    int rc = sb_read_file(&text, path, 1 << 20);
    char err[160];
    JsonValue *meta = rc == 0 ? json_parse(text.data, text.len, err, sizeof err) : NULL;
    sb_free(&text);
    if (!meta) return snprintf(why, n, "%.300s: %s", path, rc ? file_error(errno) : err), -1;
    const JsonValue *lab = json_get(meta, "lab"), *config = json_get(meta, "config");
    memset(run, 0, sizeof *run);
    snprintf(run->lab, sizeof run->lab, "%s", lab && lab->type == JSON_STRING ? lab->string : "?");
    run->world = (int)cfg_num(meta, "world_size", 0);
    run->m = (GptConfig){.vocab = (int)cfg_num(config, "vocab", GPT_VOCAB), .seq = (int)cfg_num(config, "seq", 0),
                         .layers = (int)cfg_num(config, "layers", 0), .dim = (int)cfg_num(config, "dim", 0),
                         .heads = (int)cfg_num(config, "heads", 0)};
    run->mixed = cfg_bool(config, "mixed"), run->tf32 = cfg_bool(config, "tf32");
    run->tokens = cfg_num(config, "batch", 0) * run->m.seq;
    int ok = run->world >= 1 && run->world <= RUN_MAX_RANKS && run->m.seq >= 1 && run->m.layers >= 1 && run->m.layers <= 4096 &&
             run->m.dim >= 1 && run->m.heads >= 1 && run->m.vocab >= 1 && run->tokens >= 1 && run->tokens <= 1e12;
    run->group = run->world, run->recompute = 1;
    if (ok && !strcmp(run->lab, "tp"))
        run->group = (int)cfg_num(config, "tp", run->world), run->dp = (int)cfg_num(config, "dp", 1), ok = run->dp >= 1;
    if (ok && !strcmp(run->lab, "fsdp")) {  // HSDP: the shard group's S = N/R ranks, the replica sums' R
        int R = (int)cfg_num(config, "replicate", 1);
        ok = R >= 1 && run->world % R == 0;
        if (ok && R > 1) run->group = run->world / R, run->dp = R;
    }
    if (ok && !strcmp(run->lab, "pp")) {
        double p = cfg_num(config, "stages", 1), v = cfg_num(config, "chunks", 1), m = cfg_num(config, "micro", 1);
        run->group = (int)cfg_num(config, "dp", 1);
        ok = p >= 1 && v >= 1 && m >= 1;
        run->bubble = ok ? (p - 1) / (v * m + p - 1) : 0;
        ok = ok && p <= RUN_MAX_RANKS && v <= 64 && m <= 4096;
        run->stages = (int)p, run->chunks = (int)v, run->micro = (int)m;
    }
    if (ok && !strcmp(run->lab, "ckpt")) {
        const JsonValue *policy = json_get(config, "policy");
        CkptPolicy p;
        char pwhy[200];
        ok = policy && policy->type == JSON_STRING && ckpt_policy_named(&p, policy->string, run->m.layers, pwhy, sizeof pwhy) == 0;
        if (ok) run->recompute = 1 + (double)p.recomputed / (3.0 * run->m.layers);
    }
    int trains = catalog_lab(run->lab) && catalog_lab(run->lab)->trains;
    json_free(meta);
    if (!trains) return snprintf(why, n, "%s: a run of %s, which trains no model: whatif projects the training labs", dir, run->lab), -1;
    if (!ok || run->group < 1) return snprintf(why, n, "%s: its meta.json does not describe a model and layout", dir), -1;
    return 0;
}

// ---- the projection ---------------------------------------------------------------------------

typedef struct {
    int rank;
    double compute_ms;  // projected
    double measured_compute_ms, measured_comm_ms, measured_hidden_ms;
    double comm_ms, hidden_ms, exposed_ms, step_ms;  // projected
    double p2p_ms, p2p_hidden_ms;  // the part of comm_ms and hidden_ms that is a pipeline's messages
    double bubble_ms;              // pp: idle in the pipeline
    double bytes, msg_bytes;       // all it sent; its largest message (pp)
    int calls;
    double across_ms, across_bytes;  // the part of comm_ms and bytes between replicas (--link-across)
    int across_calls;
} RankProj;

// A pipeline's step replayed (pipesim.h) with each rank's forwards and backwards in the order
// it logged them, each its logged time scaled to the rank's projected compute, and each message
// between stages taking alpha + bytes / beta of the link: each rank's idle time in it (the
// fill and the drain, and the waits for messages) into proj[r].bubble_ms. The replicas (--dp)
// are pipelines of their own: a stage's ranks in rank order. 0, or -1 if the spans do not
// describe a pipeline (a run logged before forwards and backwards carried their chunk).
static int replay_pipeline(const Run *run, const RunView *v, int64_t step, const Link *lk, double scale, RankProj *proj,
                           int nranks) {
    int p = run->stages, K = run->stages * run->chunks, replicas = nranks / (p > 0 ? p : 1);
    if (p < 1 || replicas < 1 || replicas * p != nranks) return -1;
    PipeOp **ops = calloc_check((size_t)nranks, sizeof *ops);
    int *nops = calloc_check((size_t)nranks, sizeof(int)), *stage_of = calloc_check((size_t)nranks, sizeof(int));
    int *seen = calloc_check((size_t)p, sizeof(int)), *by_stage = calloc_check((size_t)nranks, sizeof(int));  // [s * replicas + j]
    PipeStage *stages = calloc_check((size_t)p, sizeof *stages);
    int ok = 1;
    double msg_bytes = 0;
    for (int r = 0; r < nranks && ok; r++) {
        const RunSpans *sp = runview_spans(v, r, step);
        ok = sp && proj[r].measured_compute_ms > 0;
        double factor = ok ? proj[r].compute_ms / proj[r].measured_compute_ms : 0;
        ops[r] = ok ? calloc_check(sp->n + 1, sizeof(PipeOp)) : NULL;
        stage_of[r] = -1;
        for (size_t i = 0; ok && i < sp->n; i++) {  // in the order logged: each op's span once it ended
            const RunSpan *s = &sp->items[i];
            if (!strcmp(s->name, "send") && s->bytes > msg_bytes) msg_bytes = s->bytes;
            int bwd = !strcmp(s->name, "bwd");
            if (!bwd && strcmp(s->name, "fwd")) continue;
            ok = s->chunk >= 0 && s->chunk < K && (stage_of[r] < 0 || stage_of[r] == s->chunk % p);
            stage_of[r] = s->chunk % p;
            double ms = (double)(s->t1_us - s->t0_us) / 1e3 * factor;
            PipeOp *last = nops[r] ? &ops[r][nops[r] - 1] : NULL;
            if (last && last->bwd == bwd && last->mb == s->mb && last->chunk == s->chunk) last->ms += ms;  // one op, per layer
            else ops[r][nops[r]++] = (PipeOp){bwd, s->mb, s->chunk, ms};
        }
        if (ok && stage_of[r] >= 0 && seen[stage_of[r]] < replicas) by_stage[stage_of[r] * replicas + seen[stage_of[r]]++] = r;
        else ok = 0;
    }
    double msg_ms = link_call_ms(lk, "send", 2, msg_bytes) * scale;
    for (int j = 0; j < replicas && ok; j++) {
        for (int s = 0; s < p; s++) {
            int r = by_stage[s * replicas + j];
            stages[s] = (PipeStage){.ops = ops[r], .n = nops[r]};
        }
        double end = pipesim_run(stages, p, K, run->micro, msg_ms);
        ok = end >= 0;
        for (int s = 0; s < p && ok; s++) {
            RankProj *x = &proj[by_stage[s * replicas + j]];
            x->bubble_ms = end - stages[s].busy_ms, x->msg_bytes = msg_bytes;
        }
    }
    for (int r = 0; r < nranks; r++) free(ops[r]);
    free(ops), free(nops), free(stage_of), free(seen), free(by_stage), free(stages);
    return ok ? 0 : -1;
}

int whatif_main(int argc, char **argv) {
    const char *dir = NULL, *link = "nvlink4", *gpu = "h100", *across = NULL;
    double mfu = 0.4, scale = 1;
    int json = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(WHATIF_USAGE, stdout), 0;
        if (!strcmp(a, "--links")) return print_tables(), 0;
        if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--link") || !strcmp(a, "--link-across") || !strcmp(a, "--gpu") || !strcmp(a, "--mfu") ||
                   !strcmp(a, "--link-scale")) {
            if (i + 1 >= argc) usage_error("shardlab whatif", "%s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--link")) link = v;
            else if (!strcmp(a, "--link-across")) across = v;
            else if (!strcmp(a, "--gpu")) gpu = v;
            else if (!strcmp(a, "--link-scale")) {
                char *end;
                scale = strtod(v, &end);
                if (!*v || *end || !(scale >= 1 && scale <= 1e6))
                    usage_error("shardlab whatif", "--link-scale takes 1 to 1000000 (got '%s')", v);
            } else {
                char *end;
                mfu = strtod(v, &end);
                if (!*v || *end || !(mfu > 0 && mfu <= 1)) usage_error("shardlab whatif", "--mfu takes 0 < F <= 1 (got '%s')", v);
            }
        } else if (a[0] == '-') {
            usage_error("shardlab whatif", "unknown option '%s'", a);
        } else if (dir) {
            usage_error("shardlab whatif", "one run directory at a time ('%s' and '%s')", dir, a);
        } else {
            dir = a;
        }
    }
    if (!dir) usage_error("shardlab whatif", "expected a run directory (runs/<lab>-<time>-<hex>)");
    const Link *lk = link_find(link);
    int here = !strcmp(gpu, "here"), gi = here ? 0 : find_gpu(gpu);
    if (!lk) usage_error("shardlab whatif", "--link takes nvlink4, nvlink3, pcie5, pcie4, ib-ndr, ib-hdr, eth-100g or eth-25g (got '%s')", link);
    const Link *lk_across = across ? link_find(across) : lk;
    if (!lk_across)
        usage_error("shardlab whatif", "--link-across takes nvlink4, nvlink3, pcie5, pcie4, ib-ndr, ib-hdr, eth-100g or eth-25g (got '%s')",
                    across);
    if (gi < 0) usage_error("shardlab whatif", "--gpu takes h100, a100, rtx4090 or here (got '%s')", gpu);

    char why[600];
    Run run;
    RunView v;
    runview_init(&v);
    if (runview_open(&v, dir, why, sizeof why) != 0) usage_error("shardlab whatif", "%s", why);
    if (read_run(dir, &run, why, sizeof why) != 0) usage_error("shardlab whatif", "%s", why);
    int64_t step = runview_timeline_step(&v);
    if (step < 0) usage_error("shardlab whatif", "%s: no step that every rank finished with its spans", dir);
    if (across && !run.dp)
        usage_error("shardlab whatif", "%s: --link-across: this %s run has no replicas whose collectives cross between them "
                    "(tp --dp D, fsdp --replicate R)", dir, run.lab);

    // Compute: the step's FLOPs, shared evenly by the ranks, at the GPU's rate times --mfu.
    double psi = (double)gpt_num_params(&run.m), L = run.m.layers, T = run.m.seq, C = run.m.dim;
    double flops = run.tokens * (6 * psi + 12 * L * T * C) * run.recompute;
    double rate = (run.mixed ? GPUS[gi].bf16 : run.tf32 ? GPUS[gi].tf32 : GPUS[gi].fp32) * 1e12 * mfu;
    double compute_ms = flops / run.world / rate * 1e3, alone_ms = flops / rate * 1e3;

    RankProj worst = {.rank = -1}, *proj = calloc_check((size_t)run.world, sizeof *proj);
    double alone_here = 0;  // --gpu here: every rank's measured compute, done by one
    int nproj = 0;
    for (int r = 0; r < v.nranks && r < run.world; r++) {
        const RunSpans *sp = runview_spans(&v, r, step);
        if (!sp) {
            nproj = -1;  // (a pipeline is replayed only with every rank)
            continue;
        }
        SpanTime t = span_time(sp);
        RankProj p = {.rank = r, .measured_compute_ms = t.compute_us / 1e3, .measured_comm_ms = t.comm_us / 1e3,
                      .measured_hidden_ms = t.hidden_us / 1e3};
        // --gpu here: the rank's own compute, as measured.
        double rank_compute = here ? p.measured_compute_ms : compute_ms;
        p.compute_ms = rank_compute;
        for (size_t i = 0; i < sp->n; i++) {
            const RunSpan *s = &sp->items[i];
            if (span_is_compute(s->name)) continue;
            double bytes = s->bytes > 0 ? s->bytes : 0;
            // The ranks it spans: tp's gradient all-reduces span the replicas ("dp"), fsdp's replica
            // sums too ("replicate"), on --link-across; a pipeline's all-reduces its replicas
            // (--dp), its other collectives (the loss, the norms) the world.
            int crosses = run.dp && (!strcmp(s->group, "dp") || !strcmp(s->group, "replicate"));
            int n = crosses ? run.dp : run.group;
            if (!strcmp(run.lab, "pp") && strcmp(s->name, "all_reduce")) n = run.world;
            double ms = link_call_ms(crosses ? lk_across : lk, s->name, n, bytes) * scale;
            if (crosses) p.across_ms += ms, p.across_bytes += bytes, p.across_calls++;
            p.comm_ms += ms;
            if (!strcmp(s->name, "send") || !strcmp(s->name, "recv")) p.p2p_ms += ms;
            p.bytes += bytes, p.calls++;
        }
        // The share of communication the run hid stays hidden, up to the compute that ran after
        // the first communication began (that window scaled to the projected compute).
        double hidden_share = t.comm_us > 0 ? (double)t.hidden_us / (double)t.comm_us : 0;
        double window = t.compute_us > 0 ? rank_compute * (double)t.window_us / (double)t.compute_us : 0;
        p.hidden_ms = fmin(hidden_share * p.comm_ms, window);
        p.exposed_ms = p.comm_ms - p.hidden_ms;
        p.step_ms = (rank_compute + p.exposed_ms) / (1 - run.bubble);
        p.bubble_ms = p.step_ms * run.bubble;
        alone_here += p.measured_compute_ms;
        if (nproj >= 0) proj[nproj++] = p;
        if (worst.rank < 0 || p.step_ms > worst.step_ms) worst = p;
    }
    if (worst.rank < 0) usage_error("shardlab whatif", "%s: no rank has the spans of step %lld", dir, (long long)step);
    // A pipeline: its step replayed with the projected times, the messages on the link; its
    // messages' time is then in the replay (its idle time), not exposed as well. The other
    // collectives (--dp's gradients) keep the share of them the run hid.
    int replayed = !strcmp(run.lab, "pp") && nproj == run.world && replay_pipeline(&run, &v, step, lk, scale, proj, nproj) == 0;
    for (int r = 0; replayed && r < nproj; r++) {
        RankProj *p = &proj[r];
        double other = p->comm_ms - p->p2p_ms;
        p->hidden_ms = p->comm_ms > 0 ? p->hidden_ms * other / p->comm_ms : 0;
        p->exposed_ms = other - p->hidden_ms;
        p->step_ms = p->compute_ms + p->bubble_ms + p->exposed_ms;
        if (r == 0 || p->step_ms > worst.step_ms) worst = *p;
    }
    StrBuf ranks;  // each rank's projection, for --json
    sb_init(&ranks);
    for (int r = 0; r < nproj; r++)
        sb_printf(&ranks, "%s{\"rank\":%d,\"comm_ms\":%.9g,\"hidden_ms\":%.9g,\"step_ms\":%.9g,\"bytes\":%.0f}",
                  ranks.len ? "," : "", proj[r].rank, proj[r].comm_ms, proj[r].hidden_ms, proj[r].step_ms, proj[r].bytes);
    if (!ranks.data) sb_printf(&ranks, "%s", "");
    if (here) alone_ms = alone_here, compute_ms = worst.compute_ms;
    const char *gpu_name = here ? "here" : GPUS[gi].name, *gpu_what = here ? "this machine's ranks" : GPUS[gi].what;
    double bubble_ms = worst.bubble_ms, efficiency = alone_ms / (run.world * worst.step_ms);
    const RunRank *rk0 = v.nranks ? &v.ranks[0] : NULL;

    if (json) {
        printf("{\"run\":");
        StrBuf sb;
        sb_init(&sb);
        sb_json_string(&sb, dir);
        printf("%s,\"lab\":\"%s\",\"world\":%d,\"step\":%lld,\"link\":\"%s\",\"link_across\":\"%s\",\"across_ms\":%.9g,"
               "\"across_bytes\":%.0f,\"gpu\":\"%s\",\"mfu\":%g,\"link_scale\":%g,\"flops\":%.6g,"
               "\"rank\":%d,\"compute_ms\":%.9g,\"comm_ms\":%.9g,\"hidden_ms\":%.9g,\"exposed_ms\":%.9g,\"bubble_ms\":%.9g,"
               "\"step_ms\":%.9g,\"alone_ms\":%.9g,\"efficiency\":%.9g,\"bytes\":%.0f,\"calls\":%d,"
               "\"measured\":{\"compute_ms\":%.9g,\"comm_ms\":%.9g,\"hidden_ms\":%.9g},\"ranks\":[%s]}\n",
               sb.data, run.lab, run.world, (long long)step, lk->name, lk_across->name, worst.across_ms, worst.across_bytes, gpu_name, mfu, scale, flops, worst.rank, compute_ms,
               worst.comm_ms, worst.hidden_ms, worst.exposed_ms, bubble_ms, worst.step_ms, alone_ms, efficiency, worst.bytes,
               worst.calls, worst.measured_compute_ms, worst.measured_comm_ms, worst.measured_hidden_ms, ranks.data);
        sb_free(&sb), sb_free(&ranks), free(proj);
        runview_free(&v);
        return 0;
    }
    printf("shardlab whatif %s: %s on %d ranks, step %lld\n", dir, run.lab, run.world, (long long)step);
    printf("  measured (%s, %s): rank %d computed %.3f ms and communicated %.3f ms, %.0f%% of it while computing\n",
           rk0 && rk0->device[0] ? rk0->device : "?", rk0 && rk0->backend[0] ? rk0->backend : "?", worst.rank,
           worst.measured_compute_ms, worst.measured_comm_ms,
           worst.measured_comm_ms > 0 ? 100 * worst.measured_hidden_ms / worst.measured_comm_ms : 0);
    printf("  projected on %d x %s over %s: %.2f GB/s, alpha %.0f us%s; --mfu %g\n", run.world, gpu_what, lk->what,
           lk->gbps, lk->alpha_us, scale != 1 ? ", its times x --link-scale" : "", mfu);
    if (across)
        printf("  between the %d replicas (--link-across) over %s: %.2f GB/s, alpha %.0f us\n", run.dp, lk_across->what,
               lk_across->gbps, lk_across->alpha_us);
    if (here) printf("    compute        %10.3f ms   as the run measured it (rank %d)\n", compute_ms, worst.rank);
    else
        printf("    compute        %10.3f ms   %.3g FLOPs a step / %d ranks / (%.0f TFLOPS x %g)\n", compute_ms, flops, run.world,
               rate / mfu / 1e12, mfu);
    printf("    communication  %10.3f ms   %d calls, %.0f bytes sent, each k alpha + bytes / beta\n", worst.comm_ms, worst.calls,
           worst.bytes);
    if (across) {
        printf("      in a replica %10.3f ms   %d calls, %.0f bytes, over %s\n", worst.comm_ms - worst.across_ms,
               worst.calls - worst.across_calls, worst.bytes - worst.across_bytes, lk->name);
        printf("      across       %10.3f ms   %d calls, %.0f bytes, over %s\n", worst.across_ms, worst.across_calls,
               worst.across_bytes, lk_across->name);
    }
    printf("      hidden       %10.3f ms   the share the run hid, up to the compute after the first collective began\n",
           worst.hidden_ms);
    printf("      exposed      %10.3f ms\n", worst.exposed_ms);
    if (replayed)
        printf("    bubble         %10.3f ms   idle in the pipeline replayed on this link: its fill and drain, and the waits for\n"
               "                                 its messages (%.0f bytes, %.3f ms each); the schedule alone: (p-1)/(v m + p-1) = %.4f\n",
               bubble_ms, worst.msg_bytes, link_call_ms(lk, "send", 2, worst.msg_bytes) * scale, run.bubble);
    else if (run.bubble > 0)
        printf("    bubble         %10.3f ms   (p-1)/(v m + p-1) = %.4f of the step\n", bubble_ms, run.bubble);
    printf("    step           %10.3f ms   (rank %d, the slowest)\n", worst.step_ms, worst.rank);
    printf("  scaling: one %s alone takes %.3f ms for the whole batch; %d of them take %.3f ms: %.0f%% efficient\n",
           here ? "rank" : GPUS[gi].what, alone_ms, run.world, worst.step_ms, 100 * efficiency);
    sb_free(&ranks), free(proj);
    runview_free(&v);
    return 0;
}
