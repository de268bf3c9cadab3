// ddp.c — data parallelism from scratch: N replicas, one gradient.
//
// Every rank holds the whole model, its gradients and its optimizer state (a replica), and
// trains on its own slice of the global batch. After the backward pass the ranks all-reduce
// their gradients, so every rank holds the gradient of the WHOLE batch, takes the same AdamW
// step, and the replicas stay bitwise equal. The training is the single-rank training on
// the same global batch: only the order of fp32 additions differs.
//
// The algorithms it runs:
//   the buckets: labs/05-ddp/ddp.c, buckets_build(), on_layer_backward_done(), sync_gradients()
//   the ring all-reduce: labs/03-collectives/ring.c, ring_reduce_scatter(), ring_all_gather()
//   the communication thread: labs/common/comm/dist.c, submit(), comm_thread(), dist_wait()
//   AdamW: labs/common/model/adamw.c, adamw_update()
// labs/common/comm/dist.h draws the way from dist_all_reduce_start() down to the ring.
//
// Run it:   make lab-ddp NGPU=2 [STEPS=200] [ARGS="--sync bucket --bucket-mb 0.5"]
//           build/shardlab run ddp -n 4 --sync per-tensor
//           build/labs/ddp --help
//
// Lexicon: data parallelism, replica, all-reduce, ring all-reduce, gradient bucketing,
//          communication/computation overlap, gradient accumulation, no_sync, global batch.
//
// The three ways to synchronize gradients (--sync):
//   per-tensor  after the backward pass, one all-reduce per tensor (29 for L=2): many small
//               messages, each paying the fixed cost of a collective. The naive version.
//   bucket      after the backward pass, the gradients are copied into flat buckets of
//               about --bucket-mb and each bucket is all-reduced: few big messages.
//   overlap     (default) the same buckets, but a bucket's all-reduce starts the moment the
//               backward pass has produced its last gradient, on the communication thread,
//               while the backward pass goes on with earlier layers. What PyTorch's DDP does.
// With --accum K the ranks do not communicate until the last micro-batch (DDP's no_sync):
// gradients accumulate locally, then one all-reduce per bucket per step.
//
// The loss: each rank scales its tokens' losses by 1/(B T) of the GLOBAL batch, so the SUM
// of the ranks' gradients is the gradient of the global mean; no division by N is needed.
//
// What it is graded against (Psi parameters, N ranks, global batch B, K micro-batches):
//   every rank     params 4 Psi, grads 4 Psi, optim 8 Psi: DDP replicates everything
//                  acts   as single with a micro-batch of B/(N K) sequences
//                  comm   4 Psi with buckets (the bucket buffers are a second copy of the
//                         gradients), 0 per-tensor (all-reduced in place)
//   bytes sent per rank per step, ring all-reduce: 2 (N-1)/N x 4 Psi (exactly, summed over
//                  ranks; per rank within the rounding of uneven chunks), plus the loss
//   param_hash     identical on every rank after every step
//   loss           equal to `single` on the same global batch, up to fp32 rounding
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/dist.h"        // defines: dist_wait(), dist_all_reduce_start(), DistWork, ...
#include "common/harness/args.h"     // defines: TrainArgs, train_args_parse()
#include "common/harness/check.h"    // defines: calloc_check()
#include "common/harness/data.h"
#include "common/harness/lab.h"      // defines: Lab, lab_open(), lab_begin(), ...
#include "common/harness/mem.h"      // defines: Mem, mem_alloc_floats(), mem_reset_peak(), ...
#include "common/harness/train.h"    // defines: train_check_batch(), GptAdamW, DdpMemory, ...
#include "common/model/adamw.h"      // defines: AdamW, adamw_update()
#include "common/model/gpt.h"        // defines: Gpt, GPT_MAX_TENSORS, gpt_layer_tensors(), ...
#include "common/runfiles/dcp.h"     // defines: DcpState, dcp_add_units(), dcp_state_free()
#include "common/runfiles/runlog.h"  // defines: runlog_now_us(), RunLog, runlog_comm_span(), ...

// ---------------------------------------------------------------------------------------
// Buckets: gradient tensors grouped in the order the backward pass produces them
// ---------------------------------------------------------------------------------------

typedef enum { SYNC_PER_TENSOR, SYNC_BUCKET, SYNC_OVERLAP } SyncMode;

typedef struct {
    int layer;
    size_t offset, count;  // floats within the layer's flat gradient buffer
} Segment;

typedef struct {
    Segment seg[64];
    int nseg;
    size_t count;       // floats
    int last_layer;     // complete once the backward pass has finished this layer
    float *flat;        // the bucket buffer ("comm" memory); NULL per-tensor (in place)
    DistWork work;
} Bucket;

typedef struct {
    Bucket *b;
    int n;
    int next_to_start;  // overlap: buckets start in order, as their layers finish
} Buckets;

// The backward pass runs from the head (layer L+1) down to the embedding (layer 0), so the
// gradients of the last layers are ready first. Buckets take whole tensors in that order
// until they hold at least cap floats (a tensor is never split, as in PyTorch). Per-tensor
// sync is the same with a cap of one float: one tensor per bucket.
static void buckets_build(Buckets *bs, const Gpt *g, size_t cap, int flat, Mem *mem) {
    bs->b = calloc_check((size_t)g->nlayers * GPT_MAX_TENSORS, sizeof *bs->b);  // at most one per tensor
    bs->n = 0;
    // Layers from L+1 down to 0, each layer's tensors (gpt_layer_tensors) last to first: a
    // tensor joins the current bucket as a Segment, unless that bucket already holds cap
    // floats (or 64 segments): then it opens the next bucket, bs->b[bs->n++]. A bucket's
    // last_layer is the layer of the last tensor it took.
    /* BEGIN SOLUTION: fill the buckets with whole tensors in the order the backward pass makes them */
    Bucket *cur = NULL;
    for (int l = g->nlayers - 1; l >= 0; l--) {
        GptTensor t[GPT_MAX_TENSORS];
        int k = gpt_layer_tensors(&g->cfg, l, t);
        for (int i = k - 1; i >= 0; i--) {
            if (!cur || cur->count >= cap || cur->nseg == 64) cur = &bs->b[bs->n++];
            cur->seg[cur->nseg++] = (Segment){l, t[i].offset, t[i].count};
            cur->count += t[i].count;
            cur->last_layer = l;
        }
    }
    /* END SOLUTION */
    for (int i = 0; flat && i < bs->n; i++) bs->b[i].flat = mem_alloc_floats(mem, MEM_COMM, bs->b[i].count, "DDP bucket");
}

static void bucket_pack(Bucket *b, Gpt *g) {
    float *p = b->flat;
    for (int s = 0; s < b->nseg; s++) {
        g->mem->dev->ops->copy(p, g->grads[b->seg[s].layer] + b->seg[s].offset, b->seg[s].count);
        p += b->seg[s].count;
    }
}

static void bucket_unpack(const Bucket *b, Gpt *g) {
    const float *p = b->flat;
    for (int s = 0; s < b->nseg; s++) {
        g->mem->dev->ops->copy(g->grads[b->seg[s].layer] + b->seg[s].offset, p, b->seg[s].count);
        p += b->seg[s].count;
    }
}

// ---------------------------------------------------------------------------------------
// The three ways to sum the gradients over the ranks
// ---------------------------------------------------------------------------------------

typedef struct {
    SyncMode mode;
    Buckets buckets;
    Gpt *model;
    DistGroup *group;
} Sync;

// Overlap: called as each layer's backward ends (last micro-batch only). Every bucket whose
// last tensor came from this layer is complete: pack it and start its all-reduce; the
// communication thread runs it while the backward pass computes the layers below. Buckets
// complete in order, so bs->next_to_start is the next one to start; the all-reduce is
// asynchronous (dist_all_reduce_start, tagged with the bucket's index, into b->work), and
// sync_gradients() waits for it after the backward pass.
static void on_layer_backward_done(void *ctx, GptPhase phase, int layer, int64_t t0_us, int64_t t1_us) {
    /* BEGIN SOLUTION: start the all-reduce of every bucket this layer completed */
    Sync *s = ctx;
    Buckets *bs = &s->buckets;
    while (bs->next_to_start < bs->n && bs->b[bs->next_to_start].last_layer == layer) {
        Bucket *b = &bs->b[bs->next_to_start];
        bucket_pack(b, s->model);
        dist_all_reduce_start(s->group, b->flat, b->count, bs->next_to_start, &b->work);
        bs->next_to_start++;
    }
    /* END SOLUTION */
}

// After the backward pass. Returns the microseconds the caller spent waiting for
// communication (for overlap: only what the backward pass did not hide).
static int64_t sync_gradients(Sync *s) {
    int64_t t0 = runlog_now_us();
    Buckets *bs = &s->buckets;
    for (int i = 0; i < bs->n; i++) {
        Bucket *b = &bs->b[i];
        // (start + wait at once is a synchronous all-reduce that carries the bucket's index)
        switch (s->mode) {
        case SYNC_PER_TENSOR:  // in place, one tensor at a time
            dist_all_reduce_start(s->group, s->model->grads[b->seg[0].layer] + b->seg[0].offset, b->count, i, &b->work);
            dist_wait(&b->work);
            break;
        case SYNC_BUCKET:
            bucket_pack(b, s->model);
            dist_all_reduce_start(s->group, b->flat, b->count, i, &b->work);
            dist_wait(&b->work);
            bucket_unpack(b, s->model);
            break;
        case SYNC_OVERLAP:  // started during the backward pass; wait for it in order
            dist_wait(&b->work);
            bucket_unpack(b, s->model);
            break;
        }
    }
    bs->next_to_start = 0;
    return runlog_now_us() - t0;
}

// The bytes the ring (or direct) all-reduce of n floats sends from group rank r of p.
static uint64_t all_reduce_bytes(const char *algo, size_t n, int p, int r) {
    if (p == 1) return 0;
    if (strcmp(algo, "direct") == 0) return 4ull * (uint64_t)(p - 1) * n;
    size_t off, mine, next;
    dist_chunk(n, p, r, &off, &mine);
    dist_chunk(n, p, (r + 1) % p, &off, &next);
    return 4ull * (2 * n - mine - next);  // every chunk but ours in reduce-scatter, but r+1's in all-gather
}

// One span event per finished collective (bucket: its index, or -1). check = 1 (the gradient
// all-reduces of the first step) also checks that the bytes sent are the algorithm's count
// for the floats each call reduced (a ring that sends a chunk twice moves more), as a check
// event and a warning: the run goes on, and `shardlab grade` (comm.bytes) judges it. Returns
// the bytes sent.
static uint64_t log_comm_spans(RunLog *log, Dist *d, DistRecord *records, int64_t step, int mb, int check) {
    size_t k = dist_drain_records(d, records, 4096);
    uint64_t sent = 0, expect = 0;
    for (size_t i = 0; i < k; i++) {
        char extra[64];
        snprintf(extra, sizeof extra, "\"bucket\":%d,\"algo\":\"%s\"", records[i].tag, records[i].algo);
        runlog_comm_span(log, step, dist_coll_name(records[i].coll), mb, -1, records[i].t0_us, records[i].t1_us,
                         records[i].bytes_sent, records[i].waited_from_us, extra);
        sent += records[i].bytes_sent;
        expect += all_reduce_bytes(records[i].algo, records[i].count, d->world, d->rank);
    }
    if (check)
        runlog_self_check(log, "comm.grad_bytes_sent", sent == expect, (double)sent, (double)expect,
                          "the gradient all-reduces sent %llu bytes, the algorithm's count for what they reduced is %llu",
                          (unsigned long long)sent, (unsigned long long)expect);
    return sent;
}

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    TrainArgs a;
    const char *sync_name, *algo_name;  // the options' types, bounds and defaults: common/harness/catalog.c
    double bucket_mb;
    LabBind own[] = {{"sync", &sync_name}, {"bucket-mb", &bucket_mb}, {"algo", &algo_name}};
    train_args_parse(&a, argc, argv, catalog_lab("ddp"), own, 3);
    SyncMode mode = strcmp(sync_name, "per-tensor") == 0 ? SYNC_PER_TENSOR
                  : strcmp(sync_name, "bucket") == 0    ? SYNC_BUCKET
                                                        : SYNC_OVERLAP;

    // Who we are (RANK, LOCAL_RANK, ... or mpirun's and srun's names), where we compute (a
    // GPU of our own, a shared one, or the CPU), and then the collectives' backend that fits
    // (common/harness/lab.h, the harness every lab opens with).
    Lab L;
    lab_open(&L, "ddp", &a, argc, argv, 0);
    int N = L.world, rank = L.rank;
    train_check_batch(&a, "ddp", N);
    L.dist.algo = (DistAlgo)dist_algo_parse(algo_name);
    lab_begin(&L, "%d rank(s) on %s, backend %s", N, L.dev.name, L.backend);
    RunLog *log = &L.log;
    GptConfig cfg = L.cfg;

    // DDP's first step: every replica starts from rank 0's weights (the harness broadcasts them).
    Gpt model;
    GptAdamW adam;
    lab_replica_create(&L, &model, &adam);
    int per_rank = a.batch / N, micro = per_rank / a.accum;
    GptActs acts;
    gpt_acts_alloc(&acts, &cfg, micro, &L.mem);

    Sync sync = {.mode = mode, .model = &model, .group = &L.dist.world_group};
    size_t cap = mode == SYNC_PER_TENSOR ? 1 : (size_t)(bucket_mb * 1024 * 1024 / sizeof(float));
    buckets_build(&sync.buckets, &model, cap > 0 ? cap : 1, mode != SYNC_PER_TENSOR, &L.mem);
    runlog_printf(log, "sync: %s, %d all-reduce(s) per step (%s), algorithm %s; rank %d trains on sequences %d..%d "
                       "of each global batch of %d, in %d micro-batch(es) of %d\n",
                  sync_name, sync.buckets.n, mode == SYNC_PER_TENSOR ? "one per tensor" : "buckets", algo_name, rank,
                  rank * per_rank, (rank + 1) * per_rank - 1, a.batch, a.accum, micro);

    char lab_fields[160];
    snprintf(lab_fields, sizeof lab_fields, "\"sync\":\"%s\",\"bucket_mb\":%.9g,\"algo\":\"%s\",\"buckets\":%d", sync_name,
             bucket_mb, algo_name, sync.buckets.n);
    lab_start(&L, gpt_num_params(&cfg), lab_fields);
    // The memory table (train.h's DdpMemory: the labs that replace DDP print the same figures).
    DdpMemory held = train_ddp_memory(&cfg, a.batch, N, a.accum, 4, 8, mode != SYNC_PER_TENSOR);
    MemRow rows[MEM_CATEGORIES];
    for (int c = 0; c < MEM_CATEGORIES; c++) rows[c] = (MemRow){.cat = c, .formula = held.formula[c], .expect = held.bytes[c]};
    train_report_memory(log, &L.mem, NULL, &cfg, micro, rows, 5);
    mem_reset_peak(&L.mem);

    // Distributed checkpoints (dcp.h): every replica loads the whole state; saving, each
    // writes a 1/N chunk of it (the replicas are equal: no need to write it N times).
    DcpState whole = {0}, chunk = {0};
    dcp_add_units(&whole, &cfg, model.params, adam.m, adam.v, 0, 1);
    dcp_add_units(&chunk, &cfg, model.params, adam.m, adam.v, rank, N);
    int64_t first_step = lab_first_step(&L, &whole, &L.dist.world_group);
    SpanLogger spans = {.log = log};
    GptHooks sync_hooks = {.layer_done = on_layer_backward_done, .ctx = &sync};

    for (int64_t step = first_step; step <= a.steps; step++) {
        int interrupted = lab_step_begin(&L, step);
        if (interrupted) return interrupted;
        spans.step = step;

        // 1. Forward and backward on this rank's slice of the global batch. The gradients
        //    accumulate over the micro-batches; only the last one's backward starts the
        //    buckets' all-reduces (overlap).
        gpt_zero_grads(&model);
        double loss_sum = train_accumulate(&model, &acts, &L.corpus, &a, step, rank * per_rank, per_rank,
                                           (float)(1.0 / L.tokens_per_step), &spans,
                                           mode == SYNC_OVERLAP ? &sync_hooks : NULL);

        // 2. Sum the gradients over the ranks: now every rank holds the global batch's gradient.
        int64_t comm_us = sync_gradients(&sync);
        uint64_t grad_sent = log_comm_spans(log, &L.dist, L.records, step, a.accum - 1, step == first_step);

        // 3. The loss of the global batch, for the log: the ranks' double sums, added in rank
        //    order (collectives move floats: dist_sum_over_ranks sends each as a float pair).
        int64_t tl = runlog_now_us();
        double loss_total = dist_sum_over_ranks(&L.dist.world_group, loss_sum);
        comm_us += runlog_now_us() - tl;
        log_comm_spans(log, &L.dist, L.records, step, -1, 0);
        double loss = loss_total / L.tokens_per_step;

        // 4. The same update on every rank, from the same gradient: the replicas stay equal.
        double lr, grad_norm = lab_replica_update(&L, &model, &adam, &lr);

        char extra[160];
        snprintf(extra, sizeof extra, "\"grad_bytes_sent\":%llu,\"grad_all_reduces\":%d",
                 (unsigned long long)grad_sent, sync.buckets.n);
        StepRecord rec = {.step = step, .loss = loss, .lr = lr, .grad_norm = grad_norm, .tokens = (int64_t)(per_rank * a.seq),
                          .extra = extra};
        lab_replica_step_end(&L, &model, &rec, comm_us, &chunk);
    }
    dcp_state_free(&whole);
    dcp_state_free(&chunk);

    for (int i = 0; i < sync.buckets.n; i++)
        if (sync.buckets.b[i].flat) mem_free(&L.mem, sync.buckets.b[i].flat);
    free(sync.buckets.b);
    char extra[96];
    snprintf(extra, sizeof extra, "\"sync\":\"%s\",\"buckets\":%d", sync_name, sync.buckets.n);
    lab_replica_close(&L, &model, &adam, &acts, extra);
    return 0;
}
