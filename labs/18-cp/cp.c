// cp.c — context parallelism from scratch: one sequence, N ranks, keys and values in a ring.
//
// The picture. Long sequences run out of activation memory before they run out of weights:
// a block keeps about 16C floats per token. So split the SEQUENCE: each rank of a group of N
// holds T/N of every sequence's tokens and keeps only their activations. Embeddings,
// LayerNorms, the MLP, the projections and the loss are token by token: they need nothing
// from the other ranks. Attention is the one exception, and ring attention
// (labs/18-cp/ring_attention.h) handles it by passing the keys and values around the group.
// The weights are replicated, as in DDP: each rank's gradient covers its tokens only, so the
// gradients are all-reduced over the group (and over --dp D groups, each its own sequences).
//
// The algorithms it runs:
//   the layouts: labs/18-cp/ring_attention.c, ring_rank_chunks(), ring_rank_positions()
//   one block and its merge: labs/18-cp/ring_attention.c, ring_block_forward(), ring_block_backward()
//   the ring: labs/18-cp/ring_attention.c, ring_attention_forward(), ring_attention_backward()
//   positions: labs/18-cp/cp.c, embed_forward(), embed_backward()
//   the gradient all-reduce: labs/common/harness/train.c, train_all_reduce_layers()
//
// Run it:   make lab-cp NGPU=4 [ARGS="--layout contiguous"]
//           build/shardlab run cp -n 4 --seq 256 --kv all-gather
//           build/labs/cp --help
//
// Lexicon: context parallelism, ring attention, flash attention, data parallelism.
//
// The options:
//   --layout zigzag      (default) rank r holds chunks r and 2N-1-r of 2N: every rank the
//                        same attention work under the causal mask
//   --layout contiguous  rank r holds chunk r of N: the last rank works N times the first
//   --kv ring            (default) K/V blocks hop rank to rank, each hop behind the compute
//   --kv all-gather      K/V of the whole sequence gathered once per layer (as Llama 3's CP
//                        does): fewer, bigger messages, the whole sequence's K/V in memory
//   --dp D               D groups of N/D ranks, each on its own B/D sequences
//
// What it is graded against (Psi parameters, N ranks in --dp D groups of n = N/D, global
// batch B, K micro-batches of B' = B/(D K), T' this rank's tokens, M the most any rank holds):
//   memory     params 4 Psi, grads 4 Psi, optim 8 Psi: a replica, as DDP
//              acts   single's formula at T' tokens a sequence (about 1/n of single's)
//              comm   ring: 2 blocks of M tokens, K|V|dK|dV: 32 B' M C
//                     all-gather: every rank's K|V and their dK|dV: 16 n B' M C
//   bytes      per layer and micro-batch (ring_attention.h): ring forward 8 C B' (the blocks
//              this rank passes on), backward twice that plus dK dV home; then the gradient
//              all-reduce over all N ranks, 2 (N-1)/N 4 Psi
//   loss       equal to `single` on the same global batch, up to fp32 rounding
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/dist.h"        // defines: DistGroup, dist_group(), dist_drain_records(), ...
#include "common/harness/args.h"     // defines: TrainArgs, train_args_parse()
#include "common/harness/check.h"    // defines: malloc_check(), usage_error()
#include "common/harness/lab.h"      // defines: Lab, lab_open(), lab_begin(), ...
#include "common/harness/memplan.h"  // defines: MemLayout, MemPlan, memplan()
#include "common/harness/train.h"    // defines: train_micro_batch(), train_all_reduce_layers(), ...
#include "common/model/gpt.h"        // defines: Gpt, GptActs, gpt_layer_forward(), ...
#include "common/runfiles/dcp.h"     // defines: DcpState, dcp_add_units(), dcp_state_free()
#include "common/runfiles/runlog.h"  // defines: runlog_now_us(), runlog_comm_span(), ...
#include "ring_attention.h"          // defines: Ring, ring_attention_forward(), CpLayout, ...

// ---------------------------------------------------------------------------------------
// This rank's share of the sequence, and the model as it runs it
// ---------------------------------------------------------------------------------------

typedef struct {
    GptConfig local;       // the model over this rank's tokens: seq = T' (the weights are the same)
    int T, Tl, B;          // the whole sequence, this rank's tokens, the micro-batch
    const int *pos;        // their global positions (the ring's)
    Ring ring;
    Ops ops;               // the device's kernels, attention replaced by the ring
    GptActs acts;          // the activations of T' tokens per sequence
    uint8_t *tokens_all, *targets_all;  // the micro-batch's whole sequences [B', T]
    uint8_t *tokens, *targets;          // this rank's tokens of them [B', T']
    float *wpe, *dwpe;     // the position embeddings of this rank's positions, and their gradient [T', C]
    float *scratch, *dx;   // the pass's workspace, and the gradient flowing down [B' T', C]
    float *wide;           // --mixed: q, k, v and o widened from bf16 for the ring [B' T', 4C]
} Cp;

// The ops table's functions take no context: the ring they run is this rank's one.
static Cp *the_cp;

static void ring_forward_op(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int bf16_in) {
    (void)B, (void)T, (void)C, (void)NH, (void)bf16_in;  // the ring's own: this rank's shape
    ring_attention_forward(&the_cp->ring, out, lse, qkv);
}

static void ring_backward_op(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                             int B, int T, int C, int NH, int bf16_in, float *scratch) {
    (void)B, (void)T, (void)C, (void)NH, (void)bf16_in, (void)scratch;
    ring_attention_backward(&the_cp->ring, dqkv, dout, qkv, out, lse);
}

// --mixed keeps q, k, v and o in bf16 (gpt.h). The ring computes on their fp32 values (exact),
// rounding the probabilities as their products read them (ring->bf16_in), and o is rounded
// as it is kept.
static void ring_forward_bf16_op(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int C, int NH) {
    (void)NH;
    Cp *cp = the_cp;
    size_t n = (size_t)B * T;
    float *q = cp->wide, *o = cp->wide + n * 3 * C;
    cp->ops.from_bf16(q, qkv, n * 3 * C);
    ring_attention_forward(&cp->ring, o, lse, q);
    cp->ops.to_bf16(out, o, n * C);
}

static void ring_backward_bf16_op(float *dqkv, const float *dout, const bf16 *qkv, const bf16 *out, const float *lse,
                                  int B, int T, int C, int NH, float *scratch) {
    (void)NH, (void)scratch;
    Cp *cp = the_cp;
    size_t n = (size_t)B * T;
    float *q = cp->wide, *o = cp->wide + n * 3 * C;
    cp->ops.from_bf16(q, qkv, n * 3 * C);
    cp->ops.from_bf16(o, out, n * C);
    ring_attention_backward(&cp->ring, dqkv, dout, q, o, lse);
}

// x0[b,i] = wte[token] + wpe[pos(i)]: single's embedding with the positions this rank holds.
static void embed_forward(Cp *cp, const float *params) {
    /* BEGIN SOLUTION: look up each token's position embedding at its GLOBAL position */
    EmbedView w = gpt_embed_view(&cp->local, (float *)params);
    int C = cp->local.dim;
    for (int i = 0; i < cp->Tl; i++) cp->ops.copy(cp->wpe + (size_t)i * C, w.wpe + (size_t)cp->pos[i] * C, C);
    cp->ops.embedding_forward(cp->acts.x0, cp->tokens, w.wte, cp->wpe, cp->B, cp->Tl, C);
    /* END SOLUTION */
}

static void embed_backward(Cp *cp, float *grads) {
    EmbedView g = gpt_embed_view(&cp->local, grads);
    int C = cp->local.dim;
    cp->ops.zero(cp->dwpe, (size_t)cp->Tl * C);
    cp->ops.embedding_backward(g.wte, cp->dwpe, cp->dx, cp->tokens, cp->B, cp->Tl, C);
    for (int i = 0; i < cp->Tl; i++) {
        float *row = g.wpe + (size_t)cp->pos[i] * C;
        cp->ops.residual_add(row, row, cp->dwpe + (size_t)i * C, C);
    }
}

// This rank's tokens of the micro-batch's sequences, in the order of their positions.
static void take_tokens(Cp *cp) {
    for (int b = 0; b < cp->B; b++)
        for (int i = 0; i < cp->Tl; i++) {
            cp->tokens[b * cp->Tl + i] = cp->tokens_all[(size_t)b * cp->T + cp->pos[i]];
            cp->targets[b * cp->Tl + i] = cp->targets_all[(size_t)b * cp->T + cp->pos[i]];
        }
}

// Positions as runs, "0-7,56-63" (the layout's chunks), into out[n].
static void positions_text(const int *pos, int count, char *out, size_t n) {
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < count && at < n; i++) {
        int j = i;
        while (j + 1 < count && pos[j + 1] == pos[j] + 1) j++;
        int k = snprintf(out + at, n - at, "%s%d-%d", at ? "," : "", pos[i], pos[j]);
        at += k > 0 ? (size_t)k : 0;
        i = j;
    }
}

static void span(SpanLogger *s, const Device *dev, const char *name, int layer, DeviceMark m0) {
    span_logger_add(s, dev, name, layer, m0, device_mark(dev));
}

// A pass's buffers, for the step (as single's pass allocates its workspace): the ring's
// workspace, this rank's position rows and their gradient, the layers' workspace, the
// gradient flowing down, and under --mixed the fp32 copies of q, k, v and o.
static void pass_buffers_alloc(Cp *cp, Mem *mem) {
    size_t rows = (size_t)cp->B * cp->Tl, C = (size_t)cp->local.dim;
    ring_alloc_workspace(&cp->ring, mem);
    cp->wpe = mem_alloc_floats(mem, MEM_ACTS, 2 * (size_t)cp->Tl * C, "this rank's position embeddings");
    cp->dwpe = cp->wpe + (size_t)cp->Tl * C;
    int gpu = mem->dev->kind == DEVICE_CUDA;  // a GPU's kernels keep their own workspace in it too
    cp->scratch = mem_alloc_floats(mem, MEM_ACTS, gpt_pass_scratch_floats(&cp->local, cp->B, gpu), "workspace");
    cp->dx = mem_alloc_floats(mem, MEM_ACTS, rows * C, "residual gradient");
    cp->wide = cp->local.mixed ? mem_alloc_floats(mem, MEM_ACTS, rows * 4 * C, "q, k, v and o in fp32") : NULL;
}

static void pass_buffers_free(Cp *cp, Mem *mem) {
    if (cp->wide) mem_free(mem, cp->wide);
    mem_free(mem, cp->dx);
    mem_free(mem, cp->scratch);
    mem_free(mem, cp->wpe);
    ring_free_workspace(&cp->ring, mem);
}

// Forward and backward of this rank's tokens of sequences first.. first+count-1, in
// micro-batches of cp->B; returns the sum of their token losses (the loss the whole group
// sees is the sum over its ranks).
static double forward_backward(Cp *cp, Gpt *model, const Corpus *corpus, const TrainArgs *a, int64_t step, int first,
                               int count, float loss_scale, SpanLogger *spans) {
    const GptConfig *c = &cp->local;
    const Device *dev = model->mem->dev;
    int L = c->layers;
    double loss = 0;
    pass_buffers_alloc(cp, model->mem);
    for (int mb = 0; mb * cp->B < count; mb++) {
        spans->mb = mb;
        train_micro_batch(corpus, a, step, first + mb * cp->B, cp->B, cp->tokens_all, cp->targets_all);
        take_tokens(cp);
        DeviceMark m0 = device_mark(dev);
        embed_forward(cp, model->params[0]);
        span(spans, dev, "fwd", 0, m0);
        for (int l = 1; l <= L + 1; l++) {
            m0 = device_mark(dev);
            loss += gpt_layer_forward(&cp->ops, c, l, model->params[l], &cp->acts, cp->tokens, cp->targets, cp->scratch);
            span(spans, dev, "fwd", l, m0);
        }
        for (int l = L + 1; l >= 1; l--) {
            m0 = device_mark(dev);
            gpt_layer_backward(&cp->ops, c, l, model->params[l], model->grads[l], &cp->acts, cp->tokens, cp->targets,
                               loss_scale, cp->dx, cp->scratch);
            span(spans, dev, "bwd", l, m0);
        }
        m0 = device_mark(dev);
        embed_backward(cp, model->grads[0]);
        span(spans, dev, "bwd", 0, m0);
    }
    pass_buffers_free(cp, model->mem);
    span_logger_flush(spans);
    return loss;
}

// ---------------------------------------------------------------------------------------
// The checks of the options, and the memory table
// ---------------------------------------------------------------------------------------

// Exits 2 with one line when the options do not make a context-parallel run.
static void check_options(const TrainArgs *a, const Lab *L, int dp, int kind) {
    int N = L->world;
    if (N % dp != 0) {
        char divisors[64] = "";
        for (int k = 1, at = 0; k <= N; k++)
            if (N % k == 0) at += snprintf(divisors + at, sizeof divisors - (size_t)at, "%s%d", at ? ", " : "", k);
        usage_error("cp", "--dp %d does not divide the %d ranks into equal groups: use --dp %s", dp, N, divisors);
    }
    int n = N / dp;
    CpLayout l;
    if (cp_layout_init(&l, kind, a->seq, n) != 0)
        usage_error("cp", "--seq %d is too short for %s over %d ranks (%d chunks of at least one token): use --seq %d "
                    "or more, or --layout contiguous", a->seq, cp_layout_name(kind), n, l.chunks, l.chunks);
    if (strcmp(a->attn, "flash") != 0)
        usage_error("cp", "--attn %s: ring attention merges blocks by their log-sum-exps, as flash attention does; "
                    "use --attn flash", a->attn);
    if (a->batch % dp != 0 || (a->batch / dp) % a->accum != 0)
        usage_error("cp", "--batch %d does not split into %d group(s) of %d micro-batch(es): use --batch %d", a->batch,
                    dp, a->accum, ((a->batch + dp * a->accum - 1) / (dp * a->accum)) * dp * a->accum);
}

// The memory table, against memplan's formulas for this rank (common/harness/memplan.h: the
// ones the planner prints and the grader checks).
static void report_memory(Lab *L, const Cp *cp, int n, int r) {
    MemLayout ml = {.lab = "cp", .world = L->world, .micro = cp->B, .mixed = L->cfg.mixed,
                    .gpu = L->dev.kind == DEVICE_CUDA, .cp = n, .cp_rank = r,
                    .cp_layout = cp->ring.layout.kind, .cp_kv = cp->ring.kv_mode};
    MemPlan plan;
    char why[160];
    if (memplan(&L->cfg, &ml, &plan, why, sizeof why) != 0) die("this is a bug in shardlab", "cp's memory plan: %s", why);
    const char *text;
    train_acts_formula(&cp->local, cp->B, &text);
    char acts_formula[160], comm_formula[96];
    snprintf(acts_formula, sizeof acts_formula, "%s, T = %d of %d", text, cp->Tl, cp->T);
    if (cp->ring.kv_mode == CP_KV_ALL_GATHER)
        snprintf(comm_formula, sizeof comm_formula, "16 n B M C (n = %d, M = %d: all K/V)", n, cp->ring.maxc);
    else snprintf(comm_formula, sizeof comm_formula, "32 B M C (M = %d: 2 blocks in flight)", cp->ring.maxc);
    MemRow rows[] = {
        {.cat = MEM_PARAMS, .formula = "4 Psi (a full replica)", .expect = plan.after[MEM_PARAMS]},
        {.cat = MEM_GRADS, .formula = "4 Psi", .expect = plan.after[MEM_GRADS]},
        {.cat = MEM_OPTIM, .formula = "8 Psi (AdamW m and v)", .expect = plan.after[MEM_OPTIM]},
        {.cat = MEM_ACTS, .formula = acts_formula, .expect = plan.after[MEM_ACTS]},
        {.cat = MEM_COMM, .formula = comm_formula, .expect = plan.after[MEM_COMM]},
    };
    train_report_memory(&L->log, &L->mem, NULL, &L->cfg, cp->B, rows, 5);
}

// One span per finished collective. Those of the passes (attention = 1: the ring's sends and
// receives with their step, or --kv all-gather's collectives) say "phase":"attention" and
// "group":"cp", so that the grader tells them from the gradients' all-reduces and the
// dashboards and the trace draw them as the K/V exchange. Returns the bytes they sent.
static uint64_t log_comm_spans(RunLog *log, Dist *d, DistRecord *records, int64_t step, int attention) {
    size_t k = dist_drain_records(d, records, LAB_MAX_RECORDS);
    uint64_t sent = 0;
    for (size_t i = 0; i < k; i++) {
        const DistRecord *r = &records[i];
        char extra[128];
        int at = snprintf(extra, sizeof extra, "\"algo\":\"%s\"", r->algo);
        if (r->coll == DIST_SEND || r->coll == DIST_RECV)
            at += snprintf(extra + at, sizeof extra - (size_t)at, ",\"ring_step\":%d,\"issued_us\":%lld", r->tag,
                           (long long)r->issued_us);
        if (attention) snprintf(extra + at, sizeof extra - (size_t)at, ",\"phase\":\"attention\",\"group\":\"cp\"");
        runlog_comm_span(log, step, dist_coll_name(r->coll), -1, -1, r->t0_us, r->t1_us, r->bytes_sent,
                         r->waited_from_us, extra);
        sent += r->bytes_sent;
    }
    return sent;
}

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    TrainArgs a;
    const char *layout_name, *kv_name;  // the options' types, bounds and defaults: common/harness/catalog.c
    int dp;
    LabBind own[] = {{"layout", &layout_name}, {"kv", &kv_name}, {"dp", &dp}};
    train_args_parse(&a, argc, argv, catalog_lab("cp"), own, 3);
    int kind = cp_layout_parse(layout_name);
    int kv_mode = strcmp(kv_name, "all-gather") == 0 ? CP_KV_ALL_GATHER : CP_KV_RING;

    Lab L;
    lab_open(&L, "cp", &a, argc, argv, 0);
    check_options(&a, &L, dp, kind);
    int N = L.world, rank = L.rank, n = N / dp, r = rank % n, d = rank / n;
    // The ring: all-gathers and reduce-scatters whose byte counts are the formulas'.
    L.dist.algo = DIST_ALGO_RING;
    // The context-parallel group: n consecutive ranks, one group per --dp replica.
    DistGroup cp_group;
    int members[DIST_MAX_RANKS];
    for (int i = 0; i < n; i++) members[i] = d * n + i;
    dist_group(&L.dist, &cp_group, members, n);

    lab_begin(&L, "%d rank(s) on %s, backend %s, %d group(s) of %d context-parallel rank(s), layout %s, K/V %s", N,
              L.dev.name, L.backend, dp, n, cp_layout_name(kind), kv_name);
    RunLog *log = &L.log;
    GptConfig cfg = L.cfg;
    int per_group = a.batch / dp, micro = per_group / a.accum;

    Gpt model;
    GptAdamW adam;
    lab_replica_create(&L, &model, &adam);
    Cp cp = {.T = cfg.seq, .B = micro, .ops = *L.dev.ops};
    the_cp = &cp;
    CpLayout layout;
    cp_layout_init(&layout, kind, cfg.seq, n);
    ring_init(&cp.ring, &cp_group, &layout, kv_mode, micro, cfg.dim, cfg.heads, cfg.mixed, &L.mem);
    cp.Tl = cp.ring.count[r], cp.pos = cp.ring.pos[r];
    cp.local = cfg, cp.local.seq = cp.Tl;
    cp.ops.flash_attention_forward = ring_forward_op;
    cp.ops.flash_attention_backward = ring_backward_op;
    cp.ops.flash_attention_forward_bf16 = ring_forward_bf16_op;
    cp.ops.flash_attention_backward_bf16 = ring_backward_bf16_op;
    gpt_acts_alloc(&cp.acts, &cp.local, micro, &L.mem);

    char positions[64];  // this rank's runs of positions, for the log and every step event
    positions_text(cp.pos, cp.Tl, positions, sizeof positions);
    runlog_printf(log, "rank %d = group %d, context-parallel rank %d of %d: positions %s (%d of %d tokens) of "
                       "sequences %d..%d of each global batch of %d, in %d micro-batch(es) of %d\n",
                  rank, d, r, n, positions, cp.Tl, cfg.seq, d * per_group, (d + 1) * per_group - 1, a.batch, a.accum,
                  micro);

    // The attention work of each rank of the group: equal under zig-zag, rising rank by rank
    // under contiguous chunks (the last rank's queries see every key).
    {
        char line[256];
        long most = 0, least = -1;
        int at = 0;
        for (int q = 0; q < n; q++) {
            long w = 0;  // each query sees the keys at or before its position
            for (int i = 0; i < cp.ring.count[q]; i++) w += cp.ring.pos[q][i] + 1;
            at += snprintf(line + at, sizeof line - (size_t)at, "%s%ld", q ? " " : "", w);
            if (w > most) most = w;
            if (least < 0 || w < least) least = w;
        }
        runlog_printf(log, "attention work per rank (query-key pairs a sequence and head): %s; the busiest rank %.2fx "
                           "the idlest\n", line, (double)most / (double)least);
    }

    char lab_fields[160];
    snprintf(lab_fields, sizeof lab_fields, "\"cp\":%d,\"dp\":%d,\"layout\":\"%s\",\"kv\":\"%s\",\"tokens_per_rank\":%d",
             n, dp, cp_layout_name(kind), kv_name, cp.Tl);
    lab_start(&L, gpt_num_params(&cfg), lab_fields);
    report_memory(&L, &cp, n, r);
    cp.tokens_all = malloc_check((size_t)micro * cfg.seq), cp.targets_all = malloc_check((size_t)micro * cfg.seq);
    cp.tokens = malloc_check((size_t)micro * cp.Tl), cp.targets = malloc_check((size_t)micro * cp.Tl);
    mem_reset_peak(&L.mem);

    // Checkpoints: the replicas are equal, as DDP's; every rank writes a 1/N chunk.
    DcpState whole = {0}, chunk = {0};
    dcp_add_units(&whole, &cfg, model.params, adam.m, adam.v, 0, 1);
    dcp_add_units(&chunk, &cfg, model.params, adam.m, adam.v, rank, N);
    int64_t first_step = lab_first_step(&L, &whole, &L.dist.world_group);
    SpanLogger spans = {.log = log};
    uint64_t ring_expect = (uint64_t)a.accum * cfg.layers * (ring_forward_bytes(&cp.ring) + ring_backward_bytes(&cp.ring));

    for (int64_t step = first_step; step <= a.steps; step++) {
        int interrupted = lab_step_begin(&L, step);
        if (interrupted) return interrupted;
        spans.step = step;

        // 1. Forward and backward of this rank's tokens; attention passes K/V around the
        //    group (the ring's sends and receives, logged as they finish).
        gpt_zero_grads(&model);
        cp.ring.bytes_sent = 0, cp.ring.wait_us = cp.ring.transfer_us = cp.ring.attention_us = 0;
        double loss_sum = forward_backward(&cp, &model, &L.corpus, &a, step, d * per_group, per_group,
                                           (float)(1.0 / L.tokens_per_step), &spans);
        int64_t comm_us = cp.ring.wait_us;  // what the compute did not hide of the ring
        uint64_t ring_sent = log_comm_spans(log, &L.dist, L.records, step, 1);
        if (step == first_step)
            runlog_self_check(log, "comm.ring_bytes_sent", ring_sent == ring_expect, (double)ring_sent,
                              (double)ring_expect, "the ring sent %llu bytes, its formula gives %llu",
                              (unsigned long long)ring_sent, (unsigned long long)ring_expect);

        // 2. Each rank's gradient covers its tokens: the sum over every rank (the group's
        //    tokens, and the other groups' sequences) is the global batch's.
        int64_t t0 = runlog_now_us();
        train_all_reduce_layers(&L.dist.world_group, &model);
        double loss = dist_sum_over_ranks(&L.dist.world_group, loss_sum) / L.tokens_per_step;
        comm_us += runlog_now_us() - t0;
        log_comm_spans(log, &L.dist, L.records, step, 0);

        // 3. The same update on every rank: the replicas stay equal.
        double lr, grad_norm = lab_replica_update(&L, &model, &adam, &lr);
        // What the ring's benchmark reads (tests/bench/bench_cp.sh): the time this rank attended,
        // and of its hand-overs' time the part it waited for.
        char extra[256];
        snprintf(extra, sizeof extra, "\"ring_bytes_sent\":%llu,\"positions\":\"%s\",\"attention_ms\":%.3f,"
                 "\"ring_transfer_ms\":%.3f,\"ring_wait_ms\":%.3f", (unsigned long long)ring_sent, positions,
                 cp.ring.attention_us / 1e3, cp.ring.transfer_us / 1e3, cp.ring.wait_us / 1e3);
        StepRecord rec = {.step = step, .loss = loss, .lr = lr, .grad_norm = grad_norm,
                          .tokens = (int64_t)per_group * cp.Tl, .extra = extra};
        lab_replica_step_end(&L, &model, &rec, comm_us, &chunk);
    }
    dcp_state_free(&whole);
    dcp_state_free(&chunk);

    free(cp.tokens_all), free(cp.targets_all), free(cp.tokens), free(cp.targets);
    ring_free(&cp.ring, &L.mem);
    char extra[96];
    snprintf(extra, sizeof extra, "\"layout\":\"%s\",\"kv\":\"%s\"", cp_layout_name(kind), kv_name);
    lab_replica_close(&L, &model, &adam, &cp.acts, extra);
    return 0;
}
