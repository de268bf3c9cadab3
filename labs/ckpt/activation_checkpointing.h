// activation_checkpointing.h — which blocks keep only their output, where their insides go,
// and the backward pass that recomputes them. (Distributed checkpoints of the training state
// are another thing: dcp.h.)
//
// Defines: CkptKind, CKPT_MAX_BLOCKS, CkptPolicy, ckpt_policy(), ckpt_acts_bytes(),
//          ckpt_acts_formula(), ckpt_block_formula(), ckpt_acts_alloc(), CkptPass, ckpt_forward_backward().
//
// A policy is a list of SEGMENTS: runs of consecutive blocks recomputed together. A block in
// a segment keeps no insides of its own: they live in a workspace shared by every segment
// (slot j holds the j-th block of whichever segment is running, and the output that the
// segment's next block reads); only a segment's LAST block keeps its output, the boundary
// the next layer reads. Blocks outside every segment keep everything, as gpt_acts_alloc does.
//   none   no segments
//   K      blocks K, 2K, 3K, ... each a segment of its own (every: K = 1)
//   sqrt   segments of s = ceil(sqrt L) consecutive blocks (the last may be shorter)
// The activations are a GptActs whose checkpointed blocks point into the workspace, so
// gpt_layer_forward() and gpt_layer_backward() read and write the right places unchanged;
// ckpt_forward_backward() runs a segment forward again, from its kept input, just before the
// backward of its last block. Recomputation runs the same kernels on the same inputs: the
// same bits, so the gradients are those of policy none.
//
// The saved activations of a micro-batch of B sequences, b = 16C + 4 + NH T (floats per
// token a block saves with --attn naive, gpt.h; 16C + 4 + NH with --attn flash), in bytes:
//     none    4 B T (2C + 2 + V + L b)
//     K       4 B T (2C + 2 + V + (L-c) b + c C + b - C)       c = floor(L/K), 1 <= K <= L
//     every   4 B T (2C + 2 + V + L C + b - C)
//     sqrt    4 B T (2C + 2 + V + n C + s b - C)               s = ceil(sqrt L), n = ceil(L/s)
// A pass also allocates gpt_pass_scratch_floats() + B T C floats of workspace while it runs.
#ifndef SHARDLAB_CHECKPOINT_H
#define SHARDLAB_CHECKPOINT_H

#include <stdint.h>

#include "gpt.h"
#include "runlog.h"

typedef enum { CKPT_NONE, CKPT_EVERY, CKPT_SQRT, CKPT_K } CkptKind;

#define CKPT_MAX_BLOCKS 256  // --layers allows up to 256

typedef struct {
    CkptKind kind;
    int K;            // blocks K, 2K, ... (every: 1)
    char name[16];    // "none", "every", "sqrt", "3"
    int nseg, width;  // segments; the longest (the workspace holds that many blocks)
    int first[CKPT_MAX_BLOCKS], last[CKPT_MAX_BLOCKS];  // segment i: blocks first[i]..last[i] (layers)
    int seg_of[CKPT_MAX_BLOCKS + 2];                    // layer -> its segment, -1 if kept whole
    int recomputed;   // blocks recomputed per micro-batch
} CkptPolicy;

// The policy for L blocks (K: 1 <= K <= L, used by CKPT_K only).
void ckpt_policy(CkptPolicy *p, CkptKind kind, int K, int L);
// The saved activations in closed form (bytes; the table above), and that formula as text.
double ckpt_acts_bytes(const GptConfig *c, int B, const CkptPolicy *p);
const char *ckpt_acts_formula(const GptConfig *c, const CkptPolicy *p);
// b of those formulas as text: "16C+4+NH T" (naive attention) or "16C+4+NH" (flash) floats;
// under --mixed, where the formulas are in bytes, "52C+16+4NH T bytes" or "52C+16+4NH bytes".
const char *ckpt_block_formula(const GptConfig *c);
// The policy's activations for micro-batches of B sequences, laid out block by block ("acts"
// memory); free with gpt_acts_free().
void ckpt_acts_alloc(GptActs *a, const GptConfig *c, int B, const CkptPolicy *p, Mem *mem);

typedef struct {
    RunLog *log;           // a fwd, recompute and bwd span per layer; NULL: no spans
    int64_t step;
    int mb;                // the micro-batch, for the spans
    int skip_recompute;    // the graders' broken variant: the backward reads a stale workspace
    int64_t recompute_us;  // time spent recomputing, added up
} CkptPass;

// One micro-batch (a->B sequences): forward through every layer, then backward from the head
// down, each segment recomputed before the backward of its last block. Gradients ACCUMULATE
// into g->grads; loss_scale as gpt_backward's. Returns the sum of the token losses.
double ckpt_forward_backward(Gpt *g, const CkptPolicy *p, GptActs *a, const uint8_t *tokens,
                             const uint8_t *targets, float loss_scale, CkptPass *x);

#endif
