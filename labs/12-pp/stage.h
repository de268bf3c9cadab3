// stage.h — one pipeline stage's share of the model (labs/12-pp/pp.c): its layers' weights,
// gradients and AdamW state, and what a stage does with them outside the schedule (the global
// gradient norm, the update, the whole model gathered on rank 0, the memory report).
//
#ifndef SHARDLAB_PP_STAGE_H
#define SHARDLAB_PP_STAGE_H

#include "common/comm/dist.h"        // defines: DistGroup
#include "common/harness/args.h"     // defines: TrainArgs
#include "common/harness/mem.h"      // defines: Mem
#include "common/model/gpt.h"        // defines: GptConfig, Gpt
#include "common/runfiles/runlog.h"  // defines: RunLog
#include "schedule.h"                // defines: Pipe

typedef struct {
    GptConfig cfg;
    int nlayers;            // L + 2
    float **params, **grads, **m, **v;  // [nlayers]; NULL for layers of other stages
    size_t psi;             // this stage's parameters
} Stage;

// Does this stage hold layer l?
static inline int stage_holds(const Stage *st, int l) { return st->params[l] != NULL; }

// Stage s's layers (every chunk k = s, s + p, ... of the pipeline), from the whole model as
// `single` builds it (or --init), on mem's device.
void stage_create(Stage *st, const Pipe *pp, int s, const GptConfig *c, const TrainArgs *a, Mem *mem);
void stage_destroy(Stage *st, Mem *mem);
// The param_hash (hash.h) of this stage's layers, in layer order, on the device.
uint64_t stage_hash(const Stage *st, const Mem *mem);
// The global gradient norm, layer by layer in layer order as `single` sums it: each stage's
// per-layer sums of squares travel over the pipeline as raw bits (an all-gather copies words).
// layer_stage[l]: the stage that holds layer l.
double stage_grad_norm(const Stage *st, const GptConfig *c, const Mem *mem, DistGroup *pipe, int p,
                       const int *layer_stage);
// AdamW on this stage's layers, with the global clip factor, at rate lr.
void stage_update(Stage *st, const GptConfig *c, const Mem *mem, const TrainArgs *a, double norm, double lr,
                  int64_t step);
// The whole model on rank 0 (pipeline 0's stages send it their layers) into whole, which rank
// 0 creates in host: for the summary's hash and --save. Returns rank 0's hash (0 elsewhere).
uint64_t stage_gather_model(Gpt *whole, Mem *host, const Stage *st, const GptConfig *c, Mem *mem, DistGroup *pipe,
                            int s, int d, int rank, const int *layer_stage, uint64_t seed);
// Where this rank's memory goes: its layers (Psi_s), and per micro-batch in flight the
// activations of its chunks' layers.
void stage_report_memory(RunLog *log, const Stage *st, const Pipe *pp, const GptConfig *c, const Mem *mem, int s,
                         int micro);

#endif
