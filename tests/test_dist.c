// test_dist.c — every collective, for 1 to 8 real rank processes, against a serial reference.
//
// The test forks N processes that join through dist_init() exactly as a lab's ranks do
// (RANK, WORLD_SIZE, ... in the environment; rank 0 creates the shared segment). Each rank
// runs every collective with both algorithms on awkward lengths (1, N-1, a prime, lengths
// that do not divide by N, several pieces long) and compares with the answer computed
// serially right here. Ranks report one line per check through a pipe; the parent prints
// one ok/not ok line per check, over all ranks (ranks.h).
//
// Values are multiples of 1/8 below 128, so every sum is exact in fp32 whatever the order:
// a result must then equal the reference exactly, and a chunk put in the wrong place (or a
// rank's data counted twice) cannot hide inside a tolerance. Separately, random floats check
// that all ranks of a group end with the same bits.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dist.h"
#include "gpt.h"
#include "ranks.h"
#include "rng.h"
#include "test.h"

// Rank r's value at index i: exact in fp32, different for every (rank, index).
static float value(int r, size_t i) { return (float)(rng_hash(77, (uint64_t)r, i) % 1024) / 8.0f; }

static float *values(int r, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = value(r, i);
    return x;
}

// First index where got and want differ, or -1.
static long first_diff(const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) return (long)i;
    return -1;
}

static int count_diffs(const float *got, const float *want, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += got[i] != want[i];
    return k;
}

// ---- what one rank runs ------------------------------------------------------------------

static void check_collectives(DistGroup *g, const char *gname, size_t n, const char *algo) {
    int p = g->size, r = g->rank;
    char name[160];
    // The reference: the sum over the group's ranks, computed serially. Data is keyed by the
    // WORLD rank, so a sub-group mixing up its members is caught too.
    float *sum = calloc(n ? n : 1, sizeof *sum);
    for (int q = 0; q < p; q++)
        for (size_t i = 0; i < n; i++) sum[i] += value(g->ranks[q], i);
    float *mine = values(g->ranks[r], n);
    size_t off, len;
    dist_chunk(n, p, r, &off, &len);
    long bad;
    Dist *d = g->dist;
    uint64_t sent0 = d->stats.bytes_sent, recv0 = d->stats.bytes_recv;

    // all_reduce: every rank gets the whole sum.
    float *buf = values(g->ranks[r], n);
    dist_all_reduce(g, buf, n);
    snprintf(name, sizeof name, "all_reduce %s algo=%s n=%zu", gname, algo, n);
    bad = first_diff(buf, sum, n);
    report(name, bad < 0, "index %ld: got %g want %g (%d wrong)", bad, bad >= 0 ? buf[bad] : 0, bad >= 0 ? sum[bad] : 0,
           count_diffs(buf, sum, n));

    // Bytes: the ring sends every chunk but one twice (2n - len(r) - len(r+1) floats; that is
    // 2 (p-1)/p n when p divides n); direct sends all n floats to each of p-1 peers.
    uint64_t sent = d->stats.bytes_sent - sent0, recv = d->stats.bytes_recv - recv0;
    size_t o2, len_next, len_prev;
    dist_chunk(n, p, (r + 1) % p, &o2, &len_next);
    dist_chunk(n, p, (r + p - 1) % p, &o2, &len_prev);
    int direct = strcmp(algo, "direct") == 0 || (strcmp(algo, "auto") == 0 && n * 4 <= d->direct_max_bytes);
    uint64_t want_sent = p == 1 ? 0 : direct ? 4ull * (p - 1) * n : 4ull * (2 * n - len - len_next);
    uint64_t want_recv = p == 1 ? 0 : direct ? 4ull * (p - 1) * n : 4ull * (2 * n - len_prev - len);
    snprintf(name, sizeof name, "all_reduce bytes %s algo=%s n=%zu", gname, algo, n);
    report(name, sent == want_sent && recv == want_recv, "sent %llu recv %llu, want %llu %llu",
           (unsigned long long)sent, (unsigned long long)recv, (unsigned long long)want_sent,
           (unsigned long long)want_recv);

    // reduce_scatter: chunk r of the sum.
    float *out = calloc(n ? n : 1, sizeof *out);
    dist_reduce_scatter(g, mine, out, n);
    snprintf(name, sizeof name, "reduce_scatter %s algo=%s n=%zu", gname, algo, n);
    bad = first_diff(out, sum + off, len);
    report(name, bad < 0, "chunk %d index %ld wrong (%d wrong)", r, bad, count_diffs(out, sum + off, len));

    // all_gather: rank q's chunk q of its own values, assembled everywhere.
    float *want = malloc((n ? n : 1) * sizeof *want);
    for (int q = 0; q < p; q++) {
        size_t qo, ql;
        dist_chunk(n, p, q, &qo, &ql);
        for (size_t i = 0; i < ql; i++) want[qo + i] = value(g->ranks[q], qo + i);
    }
    float *gathered = calloc(n ? n : 1, sizeof *gathered);
    dist_all_gather(g, mine + off, gathered, n);
    snprintf(name, sizeof name, "all_gather %s algo=%s n=%zu", gname, algo, n);
    bad = first_diff(gathered, want, n);
    report(name, bad < 0, "index %ld wrong (%d wrong)", bad, count_diffs(gathered, want, n));

    // broadcast from the last rank and reduce to the middle one.
    int root = p - 1;
    float *b = values(g->ranks[r], n);
    dist_broadcast(g, b, n, root);
    float *root_vals = values(g->ranks[root], n);
    snprintf(name, sizeof name, "broadcast %s algo=%s n=%zu root=%d", gname, algo, n, root);
    bad = first_diff(b, root_vals, n);
    report(name, bad < 0, "index %ld wrong", bad);

    root = p / 2;
    float *red = calloc(n ? n : 1, sizeof *red);
    dist_reduce(g, mine, red, n, root);
    snprintf(name, sizeof name, "reduce %s algo=%s n=%zu root=%d", gname, algo, n, root);
    bad = r == root ? first_diff(red, sum, n) : -1;
    report(name, bad < 0, "index %ld wrong on the root", bad);

    // Random floats: the sum's rounding depends on the order of additions, but every rank
    // must get the same bits (a replica that differs by one ulp drifts apart in training).
    float *rnd = malloc((n ? n : 1) * sizeof *rnd);
    Rng rng;
    rng_seed(&rng, 1000 + (uint64_t)g->ranks[r]);
    for (size_t i = 0; i < n; i++) rnd[i] = rng_normal(&rng);
    dist_all_reduce(g, rnd, n);
    float h[2] = {0, 0};
    uint64_t bits = fnv1a64(rnd, n * sizeof(float), FNV1A64_INIT);
    memcpy(h, &bits, sizeof bits);
    float root_h[2] = {h[0], h[1]};
    dist_broadcast(g, root_h, 2, 0);  // rank 0's hash, as raw bits
    snprintf(name, sizeof name, "all_reduce same bits on every rank %s algo=%s n=%zu", gname, algo, n);
    report(name, memcmp(root_h, h, sizeof h) == 0, "rank %d's result differs from rank 0's", r);

    free(sum), free(mine), free(buf), free(out), free(want), free(gathered), free(b), free(root_vals), free(red),
        free(rnd);
}

static void check_send_recv(DistGroup *g, size_t n) {
    int p = g->size, r = g->rank;
    char name[120];
    if (p < 2) return;
    // Pairs (0,1), (2,3), ...: the even rank sends first, then receives the reply.
    int peer = r ^ 1;
    if (peer < p) {
        float *x = values(r, n), *y = calloc(n ? n : 1, sizeof *y), *want = values(peer, n);
        if (r % 2 == 0) dist_send(g, x, n, peer), dist_recv(g, y, n, peer);
        else dist_recv(g, y, n, peer), dist_send(g, x, n, peer);
        snprintf(name, sizeof name, "send/recv pairs p=%d n=%zu", p, n);
        long bad = first_diff(y, want, n);
        report(name, bad < 0, "rank %d from %d: index %ld wrong", r, peer, bad);
        free(x), free(y), free(want);
    }
    dist_barrier(g);
}

// Batched: every rank sends a message of n floats to both ring neighbours and receives one
// from each, all at once. With a blocking send each, every rank would sit in its first send
// (n is far more than a channel holds) waiting for a neighbour who sits in its own: the batch
// must get them all through. Message sizes differ per direction, so a mix-up shows.
static void check_p2p_batch(DistGroup *g, size_t n) {
    int p = g->size, r = g->rank;
    if (p < 2) return;
    int next = (r + 1) % p, prev = (r + p - 1) % p;
    size_t n_next = n + (size_t)r, n_prev = n + 2 * (size_t)r + 1;  // what this rank sends each way
    size_t from_prev = n + (size_t)prev, from_next = n + 2 * (size_t)next + 1;
    float *to_next = values(r, n_next), *to_prev = values(r + 100, n_prev);
    float *got_prev = calloc(from_prev, sizeof(float)), *got_next = calloc(from_next, sizeof(float));
    DistP2p ops[4] = {{.send = 1, .peer = next, .buf = to_next, .n = n_next, .tag = -1},
                      {.send = 1, .peer = prev, .buf = to_prev, .n = n_prev, .tag = -1},
                      {.send = 0, .peer = prev, .buf = got_prev, .n = from_prev, .tag = -1},
                      {.send = 0, .peer = next, .buf = got_next, .n = from_next, .tag = -1}};
    int nops = 4;
    if (p == 2) {  // next is prev: one message each way, in one order on both sides
        ops[1] = ops[2];
        nops = 2;
        from_prev = n + (size_t)prev;
    }
    dist_p2p(g, ops, nops);
    float *want_prev = values(prev, from_prev), *want_next = values(next + 100, from_next);
    long bad = first_diff(got_prev, want_prev, from_prev);
    if (bad < 0 && p > 2) bad = first_diff(got_next, want_next, from_next);
    char name[120];
    snprintf(name, sizeof name, "p2p batch, both neighbours at once, p=%d n=%zu", p, n);
    report(name, bad < 0, "rank %d: index %ld wrong", r, bad);
    free(to_next), free(to_prev), free(got_prev), free(got_next), free(want_prev), free(want_next);
    dist_barrier(g);
}

static void check_barrier(DistGroup *g, volatile int *arrived) {
    int p = g->size, r = g->rank;
    int ok = 1;
    for (int round = 0; round < 6; round++) {
        // One rank is late each round; nobody may leave the barrier before it arrives.
        if (round % p == r) usleep(20000);
        __atomic_add_fetch(&arrived[round], 1, __ATOMIC_SEQ_CST);
        dist_barrier(g);
        if (__atomic_load_n(&arrived[round], __ATOMIC_SEQ_CST) != p) ok = 0;
    }
    char name[80];
    snprintf(name, sizeof name, "barrier p=%d: nobody leaves early", p);
    report(name, ok, "rank %d left a barrier before every rank had arrived", r);
}

static void check_async(DistGroup *g) {
    // Three buckets started at once, completed later, in order.
    size_t sizes[3] = {1000, 70001, 5};
    float *bufs[3];
    DistWork w[3];
    for (int k = 0; k < 3; k++) {
        bufs[k] = values(g->dist->rank + k, sizes[k]);
        dist_all_reduce_start(g, bufs[k], sizes[k], k, &w[k]);
    }
    int ok = 1;
    for (int k = 0; k < 3; k++) {
        dist_wait(&w[k]);
        for (size_t i = 0; i < sizes[k]; i++) {
            float s = 0;
            for (int q = 0; q < g->size; q++) s += value(q + k, i);
            if (bufs[k][i] != s) ok = 0;
        }
        ok &= w[k].rec.tag == k && w[k].rec.t1_us >= w[k].rec.t0_us;
        free(bufs[k]);
    }
    char name[80];
    snprintf(name, sizeof name, "async all_reduce, 3 buckets, p=%d", g->size);
    report(name, ok, "rank %d: wrong sum or record", g->dist->rank);
    // Every call left a record; the three async ones carry their tags.
    DistRecord rec[4096];
    size_t k = dist_drain_records(g->dist, rec, 4096), tagged = 0;
    for (size_t i = 0; i < k; i++) tagged += rec[i].tag >= 0;
    snprintf(name, sizeof name, "records of every call, p=%d", g->size);
    report(name, k > 3 && tagged == 3 && rec[k - 1].tag == 2, "rank %d: %zu records, %zu tagged", g->dist->rank, k,
           tagged);
}

static void rank_main(int p, void *arg) {
    volatile int *arrived = arg;  // the barrier check's counters, shared by the ranks
    Dist d;
    dist_init(&d, "test_dist", NULL);
    int r = d.rank;
    // 2 pieces + 1: with p = 2 the chunks have 2 and 1 pieces, so piece loops must not stop early.
    size_t lengths[] = {0, 1, (size_t)(p > 1 ? p - 1 : 2), 7, 1009, 2 * SHM_PIECE_FLOATS + 1, 3 * SHM_PIECE_FLOATS + 5, 100003};
    const char *algos[] = {"ring", "direct", "auto"};
    for (size_t a = 0; a < 3; a++) {
        d.algo = dist_algo_parse(algos[a]);
        for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
            check_collectives(&d.world_group, "world", lengths[i], algos[a]);
    }
    d.algo = DIST_ALGO_AUTO;
    check_send_recv(&d.world_group, 5);
    check_send_recv(&d.world_group, 2 * SHM_PIECE_FLOATS + 3);
    check_p2p_batch(&d.world_group, 3);
    check_p2p_batch(&d.world_group, 9 * SHM_PIECE_FLOATS + 7);
    check_barrier(&d.world_group, arrived);
    check_async(&d.world_group);

    if (p >= 3) {
        // Sub-groups: evens and odds at the same time, and the world in reverse order (the
        // group rank is not the world rank).
        int evens[DIST_MAX_RANKS], odds[DIST_MAX_RANKS], ne = 0, no = 0, rev[DIST_MAX_RANKS];
        for (int q = 0; q < p; q++) {
            if (q % 2 == 0) evens[ne++] = q;
            else odds[no++] = q;
            rev[q] = p - 1 - q;
        }
        DistGroup half, reversed;
        if (r % 2 == 0) dist_group(&d, &half, evens, ne);
        else dist_group(&d, &half, odds, no);
        dist_group(&d, &reversed, rev, p);
        for (size_t a = 0; a < 2; a++) {
            d.algo = dist_algo_parse(algos[a]);
            check_collectives(&half, r % 2 == 0 ? "evens" : "odds", 1009, algos[a]);
            check_collectives(&half, r % 2 == 0 ? "evens" : "odds", 2 * SHM_PIECE_FLOATS + 1, algos[a]);
            check_collectives(&reversed, "reversed", 37, algos[a]);
            check_collectives(&reversed, "reversed", 2 * SHM_PIECE_FLOATS + 1, algos[a]);
        }
    }
    dist_barrier(&d.world_group);
    dist_destroy(&d);
}

// ---- the parent ----------------------------------------------------------------------------

static int run_world(int p) {
    volatile int *arrived = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int failures = fork_ranks(p, rank_main, (void *)arrived);
    munmap((void *)arrived, 4096);
    return failures;
}

// The checker itself must be able to fail: a result with two chunks swapped is caught.
static void test_checker_catches_a_misplaced_chunk(void) {
    size_t n = 1009, p = 4, o1, l1, o2, l2;
    float *sum = calloc(n, sizeof *sum), *bad = malloc(n * sizeof *bad);
    for (int q = 0; q < (int)p; q++)
        for (size_t i = 0; i < n; i++) sum[i] += value(q, i);
    memcpy(bad, sum, n * sizeof *bad);
    dist_chunk(n, (int)p, 1, &o1, &l1);
    dist_chunk(n, (int)p, 2, &o2, &l2);
    memcpy(bad + o1, sum + o2, l2 * sizeof *bad);  // chunk 2's values where chunk 1 belongs
    EXPECT(first_diff(bad, sum, n) == (long)o1 && count_diffs(bad, sum, n) > 200,
           "a chunk put in the wrong place is caught (%d values differ)", count_diffs(bad, sum, n));
    free(sum), free(bad);
}

static void test_chunks(void) {
    // dist_chunk covers 0..n exactly once, chunks differ by at most one float.
    int ok = 1;
    for (size_t n = 0; n < 40; n++)
        for (int p = 1; p <= 8; p++) {
            size_t next = 0, lo = (size_t)-1, hi = 0;
            for (int c = 0; c < p; c++) {
                size_t off, len;
                dist_chunk(n, p, c, &off, &len);
                ok &= off == next;
                next = off + len;
                lo = len < lo ? len : lo, hi = len > hi ? len : hi;
            }
            ok &= next == n && hi - lo <= 1;
        }
    EXPECT(ok, "dist_chunk splits n over p ranks contiguously, lengths within one of each other");
}

int main(void) {
    test_chunks();
    test_checker_catches_a_misplaced_chunk();
    int only = getenv("TEST_DIST_P") ? atoi(getenv("TEST_DIST_P")) : 0;
    for (int p = 1; p <= 8; p++)
        if (!only || p == only) run_world(p);
    return test_done();
}
