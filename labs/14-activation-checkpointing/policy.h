// policy.h — activation checkpointing's policies: which blocks are recomputed, and what the
// activations then take (the formulas the ckpt lab prints and the grader checks). The pass
// that recomputes them is activation_checkpointing.h's.
//
// A policy is a list of SEGMENTS: runs of consecutive blocks recomputed together. A block in
// a segment keeps no insides of its own: they live in a workspace shared by every segment
// (slot j holds the j-th block of whichever segment is running, and the output that the
// segment's next block reads); only a segment's LAST block keeps its output, the boundary
// the next layer reads. Blocks outside every segment keep everything, as gpt_acts_alloc does.
//   none   no segments
//   K      blocks K, 2K, 3K, ... each a segment of its own (every: K = 1)
//   sqrt   segments of s = ceil(sqrt L) consecutive blocks (the last may be shorter)
// The saved activations of a micro-batch of B sequences, b = 16C + 4 + NH T (floats per
// token a block saves with --attn naive, gpt.h; 16C + 4 + NH with --attn flash), in bytes:
//     none    4 B T (2C + 2 + V + L b)
//     K       4 B T (2C + 2 + V + (L-c) b + c C + b - C)       c = floor(L/K), 1 <= K <= L
//     every   4 B T (2C + 2 + V + L C + b - C)
//     sqrt    4 B T (2C + 2 + V + n C + s b - C)               s = ceil(sqrt L), n = ceil(L/s)
// A pass also allocates gpt_pass_scratch_floats() + B T C floats of workspace while it runs.
#ifndef SHARDLAB_CKPT_POLICY_H
#define SHARDLAB_CKPT_POLICY_H

#include <stddef.h>

#include "common/model/gpt.h"  // defines: gpt_acts_alloc(), gpt_pass_scratch_floats(), ...

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
// The policy --policy names for L blocks: "none", "every", "sqrt" or K. 0, or -1 with the
// reason in why (in the words the ckpt lab's usage error says).
int ckpt_policy_named(CkptPolicy *p, const char *text, int L, char *why, size_t n);
// The saved activations in closed form (bytes; the table above), and that formula as text.
double ckpt_acts_bytes(const GptConfig *c, int B, const CkptPolicy *p);
const char *ckpt_acts_formula(const GptConfig *c, const CkptPolicy *p);
// b of those formulas as text: "16C+4+NH T" (naive attention) or "16C+4+NH" (flash) floats;
// under --mixed, where the formulas are in bytes, "42C+16+4NH T bytes" or "36C+16+4NH bytes".
const char *ckpt_block_formula(const GptConfig *c);

#endif
