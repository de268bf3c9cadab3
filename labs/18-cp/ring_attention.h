// ring_attention.h — attention over a sequence split between ranks (context parallelism).
//
// The picture. A sequence of T tokens is cut into pieces, one piece per rank of a group of
// N. Everything in a transformer block is token by token except attention: a query needs
// the keys and values of every earlier token, wherever they live. Ring attention passes
// the keys and values around: each rank attends its queries to the block of K/V it holds,
// hands that block to its right neighbour, takes the next from its left, and after N
// steps has seen every block. The partial results merge as flash attention merges its
// tiles, by their log-sum-exps.
//
//     step 0: rank r holds its own K/V    step s: K/V of rank (r - s) mod N
//     send to r+1, receive from r-1       (posted before the compute, so they overlap)
//
// The layout (common/harness/cp_layout.h) says which tokens a rank holds: contiguous chunks,
// or zig-zag ones that give every rank the same work under the causal mask. Positions are
// global: causality compares them, never the local indices.
//
// The math, per sequence b and head h (hs = C / NH, scale = 1/sqrt(hs)):
//   forward, one block of keys u:   s_tu = q_t . k_u * scale  for pos(u) <= pos(t)
//                                   m = max_u s_tu,  l = sum_u exp(s_tu - m)
//                                   o_b = sum_u exp(s_tu - m) v_u / l,   lse_b = m + log l
//   merge into the running (o, lse): lse' = max + log1p(exp(min - max)) of (lse, lse_b)
//                                   o' = o exp(lse - lse') + o_b exp(lse_b - lse')
//   (written with max and min so that no exp() can overflow, whatever the scores)
//   backward, given do, the final o and lse, D_t = do_t . o_t:
//                                   p_tu = exp(s_tu - lse_t)
//                                   dv_u += p_tu do_t        dp_tu = do_t . v_u
//                                   ds_tu = p_tu (dp_tu - D_t)
//                                   dq_t += scale ds_tu k_u  dk_u += scale ds_tu q_t
// In the backward ring dK and dV travel with K and V, gathering each rank's share, and a
// last hop brings them home.
//
// Defines: ring_block_forward(), ring_block_backward(), ring_kv_pack(), ring_init(),
// ring_attention_forward(), ring_attention_backward(), ring_forward_bytes(), ring_backward_bytes().
#ifndef SHARDLAB_RING_ATTENTION_H
#define SHARDLAB_RING_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "common/comm/dist.h"
#include "common/harness/cp_layout.h"
#include "common/harness/mem.h"

// The lab's own layout (cp_layout.h has the same rule for the planner and the grader): the
// chunks rank r holds, in the order of their positions (returns 1 or 2), and its positions,
// increasing, into pos (room for l->T; returns how many).
int ring_rank_chunks(const CpLayout *l, int r, int chunk[2]);
int ring_rank_positions(const CpLayout *l, int r, int *pos);

// One block of keys and values against a rank's queries, merged into the running out and
// lse (start them at 0 and -INFINITY). qkv is the rank's [B, Tq, 3C] (q | k | v per token,
// as the model's c_attn writes it); kv is the block's [B, Tk, 2C] (k | v). bf16_in = 1
// (--mixed): q, k, v arrive as bf16 numbers already, and the probabilities are rounded to
// bf16 before they multiply v, as a tensor core's operands are. scores: Tk floats.
void ring_block_forward(float *out, float *lse, const float *qkv, const int *qpos, int Tq, const float *kv,
                        const int *kpos, int Tk, int B, int C, int NH, int bf16_in, float *scores);
// The same block's share of the gradients: dq ACCUMULATES into the q part of dqkv [B,Tq,3C],
// dk and dv into dkv [B,Tk,2C]. out and lse are the final ones; D [B,NH,Tq] is do . o.
// bf16_in = 1 rounds p (for dv) and ds (for dq, dk) to bf16 as their products read them.
void ring_block_backward(float *dqkv, float *dkv, const float *dout, const float *D, const float *lse,
                         const float *qkv, const int *qpos, int Tq, const float *kv, const int *kpos, int Tk, int B,
                         int C, int NH, int bf16_in, float *scratch);
// kv [B,T,2C] <- the k | v columns of qkv [B,T,3C].
void ring_kv_pack(float *kv, const float *qkv, int B, int T, int C);

// The ring between the ranks of a group: the layout, the buffers of the blocks in flight,
// and what each call moved (for the run's spans and the byte formulas).
typedef struct {
    DistGroup *group;
    CpLayout layout;
    int kv_mode;          // CpKvMode
    int B, C, NH;         // the micro-batch and the model
    int rank, N;
    int count[DIST_MAX_RANKS];   // tokens each rank holds
    int *pos[DIST_MAX_RANKS];    // and their positions
    int maxc;                    // cp_layout_max_count
    float *buf[2];        // ring: two blocks of maxc tokens, K|V|dK|dV (4C floats a token)
                          // all-gather: every rank's K|V padded to maxc tokens, and their dK|dV
    float *D;             // [B, NH, Tl] the backward's do . o
    float *scores;        // a row of scores, then the backward's probabilities
    int bf16_in;          // --mixed
    uint64_t bytes_sent;  // sent since the lab last zeroed it
    int64_t wait_us;      // spent waiting for the transfers: the part the compute did not hide
    int64_t transfer_us;  // the hand-overs' times, each from its post to its end (ring only)
    int64_t attention_us; // spent attending: the blocks' forward and backward arithmetic
} Ring;

// The ring of `group` (its rank and size), for micro-batches of B sequences: the positions
// of every rank, and the blocks in flight from mem ("comm"). ring_alloc_workspace adds the
// passes' workspace (D, a row of scores: "acts"), ring_free_workspace takes it back, ring_free
// all of it.
void ring_init(Ring *r, DistGroup *group, const CpLayout *l, int kv_mode, int B, int C, int NH, int bf16_in,
               Mem *mem);
void ring_alloc_workspace(Ring *r, Mem *mem);
void ring_free_workspace(Ring *r, Mem *mem);
void ring_free(Ring *r, Mem *mem);

// out [B,Tl,C], lse [B,NH,Tl] from this rank's qkv [B,Tl,3C]: every block of the ring
// merged in. dqkv [B,Tl,3C] overwritten from dout, qkv and the forward's out and lse.
void ring_attention_forward(Ring *r, float *out, float *lse, const float *qkv);
void ring_attention_backward(Ring *r, float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse);

// The bytes this rank sends in one layer's forward and backward pass: cp_layout.h's
// cp_ring_bytes(), the formula the lab checks its counters against.
uint64_t ring_forward_bytes(const Ring *r);
uint64_t ring_backward_bytes(const Ring *r);

#endif
