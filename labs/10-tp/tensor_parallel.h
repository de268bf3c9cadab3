// tensor_parallel.h — Megatron-style tensor parallelism of the GPT: which slice of each
// matrix a rank holds, the two conjugate operators f and g, and each layer's forward and
// backward pass on one tensor-parallel rank (labs/10-tp/tp.c trains with it). A rank's slices, its
// state and its activations' and workspace's layout are in slices.c; f and g in f_and_g.c;
// the passes in tensor_parallel.c.
//
// Shoeybi et al., "Megatron-LM" (2019), section 3; Korthikanti et al., "Reducing Activation
// Recomputation in Large Transformer Models" (2022) for sequence parallelism. A block's
// matrices are split over the t ranks of a tensor-parallel group, rank r of t:
//
//   attn.c_attn  [3C, C]  column-parallel BY HEADS: rank r owns heads [r NH/t, (r+1) NH/t),
//                         i.e. rows [r C/t, (r+1) C/t) of each of q, k and v:
//                              q: |r0|r1|..|   k: |r0|r1|..|   v: |r0|r1|..|
//                         its local weight is [q rows; k rows; v rows] = [3C/t, C], so the
//                         attention kernel runs unchanged on [B,T,3C/t] with NH/t heads
//   attn.c_proj  [C, C]   row-parallel: the columns [r C/t, (r+1) C/t) that read its heads
//   mlp.c_fc     [4C, C]  column-parallel: rows [r 4C/t, (r+1) 4C/t) (+ those bias entries)
//   mlp.c_proj   [C, 4C]  row-parallel: columns [r 4C/t, (r+1) 4C/t)
//   lm_head      [V, C]   --vocab-parallel: rows [r V/t, (r+1) V/t), else replicated
// Everything else (LayerNorms, the two c_proj biases, embeddings, ln_f) is REPLICATED: every
// rank holds and updates all of it. Per layer a rank keeps two flat buffers:
//   rep   the replicated tensors, in gpt.h's order       block: ln_1 w,b | attn.c_proj.bias |
//                                                               ln_2 w,b | mlp.c_proj.bias   (6C)
//   split its slices, in gpt.h's order                   block: c_attn w,b | attn.c_proj w |
//                                                               c_fc w,b | mlp.c_proj w     ((12C^2+7C)/t)
//
// The two operators (Megatron's f and g; the lab's top comment tells the story):
//   f  at the INPUT of a column-parallel linear   forward: identity     backward: all-reduce
//   g  at the OUTPUT of a row-parallel linear     forward: all-reduce   backward: identity
// With sequence parallelism (--sp) the token rows of the residual stream are split over the
// group too, and they become
//   f  forward: all-gather (rows)       backward: reduce-scatter (rows)
//   g  forward: reduce-scatter (rows)   backward: all-gather (rows)
//
// Rows. A micro-batch has BT = B T token rows. Without SP every rank holds all of them. With
// SP rank r holds rows [r BT/t, (r+1) BT/t) of the residual stream, LayerNorm inputs and
// statistics, and of the embedding output and head input: the split along the sequence of
// Megatron's [s, b, h] layout, here along our [b, t] rows (the pointwise operations between f
// and g do not care which rows they get; attention only ever sees all rows, after f).
//
// Every kernel goes through the device's Ops; the vocabulary-parallel cross-entropy reads the
// logits on the host (device_to_host), since Ops has no row-max or sum-of-exp kernel.
#ifndef SHARDLAB_TENSOR_PARALLEL_H
#define SHARDLAB_TENSOR_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/comm/dist.h"          // defines: DistGroup, Dist, DistRecord
#include "common/harness/args.h"       // defines: TrainArgs
#include "common/harness/mem.h"        // defines: Mem
#include "common/harness/tp_layout.h"
#include "common/model/gpt.h"          // defines: GptConfig, Gpt, gpt_layer_forward()
#include "common/runfiles/runlog.h"    // defines: RunLog

typedef enum { TP_ALL_REDUCE, TP_REDUCE_SCATTER, TP_ALL_GATHER, TP_KINDS } TpKind;

// Collectives counted by kind, and the bytes they sent.
typedef struct {
    int calls[TP_KINDS];
    uint64_t bytes;
} TpCount;

typedef struct {
    GptConfig cfg;
    int t, r;            // ranks in the tensor-parallel group, and this rank's place in it
    int sp, vp;          // --sp, --vocab-parallel
    DistGroup *group;    // the tensor-parallel group
    Mem *mem;
    const Ops *ops;
    int nlayers;         // L + 2, as gpt.h
    size_t *rep_n, *split_n;         // [layer] floats in each part
    float **rep, **split;            // [layer] weights on the device (split NULL when split_n is 0)
    float **rep_grad, **split_grad;  // [layer] their gradients
    // Rows of the current micro-batch (tp_acts_alloc sets them).
    int B, BT, rows, row0;           // rows: token rows of the residual stream this rank holds
    float *ones, *scratch;           // tp_workspace_begin(): [BT] ones, then workspace
    // The collectives' span events (tp_log_collectives).
    RunLog *log;
    Dist *dist;
    DistRecord records[64];
    int64_t step;
    int mb;                          // micro-batch, -1 outside one
    const char *pass;                // "fwd", "bwd" or "step"
    TpCount model;                   // this step's f, g and vocabulary-parallel collectives
    int64_t comm_us;                 // time in collectives this step
} Tp;

// A rank's part of layer l (0: replicated, 1: its slices) in rep's or split's arrays, and its floats.
static inline float *tp_part(float **rep, float **split, int part, int l) { return part ? split[l] : rep[l]; }
static inline size_t tp_part_floats(const Tp *tp, int part, int l) { return part ? tp->split_n[l] : tp->rep_n[l]; }

// ---- the layout of a rank's slices (what it holds: common/harness/tp_layout.h) -------------------

// Copies between a layer's full flat buffer (gpt.h's layout, host memory) and rank r's parts:
// to_parts = 1: full -> rep, split; 0: rep, split -> full (rank r's slices only).
void tp_layer_slice(const GptConfig *c, int vp, int t, int r, int layer, float *full, float *rep, float *split,
                    int to_parts);

// ---- the state of one rank --------------------------------------------------------------

// Builds the whole model on the host exactly as `single` does (seeded, or --init), keeps
// this rank's parts on the device ("params"), zeroed gradients ("grads").
void tp_create(Tp *tp, const GptConfig *c, int t, int r, int sp, int vp, DistGroup *g, Dist *d, Mem *mem,
               const TrainArgs *a);
void tp_destroy(Tp *tp);
void tp_zero_grads(Tp *tp);
// The param_hash (hash.h) of this rank's replicated (split = 0) or split (split = 1) weights,
// layer order, computed on the device.
uint64_t tp_hash(const Tp *tp, int split);
// The whole model into `full` (a Gpt in host memory): the split parts all-gathered over the
// group (every rank of the group must call it).
void tp_gather_model(Tp *tp, Gpt *full);

// ---- activations ------------------------------------------------------------------------
// What the forward pass saves, for a micro-batch of B sequences (BT rows, R of them this
// rank's). ln1/ln2 (and lnf with --vocab-parallel) are the LayerNorm outputs on ALL rows: the
// column-parallel linears read them (with SP: gathered by f, and kept for the backward pass).
// Under --mixed the activations only a Linear reads (ln1, atty, ln2, fch_gelu, lnf), the
// GELU's input fch and, with flash attention, qkv are kept as bf16s, as gpt.h keeps them:
// their float pointers are NULL, the _bf16 ones hold them.

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd;  // [BT,C], [R], [R]
    float *qkv;                        // [BT,3C/t] this rank's heads' q, k, v
    float *att;                        // [B,NH/t,T,T] (--attn naive; else NULL)
    float *lse;                        // [B,NH/t,T] (--attn flash; else NULL)
    float *atty;                       // [BT,C/t]
    float *res1;                       // [R,C]
    float *ln2, *ln2_mean, *ln2_rstd;  // [BT,C], [R], [R]
    float *fch, *fch_gelu;             // [BT,4C/t]
    float *out;                        // [R,C]
    bf16 *ln1_bf16, *atty_bf16, *ln2_bf16, *fch_bf16, *fch_gelu_bf16;  // --mixed (else NULL)
    bf16 *qkv_bf16;                                                     // --mixed with flash (else NULL)
} TpBlockActs;

typedef struct {
    float *x0;                         // [R,C]
    TpBlockActs *blocks;               // [L]
    float *lnf, *lnf_mean, *lnf_rstd;  // [H,C], [R], [R]   H = BT with --vocab-parallel, else R
    float *probs;                      // [H,V'] V' = V/t with --vocab-parallel, else V
    bf16 *lnf_bf16;                    // --mixed (else NULL)
    float *buffer;                     // the floats, then the bf16s
} TpActs;

// Also sets tp's rows for micro-batches of B sequences.
void tp_acts_alloc(TpActs *a, Tp *tp, int B);
void tp_acts_free(TpActs *a, Tp *tp);
// The transient workspace of a forward + backward pass (floats, "acts" while allocated).
size_t tp_workspace_floats(const Tp *tp);
void tp_workspace_begin(Tp *tp);
void tp_workspace_end(Tp *tp);

// ---- the conjugate operators (see the top of this file) ---------------------------------
// at: "attn", "mlp" or "head"; layer: gpt.h's index (blocks 1..L, head L+1). Without SP,
// in == out (every rank holds all rows: identity or an in-place all-reduce).

// f forward: in [R,C] -> out [BT,C], the input of a column-parallel linear, on all rows.
void tp_f_forward(Tp *tp, const float *in, float *out, int layer, const char *at);
// f backward: in [BT,C] this rank's PARTIAL gradient -> out [R,C] the sum over the group.
void tp_f_backward(Tp *tp, float *in, float *out, int layer, const char *at);
// g forward: in [BT,C] this rank's PARTIAL output -> out [R,C] the sum over the group.
void tp_g_forward(Tp *tp, float *in, float *out, int layer, const char *at);
// g backward: in [R,C] the gradient of the sum -> out [BT,C] on all rows.
void tp_g_backward(Tp *tp, const float *in, float *out, int layer, const char *at);
// --mixed: 1 if f forward's and g backward's all-gathers move bf16 (--sp, and BT C divides
// by 2t), which changes no number: what they gather is only read by a Linear, which rounds it.
int tp_gathers_bf16(const Tp *tp);
// g backward under --mixed (rows16, all16: R C and BT C bf16s of scratch): the fp32 one when
// tp_gathers_bf16() is 0. (f forward under --mixed is LayerNorm's, which writes its rows in bf16
// before they travel: tensor_parallel.c's layernorm_f_forward_bf16.)
void tp_g_backward_bf16(Tp *tp, const float *in, float *out, bf16 *rows16, bf16 *all16, int layer, const char *at);

// ---- layer by layer ---------------------------------------------------------------------
// As gpt_layer_forward/backward: layer 0 embedding, 1..L blocks, L+1 head; tokens/targets
// [B,T] on the host; forward returns the loss sum of the rows whose loss this rank computes
// (all BT rows, or its R rows with SP and a replicated head). Backward ACCUMULATES into the
// gradients; dx [R,C] carries the gradient from layer l+1 down to l. Between
// tp_workspace_begin() and tp_workspace_end().
double tp_layer_forward(Tp *tp, int layer, TpActs *a, const uint8_t *tokens, const uint8_t *targets);
void tp_layer_backward(Tp *tp, int layer, TpActs *a, const uint8_t *tokens, const uint8_t *targets,
                       float loss_scale, float *dx);

// Drains the finished collectives' records into span events (step, mb and pass from tp;
// extra fields "group", "op", "at", "pass", "count", "algo", "issued_us"), adds them to
// *count (may be NULL) and their time to tp->comm_us.
void tp_log_collectives(Tp *tp, const char *group, const char *op, const char *at, int layer, TpCount *count);

#endif
