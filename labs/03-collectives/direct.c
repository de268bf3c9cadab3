// direct.c — one-shot collectives, point-to-point send/recv, and the barrier.
//
// DIRECT ("one-shot") all-reduce: every rank sends its whole buffer to every other rank, and
// every rank adds up all p buffers itself, in rank order (so all ranks get the same bits):
//
//        rank 0  <------>  rank 1          each arrow carries all n floats, both ways:
//          ^  \          /   ^             a rank sends (p-1) n floats, against the ring's
//          |    \      /     |             2 (p-1)/p n; but it is ONE step instead of
//          |      \  /       |             2 (p-1), so for small messages, where the time
//          |      /  \       |             is the fixed cost of each step (latency), it
//          v    /      \     v             wins. Above a size, dist_shm.c's use_direct()
//        rank 3  <------>  rank 2          picks the ring (--algo overrides).
//
// The other direct collectives follow the same idea: reduce-scatter sends chunk c straight to
// rank c; all-gather sends a rank's chunk straight to everyone; broadcast and reduce talk to
// the root directly.
//
// Every loop below goes piece by piece (SHM_PIECE_FLOATS): send piece i to everyone who
// needs it, then receive piece i from everyone, so no channel overfills.
#include <string.h>

#include "algorithms.h"  // defines: min_size(), add_words(), direct_all_reduce(), ...

// Length of piece i of a span of len floats (0 past its end).
static size_t piece_len(size_t len, size_t i) {
    size_t start = i * SHM_PIECE_FLOATS;
    return start < len ? min_size(SHM_PIECE_FLOATS, len - start) : 0;
}

static void send_piece(Shm *s, int to, const float *src, size_t m) {
    memcpy(shm_reserve(s, to), src, m * sizeof(float));
    shm_commit(s, to, m);
}

// dst = sum over the group, in rank order, of piece m words: ours from `mine`, the others'
// from their channels (released afterwards). bf16 lanes are rounded after every addition.
static void sum_in_rank_order(Shm *s, const DistGroup *g, DistDtype t, const float *mine, float *dst, size_t m) {
    float *acc = s->scratch;
    for (int q = 0; q < g->size; q++) {
        const float *x = q == g->rank ? mine : shm_peek(s, g->ranks[q], m);
        if (q == 0) memcpy(acc, x, m * sizeof(float));
        else add_words(t, acc, acc, x, m);
    }
    for (int q = 0; q < g->size; q++)
        if (q != g->rank) shm_release(s, g->ranks[q]);
    memcpy(dst, acc, m * sizeof(float));
}

void direct_all_reduce(Shm *s, const DistGroup *g, DistDtype t, float *buf, size_t n) {
    shm_set_what(s, "all_reduce", "direct", 1, 1);
    for (size_t off = 0; off < n; off += SHM_PIECE_FLOATS) {
        size_t m = min_size(SHM_PIECE_FLOATS, n - off);
        for (int q = 0; q < g->size; q++)
            if (q != g->rank) send_piece(s, g->ranks[q], buf + off, m);
        sum_in_rank_order(s, g, t, buf + off, buf + off, m);
    }
}

void direct_reduce_scatter(Shm *s, const DistGroup *g, DistDtype t, const float *in, float *out, size_t n) {
    shm_set_what(s, "reduce_scatter", "direct", 1, 1);
    size_t own_off, own_len, off, len, longest;
    dist_chunk(n, g->size, g->rank, &own_off, &own_len);
    dist_chunk(n, g->size, 0, &off, &longest);  // chunk 0 is the longest
    for (size_t i = 0; i * SHM_PIECE_FLOATS < longest; i++) {
        for (int q = 0; q < g->size; q++) {
            dist_chunk(n, g->size, q, &off, &len);
            size_t m = piece_len(len, i);
            if (q != g->rank && m > 0) send_piece(s, g->ranks[q], in + off + i * SHM_PIECE_FLOATS, m);
        }
        size_t m = piece_len(own_len, i);
        if (m > 0) {
            size_t at = i * SHM_PIECE_FLOATS;
            sum_in_rank_order(s, g, t, in + own_off + at, out + at, m);
        }
    }
}

void direct_all_gather(Shm *s, const DistGroup *g, const float *in, float *out, size_t n) {
    shm_set_what(s, "all_gather", "direct", 1, 1);
    size_t own_off, own_len, off, len, longest;
    dist_chunk(n, g->size, g->rank, &own_off, &own_len);
    if (out + own_off != in) memmove(out + own_off, in, own_len * sizeof(float));
    dist_chunk(n, g->size, 0, &off, &longest);  // chunk 0 is the longest
    for (size_t i = 0; i * SHM_PIECE_FLOATS < longest; i++) {
        size_t m = piece_len(own_len, i);
        for (int q = 0; q < g->size && m > 0; q++)
            if (q != g->rank) send_piece(s, g->ranks[q], in + i * SHM_PIECE_FLOATS, m);
        for (int q = 0; q < g->size; q++) {
            dist_chunk(n, g->size, q, &off, &len);
            size_t mq = piece_len(len, i);
            if (q == g->rank || mq == 0) continue;
            memcpy(out + off + i * SHM_PIECE_FLOATS, shm_peek(s, g->ranks[q], mq), mq * sizeof(float));
            shm_release(s, g->ranks[q]);
        }
    }
}

void direct_broadcast(Shm *s, const DistGroup *g, float *buf, size_t n, int root) {
    shm_set_what(s, "broadcast", "direct", 1, 1);
    for (size_t off = 0; off < n; off += SHM_PIECE_FLOATS) {
        size_t m = min_size(SHM_PIECE_FLOATS, n - off);
        if (g->rank == root) {
            for (int q = 0; q < g->size; q++)
                if (q != root) send_piece(s, g->ranks[q], buf + off, m);
        } else {
            memcpy(buf + off, shm_peek(s, g->ranks[root], m), m * sizeof(float));
            shm_release(s, g->ranks[root]);
        }
    }
}

void direct_reduce(Shm *s, const DistGroup *g, DistDtype t, const float *in, float *out, size_t n, int root) {
    shm_set_what(s, "reduce", "direct", 1, 1);
    for (size_t off = 0; off < n; off += SHM_PIECE_FLOATS) {
        size_t m = min_size(SHM_PIECE_FLOATS, n - off);
        if (g->rank == root) sum_in_rank_order(s, g, t, in + off, out + off, m);
        else send_piece(s, g->ranks[root], in + off, m);
    }
}

void p2p_send(Shm *s, const DistGroup *g, const float *buf, size_t n, int peer) {
    shm_set_what(s, "send", "p2p", 0, 0);
    for (size_t off = 0; off < n; off += SHM_PIECE_FLOATS)
        send_piece(s, g->ranks[peer], buf + off, min_size(SHM_PIECE_FLOATS, n - off));
}

void p2p_recv(Shm *s, const DistGroup *g, float *buf, size_t n, int peer) {
    shm_set_what(s, "recv", "p2p", 0, 0);
    for (size_t off = 0; off < n; off += SHM_PIECE_FLOATS) {
        size_t m = min_size(SHM_PIECE_FLOATS, n - off);
        memcpy(buf + off, shm_peek(s, g->ranks[peer], m), m * sizeof(float));
        shm_release(s, g->ranks[peer]);
    }
}

// A batch of sends and receives: each pass over the messages moves every piece that can
// move now (a free slot to write, a piece there to read) and never waits on one message while
// another could go, so two ranks sending each other big messages both get through. Messages
// the same way between the same two ranks keep their order. moved[i] counts the floats of
// ops[i] moved so far, across calls. Returns after one pass if until < 0, else when ops[until]
// is done (until = nops: when all are); a pass that moved nothing while it must go on idles
// (shm_idle), with the usual deadline.
void p2p_batch(Shm *s, const DistGroup *g, const DistP2p *ops, size_t *moved, int nops, int until) {
    ShmIdle idle = {0};
    for (;;) {
        int moved_any = 0, waiting = -1, left = 0;
        for (int i = 0; i < nops; i++) {
            const DistP2p *o = &ops[i];
            if (moved[i] == o->n) continue;
            left++;
            // Two messages the same way between the same ranks go one after the other, so
            // the receiver reads them in order (its channel holds pieces, not messages).
            int behind = 0;
            for (int j = 0; j < i; j++) behind |= ops[j].send == o->send && ops[j].peer == o->peer && moved[j] < ops[j].n;
            if (behind) continue;
            int peer = g->ranks[o->peer];
            size_t m = min_size(SHM_PIECE_FLOATS, o->n - moved[i]);
            shm_set_what(s, o->send ? "send" : "recv", "p2p batch", 0, 0);
            if (o->send) {
                float *slot = shm_try_reserve(s, peer);
                if (!slot) {
                    waiting = o->peer;
                    continue;
                }
                memcpy(slot, o->buf + moved[i], m * sizeof(float));
                shm_commit(s, peer, m);
            } else {
                const float *piece = shm_try_peek(s, peer, m);
                if (!piece) {
                    waiting = o->peer;
                    continue;
                }
                memcpy(o->buf + moved[i], piece, m * sizeof(float));
                shm_release(s, peer);
            }
            moved[i] += m;
            moved_any = 1;
        }
        if (until < 0 || left == 0 || (until < nops && moved[until] == ops[until].n)) {
            shm_idle_done(s);  // we no longer wait for anyone (shm.h)
            return;
        }
        if (moved_any) idle = (ShmIdle){0};
        else shm_idle(s, &idle, g->ranks[waiting], "in a batch of sends and receives");
    }
}

// Dissemination barrier: in round j (distance d = 1, 2, 4, ...) rank r signals rank r+d and
// waits for the signal of rank r-d. After ceil(log2 p) rounds every rank has heard, through
// some chain, from every other: nobody leaves before all have arrived. A signal is an empty
// piece.
void direct_barrier(Shm *s, const DistGroup *g) {
    int p = g->size, round = 1, nrounds = 0;
    for (int d = 1; d < p; d *= 2) nrounds++;
    for (int d = 1; d < p; d *= 2, round++) {
        shm_set_what(s, "barrier", "dissemination", round, nrounds);
        shm_reserve(s, g->ranks[(g->rank + d) % p]);
        shm_commit(s, g->ranks[(g->rank + d) % p], 0);
        shm_peek(s, g->ranks[(g->rank - d + p) % p], 0);
        shm_release(s, g->ranks[(g->rank - d + p) % p]);
    }
}
