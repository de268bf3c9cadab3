// optimizer.h — the training state of a tensor-parallel rank beyond its weights (labs/10-tp/tp.c):
// AdamW on its two parts, and distributed checkpoints (dcp.h) through whole units.
//
// AdamW on a rank's two parts: the replicated weights (updated identically on every rank of
// the group) and its slices. The global gradient norm counts each replicated gradient once
// and sums the slices' squares over the group.
//
// Checkpoints: a rank's parts are not ranges of gpt.h's flat units (its slice of a
// row-parallel matrix is a set of columns), so checkpoints go through whole units: to save,
// each tensor-parallel group all-gathers its split parts, every rank rebuilds the whole units
// (tp_layer_slice) and writes its 1/N chunk of them; to resume, every rank reads the whole
// units and cuts its parts out. Any lab's checkpoint, at any N, so loads into any t and D.
#ifndef SHARDLAB_TP_OPTIMIZER_H
#define SHARDLAB_TP_OPTIMIZER_H

#include "common/harness/args.h"  // defines: TrainArgs
#include "common/model/adamw.h"   // defines: AdamW
#include "common/runfiles/dcp.h"  // defines: DcpState
#include "tensor_parallel.h"      // defines: tp_layer_slice(), Tp

typedef struct {
    AdamW hyper;
    float **m[2], **v[2];  // [replicated, split][layer]
} TpAdamW;

// AdamW's moments for each of the rank's parts (hyper-parameters from a).
void tp_adamw_create(TpAdamW *o, const Tp *tp, const TrainArgs *a);
void tp_adamw_destroy(TpAdamW *o, Tp *tp);
// Clips the gradients by the global norm (over the group) and steps AdamW at rate lr;
// returns the norm before clipping.
double tp_clip_and_update(Tp *tp, TpAdamW *o, double clip, double lr, int64_t step);

typedef struct {
    float **whole[DCP_KINDS];  // [kind][layer] host memory, gpt_layer_size() floats
    float *rep, *split;        // host staging: one layer's parts (split: the whole group's)
    size_t most_split;         // the largest layer's split part, in floats
    float *gathered;           // device, while a save gathers: the group's split parts of one
                               // layer ("comm", transient: a run's steady memory is not a save's)
} TpCkpt;

void tp_ckpt_create(TpCkpt *k, const Tp *tp);
void tp_ckpt_destroy(TpCkpt *k, Tp *tp);
// The whole units from the group's parts (every rank of the group calls it).
void tp_ckpt_gather(TpCkpt *k, Tp *tp, TpAdamW *o);
// This rank's parts cut out of the whole units.
void tp_ckpt_scatter(TpCkpt *k, Tp *tp, TpAdamW *o);
// The whole units as pieces: chunk `part` of `parts` of each.
void tp_ckpt_pieces(DcpState *s, TpCkpt *k, const GptConfig *c, int part, int parts);

#endif
