// ring_block.h — ring attention's one block (ring_attention.h has the ring): a rank's queries
// against one block of keys and values, forward and backward, and the layout that says which
// tokens a rank holds. Plain C with no communication in it, so that the CUDA kernels' test
// (tests/gpu/test_ring_kernels.cc, C++) holds the GPU's block to this one.
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
//
// Defines: ring_rank_chunks(), ring_rank_positions(), ring_block_forward(), ring_block_backward(),
// ring_kv_pack() (ring_attention.c).
#ifndef SHARDLAB_RING_BLOCK_H
#define SHARDLAB_RING_BLOCK_H

#include "common/harness/cp_layout.h"

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

#endif
