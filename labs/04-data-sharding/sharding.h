// loader.h — the data-sharding lab's loader (labs/04-data-sharding/shard.c): what a rank holds of the dataset
// and how each step's part of the global batch reaches it, and the formulas of what it
// holds and moves (the table at the top of labs/04-data-sharding/shard.c), checked against what it did.
//
#ifndef SHARDLAB_SHARD_LOADER_H
#define SHARDLAB_SHARD_LOADER_H

#include <stdint.h>
#include <stdio.h>

#include "common/comm/dist.h"        // defines: DistGroup
#include "common/runfiles/runlog.h"  // defines: RunLog
#include "dataset.h"                 // defines: Dataset, Mixture

typedef enum { SLICE, SAMPLER, DISPATCH } Strategy;

typedef struct {
    Strategy strategy;
    Dataset ds;
    const Mixture *mix;        // NULL: each epoch a permutation
    int64_t D, E;              // items, batches per epoch
    int B, N, rank, per_rank, S;  // S = T + 1 bytes per item
    int local_ranks;              // the ranks on this node, whose items share its host memory
    uint64_t seed;
    int64_t *order;            // the current epoch's D indices (every rank computes them)
    int64_t epoch;             // the epoch `order` belongs to (-1: none yet)
    uint8_t *whole;            // slice, and dispatch on rank 0: all D items
    uint8_t *mine;             // sampler: this rank's items of the epoch, in consumption order
    uint64_t held;             // bytes of dataset in memory
    uint8_t *part, *batch;     // this step's B/N sequences; dispatch rank 0: the global batch
    float *words;              // dispatch: a part as 4-byte words
    FILE *list;                // indices-rank-<r>-epoch-<e>.txt
    const char *dir;
} Loader;

// The first position of rank r's part in a global batch: r B/N.
int shard_first(const Loader *L, int r);

// A part: this rank's B/N sequences of T+1 bytes.
static inline size_t part_bytes(const Loader *L) { return (size_t)L->per_rank * (size_t)L->S; }

// What rank r should hold, by the table at the top of labs/04-data-sharding/shard.c.
uint64_t shard_held_formula(const Loader *L, int r);
// The bytes rank r moves per step (sent or received), by the same table.
uint64_t shard_sent_formula(const Loader *L, int r);
uint64_t shard_recv_formula(const Loader *L, int r);
// The data this rank holds and moved in a step, by that table: check events at the
// first step and at the first step that differs (with a warning; the run goes on, and the
// grader's data.coverage judges what the ranks read and trained on). *warned: whether one
// differed already.
void shard_check_data(RunLog *log, const Loader *ld, int64_t step, int first, uint64_t sent, uint64_t recv, int *warned);
// Every rank's figures (held, received and sent a step) on rank 0, in a table next to the
// formulas, with a check event (a collective: every rank calls it).
void shard_report_data(RunLog *log, const Loader *ld, DistGroup *g, const char *strategy_name, double held, double recv,
                       double sent);

#endif
