// pairwise.c — all-to-all by pairwise exchange.
//
// Every rank holds one block for every rank, and must end with every rank's block for it: a
// transpose of the group's blocks. Block q of rank r's input becomes block r of rank q's
// output. Expert parallelism needs exactly this: each rank routes its tokens to the ranks
// that hold their experts, and gets back the tokens routed to its own.
//
//     in:   rank 0: a0 a1 a2 a3        out:  rank 0: a0 b0 c0 d0
//           rank 1: b0 b1 b2 b3              rank 1: a1 b1 c1 d1
//           rank 2: c0 c1 c2 c3              rank 2: a2 b2 c2 d2
//           rank 3: d0 d1 d2 d3              rank 3: a3 b3 c3 d3
//
// PAIRWISE EXCHANGE, p - 1 steps. Each rank first copies its own block. In step k (1..p-1)
// rank r sends its block for rank r+k and receives the block of rank r-k (mod p):
//
//     step | rank 0        | rank 1        | rank 2        | rank 3
//     -----+---------------+---------------+---------------+--------------
//       1  | a1 -> 1, <- d0 | b2 -> 2, <- a1 | c3 -> 3, <- b2 | d0 -> 0, <- c3
//       2  | a2 -> 2, <- c0 | b3 -> 3, <- d1 | c0 -> 0, <- a2 | d1 -> 1, <- b3
//       3  | a3 -> 3, <- b0 | b0 -> 0, <- c1 | c1 -> 1, <- d2 | d2 -> 2, <- a3
//
// In every step each rank sends one block and receives one, so every link is busy and none
// twice: a rank sends (p-1)/p of its buffer, and nccl-tests' bus bandwidth for all-to-all is
// algbw x (p-1)/p, as for all-gather. Unlike the ring, no block is forwarded: each goes
// straight to its rank. So all-to-all takes as many steps as a ring, but every block crosses
// one link only.
//
// The blocks may have any lengths (all_to_allv): what rank r sends rank q, q expects from r.
// A block goes piece by piece (SHM_PIECE_FLOATS), a piece sent before the piece received, so
// no channel holds more than a piece and every rank keeps going.
#include <string.h>

#include "algorithms.h"             // defines: min_size(), pairwise_all_to_all(), ...
#include "common/harness/check.h"  // todo(), in the starter code (make starter)

// Floats of piece i of a block of len floats (0 past its end). (inline: the starter's stub
// leaves it unused until the step is written)
static inline size_t piece_of(size_t len, size_t i) {
    size_t start = i * SHM_PIECE_FLOATS;
    return start < len ? min_size(SHM_PIECE_FLOATS, len - start) : 0;
}

void pairwise_all_to_all(Shm *s, const DistGroup *g, const float *in, const size_t *send_counts, float *out,
                         const size_t *recv_counts) {
    int p = g->size, r = g->rank;
    size_t send_at[DIST_MAX_RANKS] = {0}, recv_at[DIST_MAX_RANKS] = {0};  // where each rank's block starts
    size_t a = 0, b = 0;
    for (int q = 0; q < p; q++) send_at[q] = a, recv_at[q] = b, a += send_counts[q], b += recv_counts[q];
    memmove(out + recv_at[r], in + send_at[r], send_counts[r] * sizeof(float));  // our own block stays
    for (int k = 1; k < p; k++) {
        shm_set_what(s, "all_to_all", "pairwise", k, p - 1);
        // Step k: our block for rank r+k goes out to it, and rank r-k's block for us comes in
        // (mod p), piece by piece: piece i out (shm_reserve() to `to`'s rank, copy, shm_commit()),
        // then piece i in (shm_peek() from `from`'s, copy, shm_release()). g->ranks[q] is group
        // rank q's world rank, which names its channel; send_at[q] and recv_at[q] are where
        // rank q's blocks start in `in` and `out`.
        /* BEGIN SOLUTION: all-to-all step k: our block for rank r+k out, rank r-k's block for us in */
        int to = (r + k) % p, from = (r - k + p) % p;
        size_t ns = send_counts[to], nr = recv_counts[from], longest = ns > nr ? ns : nr;
        for (size_t i = 0; i * SHM_PIECE_FLOATS < longest; i++) {
            size_t m = piece_of(ns, i), at = i * SHM_PIECE_FLOATS;
            if (m) {
                memcpy(shm_reserve(s, g->ranks[to]), in + send_at[to] + at, m * sizeof(float));
                shm_commit(s, g->ranks[to], m);
            }
            if ((m = piece_of(nr, i))) {
                memcpy(out + recv_at[from] + at, shm_peek(s, g->ranks[from], m), m * sizeof(float));
                shm_release(s, g->ranks[from]);
            }
        }
        /* END SOLUTION */
    }
}
