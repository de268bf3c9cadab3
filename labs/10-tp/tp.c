// tp.c — tensor parallelism from scratch (Megatron-LM): one layer's matrices split over ranks.
//
// Data parallelism (ddp.c) and ZeRO/FSDP copy or shard the model but every rank still runs
// whole layers. Tensor parallelism (Shoeybi et al., "Megatron-LM", 2019) splits the work
// INSIDE each block over a group of t ranks: each rank holds 1/t of every big matrix and
// computes 1/t of every big product, on the same tokens.
//
//   attention  c_attn is column-parallel BY HEADS: rank r holds the q, k and v rows of heads
//              [r NH/t, (r+1) NH/t), so it runs attention on its NH/t heads by itself; the
//              output projection c_proj is row-parallel: the columns that read those heads.
//   MLP        c_fc column-parallel (4C/t of the hidden units, GELU local), c_proj row-parallel.
//
//        X ──f──> [ X A_r ] ──(attention / GELU: local)──> [ Y_r B_r ] ──g──> sum_r Y_r B_r + b
//             (all of X)   (rank r's heads / columns)      (a PARTIAL output)
//
// Two operators carry all the communication (10-tp/f_and_g.c writes them out):
//   f  at the input of a column-parallel linear: forward identity (every rank already holds
//      X), backward ALL-REDUCE (X's gradient is the sum of the ranks' partial gradients)
//   g  at the output of a row-parallel linear: forward ALL-REDUCE (sum the partial outputs),
//      backward identity (the gradient of a sum reaches every term unchanged)
// So a block costs exactly 2 all-reduces forward and 2 backward per micro-batch, of B T C
// floats each. The row-parallel biases are added once, after g, and are replicated, like the
// LayerNorms, embeddings and head: every rank computes them fully, on identical inputs, so
// their gradients come out bitwise identical and the replicas need no communication.
//
// --sp (sequence parallelism, Korthikanti et al. 2022, "Megatron-SP"): the LayerNorms,
//      dropout-free residual adds and biases are replicated WORK too. Split them along the
//      tokens: each rank keeps B T / t of the micro-batch's rows (contiguous; Megatron splits
//      the sequence of its [s, b, h] layout, we split our [b, t] rows; pointwise operations do
//      not care). Then f = all-gather forward / reduce-scatter backward and g = reduce-scatter
//      forward / all-gather backward: 2 all-gathers + 2 reduce-scatters per block forward and
//      the same backward, the same bytes as the 2 all-reduces (an all-reduce IS a
//      reduce-scatter + an all-gather), with the residual stream's activations 1/t the size.
//      The replicated parameters now see only their rank's tokens: their gradients are
//      all-reduced over the tensor-parallel group once per step. (This lab keeps f's gathered
//      LayerNorm output for the backward pass; Megatron gathers it again instead, to save
//      that memory for one more all-gather.)
// --vocab-parallel: lm_head split by vocabulary rows (V/t each); the cross-entropy across the
//      group: per-row maxima all-gathered (t B T floats), the sums of exp and the target's
//      logit in one all-reduce (2 B T floats), and f before the head (its backward all-reduces
//      the head input's gradient; with --sp f all-gathers / reduce-scatters it).
// --dp D: a 2-D mesh, N = D x t ranks, rank = d t + r: tensor-parallel groups are contiguous
//      ranks (Megatron places TP innermost, on the fastest links), data-parallel groups are
//      ranks r, t + r, ... Each replica takes B/D sequences of the global batch; after the
//      backward pass every gradient is all-reduced over the data-parallel group.
//
// The algorithms it runs:
//   f: labs/10-tp/f_and_g.c, tp_f_forward(), tp_f_backward()
//   g: labs/10-tp/f_and_g.c, tp_g_forward(), tp_g_backward()
//   a block split over the group: labs/10-tp/tensor_parallel.c, block_forward(), block_backward()
//   the vocabulary-parallel loss: labs/10-tp/tensor_parallel.c, vocab_parallel_crossentropy()
//   each rank's slices: labs/10-tp/slices.c, tp_layer_slice()
//   the update: labs/10-tp/optimizer.c, tp_clip_and_update()
//
// Run it:   make lab-tp NGPU=4 [ARGS="--sp --dp 2"]
//           build/shardlab run tp -n 4 --vocab-parallel
//           build/labs/tp --help
//
// Lexicon: tensor parallelism, column-parallel linear, row-parallel linear, all-reduce,
//          reduce-scatter, all-gather, sequence parallelism, vocabulary-parallel
//          cross-entropy, device mesh, data parallelism.
//
// What it is graded against, per rank, with Psi_rep the replicated parameters
// ((V + T) C + 6 L C + 2 C, + V C unless --vocab-parallel), Psi_split the split ones, whole
// (L (12 C^2 + 7 C), + V C with --vocab-parallel), K micro-batches of B' = B/(D K)
// sequences, BT = B' T:
//   params 4 (Psi_rep + Psi_split / t), grads the same, optim 8 (Psi_rep + Psi_split / t)
//   acts   4 BT (2C + 2 + V + L (4C + 4 + (12C + NH T)/t)), NH for NH T with --attn flash;
//          see report_memory() for the --sp and --vocab-parallel forms, and --mixed's, which
//          keeps ln_1, ln_2 (all rows), GELU's share and ln_f as bf16s: 2 bytes less each
//   per block per micro-batch: 2 all-reduces forward and 2 backward (t > 1: 2 (t-1)/t x
//          4 BT C bytes each, ring); --sp: 2 all-gathers + 2 reduce-scatters each way,
//          (t-1)/t x 4 BT C bytes each (the all-gathers 2 BT C with --mixed: bf16), plus one
//          all-reduce per layer of the replicated gradients per step
//   param_hash (the replicated parameters) equal on every rank after every step
//   loss   equal to `single` on the same global batch, up to fp32 rounding
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/dist.h"           // defines: DistGroup, dist_all_reduce(), dist_chunk(), ...
#include "common/harness/args.h"        // defines: TrainArgs, train_args_parse(), train_lr()
#include "common/harness/batchsplit.h"  // defines: BatchSplit, batch_split_of(), ...
#include "common/harness/check.h"       // defines: malloc_check(), usage_error()
#include "common/harness/data.h"        // defines: Corpus
#include "common/harness/lab.h"         // defines: Lab, lab_open(), lab_begin(), lab_start(), ...
#include "common/harness/mem.h"         // defines: mem_alloc_floats(), mem_free(), Mem, ...
#include "common/harness/train.h"       // defines: SpanLogger, train_micro_batch(), ...
#include "common/model/adamw.h"
#include "common/model/gpt.h"           // defines: GptConfig, gpt_num_params(), Gpt, ...
#include "common/runfiles/dcp.h"        // defines: DcpState, dcp_due(), dcp_state_free()
#include "common/runfiles/runlog.h"     // defines: RunLog, runlog_self_check(), ...
#include "optimizer.h"                  // defines: tp_clip_and_update(), TpAdamW, ...
#include "tensor_parallel.h"            // defines: tp_f_forward(), tp_f_backward(), ...

// ---------------------------------------------------------------------------------------
// Forward and backward over this replica's micro-batches
// ---------------------------------------------------------------------------------------

typedef struct {
    const Corpus *corpus;
    const TrainArgs *a;
    int first, count;  // this replica's sequences of the global batch
} Batch;

static double forward_backward(Tp *tp, TpActs *acts, const Batch *b, int64_t step, float loss_scale) {
    int micro = tp->B, T = b->a->seq;
    size_t n = (size_t)micro * T;
    uint8_t *tokens = malloc_check(n), *targets = malloc_check(n);
    tp_workspace_begin(tp);
    float *dx = mem_alloc_floats(tp->mem, MEM_ACTS, (size_t)tp->rows * tp->cfg.dim, "residual gradient");
    double loss_sum = 0;
    // Spans on the device's clock (train.h): a GPU's are read once, when the step's work is queued.
    const Device *dev = tp->mem->dev;
    SpanLogger spans = {.log = tp->log, .step = step};
    for (int mb = 0; mb * micro < b->count; mb++) {
        train_micro_batch(b->corpus, b->a, step, b->first + mb * micro, micro, tokens, targets);
        tp->mb = spans.mb = mb;
        tp->pass = "fwd";
        for (int l = 0; l < tp->nlayers; l++) {
            DeviceMark m0 = device_mark(dev);
            loss_sum += tp_layer_forward(tp, l, acts, tokens, targets);
            span_logger_add(&spans, dev, "fwd", l, m0, device_mark(dev));
        }
        tp->pass = "bwd";
        for (int l = tp->nlayers - 1; l >= 0; l--) {
            DeviceMark m0 = device_mark(dev);
            tp_layer_backward(tp, l, acts, tokens, targets, loss_scale, dx);
            span_logger_add(&spans, dev, "bwd", l, m0, device_mark(dev));
        }
    }
    span_logger_flush(&spans);
    tp->mb = -1;
    tp->pass = "step";
    mem_free(tp->mem, dx);
    tp_workspace_end(tp);
    free(tokens);
    free(targets);
    return loss_sum;
}

// Sum every gradient buffer (the replicated ones, and with split = 1 the slices too) over a
// group, one all-reduce per non-empty buffer; logged as spans of `op` on group `name`.
static void all_reduce_gradients(Tp *tp, DistGroup *g, const char *name, const char *op, int split, TpCount *count) {
    for (int p = 0; p <= split; p++)
        for (int l = 0; l < tp->nlayers; l++)
            if (tp_part_floats(tp, p, l)) {
                dist_all_reduce(g, tp_part(tp->rep_grad, tp->split_grad, p, l), tp_part_floats(tp, p, l));
                tp_log_collectives(tp, name, op, p ? "split" : "replicated", l, count);
            }
}

// ---------------------------------------------------------------------------------------
// What the graders check: collectives per step, memory
// ---------------------------------------------------------------------------------------

// Bytes a ring collective of n floats sends from group rank r of p (dist.h's chunks).
static uint64_t ring_bytes(TpKind kind, size_t n, int p, int r) {
    size_t off, mine, next;
    dist_chunk(n, p, r, &off, &mine);
    dist_chunk(n, p, (r + 1) % p, &off, &next);
    size_t words = kind == TP_ALL_REDUCE ? (n - mine) + (n - next) : kind == TP_REDUCE_SCATTER ? n - mine : n - next;
    return 4ull * words;
}

static void expect_call(TpCount *c, TpKind kind, size_t n, int p, int r, int times) {
    c->calls[kind] += times;
    c->bytes += (uint64_t)times * ring_bytes(kind, n, p, r);
}

// The f, g and vocabulary-parallel collectives of one step with K micro-batches. With --sp
// --mixed, f forward's and g backward's all-gathers move bf16s, two to a word where the rows
// split into whole pairs (tp_gathers_bf16): half the words.
static TpCount expected_model_collectives(const Tp *tp, int K) {
    TpCount c = {{0}, 0};
    size_t act = (size_t)tp->BT * tp->cfg.dim, gathered = tp_gathers_bf16(tp) ? act / 2 : act;
    int L = tp->cfg.layers, t = tp->t, r = tp->r;
    if (tp->sp) {
        expect_call(&c, TP_ALL_GATHER, gathered, t, r, 4 * L * K);  // f forward, g backward
        expect_call(&c, TP_REDUCE_SCATTER, act, t, r, 4 * L * K);   // g forward, f backward
    } else {
        expect_call(&c, TP_ALL_REDUCE, act, t, r, 4 * L * K);      // g forward, f backward
    }
    if (tp->vp) {
        expect_call(&c, TP_ALL_GATHER, (size_t)t * tp->BT, t, r, K);  // row maxima
        expect_call(&c, TP_ALL_REDUCE, 2 * (size_t)tp->BT, t, r, K);  // sums of exp, target logits
        if (tp->sp) expect_call(&c, TP_ALL_GATHER, gathered, t, r, K), expect_call(&c, TP_REDUCE_SCATTER, act, t, r, K);
        else expect_call(&c, TP_ALL_REDUCE, act, t, r, K);             // f's backward at the head
    }
    return c;
}

// Step 1's f, g and vocabulary-parallel collectives against the formula: check events, and a
// warning when they differ (the run goes on; `shardlab grade` judges it in comm.bytes).
static void check_collectives(RunLog *log, const Tp *tp, int K) {
    TpCount want = expected_model_collectives(tp, K), got = tp->model;
    int calls = got.calls[TP_ALL_REDUCE] == want.calls[TP_ALL_REDUCE] &&
                got.calls[TP_REDUCE_SCATTER] == want.calls[TP_REDUCE_SCATTER] &&
                got.calls[TP_ALL_GATHER] == want.calls[TP_ALL_GATHER];
    int total = got.calls[0] + got.calls[1] + got.calls[2], expect = want.calls[0] + want.calls[1] + want.calls[2];
    runlog_self_check(log, "comm.tp_collectives", calls, total, expect,
                      "step 1: %d all-reduces, %d reduce-scatters, %d all-gathers; the formula says %d, %d and %d",
                      got.calls[0], got.calls[1], got.calls[2], want.calls[0], want.calls[1], want.calls[2]);
    runlog_self_check(log, "comm.tp_bytes_sent", got.bytes == want.bytes, (double)got.bytes, (double)want.bytes,
                      "step 1: f, g and the head's collectives sent %llu bytes; the formula says %llu",
                      (unsigned long long)got.bytes, (unsigned long long)want.bytes);
}

// The memory table. Psi_rep: replicated parameters; Psi_split: the split ones, whole. Beside
// it, DDP on the same N = D t ranks and --accum (train.h): a replica each, B/(N K) sequences.
static void report_memory(RunLog *log, const Mem *mem, const GptConfig *c, int t, int sp, int vp, int micro,
                          const TrainArgs *a, int ranks) {
    double C = c->dim, V = c->vocab, T = c->seq, L = c->layers, NH = c->heads;
    double rep = (V + T) * C + 6 * L * C + 2 * C + (vp ? 0 : V * C), split = L * (12 * C * C + 7 * C) + (vp ? V * C : 0);
    double mine = rep + split / t;
    // Activations: the residual stream and LayerNorm statistics on R rows (BT, or BT/t with
    // --sp), the LayerNorm outputs the column-parallel linears read on all BT rows, the
    // heads' and hidden units' share 1/t; the head on H rows (BT with --vocab-parallel) of
    // V' logits (V/t with --vocab-parallel).
    double BT = (double)micro * T, R = sp ? BT / t : BT, H = vp ? BT : R, Vh = vp ? V / t : V;
    // The attention's share: NH/t heads' probabilities over T keys (naive), or one
    // log-sum-exp per head (flash).
    int flash = c->attn == GPT_ATTN_FLASH;
    double att = flash ? NH : NH * T;
    const char *att_text = flash ? "NH" : "NH T";
    double acts = 4 * (R * C + L * (2 * BT * C + 4 * R + BT * (12 * C + att) / t + 2 * R * C) + H * C + 2 * R + H * Vh);
    // --mixed keeps the Linear layers' inputs, the GELU's input and (flash) qkv as bf16s
    // (tensor_parallel.h), 2 bytes less each: ln1 and ln2 on all rows, atty's, fch's and
    // fch_gelu's share (9C/t) and qkv's (3C/t), lnf on H rows.
    double halves = c->mixed ? L * (2 * BT * C + (flash ? 12 : 9) * BT * C / t) + H * C : 0;
    acts -= 2 * halves;
    char per_token[96];
    if (!sp) snprintf(per_token, sizeof per_token, "%s + L (4C + 4 + (12C + %s)/t)", vp ? "2C + 2 + V/t" : "2C + 2 + V", att_text);
    else snprintf(per_token, sizeof per_token, "%s + L (2C + (14C + 4 + %s)/t)", vp ? "C + (C + 2 + V)/t" : "(2C + 2 + V)/t",
                  att_text);
    MemRow rows[] = {
        {.cat = MEM_PARAMS, .formula = "4 (Psi_rep + Psi_split/t)", .expect = 4 * mine},
        {.cat = MEM_GRADS, .formula = "4 (Psi_rep + Psi_split/t)", .expect = 4 * mine},
        {.cat = MEM_OPTIM, .formula = "8 (Psi_rep + Psi_split/t)", .expect = 8 * mine},
        {.cat = MEM_ACTS, .formula = c->mixed ? "BT (4a - 2h) (h: a's bf16s)" : "4 BT a (a: floats per token)",
         .expect = acts},
        {.cat = MEM_COMM, .formula = "0 (no buffers of its own)", .expect = 0},
    };
    DdpMemory ddp = train_ddp_memory(c, a->batch, ranks, a->accum, 4, 8, 1);
    runlog_printf(log, "\nPsi_rep = %.0f replicated parameters (LayerNorms, row-parallel biases, embeddings%s), "
                       "Psi_split = %.0f split over t = %d (this rank: %.0f)\n",
                  rep, vp ? "" : ", lm_head", split, t, split / t);
    runlog_printf(log, "activations: a = %s floats per token of a micro-batch's BT = %.0f rows\n", per_token, BT);
    if (c->mixed)
        runlog_printf(log, "--mixed: h = L (2C + %dC/t) + %s of them kept as bf16s (ln_1, ln_2, %sthe attention's output, "
                           "GELU's input and output, ln_f's output)\n",
                      flash ? 12 : 9, vp ? "C" : sp ? "C/t" : "C", flash ? "q, k, v, " : "");
    train_report_memory_vs_ddp(log, mem, NULL, c, micro, rows, 5, &ddp);
}

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

// The D x t mesh of N ranks (D = --dp): t tensor-parallel ranks per replica, which must
// divide the heads, the vocabulary with --vocab-parallel, and with --sp a micro-batch's token
// rows. Returns t; exits 2 with one line on what does not make a mesh.
static int check_mesh(const TrainArgs *a, int N, int dp, int sp, int vp) {
    BatchSplit s = batch_split_of("tp", a, N);  // the checks, one line each: common/harness/batchsplit.c
    s.dp = dp, s.sp = sp, s.vocab_parallel = vp;
    char why[768];
    if (batch_split_check(&s, why, sizeof why) != 0) usage_error("tp", "%s", why);
    return N / dp;
}

// This rank's two groups of the mesh: its tensor-parallel group (replica d's t ranks) and its
// data-parallel group (rank r of every replica). Every rank builds all of its groups, in the
// same order (NCCL's split is a collective over the whole world).
static void build_mesh(Dist *dist, int t, int dp, int r, int d, DistGroup *tp_group, DistGroup *dp_group) {
    int tp_ranks[DIST_MAX_RANKS], dp_ranks[DIST_MAX_RANKS];
    for (int k = 0; k < t; k++) tp_ranks[k] = d * t + k;
    for (int k = 0; k < dp; k++) dp_ranks[k] = k * t + r;
    dist_group(dist, tp_group, tp_ranks, t);
    dist_group(dist, dp_group, dp_ranks, dp);
}

// A step event's own fields: the mesh, the step's collectives by kind (f and g in the blocks,
// the replicated gradients' sums, the replicas'), the bytes of this rank's parameters, its
// slices' hash, and at the last step the whole model's.
static void step_fields(char *out, size_t n, const Tp *tp, int dp, const TpCount *rep, const TpCount *dpc, int last,
                        uint64_t model_hash) {
    uint64_t split_bytes = 0, rep_bytes = 0;
    for (int l = 0; l < tp->nlayers; l++) split_bytes += 4 * tp->split_n[l], rep_bytes += 4 * tp->rep_n[l];
    char whole[48] = "";
    if (last) snprintf(whole, sizeof whole, ",\"model_hash\":\"%016llx\"", (unsigned long long)model_hash);
    snprintf(out, n,
             "\"tp\":%d,\"dp\":%d,\"sp\":%s,\"vocab_parallel\":%s,"
             "\"tp_collectives\":{\"all_reduce\":%d,\"reduce_scatter\":%d,\"all_gather\":%d,\"bytes\":%llu},"
             "\"replicated_grad_all_reduces\":%d,\"replicated_grad_bytes\":%llu,\"dp_all_reduces\":%d,"
             "\"dp_bytes\":%llu,\"split_param_bytes\":%llu,\"replicated_param_bytes\":%llu,\"shard_hash\":\"%016llx\"%s",
             tp->t, dp, tp->sp ? "true" : "false", tp->vp ? "true" : "false", tp->model.calls[TP_ALL_REDUCE],
             tp->model.calls[TP_REDUCE_SCATTER], tp->model.calls[TP_ALL_GATHER], (unsigned long long)tp->model.bytes,
             rep->calls[TP_ALL_REDUCE], (unsigned long long)rep->bytes, dpc->calls[TP_ALL_REDUCE],
             (unsigned long long)dpc->bytes, (unsigned long long)split_bytes, (unsigned long long)rep_bytes,
             (unsigned long long)tp_hash(tp, 1), whole);
}

int main(int argc, char **argv) {
    TrainArgs a;
    int dp, sp, vp;  // the options' types, bounds and defaults: common/harness/catalog.c
    LabBind own[] = {{"dp", &dp}, {"sp", &sp}, {"vocab-parallel", &vp}};
    train_args_parse(&a, argc, argv, catalog_lab("tp"), own, 3);

    Lab L;  // the harness (common/harness/lab.h): ranks, device, collectives, run log, corpus, memory
    lab_open(&L, "tp", &a, argc, argv, 0);
    int N = L.world, rank = L.rank;
    int t = check_mesh(&a, N, dp, sp, vp), r = rank % t, d = rank / t;  // t tensor-parallel ranks, replica d
    int per_replica = a.batch / dp, micro = per_replica / a.accum;
    // The ring: its all-reduce is a reduce-scatter + an all-gather, and the byte counts are the formulas'.
    L.dist.algo = DIST_ALGO_RING;
    DistGroup tp_group, dp_group;
    build_mesh(&L.dist, t, dp, r, d, &tp_group, &dp_group);

    lab_begin(&L, "%d rank(s) on %s, backend %s, %d data-parallel replica(s) x %d tensor-parallel rank(s)%s%s", N,
              L.dev.name, L.backend, dp, t, sp ? ", sequence parallel" : "", vp ? ", vocabulary-parallel head" : "");
    RunLog *log = &L.log;
    GptConfig cfg = L.cfg;
    Tp tp;
    tp_create(&tp, &cfg, t, r, sp, vp, &tp_group, &L.dist, &L.mem, &a);
    tp.log = log;
    if (a.init) runlog_printf(log, "weights: loaded from %s\n", a.init);
    TpAdamW adam;
    tp_adamw_create(&adam, &tp, &a);
    TpActs acts;
    tp_acts_alloc(&acts, &tp, micro);

    int C = cfg.dim, hl = cfg.heads / t;
    runlog_printf(log, "rank %d = replica %d, tensor-parallel rank %d (group: ranks %d..%d): heads %d..%d of %d, "
                       "MLP units %d..%d of %d%s; sequences %d..%d of each global batch of %d, in %d micro-batch(es) "
                       "of %d, token rows %d..%d of each\n",
                  rank, d, r, d * t, d * t + t - 1, r * hl, (r + 1) * hl - 1, cfg.heads, r * 4 * C / t,
                  (r + 1) * 4 * C / t - 1, 4 * C, vp ? ", a vocabulary slice of V/t" : "", d * per_replica,
                  (d + 1) * per_replica - 1, a.batch, a.accum, micro, tp.row0, tp.row0 + tp.rows - 1);

    char lab_fields[160];
    snprintf(lab_fields, sizeof lab_fields, "\"tp\":%d,\"dp\":%d,\"sp\":%s,\"vocab_parallel\":%s", t, dp,
             sp ? "true" : "false", vp ? "true" : "false");
    lab_start(&L, gpt_num_params(&cfg), lab_fields);
    report_memory(log, &L.mem, &cfg, t, sp, vp, micro, &a, N);
    mem_reset_peak(&L.mem);

    // Checkpoints: whole units on the host (see above). The dp replicas are equal, and the
    // group's ranks rebuild the same whole units: every rank writes a 1/N chunk.
    TpCkpt ck = {0};
    DcpState ck_load = {0}, ck_save = {0};
    if (a.resume || a.save_every || a.replay_every) {
        tp_ckpt_create(&ck, &tp);
        tp_ckpt_pieces(&ck_load, &ck, &cfg, 0, 1);
        tp_ckpt_pieces(&ck_save, &ck, &cfg, rank, N);
    }
    int64_t first_step = lab_first_step(&L, &ck_load, &L.dist.world_group);
    if (a.resume) tp_ckpt_scatter(&ck, &tp, &adam);
    snprintf(L.saver.layout, sizeof L.saver.layout, "tp: %d replica(s) x %d tensor-parallel rank(s); the group's parts "
             "gathered into whole units, each rank a 1/N chunk", dp, t);

    Batch batch = {&L.corpus, &a, d * per_replica, per_replica};
    uint64_t model_hash = 0;
    Mem host;
    mem_init(&host, NULL);
    Gpt full;  // the whole model, gathered at the last step (summary hash, --save)

    for (int64_t step = first_step; step <= a.steps; step++) {
        int interrupted = lab_step_begin(&L, step);
        if (interrupted) return interrupted;
        tp.step = step, tp.comm_us = 0;
        memset(&tp.model, 0, sizeof tp.model);

        // 1. Forward and backward over this replica's micro-batches: f and g move activations
        //    inside every block; the gradients of each rank's parts accumulate.
        tp_zero_grads(&tp);
        double loss_sum = forward_backward(&tp, &acts, &batch, step, (float)(1.0 / L.tokens_per_step));
        if (step == first_step) check_collectives(log, &tp, a.accum);

        // 2. --sp: each replicated parameter saw only this rank's rows: sum over the group.
        TpCount rep_count = {{0}, 0}, dp_count = {{0}, 0};
        if (sp) all_reduce_gradients(&tp, &tp_group, "tp", "replicated_grads", 0, &rep_count);
        // 3. --dp: every gradient summed over the replicas (the loss scale 1/(B T) of the
        //    global batch makes the sum the mean).
        if (dp > 1) all_reduce_gradients(&tp, &dp_group, "dp", "dp_grads", 1, &dp_count);

        // 4. The loss of the global batch: the group's rows (--sp with a replicated head: each
        //    rank has its rows' losses), then the replicas. Every rank logs the same value.
        double replica_loss = loss_sum;
        if (sp && !vp && t > 1) {
            replica_loss = dist_sum_over_ranks(&tp_group, loss_sum);
            tp_log_collectives(&tp, "tp", "loss", "", -1, NULL);
        }
        double total = replica_loss;
        if (dp > 1) {
            total = dist_sum_over_ranks(&dp_group, replica_loss);
            tp_log_collectives(&tp, "dp", "loss", "", -1, NULL);
        }
        double loss = total / L.tokens_per_step;

        // 5. Clip and update: every rank its slices, and the replicated weights identically.
        int64_t t_opt = runlog_now_us();
        double lr = train_lr(&a, step);  // the schedule: warmup, then cosine decay (adamw.h)
        double grad_norm = tp_clip_and_update(&tp, &adam, a.clip, lr, step);
        runlog_span(log, step, "optim", -1, -1, t_opt, runlog_now_us(), 0);
        // The step's bytes are the training's: the gather below is the summary's, not the step's.
        uint64_t sent = L.dist.stats.bytes_sent - L.sent0, recv = L.dist.stats.bytes_recv - L.recv0;
        if (step == a.steps) {  // the whole model, for the summary's hash and --save
            gpt_create(&full, &cfg, &host, 0);
            tp_gather_model(&tp, &full);
            model_hash = gpt_param_hash(&full);
        }

        int64_t t1 = runlog_now_us();
        double ms = (double)(t1 - L.t0_us) / 1000.0, comm_ms = (double)tp.comm_us / 1000.0;
        char extra[768];
        step_fields(extra, sizeof extra, &tp, dp, &rep_count, &dp_count, step == a.steps, model_hash);
        StepRecord rec = {.step = step, .loss = loss, .lr = lr, .grad_norm = grad_norm, .tokens = (int64_t)per_replica * a.seq,
                          .ms_work = ms, .ms_compute = ms - comm_ms, .ms_comm = comm_ms, .bytes_sent = sent,
                          .bytes_recv = recv, .param_hash = tp_hash(&tp, 0), .extra = extra};
        if (dcp_due(&a, step)) tp_ckpt_gather(&ck, &tp, &adam);  // the whole units a checkpoint writes
        lab_step_end(&L, &rec, &ck_save);
    }
    if (a.resume || a.save_every || a.replay_every) tp_ckpt_destroy(&ck, &tp);
    dcp_state_free(&ck_load);
    dcp_state_free(&ck_save);

    if (a.save && rank == 0) {
        train_save_weights(&full, a.save);
        runlog_printf(log, "weights: the whole model gathered and saved to %s\n", a.save);
    }
    char extra[128];
    snprintf(extra, sizeof extra, "\"tp\":%d,\"dp\":%d,\"sp\":%s,\"vocab_parallel\":%s", t, dp, sp ? "true" : "false",
             vp ? "true" : "false");
    lab_finish(&L, model_hash, extra);
    gpt_destroy(&full);
    mem_destroy(&host);
    tp_adamw_destroy(&adam, &tp);
    tp_acts_free(&acts, &tp);
    tp_destroy(&tp);
    lab_close(&L);
    return 0;
}
