// batchsplit.h — how each lab splits its global batch (and tp its heads) over its ranks: the
// one check the labs make before they train and the web makes before it starts a run, and,
// when something does not divide, the nearest rank counts and option values that do.
//
// The splits, checked in this order (each lab's lesson says why):
//   every lab                     --accum divides B (lab NULL: this alone, as args.c checks
//                                 it before the ranks are known)
//   ddp, zero, fsdp, ckpt, shard  N ranks take B/N sequences each, in --accum micro-batches:
//                                 N divides B, and accum divides B/N
//   fsdp --replicate R            an R x S mesh: R divides N (S = N/R ranks per shard group)
//   tp   a D x t mesh (D = --dp): D divides N; t = N/D divides --heads, and with
//        --vocab-parallel the vocabulary; D divides B, accum divides B/D; with --sp, t
//        divides the token rows of a micro-batch, B/(D accum) x --seq
//   pp   D pipelines of p = N/D stages: D divides N; interleaved: --micro is a multiple of p;
//        D x --micro divides B
//   single: the first alone; collectives: no batch (its options have none: batch 1).
// A fix is only offered if it passes every check: a rank count of pp with --layers given
// also keeps p x chunks within the layers (pp.c refuses the rest with its own line).
#ifndef SHARDLAB_BATCHSPLIT_H
#define SHARDLAB_BATCHSPLIT_H

#include <stddef.h>

#include "args.h"

#define BATCH_SPLIT_MAX_RANKS 8  // N is 1..8: the launcher's -n, the web's form

typedef struct {
    const char *lab;          // its catalog name
    int ranks;                // N
    int batch, accum;         // --batch, --accum
    int heads, seq;           // --heads, --seq (tp)
    int dp;                   // tp's and pp's --dp (1 elsewhere)
    int sp, vocab_parallel;   // tp's --sp and --vocab-parallel
    int micro;                // pp's --micro (1 elsewhere)
    int chunks;               // pp: model chunks per stage (1 but interleaved)
    int interleaved;          // pp's --schedule interleaved
    int layers;               // pp: --layers when given, else 0 (as deep as the pipeline needs)
    int replicate;            // fsdp's --replicate (1, or 0, elsewhere)
} BatchSplit;

// lab's split of a's batch over `ranks`, with one pipeline or replica (dp 1) and one
// micro-batch per pipeline: tp and pp set their own fields after.
BatchSplit batch_split_of(const char *lab, const TrainArgs *a, int ranks);

// The same from a lab's options as text (argv-style, as the web passes them on: "--batch",
// "12", "--sp", ...), with the catalog's default for each option not given.
BatchSplit batch_split_from_options(const char *lab, int ranks, int nopts, char *const opts[]);

// 0 if s splits; else -1 with one line in why: what does not divide, then the nearest values
// that do, e.g. "--batch 8 does not divide over 3 ranks (each rank takes B/N sequences): use 2
// or 4 ranks, or --batch 6 or 9".
int batch_split_check(const BatchSplit *s, char *why, size_t n);

#endif
