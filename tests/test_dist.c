// test_dist.c — every collective, for 1 to 8 real rank processes, against a serial reference.
//
// The test forks N processes that join through dist_init() exactly as a lab's ranks do
// (RANK, WORLD_SIZE, ... in the environment; rank 0 creates the shared segment). Each rank
// runs every collective with both algorithms on awkward lengths (1, N-1, a prime, lengths
// that do not divide by N, several pieces long) and compares with the answer computed
// serially right here; all-to-all with equal blocks and with a length per pair of ranks
// (0 among them), in the world and in sub-groups. Ranks report one line per check through a pipe; the parent prints
// one ok/not ok line per check, over all ranks (ranks.h).
//
// Before them, ranks of two jobs meet at one name as ranks started by hand do (shm.h): a
// name in use is never taken from its job, a dead job's is replaced, a rank of another job
// (lab, world or arguments) stops naming the difference, and a rank's place is claimed once.
//
// Values are multiples of 1/8 below 128, so every sum is exact in fp32 whatever the order:
// a result must then equal the reference exactly, and a chunk put in the wrong place (or a
// rank's data counted twice) cannot hide inside a tolerance. Separately, random floats check
// that all ranks of a group end with the same bits.
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/comm/dist.h"
#include "common/model/gpt.h"
#include "common/model/rng.h"
#include "ranks.h"
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

// all_to_all: rank r's block for rank q is values(r * 16 + q) of a length that depends on
// both (base + (3r + 5q) % 7 floats, some 0 when base is 0), so a block from the wrong rank,
// for the wrong rank, or at the wrong offset shows. even: base floats for every pair
// (dist_all_to_all), else the lengths differ (dist_all_to_allv).
static size_t a2a_len(size_t base, int even, int from, int to) { return even ? base : base + (size_t)((3 * from + 5 * to) % 7); }

static void check_all_to_all(DistGroup *g, const char *gname, size_t base, int even) {
    int p = g->size, r = g->rank;
    size_t send[DIST_MAX_RANKS], recv[DIST_MAX_RANKS], ns = 0, nr = 0;
    for (int q = 0; q < p; q++) send[q] = a2a_len(base, even, r, q), recv[q] = a2a_len(base, even, q, r);
    for (int q = 0; q < p; q++) ns += send[q], nr += recv[q];
    float *in = malloc((ns ? ns : 1) * sizeof *in), *out = malloc((nr + 1) * sizeof *out), *want = malloc((nr + 1) * sizeof *want);
    for (int q = 0, at = 0; q < p; at += (int)send[q], q++) {
        float *v = values(r * 16 + q, send[q]);
        memcpy(in + at, v, send[q] * sizeof(float));
        free(v);
    }
    for (int q = 0, at = 0; q < p; at += (int)recv[q], q++) {
        float *v = values(q * 16 + r, recv[q]);
        memcpy(want + at, v, recv[q] * sizeof(float));
        free(v);
    }
    out[nr] = want[nr] = -1;  // a guard: nothing writes past the blocks
    uint64_t sent0 = g->dist->stats.bytes_sent;
    if (even) dist_all_to_all(g, in, out, ns);
    else dist_all_to_allv(g, in, send, out, recv);
    uint64_t sent = g->dist->stats.bytes_sent - sent0;
    long bad = first_diff(out, want, nr + 1);
    char name[120];
    snprintf(name, sizeof name, "all_to_all%s %s p=%d, blocks of %zu%s floats", even ? "" : "v", gname, p, base,
             even ? "" : "+(3r+5q)%7");
    report(name, bad < 0 && sent == 4 * (ns - send[r]), "rank %d: index %ld wrong, or %llu bytes sent (want %zu)", r, bad,
           (unsigned long long)sent, 4 * (ns - send[r]));
    free(in), free(out), free(want);
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
    size_t blocks[] = {0, 1, 7, SHM_PIECE_FLOATS + 3, 2 * SHM_PIECE_FLOATS};
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        check_all_to_all(&d.world_group, "world", blocks[i], 1);
        check_all_to_all(&d.world_group, "world", blocks[i], 0);
    }
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
        check_all_to_all(&half, r % 2 == 0 ? "evens" : "odds", SHM_PIECE_FLOATS + 3, 0);
        check_all_to_all(&reversed, "reversed", 7, 0);
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

// ---- one name, two jobs: ranks started by hand meet at a name (shm.h) -----------------------
//
// Each member below is a process that calls shm_attach as a rank of some job (lab, world,
// arguments), says so through a pipe, and holds on until told to go. Two jobs then meet at
// one name in every way that hand-started ranks can: a second rank 0, a rank of another job,
// a second rank r, a job whose rank 0 was SIGKILLed. What a rank must not do shows as it
// attaching (ready) when it should have stopped, or as the first job's name changing.

typedef struct {
    pid_t pid;
    int ready, hold;  // pipes: it writes one byte when attached (and one per order done); we close hold to end it
    char err[300];    // its stderr
} Member;

static char shm_test_name[64];

// A member attaching as `rank` of a job of `world` ranks of `lab`, with arguments `args`
// (each ending in NUL, len bytes); rank 0 makes the name.
static void member_start(Member *m, const char *lab, int rank, int world, const char *args, size_t len) {
    static int count;
    int ready[2], hold[2];
    if (pipe(ready) != 0 || pipe(hold) != 0) exit(2);
    snprintf(m->err, sizeof m->err, "/tmp/test_dist-%d-member-%d.err", (int)getpid(), count++);
    fflush(stdout);
    m->pid = fork();
    if (m->pid == 0) {
        // Only its own pipes: a copy of another member's hold end would keep that one from ever
        // hearing it should go.
        for (int fd = 3; fd < 1024; fd++)
            if (fd != ready[1] && fd != hold[0]) close(fd);
        FILE *err = freopen(m->err, "w", stderr);
        (void)err;
        ShmJob job = {lab, args, len, NULL, "MASTER_PORT=40001", "MASTER_PORT=40002 (no job here uses it now)"};
        Shm s;
        shm_attach(&s, shm_test_name, &job, rank, world, 5.0, rank == 0);
        char c = 'a';
        if (write(ready[1], &c, 1) != 1) _exit(3);
        // 'j': every rank is in (shm_joined); end of file: go.
        while (read(hold[0], &c, 1) == 1) {
            if (c == 'j') shm_joined(&s);
            if (write(ready[1], &c, 1) != 1) _exit(3);
        }
        shm_release_name(&s);
        shm_detach(&s);
        _exit(0);
    }
    close(ready[1]), close(hold[0]);
    m->ready = ready[0], m->hold = hold[1];
}

// Whether the member attached (its byte came within 10 s), not stopped.
static int member_attached(Member *m) {
    char c;
    struct timeval tv = {10, 0};
    fd_set in;
    FD_ZERO(&in);
    FD_SET(m->ready, &in);
    return select(m->ready + 1, &in, NULL, NULL, &tv) == 1 && read(m->ready, &c, 1) == 1;
}

// Asks the member to swap its name for the page (shm_joined), and waits until it has.
static int member_joined(Member *m) {
    return write(m->hold, "j", 1) == 1 && member_attached(m);
}

// Ends the member (told to go, or killed), and returns its exit status; *err its stderr.
static int member_end(Member *m, int sig, char *err, size_t n) {
    if (sig) kill(m->pid, sig);
    close(m->hold);
    int status;
    waitpid(m->pid, &status, 0);
    close(m->ready);
    FILE *f = fopen(m->err, "r");
    size_t got = f ? fread(err, 1, n - 1, f) : 0;
    err[got] = 0;
    if (f) fclose(f);
    unlink(m->err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The file the name holds now (0: none).
static ino_t name_inode(void) {
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", shm_test_name);
    return lstat(path, &st) == 0 ? st.st_ino : 0;
}

static off_t name_size(void) {
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", shm_test_name);
    return lstat(path, &st) == 0 ? st.st_size : -1;
}

#define ARGS(text) text, sizeof text  // an argument list: "--seed\0" "1" (sizeof counts the last NUL)

static void test_a_name_in_use_is_kept(void) {
    char err[4096], pid[32];
    Member a, b, c;
    member_start(&a, "ddp", 0, 2, ARGS("--seed\0" "1"));
    int made = member_attached(&a);
    ino_t before = name_inode();
    member_start(&b, "ddp", 0, 2, ARGS("--seed\0" "2"));
    int b_attached = member_attached(&b);
    int b_status = member_end(&b, 0, err, sizeof err);
    snprintf(pid, sizeof pid, "process %d", (int)a.pid);
    // Proves: a second rank 0 on a name in use stops (exit 1), naming the port, the job that
    // holds it (its rank 0's pid, lab, world) and the fix. Broken on purpose: shm_unlink
    // before the name is made (what shm_attach did): it attaches.
    EXPECT(made && !b_attached && b_status == 1 && strstr(err, "MASTER_PORT=40001 is taken") && strstr(err, pid) &&
               strstr(err, "ddp with 2 ranks (1 joined so far)") && strstr(err, "HINT: start every rank of this job with MASTER_PORT=40002"),
           "a second rank 0 on a name in use stops with exit 1, naming the job that has it and the fix (exit %d)%s%.600s",
           b_status, b_status == 1 ? "" : ": ", b_status == 1 ? "" : err);
    // Proves: the name still holds the first job's segment, and its rank 1 joins it.
    member_start(&c, "ddp", 1, 2, ARGS("--seed\0" "1"));
    int c_attached = member_attached(&c);
    EXPECT(before && name_inode() == before && c_attached,
           "the first job keeps its segment: same file under the name, and its rank 1 joins it");
    member_end(&c, 0, err, sizeof err);
    member_end(&a, 0, err, sizeof err);
    // Proves: rank 0 removes its name as it ends.
    EXPECT(name_inode() == 0, "rank 0 removes the name as it ends");
}

static void test_a_dead_jobs_name_is_replaced(void) {
    char err[4096];
    Member a, b;
    member_start(&a, "ddp", 0, 2, ARGS("--seed\0" "1"));
    int made = member_attached(&a);
    ino_t dead = name_inode();
    member_end(&a, SIGKILL, err, sizeof err);
    int left = name_inode() == dead;
    member_start(&b, "ddp", 0, 2, ARGS("--seed\0" "1"));
    int b_attached = member_attached(&b);
    ino_t now = name_inode();
    // Proves: a name whose rank 0 was SIGKILLed is no obstacle: the next rank 0 replaces it
    // (the creator's pid runs no more). Broken on purpose: creator_alive always 1: it stops.
    EXPECT(made && left && b_attached && now && now != dead,
           "a segment whose rank 0 was SIGKILLed is replaced by the next rank 0 (left %d, attached %d)", left, b_attached);
    member_end(&b, 0, err, sizeof err);
}

// A rank of job `lab`/`world`/`args` reaching the segment of a ddp job of 2 ranks made with
// --seed 1: it stops (exit 1) with `says` in its message, or joins when says is NULL.
static void reach_a_job(const char *what, const char *lab, int world, const char *args, size_t len, const char *says) {
    char err[4096];
    Member a, r;
    member_start(&a, "ddp", 0, 2, ARGS("--steps\0" "3\0" "--seed\0" "1"));
    int made = member_attached(&a);
    member_start(&r, lab, 1, world, args, len);
    int attached = member_attached(&r);
    int status = member_end(&r, 0, err, sizeof err);
    // Proves: a rank of another job never joins it; it stops with exit 1, naming what differs.
    // Broken on purpose: no comparison at attach (job_difference says nothing): it attaches.
    if (says)
        EXPECT(made && !attached && status == 1 && strstr(err, "the job on MASTER_PORT=40001 is another one") && strstr(err, says),
               "%s: the rank stops with exit 1, saying \"%s\" (exit %d)%s%.600s", what, says, status, status == 1 ? "" : ": ",
               status == 1 ? "" : err);
    else
        EXPECT(made && attached && status == 0, "%s: the rank joins (exit %d) %.300s", what, status, err);
    member_end(&a, 0, err, sizeof err);
}

static void test_another_jobs_ranks_stop(void) {
    reach_a_job("another lab", "zero", 2, ARGS("--steps\0" "3\0" "--seed\0" "1"), "it runs ddp, this rank zero");
    reach_a_job("another world", "ddp", 3, ARGS("--steps\0" "3\0" "--seed\0" "1"),
                "it has 2 ranks, this rank's WORLD_SIZE is 3");
    reach_a_job("another argument", "ddp", 2, ARGS("--steps\0" "3\0" "--seed\0" "2"),
                "at argument 4: '--seed 1' there, '--seed 2' here");
    reach_a_job("one argument more", "ddp", 2, ARGS("--steps\0" "3\0" "--seed\0" "1\0" "--mixed"),
                "at argument 5: nothing there, '--mixed' here");
    reach_a_job("all three", "fsdp", 4, ARGS("--steps\0" "4"),
                "it runs ddp, this rank fsdp; it has 2 ranks, this rank's WORLD_SIZE is 4; its arguments differ");
    // The same job: lab, world and arguments all agree.
    reach_a_job("the same job", "ddp", 2, ARGS("--steps\0" "3\0" "--seed\0" "1"), NULL);
}

static void test_a_place_is_claimed_once(void) {
    char err[4096], first[48], second[48];
    Member a, e, f;
    member_start(&a, "ddp", 0, 3, ARGS("--seed\0" "1"));
    int made = member_attached(&a);
    member_start(&e, "ddp", 1, 3, ARGS("--seed\0" "1"));
    int e_attached = member_attached(&e);
    member_start(&f, "ddp", 1, 3, ARGS("--seed\0" "1"));
    int f_attached = member_attached(&f);
    int status = member_end(&f, 0, err, sizeof err);
    snprintf(first, sizeof first, "has its rank 1 already: process %d;", (int)e.pid);
    snprintf(second, sizeof second, "this process (%d)", (int)f.pid);
    // Proves: a second process for a rank whose place a live process holds stops (exit 1),
    // naming both processes.
    EXPECT(made && e_attached && !f_attached && status == 1 && strstr(err, first) && strstr(err, second),
           "a second rank 1 stops with exit 1, naming the process that has the place and itself (exit %d)%s%.600s", status,
           status == 1 ? "" : ": ", status == 1 ? "" : err);
    member_end(&e, 0, err, sizeof err);
    member_end(&a, 0, err, sizeof err);
}

static void test_the_name_stays_taken_while_the_job_runs(void) {
    char err[4096], holder[48];
    Member a, e, g, h;
    member_start(&a, "ddp", 0, 2, ARGS("--seed\0" "1"));
    int made = member_attached(&a);
    member_start(&e, "ddp", 1, 2, ARGS("--seed\0" "1"));
    int e_attached = member_attached(&e);
    ino_t segment = name_inode();
    int swapped = member_joined(&a);
    // Proves: once every rank is in, the name holds one page, not the channels' memory (that
    // goes with the last rank, whatever kills them).
    EXPECT(made && e_attached && swapped && name_inode() != segment && name_size() == 4096,
           "once every rank is in, the name holds one page (%lld bytes)", (long long)name_size());
    member_start(&g, "ddp", 0, 2, ARGS("--seed\0" "1"));
    int g_attached = member_attached(&g);
    int g_status = member_end(&g, 0, err, sizeof err);
    // Proves: the page keeps the name while the job runs: a second rank 0, even of the very
    // same lab and arguments, stops. Broken on purpose: shm_joined removing the name (the
    // channels' name went as everyone joined): it attaches, and a late rank 1 meets it.
    EXPECT(!g_attached && g_status == 1 && strstr(err, "is taken") && strstr(err, "ddp with 2 ranks (all joined)"),
           "a rank 0 of the same job, coming while it runs, stops with exit 1 (exit %d)%s%.600s", g_status,
           g_status == 1 ? "" : ": ", g_status == 1 ? "" : err);
    member_start(&h, "ddp", 1, 2, ARGS("--seed\0" "1"));
    int h_attached = member_attached(&h);
    int h_status = member_end(&h, 0, err, sizeof err);
    snprintf(holder, sizeof holder, "has its rank 1 already: process %d;", (int)e.pid);
    // Proves: a late rank 1 does not wait for a new segment (a second job's rank 0 would make
    // one, and it would train with that job): its place is taken, and it says by whom.
    EXPECT(!h_attached && h_status == 1 && strstr(err, holder),
           "a late rank 1 of the same job stops with exit 1, naming the process in its place (exit %d)%s%.600s", h_status,
           h_status == 1 ? "" : ": ", h_status == 1 ? "" : err);
    member_end(&e, 0, err, sizeof err);
    member_end(&a, 0, err, sizeof err);
    EXPECT(name_inode() == 0, "rank 0 removes the page as it ends");
}

// Two rank 0s find one dead segment at once: both may judge it dead, but only one may
// replace it; the other must then find the new one in use, not remove it too.
static void test_two_rank0s_replace_a_dead_segment_once(void) {
    char err[4096];
    int both = 0, neither = 0, lost = 0, rounds = 10;
    for (int i = 0; i < rounds; i++) {
        Member a, x, y;
        member_start(&a, "ddp", 0, 2, ARGS("--seed\0" "1"));
        member_attached(&a);
        member_end(&a, SIGKILL, err, sizeof err);
        member_start(&x, "ddp", 0, 2, ARGS("--seed\0" "1"));
        member_start(&y, "ddp", 0, 2, ARGS("--seed\0" "1"));
        int xa = member_attached(&x), ya = member_attached(&y);
        ino_t now = name_inode();
        both += xa && ya;
        neither += !xa && !ya;
        char err_x[4096], err_y[4096];
        member_end(&x, 0, err_x, sizeof err_x);
        member_end(&y, 0, err_y, sizeof err_y);
        lost += !now;
    }
    // Proves: exactly one of them makes the job's segment, every time, and it keeps it.
    EXPECT(!both && !neither && !lost, "two rank 0s at a dead segment: one replaces it, the other stops (%d rounds: both %d, "
           "neither %d, name lost %d)", rounds, both, neither, lost);
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
    snprintf(shm_test_name, sizeof shm_test_name, "/shardlab-%d-test-dist-%d", (int)getuid(), (int)getpid());
    test_a_name_in_use_is_kept();
    test_a_dead_jobs_name_is_replaced();
    test_another_jobs_ranks_stop();
    test_a_place_is_claimed_once();
    test_the_name_stays_taken_while_the_job_runs();
    test_two_rank0s_replace_a_dead_segment_once();
    int only = getenv("TEST_DIST_P") ? atoi(getenv("TEST_DIST_P")) : 0;
    for (int p = 1; p <= 8; p++)
        if (!only || p == only) run_world(p);
    return test_done();
}
