// cp_layout.h — which tokens each rank of a context-parallel group holds, and the bytes its
// ring needs, in closed form. The cp lab (labs/18-cp/) lays its tokens and buffers out by
// these; the planner, the memory check and the grader count with them.
//
// The layouts:
//   contiguous  rank r holds chunk r of N: with causal attention the last rank's queries see
//               every key and the first rank's only its own, N times less work.
//   zigzag      2N chunks; rank r holds chunks r and 2N-1-r, an early chunk and a late one,
//               so every rank does the same work (Megatron's and torchtitan's load balance).
// Chunks follow dist_chunk(): T need not divide, the first chunks take one token more.
#ifndef SHARDLAB_CP_LAYOUT_H
#define SHARDLAB_CP_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { CP_CONTIGUOUS = 0, CP_ZIGZAG = 1 } CpLayoutKind;
typedef enum { CP_KV_RING = 0, CP_KV_ALL_GATHER = 1 } CpKvMode;

typedef struct {
    int kind;     // CpLayoutKind
    int T, N;     // the sequence and the group
    int chunks;   // N (contiguous) or 2N (zigzag)
} CpLayout;

// "contiguous" / "zigzag" -> CpLayoutKind, -1 if neither; the name of one.
int cp_layout_parse(const char *s);
const char *cp_layout_name(int kind);
// 0, or -1 when T is too short for every chunk to hold a token (T < chunks).
int cp_layout_init(CpLayout *l, int kind, int T, int N);
// Tokens rank r holds, and their global positions in increasing order (pos: that many ints).
int cp_layout_count(const CpLayout *l, int r);
void cp_layout_positions(const CpLayout *l, int r, int *pos);
// Rank r's positions as runs of consecutive ones, "0-15,48-63" (zig-zag's two chunks of rank
// n-1 are one run), into out[n]: what the cp lab logs and the grader compares with.
void cp_layout_ranges(const CpLayout *l, int r, char *out, size_t n);
// Rank r's share of causal attention's work: the (query, key) pairs its queries see, per
// sequence and head, summed over the ring: pos + 1 for each of its positions.
long cp_layout_pairs(const CpLayout *l, int r);
// The most tokens any rank holds: the size of a K/V block in flight.
int cp_layout_max_count(const CpLayout *l);

// The floats of the ring's buffers for micro-batches of B sequences (M = the most tokens a
// rank holds, n = the group):
//   comm       the blocks in flight: ring, two blocks of M tokens, K|V|dK|dV (8 B M C);
//              all-gather, every rank's K|V padded to M tokens and their dK|dV (4 n B M C)
//   workspace  the backward's D = do . o (B NH M), a row of scores (M) and of output (C)
size_t cp_comm_floats(const CpLayout *l, int kv_mode, int B, int C);
size_t cp_workspace_floats(const CpLayout *l, int B, int C, int NH);

// The bytes rank r of the group sends in one layer's forward (backward = 0) or backward pass
// (backward = 1) over a micro-batch of B sequences, 4 bytes a float (labs/18-cp/ring_attention.h):
//   ring        forward  8 C B x the tokens of the blocks it passes on: steps s = 0..n-2
//                        hand on the block of rank (r - s) mod n
//               backward 16 C B x the same (K|V|dK|dV) + 8 C B T'_(r+1) (dK dV of rank r+1
//                        taken home on the last hop)
//   all-gather  forward  8 C B M (n - 1): every rank's K|V padded to M tokens, all-gathered
//               backward twice that: the all-gather again, and the reduce-scatter of dK|dV
uint64_t cp_ring_bytes(const CpLayout *l, int kv_mode, int r, int B, int C, int backward);

#endif
