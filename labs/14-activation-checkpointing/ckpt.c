// ckpt.c — activation checkpointing: keep the block boundaries, recompute the insides.
//
// The backward pass of a block reads what its forward pass saved: LayerNorm outputs and
// statistics, q k v, the attention probabilities (or, with --attn flash, their rows'
// log-sum-exps), the MLP's hidden layer (16C + 4 + NH T floats per token, 16C + 4 + NH with
// flash, against C for the block's output). Activation checkpointing keeps only
// a block's OUTPUT, the boundary that the next block reads, and lets the block's insides go
// to a shared workspace; in the backward pass the block is first run forward again from its
// kept input (RECOMPUTATION), then its backward runs as usual. Memory for compute: about one
// extra forward pass, and recomputation writes the same bits, so the training is unchanged.
//
// The algorithms it runs:
//   the pass: labs/14-activation-checkpointing/activation_checkpointing.c, ckpt_forward_backward(), ckpt_acts_alloc()
//   the policies and their formulas: labs/14-activation-checkpointing/policy.c, ckpt_policy(), ckpt_acts_bytes()
//   the gradient sum: labs/common/harness/train.c, train_all_reduce_layers()
//
// Run it:   make lab-ckpt NGPU=2 POLICY=sqrt [ARGS="--layers 9"]
//           build/shardlab run ckpt -n 1 --policy 2 --layers 8
//           build/labs/ckpt --help
//
// The model: every lab's GPT, but 4 blocks deep unless --layers says (ckpt's entry in
// common/harness/catalog.c): at the other labs' 2 blocks, sqrt makes one segment of both and saves nothing.
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
// The pass (ckpt_forward_backward(), its layout ckpt_acts_alloc()):
//     forward    layers 0 .. L+1 in order; a checkpointed block writes its insides into the
//                workspace (overwriting the previous one's) and its output where it is kept
//     backward   layers L+1 .. 0; when l ends a segment: its blocks forward again from the
//                segment's kept input ("recompute" spans), then the backward of l as usual
// Every checkpointed block is recomputed once per micro-batch. A block's backward never
// reads its own output (read gpt_block_backward), only the next layer does: a checkpointed
// block keeps exactly C floats per token and nothing it does not need.
//
// What it is graded against (tests/test_ckpt.c). b = 16C + 4 + NH T (--attn naive) or
// 16C + 4 + NH (--attn flash), the floats per token a block saves; the activations saved for a micro-batch of B sequences, in bytes:
//     none    4 B T (2C + 2 + V + L b)
//     K       4 B T (2C + 2 + V + (L-c) b + c C + b - C)       c = floor(L/K), 1 <= K <= L
//     every   4 B T (2C + 2 + V + L C + b - C)
//     sqrt    4 B T (2C + 2 + V + n C + s b - C)               s = ceil(sqrt L), n = ceil(L/s)
// (x0, the head's C + 2 + V, the blocks kept whole, the kept outputs, and the workspace: one
// block's insides b - C for K, s blocks and the s-1 outputs inside a segment for sqrt). A pass
// also holds W = 4 (S + B T C) bytes of workspace, S = gpt_pass_scratch_floats(), the same for
// every policy: the peak of the "acts" category is the formula plus W, to the byte. The
// workspace costs one block's insides, so checkpointing c blocks one at a time saves
// (c-1)(b-C) floats per token: one checkpointed block alone saves nothing. Compute:
// with backward about twice a forward, a step costs about 1 + r / (3L) times none's, r the
// blocks recomputed (every and sqrt: 4/3). For the transformer's blocks, whose insides are
// at least 15 times their output, `every` holds less than `sqrt`: sqrt(L) segments win when a layer's
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

#include "activation_checkpointing.h"  // defines: ckpt_forward_backward(), ckpt_acts_alloc(), ...
#include "common/comm/dist.h"          // defines: dist_sum_over_ranks(), DistRecord, ...
#include "common/harness/args.h"       // defines: TrainArgs, train_args_parse()
#include "common/harness/check.h"      // defines: usage_error(), malloc_check(), die()
#include "common/harness/data.h"       // defines: Corpus
#include "common/harness/lab.h"        // defines: Lab, lab_open(), lab_begin(), ...
#include "common/harness/mem.h"        // defines: Mem, format_bytes(), mem_in_use(), ...
#include "common/harness/train.h"      // defines: train_all_reduce_layers(), ...
#include "common/model/gpt.h"          // defines: gpt_block_backward(), ...
#include "common/runfiles/dcp.h"       // defines: DcpState, dcp_add_units(), dcp_state_free()
#include "common/runfiles/runlog.h"    // defines: RunLog, runlog_check(), runlog_printf(), ...

// "none", "every", "sqrt" or K; exits 2 on anything else.
static void policy_parse(CkptPolicy *p, const char *text, int L) {
    char why[200];
    if (ckpt_policy_named(p, text, L, why, sizeof why) != 0) usage_error("ckpt", "%s", why);
}

// What a rank computes in a step: its sequences of the global batch, in micro-batches.
typedef struct {
    Gpt *model;
    const Corpus *corpus;
    const TrainArgs *a;
    int first, count;     // this rank's sequences of each global batch
    float loss_scale;     // 1 / (B T) of the global batch
    CkptPass pass;        // spans, and the time spent recomputing
} Work;

// Forward and backward with recomputation over this rank's micro-batches of acts->B
// sequences; the gradients accumulate (zero them first). Returns the loss sum.
static double accumulate(Work *w, const CkptPolicy *p, GptActs *acts, int64_t step) {
    size_t n = (size_t)acts->B * w->a->seq;
    uint8_t *tokens = malloc_check(n), *targets = malloc_check(n);
    double loss_sum = 0;
    w->pass.step = step;
    for (int mb = 0; mb * acts->B < w->count; mb++) {
        train_micro_batch(w->corpus, w->a, step, w->first + mb * acts->B, acts->B, tokens, targets);
        w->pass.mb = mb;
        loss_sum += ckpt_forward_backward(w->model, p, acts, tokens, targets, w->loss_scale, &w->pass);
    }
    free(tokens), free(targets);
    return loss_sum;
}

// A check event; a failed one is a bug: die with the hint.
static void check_or_die(RunLog *log, const char *name, double value, double expect, const char *hint) {
    runlog_check(log, name, value == expect, value, expect);
    if (value != expect) die(hint, "check %s failed: %.17g, expected %.17g", name, value, expect);
}

// ---------------------------------------------------------------------------------------
// Every policy side by side, on step 1's batch and the same weights
// ---------------------------------------------------------------------------------------

// The param_hash (hash.h) of each layer's gradient, on the device.
static void grads_hashes(const Gpt *g, uint64_t *out) {
    for (int l = 0; l < g->nlayers; l++) {
        size_t bytes = gpt_layer_size(&g->cfg, l) * sizeof(float);
        const void *grad = g->grads[l];
        out[l] = device_param_hash(g->mem->dev, 1, &grad, &bytes, PARAM_HASH_INIT);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// For each policy: its activations allocated, one warm-up pass and `reps` timed passes
// (forward + backward of this rank's part of step 1, no update), the acts category's peak
// above what was allocated before (the formula + W, to the byte), the median time, and the
// layers whose gradients differ from policy none's (none: recomputation writes the same bits).
static void compare_policies(Work *w, const CkptPolicy *policies, int np, int reps, int micro, double W,
                             RunLog *log) {
    const GptConfig *c = &w->model->cfg;
    Mem *mem = w->model->mem;
    double ms_none = 0, *ms = malloc_check((size_t)reps * sizeof *ms);
    int nl = w->model->nlayers;
    uint64_t *hash = malloc_check(2 * (size_t)nl * sizeof *hash), *hash_none = hash + nl;
    char f[32], m[32], t[32], name[64];
    RunLog *spans = w->pass.log;
    w->pass.log = NULL;
    if (log->rank == 0)
        runlog_printf(log, "every policy on rank 0: step 1's %d sequences in micro-batches of %d, the same weights, "
                           "median of %d forward+backward passes;\n  b = %s, s = ceil(sqrt L), n = ceil(L/s), "
                           "c = floor(L/K); W = %s of pass workspace, the same for every policy\n"
                           "  %-6s %-11s %-27s %11s %11s %14s %9s %7s %9s\n", w->count, micro, reps, ckpt_block_formula(c),
                      format_bytes(t, sizeof t, W), "policy", "recomputed", "saved acts formula", "bytes", "+ W",
                      "measured peak", "ms", "x none", "1+r/(3L)");
    for (int i = 0; i < np; i++) {
        const CkptPolicy *p = &policies[i];
        size_t before = mem_in_use(mem, MEM_ACTS);
        mem_reset_peak(mem);
        GptActs acts;
        ckpt_acts_alloc(&acts, c, micro, p, mem);
        for (int r = -1; r < reps; r++) {  // pass -1 warms up (first touch of the buffers)
            gpt_zero_grads(w->model);
            int64_t t0 = runlog_now_us();
            accumulate(w, p, &acts, 1);
            device_sync(mem->dev);
            if (r >= 0) ms[r] = (double)(runlog_now_us() - t0) / 1000.0;
        }
        gpt_acts_free(&acts, mem);
        qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
        double median = reps % 2 ? ms[reps / 2] : (ms[reps / 2 - 1] + ms[reps / 2]) / 2;
        double expect = ckpt_acts_bytes(c, micro, p) + W, measured = (double)(mem_peak_in(mem, MEM_ACTS) - before);
        grads_hashes(w->model, p->kind == CKPT_NONE ? hash_none : hash);
        if (p->kind == CKPT_NONE) ms_none = median;
        int differ = 0;
        for (int l = 0; l < nl; l++) differ += p->kind != CKPT_NONE && hash[l] != hash_none[l];
        if (log->rank == 0)
            runlog_printf(log, "  %-6s %3d of %-3d  %-27s %11s %11s %11s %s %9.2f %7.2f %9.3f\n", p->name, p->recomputed,
                          c->layers, ckpt_acts_formula(c, p), format_bytes(f, sizeof f, expect - W),
                          format_bytes(t, sizeof t, expect), format_bytes(m, sizeof m, measured),
                          measured == expect ? "ok" : "!!", median, median / ms_none,
                          1.0 + p->recomputed / (3.0 * c->layers));
        snprintf(name, sizeof name, "ckpt.%s.peak_acts", p->name);
        check_or_die(log, name, measured, expect, "this is a bug in shardlab: the layout and the formula disagree");
        snprintf(name, sizeof name, "ckpt.%s.layers_whose_grads_differ_from_none", p->name);
        check_or_die(log, name, differ, 0, "recomputation must write the same bits: is a block recomputed from the "
                     "wrong input, or not at all?");
    }
    if (log->rank == 0)
        runlog_printf(log, "  the gradients of every layer bitwise equal to policy none's\n\n");
    free(ms), free(hash);
    w->pass.log = spans;
}

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    TrainArgs a;
    const char *policy_text;  // the options' types, bounds and defaults (--layers 4 here): common/harness/catalog.c
    int reps;
    LabBind own[] = {{"policy", &policy_text}, {"compare", &reps}};
    train_args_parse(&a, argc, argv, catalog_lab("ckpt"), own, 2);
    CkptPolicy policy;
    policy_parse(&policy, policy_text, a.layers);

    Lab L;  // the harness (common/harness/lab.h): ranks, device, collectives, run log, corpus, memory
    lab_open(&L, "ckpt", &a, argc, argv, 0);
    int N = L.world, rank = L.rank;
    train_check_batch(&a, "ckpt", N);
    lab_begin(&L, "%d rank(s) on %s, backend %s, policy %s", N, L.dev.name, L.backend, policy.name);
    RunLog *log = &L.log;
    GptConfig cfg = L.cfg;

    Gpt model;
    GptAdamW adam;
    lab_replica_create(&L, &model, &adam);
    int per_rank = a.batch / N, micro = per_rank / a.accum;
    GptActs acts;
    ckpt_acts_alloc(&acts, &cfg, micro, &policy, &L.mem);
    double acts_bytes = ckpt_acts_bytes(&cfg, micro, &policy);
    double W = 4.0 * ((double)gpt_pass_scratch_floats(&cfg, micro, L.dev.kind == DEVICE_CUDA) + (double)micro * a.seq * a.dim);
    runlog_printf(log, "rank %d trains on sequences %d..%d of each global batch of %d, in %d micro-batch(es) of %d; "
                       "recomputed: %d of %d blocks, in %d segment(s)\n", rank, rank * per_rank,
                  (rank + 1) * per_rank - 1, a.batch, a.accum, micro, policy.recomputed, a.layers, policy.nseg);

    char lab_fields[96];
    snprintf(lab_fields, sizeof lab_fields, "\"policy\":\"%s\",\"compare\":%d", policy.name, reps);
    lab_start(&L, gpt_num_params(&cfg), lab_fields);
    lab_replica_memory(&L, micro, ckpt_acts_formula(&cfg, &policy), acts_bytes, 1);

    Work work = {.model = &model, .corpus = &L.corpus, .a = &a, .first = rank * per_rank, .count = per_rank,
                 .loss_scale = (float)(1.0 / L.tokens_per_step), .pass = {.log = log}};
    if (reps > 0) {  // none, every, sqrt, and K if given
        CkptPolicy all[4];
        for (int k = CKPT_NONE; k <= CKPT_SQRT; k++) ckpt_policy(&all[k], (CkptKind)k, 0, a.layers);
        all[3] = policy;
        compare_policies(&work, all, policy.kind == CKPT_K ? 4 : 3, reps, micro, W, log);
    }
    mem_reset_peak(&L.mem);

    // Distributed checkpoints (dcp.h), as in ddp.c: every replica loads the whole state, and
    // saves a 1/N chunk of it.
    DcpState whole = {0}, chunk = {0};
    dcp_add_units(&whole, &cfg, model.params, adam.m, adam.v, 0, 1);
    dcp_add_units(&chunk, &cfg, model.params, adam.m, adam.v, rank, N);
    int64_t first_step = lab_first_step(&L, &whole, &L.dist.world_group);

    for (int64_t step = first_step; step <= a.steps; step++) {
        int interrupted = lab_step_begin(&L, step);
        if (interrupted) return interrupted;
        work.pass.recompute_us = 0;

        // 1. Forward and backward with recomputation, over this rank's micro-batches.
        gpt_zero_grads(&model);
        double loss_sum = accumulate(&work, &policy, &acts, step);

        // 2. The replicas sum their gradients, layer by layer (a world of one has nothing to add).
        int64_t tc = runlog_now_us();
        if (N > 1) train_all_reduce_layers(&L.dist.world_group, &model);
        double loss = (N > 1 ? dist_sum_over_ranks(&L.dist.world_group, loss_sum) : loss_sum) / L.tokens_per_step;
        int64_t comm_us = runlog_now_us() - tc;
        DistRecord *records = L.records;
        size_t k = dist_drain_records(&L.dist, records, LAB_MAX_RECORDS);
        for (size_t i = 0; i < k; i++)
            runlog_comm_span(log, step, dist_coll_name(records[i].coll), -1,
                             records[i].coll == DIST_ALL_REDUCE ? records[i].tag : -1, records[i].t0_us,
                             records[i].t1_us, records[i].bytes_sent, records[i].waited_from_us, NULL);

        // 3. The same AdamW step on every rank.
        double lr, grad_norm = lab_replica_update(&L, &model, &adam, &lr);

        if (step == first_step)  // the step's peak: the saved activations plus the pass's workspace (mem.formula grades it)
            runlog_self_check(log, "acts.peak_in_step_1", (double)mem_peak_in(&L.mem, MEM_ACTS) == acts_bytes + W,
                              (double)mem_peak_in(&L.mem, MEM_ACTS), acts_bytes + W,
                              "the pass held %zu bytes of activations at its peak, the policy's formula and the pass's "
                              "workspace are %.0f", mem_peak_in(&L.mem, MEM_ACTS), acts_bytes + W);
        char extra[256];
        snprintf(extra, sizeof extra,
                 "\"policy\":\"%s\",\"recomputed_blocks\":%d,\"recompute_ms\":%.3f,"
                 "\"acts_saved\":%.0f,\"workspace\":%.0f", policy.name, policy.recomputed,
                 (double)work.pass.recompute_us / 1000.0, acts_bytes, W);
        StepRecord rec = {.step = step, .loss = loss, .lr = lr, .grad_norm = grad_norm, .tokens = (int64_t)(per_rank * a.seq),
                          .extra = extra};
        lab_replica_step_end(&L, &model, &rec, comm_us, &chunk);
    }
    dcp_state_free(&whole);
    dcp_state_free(&chunk);

    char extra[96];
    snprintf(extra, sizeof extra, "\"policy\":\"%s\",\"recomputed_blocks\":%d", policy.name, policy.recomputed);
    lab_replica_close(&L, &model, &adam, &acts, extra);
    return 0;
}
