// zero.c — ZeRO stages 0 to 3 from scratch: shard the training state, not the work.
//
// Data parallelism (ddp.c) keeps a full replica of everything on every rank: the weights,
// their gradients and the optimizer state. ZeRO (Rajbhandari et al., "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", 2020) notices that each rank only
// needs ALL of it briefly, and cuts each of the three into N shards, one per rank:
//
//   stage 0  nothing sharded: DDP. The gradient all-reduce is written as its two halves,
//            reduce-scatter then all-gather (ring.c: that is what a ring all-reduce is).
//   stage 1  optimizer state sharded. The same two halves, with the optimizer step moved
//            between them: after the reduce-scatter rank r holds the summed gradient of
//            shard r only, so it updates shard r of the weights only (with its 1/N of the
//            AdamW state), and the all-gather then carries updated WEIGHTS instead of
//            gradients. Same bytes on the wire as DDP.
//   stage 2  gradients sharded too. Each unit's gradient is reduce-scattered the moment its
//            backward pass ends, the rank keeps its shard and frees the full gradient: a
//            rank never holds more than one unit's full gradient.
//   stage 3  parameters sharded too. Before a unit runs (forward, and again in backward),
//            its shards are all-gathered into a full copy, which is freed right after:
//            a rank holds its 1/N of the weights plus one unit at a time. Costs a second
//            all-gather of the weights in backward: 3 Psi on the wire instead of 2 Psi.
//   --offload (stages 1-3, ZeRO-Offload, Ren et al. 2021): the optimizer state lives in host
//            memory and the update runs on the host; the gradient shard goes down to the
//            host and the updated weights come back up, every step.
//
// Units are gpt.h's layers (embedding, each block, head); each is padded so that it splits
// into N equal shards (sharded.h draws it). --mixed stores weights and gradients in bf16 with
// fp32 master weights in the optimizer state.
//
// The algorithms it runs:
//   the units' shards: labs/08-zero/sharded.c, shard_layout_init()
//   a unit's collectives: labs/08-zero/sharded.c, sharded_reduce_scatter(), sharded_all_gather()
//   the sharded AdamW, on the device or the host: labs/08-zero/sharded.c, sharded_adamw_step()
//   the ring halves: labs/03-collectives/ring.c, ring_reduce_scatter(), ring_all_gather()
//
// Run it:   make lab-zero STAGE=2 NGPU=4 [ARGS="--mixed"]
//           build/shardlab run zero -n 4 --stage 3 --offload
//           build/labs/zero --help
//
// Lexicon: ZeRO, ZeRO stage 1, ZeRO stage 2, ZeRO stage 3, ZeRO-Offload, mixed precision,
//          reduce-scatter, all-gather, training memory breakdown.
//
// What it is graded against, per rank, with Psi' = Psi + padding elements, N ranks, e bytes
// per stored element (4 fp32, 2 bf16), K micro-batches, k = 8 (fp32: AdamW m, v) or 12
// (mixed: fp32 master weights, m, v):
//                 params      grads       optim       (DDP: e Psi + e Psi + k Psi)
//   stage 0       e Psi'      e Psi'      k Psi'
//   stage 1       e Psi'      e Psi'      k Psi'/N        mixed: 4 Psi + 12 Psi/N
//   stage 2       e Psi'      e Psi'/N    k Psi'/N        mixed: 2 Psi + 14 Psi/N
//   stage 3       e Psi'/N    e Psi'/N    k Psi'/N        mixed: 16 Psi/N
//   --offload     optim 0 on the device; host 12 Psi'/N (fp32 master weights, m, v), and
//                 e Psi'/N bytes each way between host and device per step
//   acts, comm    DDP's activations (B/(N K) sequences), 0 comm: the memory table prints
//                 DDP's own figures beside these (train_ddp_memory(), with its e Psi of
//                 bucket buffers), so DDP's total is what ddp.c's table prints
//   bytes sent per rank per step in reduce-scatters and all-gathers (ring, equal shards):
//     stages 0, 1 2 (N-1)/N Psi' e                         (= DDP's ring all-reduce)
//     stage 2     (K+1) (N-1)/N Psi' e                     (K reduce-scatters, 1 all-gather)
//     stage 3     3 K (N-1)/N Psi' e                       (gather fwd, gather bwd, scatter)
//   loss          equal to DDP and single on the same global batch up to fp32 rounding, and
//                 BITWISE equal across stages 0-3 at the same N with K = 1: sharding moves
//                 the same numbers around, it does not change them.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/dist.h"        // defines: DistGroup, dist_drain_records(), ...
#include "common/harness/args.h"     // defines: TrainArgs, train_args_parse(), train_lr()
#include "common/harness/check.h"    // defines: calloc_check(), usage_error()
#include "common/harness/data.h"     // defines: Corpus
#include "common/harness/lab.h"      // defines: Lab, lab_open(), lab_begin(), lab_start(), ...
#include "common/harness/mem.h"      // defines: Mem, mem_alloc(), mem_free(), ...
#include "common/harness/train.h"    // defines: train_ddp_memory(), train_model_config(), ...
#include "common/model/gpt.h"        // defines: GptActs, GptConfig, GptPassBuffers, ...
#include "common/runfiles/runlog.h"  // defines: RunLog, runlog_printf(), runlog_now_us(), ...
#include "sharded.h"                 // defines: shard_layout_init(), sharded_reduce_scatter(), ...

// ---------------------------------------------------------------------------------------
// The training state of one rank
// ---------------------------------------------------------------------------------------

typedef struct {
    int stage;
    Precision prec;
    size_t e;              // bytes per stored element
    ShardLayout lay;
    Mem *mem;
    const Ops *ops;
    DistGroup *group;
    // [unit], in storage precision. What a rank holds of each:
    //   params  stages 0-2: the whole padded unit      stage 3: its shard
    //   grads   stages 0-1: the whole padded unit      stages 2-3: its shard
    void **params, **grads;
    void **param_slice, **grad_slice;  // [unit] this rank's part: what its optimizer updates
} Zero;

static char *at(void *p, size_t elements, size_t e) { return (char *)p + elements * e; }

// lay: the units' shards over g's ranks (z owns it from here); init: sharded_init_weights()'s.
static void zero_create(Zero *z, int stage, Precision prec, const ShardLayout *lay, DistGroup *g, Mem *mem,
                        float *const *init) {
    z->stage = stage;
    z->prec = prec;
    z->e = precision_bytes(prec);
    z->mem = mem;
    z->ops = mem->dev->ops;
    z->group = g;
    z->lay = *lay;
    int U = z->lay.units;
    z->params = calloc_check((size_t)U, sizeof(void *));
    z->grads = calloc_check((size_t)U, sizeof(void *));
    z->param_slice = calloc_check((size_t)U, sizeof(void *));
    z->grad_slice = calloc_check((size_t)U, sizeof(void *));
    for (int u = 0; u < U; u++) {
        size_t s = z->lay.shard[u], full = shard_padded(&z->lay, u), mine = (size_t)g->rank * s;
        size_t np = stage == 3 ? s : full, ng = stage >= 2 ? s : full;
        z->params[u] = mem_alloc(mem, MEM_PARAMS, np * z->e, stage == 3 ? "parameter shard" : "parameters");
        z->grads[u] = mem_alloc(mem, MEM_GRADS, ng * z->e, stage >= 2 ? "gradient shard" : "gradients");
        z->param_slice[u] = stage == 0 || stage == 3 ? z->params[u] : at(z->params[u], mine, z->e);
        z->grad_slice[u] = stage == 0 || stage >= 2 ? z->grads[u] : at(z->grads[u], mine, z->e);
        sharded_load(mem, prec, z->params[u], init[u] + (stage == 3 ? mine : 0), np);  // what this rank holds
    }
}

static void zero_destroy(Zero *z) {
    for (int u = 0; u < z->lay.units; u++) {
        mem_free(z->mem, z->params[u]);
        mem_free(z->mem, z->grads[u]);
    }
    free(z->params);
    free(z->grads);
    free(z->param_slice);
    free(z->grad_slice);
    shard_layout_free(&z->lay);
}

// ---------------------------------------------------------------------------------------
// Weights in, gradients out: the part of each stage that runs around every unit
// ---------------------------------------------------------------------------------------

// The fp32 weights of unit u, ready to compute with. Stage 3 all-gathers the unit's shards
// into a full copy first (in forward AND again in backward: it was freed in between). With
// bf16 storage the weights are widened into an fp32 copy. unit_release() frees what this made.
typedef struct {
    void *gathered;   // stage 3: the full unit, storage precision
    float *widened;   // bf16: the fp32 copy
    const float *w;   // what the layer computes with
} UnitWeights;

static UnitWeights unit_acquire(Zero *z, int u) {
    UnitWeights uw = {0};
    size_t full = shard_padded(&z->lay, u);
    void *weights = z->params[u];
    if (z->stage == 3) {
        uw.gathered = mem_alloc(z->mem, MEM_PARAMS, full * z->e, "gathered unit");
        sharded_all_gather(z->group, z->prec, z->params[u], uw.gathered, full, u, NULL);
        weights = uw.gathered;
    }
    uw.w = sharded_widen(z->mem, z->prec, weights, full, &uw.widened);
    return uw;
}

static void unit_release(Zero *z, UnitWeights *uw) {
    mem_free(z->mem, uw->widened);
    mem_free(z->mem, uw->gathered);  // stage 3: the full copy goes; the shard stays
    memset(uw, 0, sizeof *uw);
}

// Where unit u's backward writes its fp32 gradient: straight into the stored gradients (fp32,
// stages 0-1, which keep whole units), else into a zeroed buffer for this unit only.
static float *unit_grad_begin(Zero *z, int u) {
    if (z->prec == PREC_FP32 && z->stage <= 1) return z->grads[u];
    return mem_alloc_floats(z->mem, MEM_GRADS, shard_padded(&z->lay, u), "gradient of one unit");
}

// Unit u's backward has ended (one micro-batch). Stages 0-1 keep the whole gradient, summed
// over micro-batches locally. Stages 2-3 reduce-scatter it now: the rank adds the sum of its
// shard over all ranks to its gradient shard, and the unit's full gradient is freed.
static void unit_grad_end(Zero *z, int u, float *g32) {
    size_t full = shard_padded(&z->lay, u);
    if (z->stage <= 1) {
        if (g32 != z->grads[u]) {
            precision_accumulate(z->ops, z->prec, z->grads[u], g32, full);  // bf16 += fp32, rounded
            mem_free(z->mem, g32);
        }
        return;
    }
    sharded_reduce_gradient(z->group, z->prec, z->mem, g32, z->grads[u], full, u);
    mem_free(z->mem, g32);
}

// ---------------------------------------------------------------------------------------
// One step
// ---------------------------------------------------------------------------------------

typedef struct {
    const Corpus *corpus;
    const TrainArgs *a;
    GptActs *acts;
    RunLog *log;
    int first, count;  // this rank's sequences of the global batch
} Batch;

// Forward and backward over this rank's micro-batches; returns the sum of the token losses.
static double forward_backward(Zero *z, const Batch *b, int64_t step, float loss_scale) {
    const GptConfig c = train_model_config(b->a);
    int micro = b->acts->B, U = z->lay.units;
    GptPassBuffers pass;  // tokens, targets, the workspace, the gradient flowing down (gpt.h)
    gpt_pass_buffers_alloc(&pass, &c, micro, z->mem);
    double loss_sum = 0;
    // Spans on the device's clock (train.h): a GPU's are read once, when the step's work is queued.
    const Device *dev = z->mem->dev;
    SpanLogger spans = {.log = b->log, .step = step};
    for (int mb = 0; mb * micro < b->count; mb++) {
        train_micro_batch(b->corpus, b->a, step, b->first + mb * micro, micro, pass.tokens, pass.targets);
        spans.mb = mb;
        for (int u = 0; u < U; u++) {
            UnitWeights uw = unit_acquire(z, u);  // stage 3: all-gather
            DeviceMark m0 = device_mark(dev);
            loss_sum += gpt_layer_forward(z->ops, &c, u, uw.w, b->acts, pass.tokens, pass.targets, pass.scratch);
            span_logger_add(&spans, dev, "fwd", u, m0, device_mark(dev));
            unit_release(z, &uw);                 // stage 3: free the gathered copy
        }
        for (int u = U - 1; u >= 0; u--) {
            UnitWeights uw = unit_acquire(z, u);  // stage 3: all-gather again
            float *g32 = unit_grad_begin(z, u);
            DeviceMark m0 = device_mark(dev);
            gpt_layer_backward(z->ops, &c, u, uw.w, g32, b->acts, pass.tokens, pass.targets, loss_scale, pass.dx, pass.scratch);
            span_logger_add(&spans, dev, "bwd", u, m0, device_mark(dev));
            unit_release(z, &uw);
            unit_grad_end(z, u, g32);             // stages 2-3: reduce-scatter
        }
    }
    span_logger_flush(&spans);
    gpt_pass_buffers_free(&pass, z->mem);
    return loss_sum;
}

// After the backward pass: stages 0-1 reduce-scatter the whole gradients in place (rank r's
// shard of each unit now holds the sum over ranks); stage 0 then all-gathers them, which
// completes DDP's all-reduce. (Stages 2-3 did theirs unit by unit: nothing to do here.) Unit
// u is shard_padded() elements long, rank r's shard starts r shard[u] elements in (at()),
// and each collective is tagged with its unit; NULL work: synchronous.
static void reduce_gradients(Zero *z) {
    /* BEGIN SOLUTION: stages 0-1: reduce-scatter each unit's gradient in place (stage 0: then all-gather it) */
    for (int u = 0; u < z->lay.units && z->stage <= 1; u++) {
        size_t full = shard_padded(&z->lay, u), mine = (size_t)z->lay.rank * z->lay.shard[u];
        sharded_reduce_scatter(z->group, z->prec, z->grads[u], at(z->grads[u], mine, z->e), full, u, NULL);
        if (z->stage == 0) sharded_all_gather(z->group, z->prec, at(z->grads[u], mine, z->e), z->grads[u], full, u, NULL);
    }
    /* END SOLUTION */
}

// After the optimizer step: stages 1-2 hold the updated shard of weights that every rank needs
// whole for the next forward pass: all-gather them in place, from each unit's param_slice
// into its params. (Stage 0 updated everything; stage 3 gathers per unit when it runs.)
static void gather_updated_weights(Zero *z) {
    /* BEGIN SOLUTION: stages 1-2: all-gather each unit's updated shard into the whole unit */
    for (int u = 0; u < z->lay.units && (z->stage == 1 || z->stage == 2); u++)
        sharded_all_gather(z->group, z->prec, z->param_slice[u], z->params[u], shard_padded(&z->lay, u), u, NULL);
    /* END SOLUTION */
}

static void zero_zero_grads(Zero *z) {
    for (int u = 0; u < z->lay.units; u++) {
        size_t n = z->stage >= 2 ? z->lay.shard[u] : shard_padded(&z->lay, u);
        device_zero(z->mem->dev, z->grads[u], n * z->e);
    }
}

// The bytes a rank sends per step in the units' reduce-scatters and all-gathers (ring, equal
// shards: (N-1) shards each), the formula of the top comment.
static double expected_unit_bytes(const Zero *z, int K) {
    double per_pass = (double)(z->lay.world - 1) * (double)z->lay.shard_total * (double)z->e;  // (N-1)/N Psi' e
    switch (z->stage) {
    case 0:
    case 1: return 2 * per_pass;
    case 2: return (K + 1) * per_pass;
    default: return 3.0 * K * per_pass;
    }
}


// ---------------------------------------------------------------------------------------
// The memory table: this stage's formula, measured, and what DDP holds instead
// ---------------------------------------------------------------------------------------

static void report_memory(RunLog *log, const Zero *z, const Mem *mem, const Mem *host, int offload,
                          const GptConfig *cfg, int micro, const TrainArgs *a) {
    double N = z->lay.world, e = (double)z->e, pp = (double)z->lay.psi_padded, psi = (double)z->lay.psi;
    int mixed = z->prec == PREC_BF16, st = z->stage;
    double k = mixed ? 12 : 8;
    char fp[48], fg[48], fo[48], fh[48];
    snprintf(fp, sizeof fp, st == 3 ? "%g Psi'/N" : "%g Psi'", e);
    snprintf(fg, sizeof fg, st >= 2 ? "%g Psi'/N" : "%g Psi'", e);
    if (offload) snprintf(fo, sizeof fo, "0 (offloaded to the host)");
    else snprintf(fo, sizeof fo, st == 0 ? "%g Psi' (%s)" : "%g Psi'/N (%s)", k, mixed ? "master, m, v" : "AdamW m, v");
    snprintf(fh, sizeof fh, "12 Psi'/N (master, m, v)");
    const char *acts_formula;
    double acts_expect = train_acts_formula(cfg, micro, &acts_formula);
    MemRow rows[6] = {
        {.cat = MEM_PARAMS, .formula = fp, .expect = e * (st == 3 ? pp / N : pp)},
        {.cat = MEM_GRADS, .formula = fg, .expect = e * (st >= 2 ? pp / N : pp)},
        {.cat = MEM_OPTIM, .formula = fo, .expect = offload ? 0 : k * (st == 0 ? pp : pp / N)},
        {.cat = MEM_ACTS, .formula = acts_formula, .expect = acts_expect},
        {.cat = MEM_COMM, .formula = "0 (transient buffers only)", .expect = 0},
        {.cat = MEM_OPTIM, .formula = fh, .expect = 12 * pp / N, .host = 1},
    };
    // DDP at the same N and --accum, in the same precision, with its bucket buffers.
    DdpMemory ddp = train_ddp_memory(cfg, a->batch, z->lay.world, a->accum, (int)z->e, (int)k, 1);
    runlog_printf(log, "\nZeRO stage %d, %s storage%s: Psi = %.0f parameters in %d units, each padded to split into %d "
                       "equal shards%s: Psi' = %.0f (padding: %.0f elements)\n",
                  st, precision_name(z->prec), offload ? ", optimizer offloaded to the host" : "", psi, z->lay.units,
                  z->lay.world, z->lay.align > 1 ? " of an even length" : "", pp, pp - psi);
    train_report_memory_vs_ddp(log, mem, host, cfg, micro, rows, offload ? 6 : 5, &ddp);
}

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    TrainArgs a;
    int stage, offload, save_optim;  // the options' types, bounds and defaults: common/harness/catalog.c
    LabBind own[] = {{"stage", &stage}, {"offload", &offload}, {"save-optim", &save_optim}};
    train_args_parse(&a, argc, argv, catalog_lab("zero"), own, 3);
    int mixed = a.mixed;  // (a shared option: here it also stores weights and gradients in bf16)
    if (offload && stage == 0)
        usage_error("zero", "--offload moves the sharded optimizer to the host: it needs --stage 1, 2 or 3 (stage 0 is DDP)");
    Precision prec = mixed ? PREC_BF16 : PREC_FP32;

    Lab L;  // the harness (common/harness/lab.h): ranks, device, collectives, run log, corpus, memory
    lab_open(&L, "zero", &a, argc, argv, 0);
    int N = L.world, rank = L.rank;
    train_check_batch(&a, "zero", N);
    // The ring: its reduce-scatter and all-gather send exactly (N-1) shards each, the paper's
    // count, and its all-reduce is those two halves (so stage 0 is DDP bit for bit).
    L.dist.algo = DIST_ALGO_RING;
    lab_begin(&L, "stage %d on %d rank(s) on %s, backend %s, %s%s", stage, N, L.dev.name, L.backend,
              mixed ? "mixed precision (bf16 storage and matrix products, fp32 master weights)" : "fp32",
              offload ? ", optimizer offloaded to the host" : "");
    RunLog *log = &L.log;
    GptConfig cfg = L.cfg;
    Mem *mem = &L.mem, host;  // host: ZeRO-Offload's optimizer state, counted apart
    mem_init(&host, NULL);
    Zero z;
    ShardLayout lay;  // every unit padded to N equal shards (of an even length for bf16)
    shard_layout_init(&lay, &cfg, N, rank, mixed ? 2 : 1);
    float **init = sharded_init_weights(&lay, &cfg, &a, &L.dist.world_group);
    zero_create(&z, stage, prec, &lay, &L.dist.world_group, mem, init);
    ShardedAdamW adam;
    sharded_adamw_create(&adam, &z.lay, prec, stage >= 1, offload, &a, mem, &host, init);
    sharded_free_weights(&z.lay, init);
    int per_rank = a.batch / N, micro = per_rank / a.accum;
    GptActs acts;
    gpt_acts_alloc(&acts, &cfg, micro, mem);

    char layout[160], lab_fields[256];
    sharded_layout_fields(layout, sizeof layout, &z.lay, prec);
    snprintf(lab_fields, sizeof lab_fields, "\"stage\":%d,\"offload\":%s,%s", stage, offload ? "true" : "false", layout);
    lab_start(&L, gpt_num_params(&cfg), lab_fields);
    report_memory(log, &z, mem, &host, offload, &cfg, micro, &a);
    runlog_printf(log, "rank %d trains on sequences %d..%d of each global batch of %d, in %d micro-batch(es) of %d\n",
                  rank, rank * per_rank, (rank + 1) * per_rank - 1, a.batch, a.accum, micro);
    mem_reset_peak(mem);

    // Distributed checkpoints (dcp.h): each rank saves and loads its own slices; a checkpoint
    // from any lab at any N loads, each rank reading the ranges of its shards.
    DcpState load_state = {0}, save_state = {0};
    sharded_dcp_state(&load_state, &adam, z.param_slice, 0, 1);
    sharded_dcp_state(&save_state, &adam, z.param_slice, stage == 0 ? rank : 0, stage == 0 ? N : 1);  // (stage 0: each its 1/N)
    int64_t first_step = lab_first_step(&L, &load_state, &L.dist.world_group);
    if (a.resume) {
        sharded_dcp_loaded(&adam, z.param_slice);
        if (N > 1) gather_updated_weights(&z);  // stages 1-2: every rank's full weights from the loaded shards
        dist_drain_records(&L.dist, L.records, LAB_MAX_RECORDS);
    }
    snprintf(L.saver.layout, sizeof L.saver.layout, "zero stage %d, %s%s: each rank its shard of every unit (stage 0: a 1/N chunk)",
             stage, precision_name(prec), offload ? ", offload" : "");

    Batch batch = {&L.corpus, &a, &acts, log, rank * per_rank, per_rank};
    const double expect_bytes = expected_unit_bytes(&z, a.accum);

    for (int64_t step = first_step; step <= a.steps; step++) {
        int interrupted = lab_step_begin(&L, step);
        if (interrupted) return interrupted;
        int64_t comm_us = 0;

        // 1. Forward and backward, unit by unit (stage 3 gathers each unit's weights as it
        //    runs; stages 2-3 reduce-scatter each unit's gradient as soon as it is complete).
        zero_zero_grads(&z);
        double loss_sum = forward_backward(&z, &batch, step, (float)(1.0 / L.tokens_per_step));
        // 2. Stages 0-1: reduce-scatter the gradients (stage 0: and all-gather them back). One
        //    rank has nothing to exchange: its gradients are the sum, its shards the whole units.
        if (N > 1) reduce_gradients(&z);
        // 3. Each rank updates its slice: its shard (stages 1-3), everything (stage 0).
        int64_t t_opt = runlog_now_us();
        double lr = train_lr(&a, step);  // the schedule: warmup, then cosine decay (adamw.h)
        double grad_norm = sharded_adamw_step(&adam, &L.dist.world_group, z.param_slice, z.grad_slice, a.clip, lr, step);
        runlog_span(log, step, "optim", -1, -1, t_opt, runlog_now_us(), 0);
        // 4. Stages 1-2: every rank gets every updated shard.
        if (N > 1) gather_updated_weights(&z);
        uint64_t unit_bytes = sharded_log_collectives(log, &L.dist, L.records, LAB_MAX_RECORDS, step, &comm_us, NULL);
        if (step == first_step)  // more or fewer bytes: a warning, and comm.bytes grades it
            runlog_self_check(log, "comm.unit_bytes_sent", (double)unit_bytes == expect_bytes, (double)unit_bytes,
                              expect_bytes, "the reduce-scatters and all-gathers sent %llu bytes, the formula says %.0f",
                              (unsigned long long)unit_bytes, expect_bytes);

        // 5. The loss of the global batch, for the log: the ranks' sums, added in rank order.
        int64_t tl = runlog_now_us();
        double loss = dist_sum_over_ranks(&L.dist.world_group, loss_sum) / L.tokens_per_step;
        comm_us += runlog_now_us() - tl;
        dist_drain_records(&L.dist, L.records, LAB_MAX_RECORDS);

        int64_t t1 = runlog_now_us();
        double ms = (double)(t1 - L.t0_us) / 1000.0, comm_ms = (double)comm_us / 1000.0;
        char extra[320];
        snprintf(extra, sizeof extra,
                 "\"unit_bytes_sent\":%llu,\"param_hash_of\":\"%s\",\"precision\":\"%s\","
                 "\"offload_bytes\":{\"d2h\":%llu,\"h2d\":%llu}",
                 (unsigned long long)unit_bytes, stage == 3 ? "shard" : "replica", precision_name(prec),
                 (unsigned long long)adam.bytes_d2h, (unsigned long long)adam.bytes_h2d);
        StepRecord rec = {.step = step, .loss = loss, .lr = lr, .grad_norm = grad_norm, .tokens = (int64_t)(per_rank * a.seq),
                          .ms_work = ms, .ms_compute = ms - comm_ms, .ms_comm = comm_ms, .host_mem = offload ? &host : NULL,
                          .param_hash = sharded_hash(&z.lay, prec, &L.dev, z.params, stage < 3), .extra = extra};
        lab_step_end(&L, &rec, &save_state);
    }
    dcp_state_free(&load_state);
    dcp_state_free(&save_state);

    // The summary's hash is of the whole model, gathered unit by unit for stage 3, so that
    // runs of every stage compare.
    uint64_t hash = sharded_model_hash(&z.lay, prec, mem, &L.dist.world_group, z.params, stage < 3);
    if (a.save) {
        sharded_save_weights(a.save, &cfg, &adam, &L.dist.world_group, z.param_slice);
        if (rank == 0) runlog_printf(log, "weights: saved to %s\n", a.save);
    }
    if (save_optim) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/optim-rank-%d.safetensors", log->dir, rank);
        sharded_save_optim(path, &adam);
        runlog_printf(log, "optimizer state: rank %d's slices saved to %s\n", rank, path);
    }
    char extra[160];
    snprintf(extra, sizeof extra, "\"stage\":%d,\"precision\":\"%s\",\"offload\":%s,\"psi_padded\":%zu", stage,
             precision_name(prec), offload ? "true" : "false", z.lay.psi_padded);
    lab_finish(&L, hash, extra);
    sharded_adamw_destroy(&adam);
    gpt_acts_free(&acts, mem);
    zero_destroy(&z);
    mem_destroy(&host);
    lab_close(&L);
    return 0;
}
