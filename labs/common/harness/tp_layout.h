// tp_layout.h — what a tensor-parallel rank holds, in closed form: its share of each layer's
// parameters and the bytes of its activations. The tp lab (labs/10-tp/) lays its buffers out
// by these; the memory check (memfit.h) and the grader count with them.
//
// Of a layer's parameters some are replicated on every rank of the group (embeddings,
// LayerNorms, the biases added after a row-parallel product, and lm_head unless it is split
// by vocabulary) and the rest split in t equal slices (labs/10-tp/tensor_parallel.h draws them).
#ifndef SHARDLAB_TP_LAYOUT_H
#define SHARDLAB_TP_LAYOUT_H

#include <stddef.h>

#include "common/model/gpt.h"

size_t tp_replicated_floats(const GptConfig *c, int vp, int layer);
size_t tp_split_floats(const GptConfig *c, int vp, int t, int layer);  // this rank's: 1/t of the split tensors

// The rows of a micro-batch of B sequences on a rank of t (sp: sequence parallel; vp: the head
// split by vocabulary): BT in all, R this rank's residual stream, H the head's, Vh its
// vocabulary.
typedef struct {
    size_t BT, R, H, Vh;
} TpRows;
TpRows tp_rows(const GptConfig *c, int t, int sp, int vp, int B);

// Bytes of the tp lab's activations (tp_acts_alloc) for micro-batches of B sequences.
size_t tp_acts_bytes(const GptConfig *c, int t, int sp, int vp, int B);

#endif
