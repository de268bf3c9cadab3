// ring.c — ring reduce-scatter + ring all-gather = ring all-reduce; chain broadcast and reduce.
//
// The ranks of a group stand in a ring; each only ever sends to its right neighbour and
// receives from its left one:
//
//          +--------+          +--------+
//          | rank 0 | -------> | rank 1 |
//          +--------+          +--------+
//               ^                   |
//               |                   v
//          +--------+          +--------+
//          | rank 3 | <------- | rank 2 |
//          +--------+          +--------+
//
// The buffer of n floats is cut into p chunks c0..c(p-1) (dist_chunk: the first n % p are one
// float longer).
//
// REDUCE-SCATTER, p - 1 rounds. In round k (1..p-1) rank r sends chunk (r - k) mod p, holding
// the sum of k ranks' values, to rank r+1, which adds its own values of that chunk. After
// round p-1 each chunk has passed through every rank: rank r holds the full sum of chunk r.
//
//     round | rank 0 sends | rank 1 sends | rank 2 sends | rank 3 sends
//     ------+--------------+--------------+--------------+-------------
//       1   |  c3 (x0)     |  c0 (x1)     |  c1 (x2)     |  c2 (x3)
//       2   |  c2 (x3+x0)  |  c3 (x0+x1)  |  c0 (x1+x2)  |  c1 (x2+x3)
//       3   |  c1 (..+x0)  |  c2 (..+x1)  |  c3 (..+x2)  |  c0 (..+x3)
//     then rank 0 adds its x0 to the c0 it receives from rank 3: c0 = x1+x2+x3+x0, and so on.
//
// ALL-GATHER, p - 1 rounds. In round k rank r sends chunk (r - k + 1) mod p to rank r+1: first
// its own, then whatever it received in the round before. After p-1 rounds every rank has
// every chunk.
//
//     round | rank 0 sends | rank 1 sends | rank 2 sends | rank 3 sends
//     ------+--------------+--------------+--------------+-------------
//       1   |  c0          |  c1          |  c2          |  c3
//       2   |  c3          |  c0          |  c1          |  c2
//       3   |  c2          |  c3          |  c0          |  c1
//
// bf16. A bf16 buffer of n elements travels as n/2 four-byte words, two bf16 lanes to a word,
// so everything above holds with "word" for "float" (dist.c makes sure n/2 splits into p
// equal chunks). Only the additions change: at each hop both lanes are widened to fp32,
// added and rounded back to bf16 (nearest even), as NCCL does. So chunk c's sum is rounded
// p - 1 times, in ring order: rank c+1's values, plus rank c+2's, ..., plus rank c's own last.
//
// ALL-REDUCE = reduce-scatter, then all-gather. Each rank sends 2 (p-1) chunks of n/p floats:
// 2 (p-1)/p n floats whatever p is, which is why the ring is the algorithm for big buffers
// (nccl-tests call 2 (p-1)/p the all-reduce's "bus bandwidth" factor). Every rank ends with
// the same bits: each chunk is summed once, by one rank, then copied.
//
// Pipelining. Channels carry pieces of SHM_PIECE_FLOATS, not whole chunks, and the code runs
// the rounds piece by piece: for piece i, round 1, then round 2, ... So a chunk's pieces flow
// around the ring one after the other (a bucket brigade): every rank is busy at once, and no
// channel ever holds more than a piece or two. (Sending all of round 1 before receiving
// anything would fill the channels and deadlock on big chunks.)
#include <string.h>

#include "algorithms.h"  // defines: add_words(), min_size(), ring_reduce_scatter(), ...
#include "common/harness/check.h"  // todo(), in the starter code (make starter)

static int mod(int a, int p) { return ((a % p) + p) % p; }

void add_words(DistDtype t, float *dst, const float *a, const float *b, size_t m) {
    if (t == DIST_F32) {
        for (size_t j = 0; j < m; j++) dst[j] = a[j] + b[j];
        return;
    }
    // Two bf16 lanes per word, read and written as bf16s (never as floats).
    const bf16 *x = (const bf16 *)a, *y = (const bf16 *)b;
    bf16 *z = (bf16 *)dst;
    for (size_t j = 0; j < 2 * m; j++) z[j] = bf16_add(x[j], y[j]);
}

// The piece i of chunk c: offset in the whole buffer and length (0 if the chunk has fewer
// pieces; chunks differ in length by at most one float).
static size_t piece(size_t n, int p, int c, size_t i, size_t *off) {
    size_t coff, clen;
    dist_chunk(n, p, c, &coff, &clen);
    size_t start = i * SHM_PIECE_FLOATS;
    *off = coff + start;
    return start < clen ? min_size(SHM_PIECE_FLOATS, clen - start) : 0;
}

static size_t max_pieces(size_t n, int p) {
    size_t off, len;
    dist_chunk(n, p, 0, &off, &len);  // chunk 0 is the longest
    return shm_pieces(len);
}

void ring_reduce_scatter(Shm *s, const DistGroup *g, DistDtype t, const float *in, float *out, size_t n) {
    int p = g->size, r = g->rank;
    size_t off, m;
    if (p == 1) {
        if (out != in) memmove(out, in, n * sizeof(float));
        return;
    }
    int right = g->ranks[mod(r + 1, p)], left = g->ranks[mod(r - 1, p)];
    for (size_t i = 0; i < max_pieces(n, p); i++) {
        // Round 1: our own values of chunk r-1 start their trip around the ring.
        shm_set_what(s, "reduce_scatter", "ring reduce-scatter", 1, p - 1);
        if ((m = piece(n, p, mod(r - 1, p), i, &off)) > 0) {
            memcpy(shm_reserve(s, right), in + off, m * sizeof(float));
            shm_commit(s, right, m);
        }
        // Rounds 2..p-1: the partial sum of chunk r-k arrives from the left; add ours, pass it on.
        // (Piece i of that chunk: shm_peek() it from the left, add_words() our values into
        // shm_reserve(right), shm_release() the left channel, shm_commit() the right one.)
        /* BEGIN SOLUTION: ring reduce-scatter, rounds k = 2..p-1 of piece i (which chunk, from whom, to whom) */
        for (int k = 2; k <= p - 1; k++) {
            shm_set_what(s, "reduce_scatter", "ring reduce-scatter", k, p - 1);
            if ((m = piece(n, p, mod(r - k, p), i, &off)) == 0) continue;
            const float *partial = shm_peek(s, left, m);
            add_words(t, shm_reserve(s, right), partial, in + off, m);
            shm_release(s, left);
            shm_commit(s, right, m);
        }
        /* END SOLUTION */
        // The last partial sum is of chunk r: with ours added, it is the full sum.
        shm_set_what(s, "reduce_scatter", "ring reduce-scatter", p - 1, p - 1);
        if ((m = piece(n, p, r, i, &off)) > 0) {
            size_t chunk_off, chunk_len;
            dist_chunk(n, p, r, &chunk_off, &chunk_len);
            const float *partial = shm_peek(s, left, m);
            add_words(t, out + (off - chunk_off), partial, in + off, m);
            shm_release(s, left);
        }
    }
}

void ring_all_gather(Shm *s, const DistGroup *g, const float *in, float *out, size_t n) {
    int p = g->size, r = g->rank;
    size_t off, m, own_off, own_len;
    dist_chunk(n, p, r, &own_off, &own_len);
    if (out + own_off != in) memmove(out + own_off, in, own_len * sizeof(float));
    if (p == 1) return;
    int right = g->ranks[mod(r + 1, p)], left = g->ranks[mod(r - 1, p)];
    for (size_t i = 0; i < max_pieces(n, p); i++) {
        // Round 1: our own chunk.
        shm_set_what(s, "all_gather", "ring all-gather", 1, p - 1);
        if ((m = piece(n, p, r, i, &off)) > 0) {
            memcpy(shm_reserve(s, right), out + off, m * sizeof(float));
            shm_commit(s, right, m);
        }
        // Rounds 2..p-1: keep what arrives from the left (chunk r-k+1) and pass it on.
        /* BEGIN SOLUTION: ring all-gather, rounds k = 2..p-1 of piece i (which chunk, from whom, to whom) */
        for (int k = 2; k <= p - 1; k++) {
            shm_set_what(s, "all_gather", "ring all-gather", k, p - 1);
            if ((m = piece(n, p, mod(r - k + 1, p), i, &off)) == 0) continue;
            const float *got = shm_peek(s, left, m);
            memcpy(out + off, got, m * sizeof(float));
            memcpy(shm_reserve(s, right), got, m * sizeof(float));
            shm_release(s, left);
            shm_commit(s, right, m);
        }
        /* END SOLUTION */
        // The last chunk to arrive is r+1's, which went all the way round.
        shm_set_what(s, "all_gather", "ring all-gather", p - 1, p - 1);
        if ((m = piece(n, p, mod(r + 1, p), i, &off)) > 0) {
            memcpy(out + off, shm_peek(s, left, m), m * sizeof(float));
            shm_release(s, left);
        }
    }
}

void ring_all_reduce(Shm *s, const DistGroup *g, DistDtype t, float *buf, size_t n) {
    size_t off, len;
    dist_chunk(n, g->size, g->rank, &off, &len);
    ring_reduce_scatter(s, g, t, buf, buf + off, n);  // chunk r of buf now holds the full sum
    ring_all_gather(s, g, buf + off, buf, n);         // and every rank gets every chunk
}

// ---------------------------------------------------------------------------------------
// Chains: the ring cut open at the root. Broadcast flows root -> root+1 -> ... -> root-1;
// reduce flows root+1 -> ... -> root-1 -> root, each rank adding its values on the way.
// Pipelined by pieces, each rank sends n floats at most: the right shape for big buffers.
// ---------------------------------------------------------------------------------------

void chain_broadcast(Shm *s, const DistGroup *g, float *buf, size_t n, int root) {
    int p = g->size, q = mod(g->rank - root, p);  // q: place in the chain, root first
    if (p == 1) return;
    int next = g->ranks[mod(g->rank + 1, p)], prev = g->ranks[mod(g->rank - 1, p)];
    shm_set_what(s, "broadcast", "chain", q, p - 1);
    for (size_t off = 0; off < n; off += SHM_PIECE_FLOATS) {
        size_t m = min_size(SHM_PIECE_FLOATS, n - off);
        if (q > 0) {
            memcpy(buf + off, shm_peek(s, prev, m), m * sizeof(float));
            shm_release(s, prev);
        }
        if (q < p - 1) {
            memcpy(shm_reserve(s, next), buf + off, m * sizeof(float));
            shm_commit(s, next, m);
        }
    }
}

void chain_reduce(Shm *s, const DistGroup *g, DistDtype t, const float *in, float *out, size_t n, int root) {
    int p = g->size, q = mod(g->rank - root - 1, p);  // q: place in the chain, root last
    if (p == 1) {
        if (out != in) memmove(out, in, n * sizeof(float));
        return;
    }
    int next = g->ranks[mod(g->rank + 1, p)], prev = g->ranks[mod(g->rank - 1, p)];
    shm_set_what(s, "reduce", "chain", q + 1, p);
    for (size_t off = 0; off < n; off += SHM_PIECE_FLOATS) {
        size_t m = min_size(SHM_PIECE_FLOATS, n - off);
        if (q == 0) {  // the chain's start sends its own values
            memcpy(shm_reserve(s, next), in + off, m * sizeof(float));
            shm_commit(s, next, m);
            continue;
        }
        const float *partial = shm_peek(s, prev, m);
        if (q == p - 1) {  // the root: the full sum
            add_words(t, out + off, partial, in + off, m);
        } else {
            add_words(t, shm_reserve(s, next), partial, in + off, m);
            shm_commit(s, next, m);
        }
        shm_release(s, prev);
    }
}
