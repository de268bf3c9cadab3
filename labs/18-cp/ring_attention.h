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
// The math of one block, and its functions: ring_block.h.
//
// In the backward ring dK and dV travel with K and V, gathering each rank's share, and a
// last hop brings them home.
//
// Defines: RingKernels, Ring, ring_init(), ring_attach_device(), ring_attention_forward(),
// ring_attention_backward(), ring_forward_bytes(), ring_backward_bytes().
#ifndef SHARDLAB_RING_ATTENTION_H
#define SHARDLAB_RING_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "common/comm/dist.h"
#include "common/harness/cp_layout.h"
#include "common/harness/mem.h"
#include "common/model/device.h"
#include "ring_block.h"

// The kernels the ring runs, on the device of its buffers: the CPU's (the functions above,
// and the copies in ring_attention.c) or the GPU's (common/cuda/gpu.h, cuda_ring_*: the same
// arguments and meaning, on device pointers).
typedef struct {
    void (*block_forward)(float *out, float *lse, const float *qkv, const int *qpos, int Tq, const float *kv,
                          const int *kpos, int Tk, int B, int C, int NH, int bf16_in, float *scores);
    void (*block_backward)(float *dqkv, float *dkv, const float *dout, const float *D, const float *lse,
                           const float *qkv, const int *qpos, int Tq, const float *kv, const int *kpos, int Tk, int B,
                           int C, int NH, int bf16_in, float *scratch);
    void (*kv_pack)(float *kv, const float *qkv, int B, int T, int C);
    void (*kv_unpack)(float *dqkv, const float *dkv, int B, int T, int C);  // dqkv's k | v columns <- dkv
    void (*do_dot_o)(float *D, const float *dout, const float *out, int B, int T, int C, int NH);
    void (*fill)(float *x, size_t n, float v);
} RingKernels;

// The ring between the ranks of a group: the layout, the buffers of the blocks in flight,
// and what each call moved (for the run's spans and the byte formulas).
typedef struct {
    const Device *dev;    // where the buffers live and the kernels run
    const RingKernels *k;
    DistGroup *group;
    CpLayout layout;
    int kv_mode;          // CpKvMode
    int B, C, NH;         // the micro-batch and the model
    int rank, N;
    int count[DIST_MAX_RANKS];   // tokens each rank holds
    int *pos[DIST_MAX_RANKS];    // and their positions
    int *dev_pos[DIST_MAX_RANKS];  // the same on the device, for its kernels (pos itself on the CPU)
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
    DeviceMark *marks;    // a block's start and end marks, a pair per sequence (the device's clock)
    int64_t *mark_us;     // and when the device reached them
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

// The device's half of a ring: its kernels, its copy of the positions, its timing marks.
// ring_init calls it; a ring built by hand (the TODO checks) calls it once B, N, count and
// pos are set, and ring_detach_device when done (ring_free does for ring_init's).
void ring_attach_device(Ring *r, const Device *dev);
void ring_detach_device(Ring *r);

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
