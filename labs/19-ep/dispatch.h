// dispatch.h — expert parallelism's token dispatcher: every rank's tokens to the ranks that
// hold their experts, and the experts' outputs back.
//
// The picture. E experts, n ranks, E/n experts each. Every rank routes its own tokens (the
// router is replicated, as attention is). A token's chosen experts may live anywhere, so
// the rows travel:
//
//     rank 0 tokens ──route──▶ rows sorted by the rank of their expert ──┐
//     rank 1 tokens ──route──▶ rows sorted by the rank of their expert ──┼─ all-to-all ─▶ each
//                                                                        │  rank's experts run
//     each token ◀──combine── its rows, weighted ◀── all-to-all back ────┘  on what came in
//
// Per block and pass, in order:
//   1. route       this rank's tokens: the top K experts and their weights (moe_route)
//   2. count       every rank's counts [K][E] and probability sums [E], all-gathered: every
//                  rank then knows what each rank sends each expert, which assignments the
//                  capacity drops (the rule below), and the aux loss's f_e and P_e
//   3. dispatch    the served rows, sorted by destination rank, then expert, then serving
//                  order: an all-to-all with uneven splits (all_to_allv)
//   4. experts     the rows that came in, regrouped by expert (from each rank in turn), run
//                  through this rank's experts (moe_experts_forward)
//   5. combine     the outputs regrouped by source rank, all-to-all'd back (the splits
//                  swapped), weighted by the router and summed into each token (moe_combine)
// The backward runs 5 to 3 backwards: the rows' gradients travel as the rows did (the
// dispatch's splits), the inputs' gradients come home as the outputs did (the combine's).
//
// Capacity is global, the single-rank rule over the whole pass: an expert serves at most
// ceil(F N K / E) of the pass's N tokens (all ranks'), first choices before second choices,
// and within a choice in token order, rank 0's tokens first. A per-rank capacity would be
// cheaper (no counts to gather) but would drop different tokens at every n, so the run would
// not equal the single-rank one; the counts are K E ints a rank.
//
// What it sends, per block and pass (rows of C floats; R_sent the rows this rank sends to
// OTHER ranks, its own stay in memory): forward 4 C R_sent twice (dispatch, combine), the
// same twice in the backward; the counts' all-gather, 4 (n-1) (K E + 2 E).
#ifndef SHARDLAB_EP_DISPATCH_H
#define SHARDLAB_EP_DISPATCH_H

#include <stdint.h>

#include "common/comm/dist.h"
#include "common/harness/mem.h"
#include "common/model/moe.h"

typedef struct {
    DistGroup *group;     // the expert-parallel ranks (E / n experts each)
    int N;                // tokens a rank routes in a pass
    float *stage;         // [R, C] rows as they cross the wire: from each rank, by expert ("comm")
    float *stats;         // [n, K E + 2 E] every rank's counts and probability sums ("comm")
    int stats_row;        // K E + 2 E
    uint64_t bytes_sent;  // what this rank sent since the caller last zeroed it
    int64_t rows_to[DIST_MAX_RANKS];  // the rows its dispatches sent each rank (its own: kept), since then
    int64_t exchange_us;  // the time it spent in the exchanges
} Dispatcher;

// The buffers for passes of N tokens a rank, the layer m (m->ranks the group's size).
void dispatcher_init(Dispatcher *d, DistGroup *group, const MoeConfig *m, int N, Mem *mem);
void dispatcher_free(Dispatcher *d, Mem *mem);
// The bytes the two buffers take: 4 (R C + n (K E + 2 E)).
double dispatcher_bytes(const MoeConfig *m, int N);

// The global capacity rule from every rank's counts: served[(s K + k) E + e] of rank s's
// choice-k assignments to e, from counts[(s K + k) E + e], for a pass of n N tokens.
// Returns the assignments dropped.
int dispatch_serve(const MoeConfig *m, int n, int N, const int *counts, int *served);

// The layer on this rank's tokens (the Ops table's moe_forward and moe_backward, gpt.c).
void dispatch_forward(Dispatcher *d, const Ops *ops, const MoeConfig *m, const float *params, const float *x,
                      float *out, MoeActs *a, int bf16_in, float *scratch);
void dispatch_backward(Dispatcher *d, const Ops *ops, const MoeConfig *m, const float *params, float *grads,
                       const float *x, const float *dout, const MoeActs *a, float aux_scale, float *dx, int bf16_in,
                       float *scratch);

#endif
