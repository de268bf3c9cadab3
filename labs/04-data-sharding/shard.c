// shard.c — data sharding: who holds the dataset, and how each rank gets its part of a batch.
//
// Data parallelism (ddp.c) splits every global batch over the ranks. This lab is about the
// data side of that split: where the dataset lives, who reads what, and what travels. The
// model trains as in DDP (replicas, per-layer gradient all-reduce, the same AdamW step on
// every rank); only the way the sequences reach the ranks changes, and the lab counts it.
//
// The algorithms it runs:
//   the epoch's permutation: labs/04-data-sharding/sampler.c, sampler_epoch()
//   the dataset file: labs/04-data-sharding/dataset.c, dataset_open(), dataset_read()
//   the loader: labs/04-data-sharding/shard.c, loader_start_epoch(), loader_fetch()
//   each strategy's bytes: labs/04-data-sharding/figures.c, shard_held_formula(), shard_sent_formula()
//   the gradient sum: labs/common/harness/train.c, train_all_reduce_layers()
//
// Run it:   make lab-shard NGPU=2 STRATEGY=slice|sampler|dispatch [ARGS="--weights 1,3 --temperature 2"]
//           build/shardlab run shard -n 4 --strategy dispatch --items 1000
//           build/labs/shard --help
//
// Lexicon: data sharding, global batch, sampler, epoch, drop_last, data parallelism.
//
// The dataset is a FILE of D items: item i is bytes [i(T+1), (i+1)(T+1)), a sequence of T
// inputs and its T targets, D = floor(file bytes / (T+1)) (--items caps it). --data PATH is
// that file; with synthetic data rank 0 writes the corpus to <run dir>/dataset.bin first.
// A rank HOLDS the items it has read into memory.
//
// The global sampler (04-data-sharding/dataset.h, its permutation 04-data-sharding/sampler.c), one for all three
// strategies, computed by each rank:
// epoch e is a permutation of the D items seeded by (seed, e); global batch b of the epoch
// is positions [b B, (b+1) B) of it; step s (1-based) is batch (s-1) mod E of epoch
// (s-1) / E, with E = floor(D/B) batches an epoch. drop_last: the last D mod B positions of
// each epoch's order are not used. With --weights w1,..,wk (--temperature tau) the items form
// k equal contiguous sources and an epoch is D draws with replacement: a source with
// probability w^(1/tau) normalised, then an item uniformly within it. Rank r of N takes
// positions [r B/N, (r+1) B/N) of every global batch.
//
// The three strategies (--strategy):
//   slice     every rank reads the whole dataset and takes its slice of each global batch:
//             no communication, N copies of the data.
//   sampler   batch-sampler sharding: at each epoch's start every rank computes the epoch's
//             order and reads (pread) only the items it will consume this epoch.
//   dispatch  rank 0 reads the dataset, builds each global batch and sends every other rank
//             its part (dist_send). Collectives move floats: a part's (B/N)(T+1) bytes go as
//             ceil((B/N)(T+1) / 4) words, the last one padded with zeros. The payload and the
//             bytes moved are equal when (B/N)(T+1) is a multiple of 4, as with the defaults
//             (B = 8, T = 64) at N = 1 and 2; otherwise up to 3 bytes of padding per message.
// All three feed every rank the same sequences in the same order, so they train BITWISE the
// same: the losses and weights of a run do not depend on the strategy.
//
// What it is graded against (D items, T+1 bytes each, global batch B, N ranks), per rank:
//                held (bytes of dataset in memory)     recv per step           sent per step
//   slice        D (T+1)                               0                       0
//   sampler      floor(D/B) (B/N) (T+1)                0                       0
//   dispatch     rank 0: D (T+1), others 0             others: 4 ceil(P/4)     rank 0: (N-1) 4 ceil(P/4)
// with P = (B/N)(T+1), the payload of one part. Summed over ranks, slice holds N D (T+1) and
// sampler floor(D/B) B (T+1): N times less, up to the D mod B items drop_last leaves out.
// Each step event's "data" object says what this rank held, received and sent, the epoch and
// an FNV-1a hash of the indices it consumed; each rank lists them per epoch in
// <run dir>/indices-rank-<r>-epoch-<e>.txt ("step position index bytes" lines under a header
// that states the rule, bytes being the FNV-1a 64 of what the rank trained on there), and a
// sampler lists what it read from the file in reads-rank-<r>-epoch-<e>.txt: the grader checks
// what was read and trained on, not what should have been. The loss, memory (as DDP: 16 Psi,
// no buckets) and param_hash are DDP's.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/dist.h"        // defines: dist_send(), Dist, dist_recv(), DistRecord, ...
#include "common/harness/args.h"     // defines: TrainArgs, train_args_parse()
#include "common/harness/check.h"    // defines: usage_error(), malloc_check(), fopen_check(), ...
#include "common/harness/data.h"     // defines: Corpus, corpus_free(), MarkovSource, ...
#include "common/harness/lab.h"      // defines: Lab, lab_open(), lab_begin(), ...
#include "common/harness/mem.h"      // defines: format_bytes(), mem_reset_peak()
#include "common/harness/memfit.h"     // defines: memfit_host_available()
#include "common/harness/train.h"    // defines: train_all_reduce_layers(), train_accumulate(), ...
#include "common/model/gpt.h"        // defines: Gpt, GptActs, GptHooks, gpt_forward(), ...
#include "common/runfiles/dcp.h"     // defines: DcpState, dcp_add_units(), dcp_due(), ...
#include "common/runfiles/runlog.h"  // defines: RunLog, runlog_comm_span(), runlog_printf(), ...
#include "dataset.h"                 // defines: sampler_epoch(), dataset_open(), ...
#include "sharding.h"                // defines: shard_held_formula(), shard_sent_formula(), ...

// ---------------------------------------------------------------------------------------
// The loader: what this rank holds, and how each step's part of the global batch reaches it
// (its state and the formulas it is checked against: 04-data-sharding/sharding.h, 04-data-sharding/figures.c)
// ---------------------------------------------------------------------------------------

static void loader_open(Loader *L, const char *path, int64_t cap) {
    char err[1200];
    if (dataset_open(&L->ds, path, L->S, cap, err, sizeof err) != 0)
        usage_error("shard", "--data: %s", err);
    L->D = L->ds.items;
    L->E = L->D / L->B;
    L->epoch = -1;
    // A --data file can be larger than the machine: what the ranks of this node are about to
    // hold (their strategy's shares of the items, and each rank its epoch's order at 8 bytes an
    // item) is checked against the host memory first. Every rank does the same sum.
    double shares = 0, available = memfit_host_available();
    for (int r = 0; r < L->N; r++) shares += (double)shard_held_formula(L, r);
    double here = shares * L->local_ranks / L->N + 8.0 * (double)L->D * L->local_ranks;
    if (available >= 0 && here > available) {
        char h[32], have[32];
        usage_error("shard", "--data: D = %lld items of T+1 = %d bytes: the %d rank%s here would hold %s (strategy %s%s, "
                             "and each epoch's order at 8 bytes an item), and host memory has %s available "
                             "(MemAvailable): use the first D items only with --items D%s",
                    (long long)L->D, L->S, L->local_ranks, L->local_ranks == 1 ? "" : "s", format_bytes(h, sizeof h, here),
                    SHARD_STRATEGIES[L->strategy], L->strategy == SLICE ? ": every rank holds them all" : "",
                    format_bytes(have, sizeof have, available),
                    L->strategy == SLICE ? ", or --strategy sampler (a rank holds only the items it trains on)" : "");
    }
    L->order = malloc_check((size_t)L->D * sizeof *L->order);
    L->part = malloc_check(part_bytes(L));
    if (L->strategy == SLICE || (L->strategy == DISPATCH && L->rank == 0)) {
        L->whole = malloc_check((size_t)L->D * (size_t)L->S);
        dataset_read(&L->ds, 0, L->D, L->whole);
        L->held = (uint64_t)L->D * (uint64_t)L->S;
    }
    if (L->strategy == SAMPLER) L->mine = malloc_check((size_t)(L->E * L->per_rank) * (size_t)L->S);
    if (L->strategy == DISPATCH) L->words = malloc_check(words_for_bytes(part_bytes(L)) * sizeof(float));
    if (L->strategy == DISPATCH && L->rank == 0) L->batch = malloc_check((size_t)L->B * (size_t)L->S);
}

// A new epoch: its order, its list file, and (sampler) the items this rank will consume in it.
static void loader_start_epoch(Loader *L, int64_t e) {
    L->epoch = e;
    sampler_epoch(L->order, L->D, L->seed, e, L->mix);
    if (L->strategy == SAMPLER) {
        // What the sampler reads, as it reads it: every dataset_read() below is recorded in
        // reads-rank-<r>-epoch-<e>.txt ("first count" lines), for the grader to compare with
        // this rank's part of the epoch (data.coverage).
        char reads_path[PATH_MAX + 64];
        snprintf(reads_path, sizeof reads_path, "%s/reads-rank-%d-epoch-%lld.txt", L->dir, L->rank, (long long)e);
        FILE *reads = fopen_check(reads_path, "w");
        fprintf(reads, "# epoch %lld, rank %d of %d: the items this rank read from the dataset file for the epoch, in "
                       "the order it read them; lines: first count (items first .. first+count-1)\n",
                (long long)e, L->rank, L->N);
        L->ds.read_log = reads;
        // Read (dataset_read, one item of S bytes at a time) only the items this rank consumes
        // this epoch, in the order it consumes them, into L->mine: for each of the E batches
        // b, the per_rank items at positions b B + shard_first(L, rank) + j of the order. Then
        // L->held is the bytes now held.
        /* BEGIN SOLUTION: sampler: read this rank's part of every global batch of the epoch */
        for (int64_t b = 0, k = 0; b < L->E; b++)
            for (int j = 0; j < L->per_rank; j++, k++)
                dataset_read(&L->ds, L->order[b * L->B + shard_first(L, L->rank) + j], 1, L->mine + k * L->S);
        L->held = (uint64_t)(L->E * L->per_rank) * (uint64_t)L->S;
        /* END SOLUTION */
        L->ds.read_log = NULL;
        fclose_check(reads, "the list of reads");
    }
    if (L->list) fclose_check(L->list, "the indices list");
    char path[PATH_MAX + 64], order[600] = "";
    snprintf(path, sizeof path, "%s/indices-rank-%d-epoch-%lld.txt", L->dir, L->rank, (long long)e);
    L->list = fopen_check(path, "w");
    if (L->mix) {
        int n = snprintf(order, sizeof order, "%lld draws with replacement from %d sources, p =", (long long)L->D,
                         L->mix->k);
        for (int s = 0; s < L->mix->k && n < (int)sizeof order - 16; s++)
            n += snprintf(order + n, sizeof order - (size_t)n, "%s%.6f", s ? "," : " ", L->mix->prob[s]);
    } else {
        snprintf(order, sizeof order, "a permutation of the %lld items", (long long)L->D);
    }
    fprintf(L->list,
            "# epoch %lld, rank %d of %d, strategy %s; order: %s, seeded by (seed %llu, epoch %lld); drop_last: "
            "floor(D/B) = floor(%lld/%d) = %lld batches use positions 0..%lld, the last D mod B = %lld positions are "
            "not used; this rank takes positions [b*%d + %d, b*%d + %d) of batch b; lines: step position index bytes, "
            "bytes being the FNV-1a 64 of the %d bytes the rank trained on there\n",
            (long long)e, L->rank, L->N, SHARD_STRATEGIES[L->strategy], order, (unsigned long long)L->seed, (long long)e,
            (long long)L->D, L->B, (long long)L->E, (long long)(L->E * L->B - 1), (long long)(L->D % L->B), L->B,
            shard_first(L, L->rank), L->B, shard_first(L, L->rank) + L->per_rank, L->S);
}

// Batch b of the current epoch: this rank's part (per_rank sequences of S bytes), whose
// items are idx. Dispatch moves bytes here; the caller reads them off dist.stats.
static const uint8_t *loader_fetch(Loader *L, Dist *dist, int64_t b, const int64_t *idx) {
    size_t P = part_bytes(L), W = words_for_bytes(P);
    switch (L->strategy) {
    case SLICE:  // our slice of the global batch, from our copy of the whole dataset
        for (int j = 0; j < L->per_rank; j++) memcpy(L->part + (size_t)j * L->S, L->whole + idx[j] * L->S, (size_t)L->S);
        return L->part;
    case SAMPLER:  // read at the epoch's start, in the order we consume them
        return L->mine + (size_t)(b * L->per_rank) * (size_t)L->S;
    case DISPATCH:
        if (L->rank != 0) {
            dist_recv(&dist->world_group, L->words, W, 0);
            memcpy(L->part, L->words, P);
            return L->part;
        }
        // Rank 0 builds the whole global batch, rank k's part at k B/N, and sends each part
        // away as words (the last one padded with zeros).
        for (int k = 0; k < L->N; k++)
            for (int j = 0; j < L->per_rank; j++)
                memcpy(L->batch + ((size_t)k * L->per_rank + j) * L->S,
                       L->whole + L->order[b * L->B + shard_first(L, k) + j] * L->S, (size_t)L->S);
        for (int k = 1; k < L->N; k++) {
            L->words[W - 1] = 0;
            memcpy(L->words, L->batch + (size_t)k * P, P);
            dist_send(&dist->world_group, L->words, W, k);
        }
        return L->batch;
    }
    return NULL;
}

// Step s: this rank's part of the global batch (per_rank sequences of S bytes), its item
// indices into idx, and a line per sequence in the epoch's list: the step, the position, the
// item, and a hash of the bytes the rank is about to train on (what it consumed, however it
// got it: the grader compares them with the dataset's item at that position).
static const uint8_t *loader_next(Loader *L, Dist *dist, int64_t step, int64_t *idx) {
    int64_t e = (step - 1) / L->E, b = (step - 1) % L->E;
    if (e != L->epoch) loader_start_epoch(L, e);
    int64_t first = b * L->B + shard_first(L, L->rank);
    for (int j = 0; j < L->per_rank; j++) idx[j] = L->order[first + j];
    const uint8_t *part = loader_fetch(L, dist, b, idx);
    for (int j = 0; j < L->per_rank; j++)
        fprintf(L->list, "%lld %lld %lld %016llx\n", (long long)step, (long long)(first + j), (long long)idx[j],
                (unsigned long long)fnv1a64(part + (size_t)j * L->S, (size_t)L->S, FNV1A64_INIT));
    return part;
}

static void loader_close(Loader *L) {
    if (L->list) fclose_check(L->list, "the indices list");
    dataset_close(&L->ds);
    free(L->order), free(L->whole), free(L->mine), free(L->part), free(L->batch), free(L->words);
}

// ---------------------------------------------------------------------------------------
// Training on sequences we hold
// ---------------------------------------------------------------------------------------

// train_accumulate's loop over micro-batches of acts->B sequences, on the `count` sequences at
// seqs (T+1 bytes each, back to back) instead of the hash sampler's. Each token's loss
// enters with weight loss_scale = 1/(B T) of the GLOBAL batch, so the ranks' gradients add up
// to the gradient of the global mean. Returns the sum of the token losses.
static double forward_backward(Gpt *g, GptActs *acts, const uint8_t *seqs, int count, float loss_scale,
                               SpanLogger *spans) {
    int micro = acts->B, T = g->cfg.seq;
    uint8_t *tokens = malloc_check((size_t)micro * T), *targets = malloc_check((size_t)micro * T);
    GptHooks hooks = span_logger_hooks(spans);
    double loss_sum = 0;
    for (int mb = 0; mb * micro < count; mb++) {
        spans->mb = mb;
        for (int s = 0; s < micro; s++) {
            const uint8_t *seq = seqs + (size_t)(mb * micro + s) * (size_t)(T + 1);
            memcpy(tokens + (size_t)s * T, seq, (size_t)T);       // x_0 .. x_{T-1}
            memcpy(targets + (size_t)s * T, seq + 1, (size_t)T);  // x_1 .. x_T
        }
        loss_sum += gpt_forward(g, acts, tokens, targets, &hooks);
        gpt_backward(g, acts, tokens, targets, loss_scale, &hooks);
    }
    span_logger_flush(spans);  // a GPU's spans, read once the step's compute is queued
    free(tokens), free(targets);
    return loss_sum;
}

// One span per finished collective of the step: gradient all-reduces carry their layer.
static void log_comm_spans(RunLog *log, Dist *d, DistRecord *records, int64_t step) {
    size_t k = dist_drain_records(d, records, 4096);
    for (size_t i = 0; i < k; i++) {
        const DistRecord *r = &records[i];
        runlog_comm_span(log, step, dist_coll_name(r->coll), -1, r->coll == DIST_ALL_REDUCE ? r->tag : -1, r->t0_us,
                         r->t1_us, r->coll == DIST_RECV ? r->bytes_recv : r->bytes_sent, r->waited_from_us, NULL);
    }
}

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

// The dataset's file (synthetic data: rank 0 writes the corpus there while the others wait,
// and the loss floor is the Markov source's), and this rank's loader on it, checked against
// the global batch. mix: the mixture of --weights, or NULL.
static void open_data(Loader *ld, Lab *L, Strategy strategy, Mixture *mix, long long cap) {
    const TrainArgs *a = L->a;
    char data_path[PATH_MAX + 64], err[600];
    snprintf(data_path, sizeof data_path, "%s", a->data);
    if (strcmp(a->data, "synthetic") == 0) {
        snprintf(data_path, sizeof data_path, "%s/dataset.bin", L->log.dir);
        if (L->rank == 0) {
            Corpus corpus;
            train_corpus(&corpus, a);
            dataset_write_file(data_path, corpus.bytes, corpus.n);
            corpus_free(&corpus);
        }
        MarkovSource m;
        markov_init(&m, a->seed, SYNTH_ORDER, SYNTH_ALPHABET);
        L->floor = markov_loss_floor(&m, a->seq);  // each window starts at a stationary point
        markov_free(&m);
        dist_barrier(&L->dist.world_group);
    }
    *ld = (Loader){.strategy = strategy, .mix = mix, .B = a->batch, .N = L->world, .rank = L->rank,
                   .local_ranks = L->env.local_world, .per_rank = a->batch / L->world, .S = a->seq + 1, .seed = a->seed,
                   .dir = L->log.dir};
    loader_open(ld, data_path, cap);
    if (cap > ld->ds.available)
        usage_error("shard", "--items %lld: the data holds only %lld items of T+1 = %d bytes", cap,
                    (long long)ld->ds.available, ld->S);
    if (ld->E < 1)
        usage_error("shard", "%lld items make no global batch of %d (drop_last): lower --batch or raise --items",
                    (long long)ld->D, a->batch);
    if (mix && mixture_layout(mix, ld->D, err, sizeof err) != 0) usage_error("shard", "--weights: %s", err);
    runlog_printf(&L->log, "data: %s, D = %lld items of T+1 = %d bytes%s; B = %d: %lld steps an epoch, drop_last leaves "
                           "%lld items out; rank %d takes positions %d..%d of each global batch\n",
                  strcmp(a->data, "synthetic") == 0 ? "synthetic corpus in dataset.bin" : a->data, (long long)ld->D, ld->S,
                  ld->D < ld->ds.available ? " (--items)" : "", a->batch, (long long)ld->E, (long long)(ld->D % a->batch),
                  L->rank, shard_first(ld, L->rank), shard_first(ld, L->rank) + ld->per_rank - 1);
}

int main(int argc, char **argv) {
    TrainArgs a;
    ShardArgs sa;  // --strategy, --weights, --temperature, --items (types, bounds, defaults: common/harness/catalog.c)
    LabBind own[SHARD_NOPTIONS];
    shard_args_bind(&sa, own);
    train_args_parse(&a, argc, argv, catalog_lab("shard"), own, SHARD_NOPTIONS);
    const char *strategy_name = sa.strategy, *weights = sa.weights;
    double temperature = sa.temperature;
    int strategy_index;
    long long cap;  // 0: every whole item of the file
    Mixture mix;
    char err[600];
    if (shard_args_check(&sa, &strategy_index, &cap, &mix, err, sizeof err) != 0) usage_error("shard", "%s", err);
    Strategy strategy = (Strategy)strategy_index;

    Lab L;  // the harness (common/harness/lab.h): ranks, device, collectives, run log, memory; the data is ours
    lab_open(&L, "shard", &a, argc, argv, LAB_NO_CORPUS);
    int N = L.world, rank = L.rank;
    train_check_batch(&a, "shard", N);
    lab_begin(&L, "%d rank(s) on %s, backend %s, strategy %s", N, L.dev.name, L.backend, strategy_name);
    RunLog *log = &L.log;
    GptConfig cfg = L.cfg;

    Loader ld;  // the dataset's file and this rank's way to its part of each batch
    open_data(&ld, &L, strategy, weights ? &mix : NULL, cap);

    // The model, replicated as in DDP: every replica starts from rank 0's weights.
    Gpt model;
    GptAdamW adam;
    lab_replica_create(&L, &model, &adam);
    int micro = ld.per_rank / a.accum;
    GptActs acts;
    gpt_acts_alloc(&acts, &cfg, micro, &L.mem);

    StrBuf lab_fields;
    sb_init(&lab_fields);
    sb_printf(&lab_fields, "\"strategy\":\"%s\",\"items\":%lld,\"item_bytes\":%d,\"steps_per_epoch\":%lld,"
                           "\"temperature\":%.9g,\"weights\":",
              strategy_name, (long long)ld.D, ld.S, (long long)ld.E, temperature);
    if (weights) sb_json_string(&lab_fields, weights);
    else sb_printf(&lab_fields, "null");
    lab_start(&L, gpt_num_params(&cfg), lab_fields.data);
    sb_free(&lab_fields);
    lab_replica_memory(&L, micro, NULL, 0, 1);  // a whole replica, as ddp's
    // The dataset this rank holds (host memory): the slice and dispatch copies were read at
    // open; the sampler reads its first epoch's items at step 1, so it is checked there.
    if (strategy != SAMPLER)
        runlog_check(log, "data.held", ld.held == shard_held_formula(&ld, rank), (double)ld.held, (double)shard_held_formula(&ld, rank));
    mem_reset_peak(&L.mem);

    // Distributed checkpoints (dcp.h), as in ddp.c: every replica loads the whole state, and
    // saves a 1/N chunk of it. The sampler's state is the step: epoch (s-1)/E, batch (s-1) mod E.
    DcpState whole = {0}, chunk = {0};
    dcp_add_units(&whole, &cfg, model.params, adam.m, adam.v, 0, 1);
    dcp_add_units(&chunk, &cfg, model.params, adam.m, adam.v, rank, N);
    int64_t first_step = lab_first_step(&L, &whole, &L.dist.world_group);
    L.saver.sampler_name = "epochs of a seeded permutation (or mixture draws), drop_last";
    SpanLogger spans = {.log = log};
    double moved_sent = 0, moved_recv = 0;
    int data_warned = 0;
    int64_t *idx = malloc_check((size_t)ld.per_rank * sizeof *idx);

    for (int64_t step = first_step; step <= a.steps; step++) {
        int interrupted = lab_step_begin(&L, step);
        if (interrupted) return interrupted;
        spans.step = step;

        // 1. This rank's part of the global batch: from memory, or from rank 0.
        const uint8_t *part = loader_next(&ld, &L.dist, step, idx);
        uint64_t data_sent = L.dist.stats.bytes_sent - L.sent0, data_recv = L.dist.stats.bytes_recv - L.recv0;
        int64_t t_data = runlog_now_us();
        shard_check_data(log, &ld, step, step == first_step, data_sent, data_recv, &data_warned);
        moved_sent += (double)data_sent, moved_recv += (double)data_recv;

        // 2. Forward and backward on it, then the gradients summed over the replicas, layer
        //    by layer (start + wait: a synchronous all-reduce whose record carries the layer).
        gpt_zero_grads(&model);
        double loss_sum = forward_backward(&model, &acts, part, ld.per_rank, (float)(1.0 / L.tokens_per_step), &spans);
        int64_t t_comm = runlog_now_us();
        train_all_reduce_layers(&L.dist.world_group, &model);
        double loss = dist_sum_over_ranks(&L.dist.world_group, loss_sum) / L.tokens_per_step;
        int64_t comm_us = (strategy == DISPATCH ? t_data - L.t0_us : 0) + (runlog_now_us() - t_comm);
        log_comm_spans(log, &L.dist, L.records, step);

        // 3. The same update on every replica.
        double lr, grad_norm = lab_replica_update(&L, &model, &adam, &lr);

        char extra[512];
        snprintf(extra, sizeof extra,
                 "\"data\":{\"strategy\":\"%s\",\"held\":%llu,\"recv\":%llu,\"sent\":%llu,"
                 "\"payload_recv\":%llu,\"payload_sent\":%llu,\"epoch\":%lld,\"batch\":%lld,\"indices_hash\":\"%016llx\"}",
                 strategy_name, (unsigned long long)ld.held, (unsigned long long)data_recv,
                 (unsigned long long)data_sent, (unsigned long long)(data_recv ? part_bytes(&ld) : 0),
                 (unsigned long long)(data_sent ? (size_t)(N - 1) * part_bytes(&ld) : 0), (long long)ld.epoch,
                 (long long)((step - 1) % ld.E), (unsigned long long)indices_hash(idx, ld.per_rank));
        StepRecord rec = {.step = step, .loss = loss, .lr = lr, .grad_norm = grad_norm, .tokens = (int64_t)ld.per_rank * a.seq,
                          .extra = extra};
        if (dcp_due(&a, step))  // a checkpoint's sampler state: where the next step's batch is in the epochs
            snprintf(L.saver.sampler, sizeof L.saver.sampler,
                     "\"epochs\":{\"items\":%lld,\"batches_per_epoch\":%lld,\"next_epoch\":%lld,\"next_batch\":%lld}",
                     (long long)ld.D, (long long)ld.E, (long long)(step / ld.E), (long long)(step % ld.E));
        lab_replica_step_end(&L, &model, &rec, comm_us, &chunk);
    }
    dcp_state_free(&whole);
    dcp_state_free(&chunk);
    const double steps_run = (double)(a.steps - first_step + 1);

    shard_report_data(log, &ld, &L.dist.world_group, strategy_name, (double)ld.held, moved_recv / steps_run, moved_sent / steps_run);

    char summary[160];
    snprintf(summary, sizeof summary, "\"strategy\":\"%s\",\"items\":%lld,\"held\":%llu", strategy_name, (long long)ld.D,
             (unsigned long long)ld.held);
    free(idx);
    loader_close(&ld);
    lab_replica_close(&L, &model, &adam, &acts, summary);
    return 0;
}
