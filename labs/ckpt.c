// ckpt.c — activation checkpointing: keep the block boundaries, recompute the insides.
//
// The backward pass of a block reads what its forward pass saved: LayerNorm outputs and
// statistics, q k v, the attention probabilities, the MLP's hidden layer (16C + 4 + NH T
// floats per token, against C for the block's output). Activation checkpointing keeps only
// a block's OUTPUT, the boundary that the next block reads, and lets the block's insides go
// to a shared workspace; in the backward pass the block is first run forward again from its
// kept input (RECOMPUTATION), then its backward runs as usual. Memory for compute: about one
// extra forward pass, and recomputation writes the same bits, so the training is unchanged.
//
// Run it:   make lab-ckpt NGPU=2 POLICY=sqrt [ARGS="--layers 9"]
//           build/shardlab run ckpt -n 1 --policy 2 --layers 8
//           build/labs/ckpt --help
//
// Lexicon: activation checkpointing, recomputation, memory/compute trade-off, activation
//          memory, data parallelism, micro-batch.
//
// Policies (--policy), L blocks numbered 1..L:
//   none   every block keeps everything (the `single` lab's activations)
//   K      blocks K, 2K, 3K, ... are checkpointed, each on its own: c = floor(L/K) of them
//   every  K = 1: every block checkpointed; one block's insides at a time in the workspace
//   sqrt   segments of s = ceil(sqrt L) consecutive blocks, n = ceil(L/s) of them: only each
//          segment's output is kept; in backward the whole segment is run forward again
//          into a workspace of s blocks, then its blocks' backwards run
// Every checkpointed block is recomputed once per micro-batch ("recompute" spans, with the
// block's layer and the micro-batch). A block's backward never reads its own output (read
// gpt_block_backward), only the next block does: a checkpointed block keeps exactly C floats
// per token and nothing it does not need.
//
// What it is graded against (tests/test_ckpt.c). b = 16C + 4 + NH T, the floats per token a
// block saves; the activations saved for a micro-batch of B sequences, in bytes:
//     none    4 B T (2C + 2 + V + L b)
//     K       4 B T (2C + 2 + V + (L-c) b + c C + b - C)       c = floor(L/K), 1 <= K <= L
//     every   4 B T (2C + 2 + V + L C + b - C)
//     sqrt    4 B T (2C + 2 + V + n C + s b - C)               s = ceil(sqrt L), n = ceil(L/s)
// (x0, the head's C + 2 + V, the blocks kept whole, the kept outputs, and the workspace: one
// block's insides b - C for K, s blocks and the s-1 outputs inside a segment for sqrt). A pass
// also holds W = 4 (S + B T C) bytes of workspace, S = gpt_scratch_floats(), the same for
// every policy: the peak of the "acts" category is the formula plus W, to the byte. The
// workspace costs one block's insides, so checkpointing c blocks one at a time saves
// (c-1)(b-C) floats per token: one checkpointed block alone saves nothing. Compute:
// with backward about twice a forward, a step costs about 1 + r / (3L) times none's, r the
// blocks recomputed (every and sqrt: 4/3). For the transformer's blocks, whose insides are
// 15 times their output, `every` holds less than `sqrt`: sqrt(L) segments win when a layer's
// saved state is about its output's size, as in the paper's chains of small layers.
//
// Underneath, data parallelism as in ddp.c: rank r trains on sequences r B/N .. of the global
// batch in --accum micro-batches, each token weighted 1/(B T), the gradients all-reduced
// layer by layer, the same AdamW step everywhere. Losses and param_hash: bitwise those of
// --policy none, the replicas bitwise equal, and equal to `single` on the same global batch.
//
// At the start, every policy (none, every, sqrt, and K if given) runs a few forward and
// backward passes of step 1's batch on the same weights: the table of the formula, the
// measured peak and the time, with a check event per row and one that the gradients are
// bitwise equal; then the training runs with the chosen policy.
// Cited: Chen et al., "Training Deep Nets with Sublinear Memory Cost" (2016).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "check.h"
#include "data.h"
#include "dist.h"
#include "gpt.h"
#include "mem.h"
#include "runlog.h"
#include "train.h"

// ---------------------------------------------------------------------------------------
// Policies, as segments: runs of consecutive blocks recomputed together in backward
// ---------------------------------------------------------------------------------------

typedef enum { POLICY_NONE, POLICY_EVERY, POLICY_SQRT, POLICY_K } PolicyKind;

#define MAX_BLOCKS 256  // --layers allows up to 256

typedef struct {
    PolicyKind kind;
    int K;            // blocks K, 2K, ... (every: 1)
    char name[16];    // "none", "every", "sqrt", "3"
    int nseg, width;  // segments; the longest (the workspace holds that many blocks)
    int first[MAX_BLOCKS], last[MAX_BLOCKS];  // segment i: blocks first[i]..last[i] (layers)
    int seg_of[MAX_BLOCKS + 2];               // layer -> its segment, -1 if kept whole
    int recomputed;                           // blocks recomputed per micro-batch
} Policy;

static void policy_make(Policy *p, PolicyKind kind, int K, int L) {
    memset(p, 0, sizeof *p);
    p->kind = kind, p->K = kind == POLICY_EVERY ? 1 : K;
    if (kind == POLICY_K) snprintf(p->name, sizeof p->name, "%d", K);
    else snprintf(p->name, sizeof p->name, "%s", kind == POLICY_NONE ? "none" : kind == POLICY_EVERY ? "every" : "sqrt");
    for (int l = 0; l < L + 2; l++) p->seg_of[l] = -1;
    int s = 1;
    while (s * s < L) s++;  // ceil(sqrt L)
    if (kind == POLICY_SQRT)
        for (int l = 1; l <= L; l += s) p->first[p->nseg] = l, p->last[p->nseg++] = l + s - 1 < L ? l + s - 1 : L;
    else if (kind != POLICY_NONE)
        for (int l = p->K; l <= L; l += p->K) p->first[p->nseg] = p->last[p->nseg] = l, p->nseg++;
    for (int i = 0; i < p->nseg; i++) {
        int len = p->last[i] - p->first[i] + 1;
        if (len > p->width) p->width = len;
        p->recomputed += len;
        for (int l = p->first[i]; l <= p->last[i]; l++) p->seg_of[l] = i;
    }
}

// "none", "every", "sqrt" or K; exits 2 on anything else.
static void policy_parse(Policy *p, const char *text, int L) {
    if (strcmp(text, "none") == 0) return policy_make(p, POLICY_NONE, 0, L);
    if (strcmp(text, "every") == 0) return policy_make(p, POLICY_EVERY, 1, L);
    if (strcmp(text, "sqrt") == 0) return policy_make(p, POLICY_SQRT, 0, L);
    char *end;
    long K = strtol(text, &end, 10);
    if (end == text || *end || K < 1)
        usage_error("ckpt", "--policy must be none, every, sqrt or a positive whole number K (got '%s')", text);
    if (K > L)
        usage_error("ckpt", "--policy %ld checkpoints blocks %ld, %ld, ...: K must be at most --layers %d", K, K, 2 * K, L);
    policy_make(p, POLICY_K, (int)K, L);
}

// The saved activations in closed form (bytes): the formulas at the top of this file.
static double acts_formula(const GptConfig *c, int B, const Policy *p) {
    double T = c->seq, C = c->dim, L = c->layers, V = c->vocab, b = 16 * C + 4 + (double)c->heads * T;
    double per_token = 2 * C + 2 + V;
    if (p->kind == POLICY_NONE) per_token += L * b;
    if (p->kind == POLICY_EVERY || p->kind == POLICY_K) {
        double k = floor(L / p->K);
        per_token += (L - k) * b + k * C + b - C;
    }
    if (p->kind == POLICY_SQRT) {
        double s = ceil(sqrt(L)), n = ceil(L / s);
        per_token += n * C + s * b - C;
    }
    return 4.0 * B * T * per_token;
}

static const char *acts_formula_text(const Policy *p) {
    switch (p->kind) {
    case POLICY_NONE: return "4BT(2C+2+V+Lb)";
    case POLICY_EVERY: return "4BT(2C+2+V+LC+b-C)";
    case POLICY_SQRT: return "4BT(2C+2+V+nC+sb-C)";
    default: return "4BT(2C+2+V+(L-c)b+cC+b-C)";
    }
}

// ---------------------------------------------------------------------------------------
// The activations of a policy: a GptActs whose checkpointed blocks point into a workspace
// ---------------------------------------------------------------------------------------

// Hands out the next n floats; with no base, only counts them (the layout's size).
typedef struct {
    float *base;
    size_t used;
} Cursor;

static float *take(Cursor *k, size_t n) {
    float *p = k->base ? k->base + k->used : NULL;
    k->used += n;
    return p;
}

// A block's insides: everything its backward reads; not its output.
static void take_insides(BlockActs *b, Cursor *k, const GptConfig *c, int B) {
    size_t BT = (size_t)B * c->seq, C = c->dim;
    b->ln1 = take(k, BT * C), b->ln1_mean = take(k, BT), b->ln1_rstd = take(k, BT);
    b->qkv = take(k, BT * 3 * C), b->att = take(k, (size_t)B * c->heads * c->seq * c->seq);
    b->atty = take(k, BT * C), b->res1 = take(k, BT * C);
    b->ln2 = take(k, BT * C), b->ln2_mean = take(k, BT), b->ln2_rstd = take(k, BT);
    b->fch = take(k, BT * 4 * C), b->fch_gelu = take(k, BT * 4 * C);
}

// Lays the policy's activations out from k.base (a->blocks allocated); returns their floats.
// Block l of segment i uses workspace slot l - first[i] (slots hold insides and, but for the
// last, the output that the segment's next block reads); a segment's last block keeps its
// output. gpt_layer_forward/backward then read and write the right places unchanged.
static size_t lay_out(GptActs *a, const GptConfig *c, int B, const Policy *p, Cursor *k) {
    size_t BTC = (size_t)B * c->seq * c->dim;
    BlockActs slot[MAX_BLOCKS];
    a->x0 = take(k, BTC);
    for (int i = 0; i < p->width; i++) {
        take_insides(&slot[i], k, c, B);
        slot[i].out = i < p->width - 1 ? take(k, BTC) : NULL;
    }
    for (int l = 1; l <= c->layers; l++) {
        BlockActs *b = &a->blocks[l - 1];
        int i = p->seg_of[l];
        if (i < 0) take_insides(b, k, c, B);  // kept whole
        else *b = slot[l - p->first[i]];
        if (i < 0 || l == p->last[i]) b->out = take(k, BTC);  // kept: the next block's input
    }
    a->head.lnf = take(k, BTC), a->head.lnf_mean = take(k, BTC / c->dim), a->head.lnf_rstd = take(k, BTC / c->dim);
    a->head.probs = take(k, BTC / c->dim * c->vocab);
    return k->used;
}

static void ckpt_acts_alloc(GptActs *a, const GptConfig *c, int B, const Policy *p, Mem *mem) {
    memset(a, 0, sizeof *a);
    a->B = B;
    a->blocks = calloc_check((size_t)c->layers, sizeof *a->blocks);
    Cursor count = {NULL, 0};
    size_t n = lay_out(a, c, B, p, &count);
    Cursor k = {mem_alloc_floats(mem, MEM_ACTS, n, "activations"), 0};
    a->buffer = k.base;
    lay_out(a, c, B, p, &k);
}

// ---------------------------------------------------------------------------------------
// Forward, and backward with recomputation
// ---------------------------------------------------------------------------------------

typedef struct {
    Gpt *model;
    const Policy *policy;
    GptActs *acts;
    RunLog *log;          // spans go here; NULL for none
    int64_t step;
    float loss_scale;
    int broken;           // SHARDLAB_TEST_BREAK=ckpt-stale-recompute
    int64_t recompute_us;
} Pass;

static void span(Pass *x, const char *name, int mb, int layer, int64_t t0) {
    if (!x->log) return;
    device_sync(x->model->mem->dev);  // a GPU runs behind: the span ends when its work does
    runlog_span(x->log, x->step, name, mb, layer, t0, runlog_now_us(), 0);
}

// One micro-batch: forward through every layer (a checkpointed block's insides land in the
// workspace), then backward from the head down; before the backward of a segment's last
// block, the whole segment runs forward again from its kept input. Returns the loss sum.
static double forward_backward(Pass *x, int mb, const uint8_t *tokens, const uint8_t *targets) {
    Gpt *g = x->model;
    const GptConfig *c = &g->cfg;
    const Ops *ops = g->mem->dev->ops;
    const Policy *p = x->policy;
    GptActs *a = x->acts;
    float *scratch = mem_alloc_floats(g->mem, MEM_ACTS, gpt_scratch_floats(c, a->B), "workspace");
    float *dx = mem_alloc_floats(g->mem, MEM_ACTS, (size_t)a->B * c->seq * c->dim, "residual gradient");
    double loss_sum = 0;
    for (int l = 0; l < g->nlayers; l++) {
        int64_t t0 = runlog_now_us();
        loss_sum += gpt_layer_forward(ops, c, l, g->params[l], a, tokens, targets, scratch);
        span(x, "fwd", mb, l, t0);
    }
    for (int l = g->nlayers - 1; l >= 0; l--) {
        int i = l >= 1 && l <= c->layers ? p->seg_of[l] : -1;
        if (i >= 0 && l == p->last[i]) {
            int64_t r0 = runlog_now_us();
            for (int j = p->first[i]; j <= l; j++) {
                int64_t t0 = runlog_now_us();
                // The graders' own test: skip the recompute, so the backward reads whatever
                // the workspace last held (another block's insides).
                if (!x->broken) gpt_layer_forward(ops, c, j, g->params[j], a, tokens, targets, scratch);
                span(x, "recompute", mb, j, t0);
            }
            device_sync(g->mem->dev);
            x->recompute_us += runlog_now_us() - r0;
        }
        int64_t t0 = runlog_now_us();
        gpt_layer_backward(ops, c, l, g->params[l], g->grads[l], a, tokens, targets, x->loss_scale, dx, scratch);
        span(x, "bwd", mb, l, t0);
    }
    mem_free(g->mem, dx);
    mem_free(g->mem, scratch);
    return loss_sum;
}

// This rank's part of step `step`: sequences first .. first+count-1 in micro-batches of
// acts->B; gradients accumulate (zero them first). Returns the loss sum.
static double accumulate(Pass *x, const Corpus *corpus, const TrainArgs *a, int first, int count) {
    int micro = x->acts->B;
    uint8_t *tokens = malloc_check((size_t)micro * a->seq), *targets = malloc_check((size_t)micro * a->seq);
    double loss_sum = 0;
    for (int mb = 0; mb * micro < count; mb++) {
        train_micro_batch(corpus, a, x->step, first + mb * micro, micro, tokens, targets);
        loss_sum += forward_backward(x, mb, tokens, targets);
    }
    free(tokens), free(targets);
    return loss_sum;
}

static uint64_t grads_hash(const Gpt *g) {
    uint64_t h = FNV1A64_INIT;
    void *host = NULL;
    size_t cap = 0;
    for (int l = 0; l < g->nlayers; l++) {
        size_t bytes = gpt_layer_size(&g->cfg, l) * sizeof(float);
        h = fnv1a64(device_peek(g->mem->dev, g->grads[l], bytes, &host, &cap), bytes, h);
    }
    free(host);
    return h;
}

// ---------------------------------------------------------------------------------------
// Every policy side by side, on step 1's batch and the same weights
// ---------------------------------------------------------------------------------------

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void compare_policies(Gpt *g, const Policy *policies, int np, int reps, const Corpus *corpus,
                             const TrainArgs *a, int first, int count, int micro, float loss_scale, int broken,
                             RunLog *log) {
    const GptConfig *c = &g->cfg;
    Mem *mem = g->mem;
    double W = 4.0 * ((double)gpt_scratch_floats(c, micro) + (double)micro * c->seq * c->dim), ms_none = 0;
    uint64_t hash_none = 0;
    char f[32], m[32], w[32];
    if (log->rank == 0) {
        runlog_printf(log, "every policy on rank 0: step 1's %d sequences in %d micro-batch(es) of %d, the same weights, "
                           "median of %d forward+backward passes\n", count, count / micro, micro, reps);
        runlog_printf(log, "  b = 16C+4+NH T floats per token and block; s = %d, n = %d; W = %s of pass workspace, "
                           "the same for every policy\n", (int)ceil(sqrt(c->layers)),
                      (int)ceil(c->layers / ceil(sqrt(c->layers))), format_bytes(w, sizeof w, W));
        runlog_printf(log, "  %-6s %-11s %-27s %11s %11s %14s %9s %7s %9s\n", "policy", "recomputed", "saved acts formula",
                      "bytes", "+ W", "measured peak", "ms", "x none", "1+r/(3L)");
    }
    for (int i = 0; i < np; i++) {
        const Policy *p = &policies[i];
        size_t before = mem_in_use(mem, MEM_ACTS);
        mem_reset_peak(mem);
        GptActs acts;
        ckpt_acts_alloc(&acts, c, micro, p, mem);
        Pass x = {.model = g, .policy = p, .acts = &acts, .step = 1, .loss_scale = loss_scale, .broken = broken};
        double *ms = malloc_check((size_t)reps * sizeof *ms);
        for (int r = -1; r < reps; r++) {  // pass -1 warms up (first touch of the buffers)
            gpt_zero_grads(g);
            int64_t t0 = runlog_now_us();
            accumulate(&x, corpus, a, first, count);
            device_sync(mem->dev);
            if (r >= 0) ms[r] = (double)(runlog_now_us() - t0) / 1000.0;
        }
        qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
        double median = reps % 2 ? ms[reps / 2] : (ms[reps / 2 - 1] + ms[reps / 2]) / 2;
        double formula = acts_formula(c, micro, p), measured = (double)(mem_peak_in(mem, MEM_ACTS) - before);
        uint64_t hash = grads_hash(g);
        if (p->kind == POLICY_NONE) ms_none = median, hash_none = hash;
        gpt_acts_free(&acts, mem);
        free(ms);
        if (log->rank == 0)
            runlog_printf(log, "  %-6s %3d of %-3d  %-27s %11s %11s %11s %s %9.2f %7.2f %9.3f\n", p->name, p->recomputed,
                          c->layers, acts_formula_text(p), format_bytes(f, sizeof f, formula),
                          format_bytes(w, sizeof w, formula + W), format_bytes(m, sizeof m, measured),
                          measured == formula + W ? "ok" : "!!", median, median / ms_none,
                          1.0 + p->recomputed / (3.0 * c->layers));
        char name[64];
        snprintf(name, sizeof name, "ckpt.%s.peak_acts", p->name);
        runlog_check(log, name, measured == formula + W, measured, formula + W);
        snprintf(name, sizeof name, "ckpt.%s.grads_bitwise_none", p->name);
        runlog_check(log, name, hash == hash_none, (double)(hash == hash_none), 1);
        if (measured != formula + W)
            die("this is a bug in shardlab: the layout and the formula disagree",
                "policy %s: the peak of the acts category is %.0f bytes, the formula plus W gives %.0f", p->name,
                measured, formula + W);
        if (hash != hash_none)
            die("recomputation must write the same bits: is a block recomputed from the wrong input?",
                "policy %s: the gradients differ from policy none's (hash %016llx vs %016llx)", p->name,
                (unsigned long long)hash, (unsigned long long)hash_none);
    }
    if (log->rank == 0)
        runlog_printf(log, "  gradients of every policy bitwise equal to none's (FNV-1a %016llx)\n\n",
                      (unsigned long long)hash_none);
}

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    TrainArgs a;
    train_args_defaults(&a);
    const char *policy_text = "every";
    int reps = 3;
    LabOption opts[] = {
        {"policy", OPT_STRING, &policy_text, 0, 0, "P", "none, every, sqrt or K (checkpoint blocks K, 2K, ...)"},
        {"compare", OPT_INT, &reps, 0, 1000, "R", "timed passes per policy in the comparison table (0: skip it)"},
    };
    train_args_parse(&a, argc, argv, "ckpt",
                     "Activation checkpointing: keep the block boundaries, recompute the insides in backward.\n"
                     "Run N data-parallel ranks with 'shardlab run ckpt -n N --policy sqrt'.",
                     opts, 2);
    Policy policy;
    policy_parse(&policy, policy_text, a.layers);

    DistEnv env = dist_env("ckpt");
    Device dev;
    train_device(&dev, &a, "ckpt", env.local_rank, env.local_world);
    Dist dist;
    dist_init(&dist, "ckpt", &dev);
    int N = dist.world, rank = dist.rank;
    train_check_batch(&a, "ckpt", N);
    char who[32];
    snprintf(who, sizeof who, "ckpt rank %d", rank);
    check_set_context(who);

    RunLog log;
    char run_dir[3072];
    dist_run_dir(&dist, a.run_dir, "ckpt", run_dir, sizeof run_dir);
    runlog_open(&log, "ckpt", rank, N, run_dir);
    runlog_printf(&log, "ckpt: %d rank(s) on %s, backend %s, policy %s; run directory %s\n", N, dev.name,
                  dist.backend, policy.name, log.dir);
    train_say_device(&log, &dev, N);
    const char *test_break = getenv("SHARDLAB_TEST_BREAK");
    int broken = test_break && strcmp(test_break, "ckpt-stale-recompute") == 0;
    if (broken) runlog_printf(&log, "SHARDLAB_TEST_BREAK: deliberately broken: checkpointed blocks are not recomputed\n");

    Corpus corpus;
    train_corpus(&corpus, &a);
    double floor = corpus.synthetic ? corpus.loss_floor : -1.0;
    Mem mem;
    mem_init(&mem, &dev);
    GptConfig cfg = train_model_config(&a);
    Gpt model;
    gpt_create(&model, &cfg, &mem, a.seed);
    if (a.init) train_load_weights(&model, a.init);
    for (int l = 0; l < model.nlayers; l++) dist_broadcast(&dist.world_group, model.params[l], gpt_layer_size(&cfg, l), 0);
    GptAdamW adam;
    gpt_adamw_create(&adam, &model, &a);
    int per_rank = a.batch / N, micro = per_rank / a.accum;
    GptActs acts;
    ckpt_acts_alloc(&acts, &cfg, micro, &policy, &mem);
    double acts_bytes = acts_formula(&cfg, micro, &policy);
    double workspace = 4.0 * ((double)gpt_scratch_floats(&cfg, micro) + (double)micro * a.seq * a.dim);
    runlog_printf(&log, "rank %d trains on sequences %d..%d of each global batch of %d, in %d micro-batch(es) of %d; "
                        "checkpointed: %d of %d blocks in %d segment(s)\n",
                  rank, rank * per_rank, (rank + 1) * per_rank - 1, a.batch, a.accum, micro, policy.recomputed,
                  a.layers, policy.nseg);

    StrBuf config;
    sb_init(&config);
    char lab_fields[96];
    snprintf(lab_fields, sizeof lab_fields, "\"policy\":\"%s\",\"compare\":%d", policy.name, reps);
    train_config_json(&config, &a, lab_fields);
    runlog_meta(&log, argc, argv, dev.name, dist.backend, config.data);
    runlog_start(&log, &dev, dist.backend, gpt_num_params(&cfg), config.data, floor);
    double psi = (double)gpt_num_params(&cfg);
    MemRow rows[] = {
        {.cat = MEM_PARAMS, .formula = "4 Psi (a full replica)", .expect = 4 * psi},
        {.cat = MEM_GRADS, .formula = "4 Psi", .expect = 4 * psi},
        {.cat = MEM_OPTIM, .formula = "8 Psi (AdamW m and v)", .expect = 8 * psi},
        {.cat = MEM_ACTS, .formula = acts_formula_text(&policy), .expect = acts_bytes},
        {.cat = MEM_COMM, .formula = "0 (all-reduced in place)", .expect = 0},
    };
    train_report_memory(&log, &mem, NULL, &cfg, micro, rows, 5);

    const double tokens_per_step = (double)a.batch * a.seq;
    const float loss_scale = (float)(1.0 / tokens_per_step);
    if (reps > 0) {
        Policy all[4];
        int np = 0;
        policy_make(&all[np++], POLICY_NONE, 0, a.layers);
        policy_make(&all[np++], POLICY_EVERY, 1, a.layers);
        policy_make(&all[np++], POLICY_SQRT, 0, a.layers);
        if (policy.kind == POLICY_K) all[np++] = policy;
        compare_policies(&model, all, np, reps, &corpus, &a, rank * per_rank, per_rank, micro, loss_scale, broken, &log);
    }
    mem_reset_peak(&mem);
    DistRecord *records = malloc_check(4096 * sizeof *records);
    dist_drain_records(&dist, records, 4096);  // the start-up broadcasts are not a step's

    Progress progress;
    progress_init(&progress, &a);
    Pass pass = {.model = &model, .policy = &policy, .acts = &acts, .log = &log, .loss_scale = loss_scale,
                 .broken = broken};
    double first_loss = 0, loss = 0, step_ms_total = 0;
    int64_t t_train0 = runlog_now_us();

    train_catch_signals();
    for (int64_t step = 1; step <= a.steps; step++) {
        int interrupted = train_interrupted(&log, step - 1);
        if (interrupted) return interrupted;
        int64_t t0 = runlog_now_us();
        uint64_t sent0 = dist.stats.bytes_sent, recv0 = dist.stats.bytes_recv;
        pass.step = step, pass.recompute_us = 0;

        // 1. Forward and backward with recomputation, over this rank's micro-batches.
        gpt_zero_grads(&model);
        double loss_sum = accumulate(&pass, &corpus, &a, rank * per_rank, per_rank);

        // 2. The replicas sum their gradients, layer by layer (a world of one has nothing to add).
        int64_t tc = runlog_now_us();
        for (int l = 0; N > 1 && l < model.nlayers; l++) {
            DistWork w;
            dist_all_reduce_start(&dist.world_group, model.grads[l], gpt_layer_size(&cfg, l), l, &w);
            dist_wait(&w);
        }
        double loss_total = N > 1 ? dist_sum_over_ranks(&dist.world_group, loss_sum) : loss_sum;
        int64_t comm_us = runlog_now_us() - tc;
        loss = loss_total / tokens_per_step;
        if (!isfinite(loss))
            die("lower --lr, or set --clip", "the loss is %f at step %lld: training diverged", loss, (long long)step);
        size_t k = dist_drain_records(&dist, records, 4096);
        for (size_t i = 0; i < k; i++)
            runlog_span(&log, step, dist_coll_name(records[i].coll), -1, records[i].coll == DIST_ALL_REDUCE ?
                        records[i].tag : -1, records[i].t0_us, records[i].t1_us, records[i].bytes_sent);

        // 3. The same AdamW step on every rank.
        int64_t t_opt = runlog_now_us();
        double grad_norm = train_clip_and_update(&model, &adam, a.clip, step);
        int64_t t1 = runlog_now_us();
        runlog_span(&log, step, "optim", -1, -1, t_opt, t1, 0);

        if (step == 1) {  // the pass's peak: the saved activations plus the workspace, to the byte
            double peak = (double)mem_peak_in(&mem, MEM_ACTS);
            runlog_check(&log, "acts.peak = formula + W", peak == acts_bytes + workspace, peak, acts_bytes + workspace);
            if (peak != acts_bytes + workspace)
                die("this is a bug in shardlab", "the acts peak of step 1 is %.0f bytes, the formula plus W %.0f", peak,
                    acts_bytes + workspace);
        }
        double ms = (double)(t1 - t0) / 1000.0, comm_ms = (double)comm_us / 1000.0;
        step_ms_total += ms;
        if (step == 1) first_loss = loss;
        char extra[256];
        snprintf(extra, sizeof extra,
                 "\"grad_norm\":%.6g,\"policy\":\"%s\",\"recomputed_blocks\":%d,\"recompute_ms\":%.3f,"
                 "\"acts_saved\":%.0f,\"workspace\":%.0f",
                 grad_norm, policy.name, policy.recomputed, (double)pass.recompute_us / 1000.0, acts_bytes, workspace);
        StepRecord rec = {.step = step, .loss = loss, .lr = a.lr, .tokens = (int64_t)(per_rank * a.seq),
                          .ms_step = ms, .ms_compute = ms - comm_ms, .ms_comm = comm_ms,
                          .bytes_sent = dist.stats.bytes_sent - sent0, .bytes_recv = dist.stats.bytes_recv - recv0,
                          .mem = &mem, .param_hash = gpt_param_hash(&model), .extra = extra};
        runlog_step(&log, &rec);
        if (rank == 0) progress_update(&progress, &log, step, loss, floor, ms);
    }

    double wall_s = (double)(runlog_now_us() - t_train0) / 1e6;
    double tok_s = tokens_per_step * a.steps / (step_ms_total / 1000.0);
    train_say_done(&log, first_loss, loss, floor, tok_s, N, mem_peak(&mem));
    if (a.save && rank == 0) {
        train_save_weights(&model, a.save);
        runlog_printf(&log, "weights: saved to %s\n", a.save);
    }
    runlog_end(&log, "ok", a.steps);
    char extra[96];
    snprintf(extra, sizeof extra, "\"policy\":\"%s\",\"recomputed_blocks\":%d", policy.name, policy.recomputed);
    train_write_summary(&log, &a, first_loss, loss, floor, wall_s, tok_s, gpt_param_hash(&model), mem_peak(&mem), extra);
    if (rank == 0) runlog_printf(&log, "run written to %s\n", log.dir);

    dist_barrier(&dist.world_group);  // nobody tears down shared memory while others still talk
    dist_destroy(&dist);
    free(records);
    sb_free(&config);
    runlog_close(&log);
    gpt_adamw_destroy(&adam);
    gpt_acts_free(&acts, &mem);
    gpt_destroy(&model);
    mem_destroy(&mem);
    device_close(&dev);
    corpus_free(&corpus);
    return 0;
}
