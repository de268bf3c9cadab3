// activation_checkpointing.h — which blocks keep only their output, where their insides go,
// and the backward pass that recomputes them. (Distributed checkpoints of the training state
// are another thing: dcp.h.)
//
// memory formulas are policy.h's.
//
// A policy's activations (policy.h) are a GptActs whose checkpointed blocks point into the workspace, so
// gpt_layer_forward() and gpt_layer_backward() read and write the right places unchanged;
// ckpt_forward_backward() runs a segment forward again, from its kept input, just before the
// backward of its last block. Recomputation runs the same kernels on the same inputs: the
// same bits, so the gradients are those of policy none.
#ifndef SHARDLAB_CHECKPOINT_H
#define SHARDLAB_CHECKPOINT_H

#include <stdint.h>

#include "common/model/gpt.h"        // defines: GptActs, gpt_layer_forward(), ...
#include "common/runfiles/runlog.h"  // defines: RunLog
#include "policy.h"                  // defines: CkptPolicy

// The policy's activations for micro-batches of B sequences, laid out block by block ("acts"
// memory); free with gpt_acts_free().
void ckpt_acts_alloc(GptActs *a, const GptConfig *c, int B, const CkptPolicy *p, Mem *mem);

typedef struct {
    RunLog *log;           // a fwd, recompute and bwd span per layer; NULL: no spans
    int64_t step;
    int mb;                // the micro-batch, for the spans
    int64_t recompute_us;  // time spent recomputing, added up
} CkptPass;

// One micro-batch (a->B sequences): forward through every layer, then backward from the head
// down, each segment recomputed before the backward of its last block. Gradients ACCUMULATE
// into g->grads; loss_scale as gpt_backward's. Returns the sum of the token losses.
double ckpt_forward_backward(Gpt *g, const CkptPolicy *p, GptActs *a, const uint8_t *tokens,
                             const uint8_t *targets, float loss_scale, CkptPass *x);

#endif
