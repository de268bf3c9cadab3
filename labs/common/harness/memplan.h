// memplan.h — the bytes one rank holds, by category, after a step and at the most it holds at
// once: the formulas every lab's run is graded against (mem.formula, labs/command/grade/memory.c), and
// what `shardlab plan` prints for a model and layout at any scale. One implementation for both.
//
// The categories are mem.h's.
//
// After a step (the steady state, the papers' formulas), for Psi parameters, e bytes a weight
// (4, or 2 with --mixed) and K bytes of optimizer state a parameter (8, or 12 with --mixed:
// AdamW's m and v and the fp32 master weights):
//   a replica (single, ddp, shard, ckpt)  e Psi, e Psi, K Psi; ddp's bucket buffers 4 Psi
//   ZeRO stage 0-3                         e Psi' or e Psi'/N for the weights (stage 3) and the
//                                          gradients (stage 2+), K Psi'/N for the optimizer
//                                          (stage 1+; 0 on the device with --offload)
//   FSDP                                   as ZeRO-3; HSDP (--replicate R) as ZeRO-3 at
//                                          S = N/R ranks, each shard padded to a multiple of R
//   a pipeline stage                       4 Psi_s, 4 Psi_s, 8 Psi_s for its layers Psi_s
//   a tensor-parallel rank                 4, 4 and 8 x (Psi_rep + Psi_split / t): the replicated
//                                          parameters and its slice of the split ones (tp_layout.h)
//   a context-parallel rank                a replica; the activations of its T' tokens a sequence,
//                                          the ring's blocks in flight as comm (cp_layout.h)
//   an expert-parallel rank                4, 4 and 8 x (Psi_rep + L E/N Psi_exp): the replicated
//                                          parameters and its experts; the dispatcher's buffers as comm
// where Psi' counts each unit (a block, the embedding, the head) padded to N equal shards.
// A bare parameter count (MemLayout.psi, `shardlab plan --psi`: a model without a shape, as
// the ZeRO paper counts one) is one unit: the state after a step alone, no activations, no peaks.
// The activations: the lab's formula for a micro-batch of B' sequences (gpt_acts_bytes; ckpt:
// the policy's), and at the peak the pass's workspace W = 4 (S + B' T C) on top. The peaks of
// the other categories are walked from each method's schedule (memplan.c says how).
#ifndef SHARDLAB_MEMPLAN_H
#define SHARDLAB_MEMPLAN_H

#include <stddef.h>

#include "common/model/gpt.h"
#include "mem.h"

typedef struct {
    const char *lab;      // single, ddp, shard, ckpt, zero, fsdp, pp, tp, cp or ep
    int world;            // N: ranks that split the training state (and, but pp, the batch)
    int micro;            // B': sequences in one micro-batch of one rank
    int mixed;            // bf16 weights and gradients, fp32 master weights in the optimizer
    int gpu;              // on a GPU the pass's workspace also holds its kernels' own
    int stage, offload;   // zero: the stage, 0-3; the optimizer's state in host memory
    int prefetch, reshard;  // fsdp: the next unit gathered early; units freed after forward
    int replicate;        // fsdp --replicate R (HSDP): units sharded over S = world/R ranks, each
                          // shard a multiple of R elements (2R with mixed); 0 or 1: plain FSDP
    int buckets;          // ddp: gradients reduced through bucket buffers (not --sync per-tensor)
    double ckpt_acts;     // ckpt: the activation bytes its policy keeps (ckpt_acts_bytes)
    double stage_params;  // pp: Psi_s, the parameters of this rank's stage
    double held_acts;     // pp: the activation bytes its schedule holds at its fullest moment
    int in_flight;        // pp: the (micro-batch, chunk) pairs held then (0: not planned)
    int interleaved;      // pp: under interleaved 1F1B (a mix of its chunks in flight)
    int tp, sp, vp;       // tp: the tensor-parallel ranks t; sequence parallel; the head split by vocabulary
    int cp, cp_rank;      // cp: the context-parallel group n (world = D n) and this rank's place in it
    int cp_layout, cp_kv; // cp: CpLayoutKind and CpKvMode (cp_layout.h)
    double psi;           // > 0: a bare parameter count in place of m's shape (single, ddp, shard,
                          // zero, fsdp): one unit; micro unused
} MemLayout;

typedef struct {
    double after[MEM_CATEGORIES], peak[MEM_CATEGORIES];  // bytes; NaN: no formula (pp's acts and comm)
    const char *formula;                     // params, grads and optim after a step
    const char *after_formula[MEM_CATEGORIES], *peak_formula[MEM_CATEGORIES];
    double host;                             // bytes in host memory beside them: zero --offload's
                                             // 12 Psi'/N (fp32 masters, m and v), else 0
} MemPlan;

// The plan of layout l for model m: 0, or -1 with the reason in why (a lab it has no formula
// for, a ZeRO stage outside 0-3, a bare count for a lab that needs the shape).
int memplan(const GptConfig *m, const MemLayout *l, MemPlan *p, char *why, size_t nwhy);

// A pipeline of K = p v model chunks over L blocks, as pp lays it out unless --split says
// otherwise: blocks as even as can be, the first chunks taking the remainder; chunk 0 starts
// with the embedding (layer 0), the last ends with the head (layer L + 1). Chunk k's layers,
// first..last. A stage s holds chunks s, s + p, s + 2p, ...
void memplan_pp_chunk(int L, int K, int k, int *first, int *last);

// A pipeline stage's activations under its schedule (0 gpipe, 1 1f1b, 2 interleaved; p stages,
// v chunks a stage, m micro-batches): the stage's forwards and backwards walked in the order
// pp runs them, each forward of local chunk j taking chunk_acts[j] bytes until its backward.
// The most bytes held at once; *held: the (micro-batch, chunk) pairs held at that moment.
//   gpipe        m forwards, then m backwards: all m held
//   1f1b         p-s-1 forwards (at most m), then one forward and one backward until the
//                forwards are out, then the backwards left: min(m, p-s) held
//   interleaved  (Megatron-LM's) forward i runs micro-batch (i / pv) p + i mod p on local
//                chunk (i / p) mod v, backward i the same with the chunks reversed; the
//                warm-up is 2 (p-s-1) + (v-1) p forwards (all m v when m = p): up to
//                min(2 (p-s-1) + (v-1) p + 1, m v) pairs held, a mix of the chunks
double memplan_pp_held(int schedule, int p, int v, int m, int s, const double *chunk_acts, int *held);

// ZeRO's and FSDP's units: a unit of count elements padded to N equal shards of s = ceil(count /
// N) elements, s rounded up to `align` (sharded.h: 2 with --mixed). The shard's length in
// elements; memplan_unit_shard() for the model's unit u.
double memplan_shard(double count, int N, int align);
double memplan_unit_shard(const GptConfig *m, int u, int N, int align);

#endif
