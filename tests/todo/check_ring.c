// check_ring.c — the checks of the collectives' regions: the ring's two (labs/03-collectives/
// ring.c), `make check TODO=ring-reduce-scatter`, `make check TODO=ring-all-gather`, and the
// pairwise all-to-all's step (labs/03-collectives/pairwise.c), `make check TODO=all-to-all`.
//
// Each runs the ring (dist_reduce_scatter / dist_all_gather on the shared-memory backend, the
// algorithm forced to the ring) on 1 to 8 ranks, over buffers that do not split evenly: fewer
// elements than ranks (empty chunks), one more than a multiple, and one buffer of more than a
// piece per chunk (the rounds run piece by piece). The values say where they came from, so
// that a wrong one says which round went wrong:
//   reduce-scatter: rank q's element e is 2^q + 256 e, so a chunk's sum has the bits of the
//     ranks that added to it (low byte) and the element they added at (the rest). Chunk c's
//     partial sum starts at rank c+1 (round 1) and gains rank c+k in round k: the first rank
//     missing in that order names the round that dropped it.
//   all-gather: rank q's chunk holds 1000 q + e, so a wrong element names the rank and the
//     element it was copied from; rank r receives chunk (r - k) mod p in round k.
//   all-to-all: rank q's block for rank r holds 10000 q + 100 r + e, a length for each pair
//     (some 0), so a wrong element names the block it came from; rank r receives rank
//     (r - k) mod p's block in step k.
// The reference is the sum (or the concatenation) computed here, not the ring's code.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/dist.h"
#include "common/comm/shm.h"
#include "todo.h"

static int mod(int a, int p) { return ((a % p) + p) % p; }

// The sizes each world is checked at: small ones that exercise empty and uneven chunks, then
// one of more than a piece per chunk.
static int sizes(int p, size_t *out) {
    int n = 0;
    out[n++] = 3 * (size_t)p + 2;
    out[n++] = (size_t)p + 1;
    out[n++] = 1;
    if (p > 2) out[n++] = (size_t)p - 1;
    out[n++] = (size_t)p * SHM_PIECE_FLOATS + 5;
    return n;
}

// One collective of n elements on this rank, checked.
typedef void (*AtSize)(Dist *d, size_t n);

static void every_size(Dist *d, void *arg) {
    const AtSize *one = arg;
    size_t ns[8];
    int k = sizes(d->world, ns);
    for (int s = 0; s < k; s++) (*one)(d, ns[s]);
}

// `one` at every size, on 1 to 8 ranks, on the ring.
static void on_every_world(AtSize one) {
    for (int p = 1; p <= 8; p++) todo_ranks(p, DIST_ALGO_RING, 5, every_size, &one);
}

// ---- reduce-scatter ------------------------------------------------------------------------

static void reduce_scatter_at(Dist *d, size_t n) {
    int p = d->world, r = d->rank;
    size_t off, len;
    int small = n < 4096;  // small buffers decode exactly (sums < 2^24)
    float *in = malloc((n ? n : 1) * sizeof(float)), *out = malloc((n / (size_t)p + 2) * sizeof(float));
    for (size_t e = 0; e < n; e++) in[e] = small ? (float)(1u << r) + 256.0f * (float)e : (float)(r + 1) * (float)(e % 97);
    dist_chunk(n, p, r, &off, &len);
    for (size_t j = 0; j < len; j++) out[j] = -1.0f;
    todo_context("the ring reduce-scatter on %d ranks, %zu elements", p, n);
    dist_reduce_scatter(&d->world_group, in, out, n);
    unsigned full = (1u << p) - 1;
    for (size_t j = 0; j < len; j++) {
        size_t e = off + j;
        double want = small ? full + 256.0 * (double)p * (double)e : (double)p * (p + 1) / 2 * (double)(e % 97);
        double got = out[j];
        if (got == want) continue;
        char head[300];
        snprintf(head, sizeof head,
                 "%d ranks, %zu elements: rank %d holds chunk %d (elements %zu..%zu) after the reduce-scatter; "
                 "element %zu should be %.0f, got %.0f",
                 p, n, r, r, off, off + len - 1, e, want, got);
        if (got == -1.0f) todo_fail("%s\nnothing was written there: the last round never reached rank %d", head, r);
        if (!small) todo_fail("%s", head);
        long g = (long)got;
        unsigned mask = (unsigned)(g & 255);
        long at = g >> 8;
        char had[64], all[64];
        todo_ranks_list(mask, p, had, sizeof had);
        todo_ranks_list(full, p, all, sizeof all);
        if ((double)g != got || at != (long)__builtin_popcount(mask) * (long)e)
            todo_fail("%s\nthe sum holds values of other elements than %zu: a round added a piece of another chunk "
                      "(each round k, rank q adds its values of chunk (q - k) mod p, at that chunk's offset)",
                      head, e);
        // The chunk's trip: round 1 starts at rank r+1, round k adds rank r+k (rank r last).
        int k = 1;
        while (k < p && (mask >> mod(r + k, p) & 1)) k++;
        int q = mod(r + k, p);
        todo_fail("%s\nthe sum holds ranks %s of %s: chunk %d's partial sum starts at rank %d in round 1 and "
                  "gains rank (%d + k) mod p in round k; rank %d's values are missing, so round %d went wrong "
                  "(rank %d should add its values of chunk %d to what it received from rank %d and pass the sum "
                  "to rank %d)",
                  head, had, all, r, mod(r + 1, p), r, q, k == p ? p - 1 : k, q, r, mod(q - 1, p), mod(q + 1, p));
    }
    free(in), free(out);
}

static void check_reduce_scatter(void) { on_every_world(reduce_scatter_at); }

// ---- all-gather ------------------------------------------------------------------------------

static void all_gather_at(Dist *d, size_t n) {
    int p = d->world, r = d->rank;
    size_t off, len;
    dist_chunk(n, p, r, &off, &len);
    float *in = malloc((len + 1) * sizeof(float)), *out = malloc(n * sizeof(float));
    for (size_t j = 0; j < len; j++) in[j] = (float)(1000 * r) + (float)((off + j) % 1000);
    for (size_t e = 0; e < n; e++) out[e] = -1.0f;
    todo_context("the ring all-gather on %d ranks, %zu elements", p, n);
    dist_all_gather(&d->world_group, in, out, n);
    for (int c = 0; c < p; c++) {
        size_t coff, clen;
        dist_chunk(n, p, c, &coff, &clen);
        for (size_t e = coff; e < coff + clen; e++) {
            float want = (float)(1000 * c) + (float)(e % 1000);
            if (out[e] == want) continue;
            int k = mod(r - c, p);
            char head[300];
            snprintf(head, sizeof head,
                     "%d ranks, %zu elements: after the all-gather, rank %d's copy of chunk %d (elements "
                     "%zu..%zu, rank %d's) is wrong at element %zu: expected %.0f, got %.0f",
                     p, n, r, c, coff, coff + clen - 1, c, e, want, out[e]);
            if (out[e] == -1.0f)
                todo_fail("%s\nnothing was written there: rank %d receives chunk %d in round %d, from rank %d",
                          head, r, c, k, mod(r - 1, p));
            int from = (int)(out[e] / 1000);
            size_t at = (size_t)out[e] % 1000;
            todo_fail("%s\nthat is element %zu of rank %d's chunk: in round k rank %d receives chunk (%d - k) mod "
                      "%d from rank %d, so chunk %d arrives in round %d (and rank %d passes it on to rank %d in "
                      "round %d)",
                      head, at, from, r, r, p, mod(r - 1, p), c, k, r, mod(r + 1, p), k + 1);
        }
    }
    free(in), free(out);
}

static void check_all_gather(void) { on_every_world(all_gather_at); }

// ---- all-to-all -----------------------------------------------------------------------------

// Floats rank `from` sends rank `to`: base plus a few that differ by pair (0 for some).
static size_t block_len(size_t base, int from, int to) { return base + (size_t)((2 * from + 3 * to) % 5); }

static void all_to_all_at(Dist *d, size_t base) {
    int p = d->world, r = d->rank;
    size_t send[DIST_MAX_RANKS], recv[DIST_MAX_RANKS], ns = 0, nr = 0, at[DIST_MAX_RANKS + 1] = {0};
    for (int q = 0; q < p; q++) {
        send[q] = block_len(base, r, q), recv[q] = block_len(base, q, r);
        ns += send[q], nr += recv[q], at[q + 1] = at[q] + recv[q];
    }
    float *in = malloc((ns + 1) * sizeof(float)), *out = malloc((nr + 1) * sizeof(float));
    for (int q = 0, i = 0; q < p; q++)
        for (size_t e = 0; e < send[q]; e++) in[i++] = (float)(10000 * r + 100 * q) + (float)(e % 100);
    for (size_t i = 0; i <= nr; i++) out[i] = -1.0f;
    todo_context("the all-to-all on %d ranks, blocks of %zu to %zu floats", p, base, base + 4);
    dist_all_to_allv(&d->world_group, in, send, out, recv);
    if (out[nr] != -1.0f) todo_fail("%d ranks: rank %d's output was written past its %zu floats (its blocks' sum)", p, r, nr);
    for (int q = 0; q < p; q++)
        for (size_t e = 0; e < recv[q]; e++) {
            float got = out[at[q] + e], want = (float)(10000 * q + 100 * r) + (float)(e % 100);
            if (got == want) continue;
            int k = (r - q + p) % p;
            char head[300];
            snprintf(head, sizeof head,
                     "%d ranks: after the all-to-all, rank %d's block from rank %d (elements %zu..%zu of its output) is "
                     "wrong at element %zu: expected %.0f (rank %d's element %zu for rank %d), got %.0f",
                     p, r, q, at[q], at[q] + recv[q] - 1, at[q] + e, want, q, e % 100, r, got);
            if (got == -1.0f)
                todo_fail("%s\nnothing was written there: in step %d rank %d receives rank %d's block for it (r - k mod "
                          "p), at out + recv_at[%d]", head, k, r, q, q);
            int from = (int)(got / 10000), to = (int)((long)got % 10000 / 100);
            todo_fail("%s\nthat is rank %d's block for rank %d: in step k rank r sends its block for rank (r + k) mod %d "
                      "to that rank, so in step %d rank %d sends rank %d the block at in + send_at[%d]",
                      head, from, to, p, k, q, r, r);
        }
    free(in), free(out);
}

static void every_block(Dist *d, void *arg) {
    (void)arg;
    size_t bases[] = {0, 3, SHM_PIECE_FLOATS + 1};
    for (int i = 0; i < 3; i++) all_to_all_at(d, bases[i]);
}

static void check_all_to_all(void) {
    for (int p = 1; p <= 8; p++) todo_ranks(p, DIST_ALGO_AUTO, 5, every_block, NULL);
}

int main(int argc, char **argv) {
    static const TodoCheck checks[] = {{"ring-reduce-scatter", check_reduce_scatter},
                                       {"ring-all-gather", check_all_gather},
                                       {"all-to-all", check_all_to_all}};
    return todo_main(argc, argv, checks, 3);
}
