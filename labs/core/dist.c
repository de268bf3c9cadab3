// dist.c — see dist.h: joining the run, groups, choosing an algorithm, asynchronous calls
// on a communication thread, and the bookkeeping of bytes and spans.
#include "dist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algos.h"
#include "check.h"
#include "runlog.h"

const char *dist_coll_name(DistColl c) {
    static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                  "reduce",     "send",           "recv",       "barrier"};
    return names[c];
}

int dist_algo_parse(const char *s) {
    if (strcmp(s, "auto") == 0) return DIST_ALGO_AUTO;
    if (strcmp(s, "ring") == 0) return DIST_ALGO_RING;
    if (strcmp(s, "direct") == 0) return DIST_ALGO_DIRECT;
    return -1;
}

void dist_chunk(size_t n, int p, int c, size_t *off, size_t *len) {
    size_t base = n / (size_t)p, extra = n % (size_t)p, cc = (size_t)c;
    *len = base + (cc < extra ? 1 : 0);
    *off = cc * base + (cc < extra ? cc : extra);
}

// ---------------------------------------------------------------------------------------
// Joining the run
// ---------------------------------------------------------------------------------------

// An integer environment variable in [lo, hi]; `fallback` when unset.
static long env_long(const char *name, long lo, long hi, long fallback) {
    const char *v = getenv(name);
    if (!v || !*v) return fallback;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        die("'shardlab run <lab> -n N' sets these variables for every rank",
            "%s=%s: expected an integer from %ld to %ld", name, v, lo, hi);
    return x;
}

static void on_die(const char *msg, void *arg) {
    Dist *d = arg;
    char line[600];
    snprintf(line, sizeof line, "rank %d: %s", d->rank, msg);
    dist_abort(d, line);
}

void dist_init(Dist *d, const char *lab) {
    memset(d, 0, sizeof *d);
    int have_rank = getenv("RANK") && *getenv("RANK"), have_world = getenv("WORLD_SIZE") && *getenv("WORLD_SIZE");
    if (have_rank != have_world)
        die("set both RANK and WORLD_SIZE (or neither, for one rank), or use 'shardlab run <lab> -n N'",
            "%s: %s is set but %s is not", lab, have_rank ? "RANK" : "WORLD_SIZE", have_rank ? "WORLD_SIZE" : "RANK");
    d->world = (int)env_long("WORLD_SIZE", 1, DIST_MAX_RANKS, 1);
    d->rank = (int)env_long("RANK", 0, d->world - 1, 0);
    d->local_rank = (int)env_long("LOCAL_RANK", 0, d->world - 1, d->rank);
    long local_world = env_long("LOCAL_WORLD_SIZE", 1, DIST_MAX_RANKS, d->world);
    if (local_world != d->world)
        die("run every rank on one machine (the CUDA build reaches other machines through NCCL)",
            "%s: the shm backend needs all %d ranks on one machine, but LOCAL_WORLD_SIZE=%ld", lab, d->world,
            local_world);
    d->timeout_s = 120;
    const char *t = getenv("SHARDLAB_TIMEOUT_S");
    if (t && *t) {
        char *end;
        d->timeout_s = strtod(t, &end);
        if (*end || !(d->timeout_s > 0) || d->timeout_s > 1e6)
            die("SHARDLAB_TIMEOUT_S is a number of seconds, e.g. 120", "SHARDLAB_TIMEOUT_S=%s is not a positive number", t);
    }
    const char *hang = getenv("SHARDLAB_TEST_HANG");  // "rank:call", for the fault tests
    int hang_rank = -1, hang_call = 0;
    if (hang && *hang && (sscanf(hang, "%d:%d", &hang_rank, &hang_call) != 2 || hang_call < 1))
        die("SHARDLAB_TEST_HANG is RANK:CALL, e.g. 1:5", "SHARDLAB_TEST_HANG=%s is not RANK:CALL", hang);
    d->hang_at = hang_rank == d->rank ? hang_call : 0;

    d->backend = "shm";
    d->algo = DIST_ALGO_AUTO;
    d->direct_max_bytes = 64 * 1024;
    int all[DIST_MAX_RANKS];
    for (int i = 0; i < d->world; i++) all[i] = i;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->cond, NULL);
    dist_group(d, &d->world_group, all, d->world);
    if (d->world == 1) return;

    // The segment: 'shardlab run' made it and names it in SHARDLAB_SHM; ranks started some
    // other way (mpirun, a shell) find it by MASTER_PORT, rank 0 creating it.
    const char *name = getenv("SHARDLAB_SHM");
    char own[64];
    int create = 0;
    if (!name || !*name) {
        long port = env_long("MASTER_PORT", 1, 65535, 29500);
        snprintf(own, sizeof own, "/shardlab-%d-%ld", (int)getuid(), port);
        name = own;
        create = d->rank == 0;
    }
    if (name[0] != '/' || strlen(name) >= sizeof d->shm.name || strchr(name + 1, '/'))
        die("SHARDLAB_SHM is set by 'shardlab run'; unset it", "SHARDLAB_SHM=%s is not a valid shared memory name", name);
    shm_attach(&d->shm, name, d->rank, d->world, d->timeout_s, create);
    check_on_die(on_die, d);
    // Everyone is here; the name can go: the memory stays while mapped and vanishes with
    // the last rank, however the run ends.
    dist_barrier(&d->world_group);
    if (d->rank == 0) shm_remove(name);
}

void dist_abort(Dist *d, const char *msg) { shm_abort(&d->shm, msg); }

static void drain_queue(Dist *d);

void dist_destroy(Dist *d) {
    if (d->thread_running) {
        drain_queue(d);
        pthread_mutex_lock(&d->lock);
        d->stopping = 1;
        pthread_cond_broadcast(&d->cond);
        pthread_mutex_unlock(&d->lock);
        pthread_join(d->thread, NULL);
    }
    if (d->world > 1) check_forget_die(on_die, d);
    shm_detach(&d->shm);
    free(d->records);
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->cond);
    memset(d, 0, sizeof *d);
}

void dist_group(Dist *d, DistGroup *g, const int *world_ranks, int size) {
    if (size < 1 || size > d->world)
        die("a group has 1 to WORLD_SIZE ranks", "rank %d: group of %d ranks in a world of %d", d->rank, size, d->world);
    memset(g, 0, sizeof *g);
    g->dist = d;
    g->size = size;
    g->rank = -1;
    for (int i = 0; i < size; i++) {
        if (world_ranks[i] < 0 || world_ranks[i] >= d->world)
            die("list world ranks 0..WORLD_SIZE-1", "rank %d: group member %d is not a rank", d->rank, world_ranks[i]);
        for (int j = 0; j < i; j++)
            if (world_ranks[j] == world_ranks[i])
                die("list each rank once", "rank %d: rank %d is twice in a group", d->rank, world_ranks[i]);
        g->ranks[i] = world_ranks[i];
        if (world_ranks[i] == d->rank) g->rank = i;
    }
    if (g->rank < 0) die("build only the groups this rank belongs to", "rank %d is not in the group it builds", d->rank);
}

// ---------------------------------------------------------------------------------------
// Running one call: pick the algorithm, time it, count its bytes
// ---------------------------------------------------------------------------------------

static int use_direct(const Dist *d, size_t n) {
    if (d->algo == DIST_ALGO_DIRECT) return 1;
    if (d->algo == DIST_ALGO_RING) return 0;
    return n * sizeof(float) <= d->direct_max_bytes;
}

// A group of one: nothing to exchange.
static const char *run_alone(DistWork *w) {
    switch (w->coll) {
    case DIST_REDUCE_SCATTER:
    case DIST_ALL_GATHER:
    case DIST_REDUCE:
        if (w->out != w->in) memmove(w->out, w->in, w->n * sizeof(float));
        break;
    case DIST_SEND:
    case DIST_RECV:
        die("send to and receive from another rank", "rank %d: %s with itself", w->group->dist->rank,
            dist_coll_name(w->coll));
    default:
        break;
    }
    return "local";
}

static const char *run_shm(Dist *d, DistWork *w) {
    Shm *s = &d->shm;
    DistGroup *g = w->group;
    int direct = use_direct(d, w->n);
    switch (w->coll) {
    case DIST_ALL_REDUCE:
        if (direct) direct_all_reduce(s, g, w->out, w->n);
        else ring_all_reduce(s, g, w->out, w->n);
        break;
    case DIST_REDUCE_SCATTER:
        if (direct) direct_reduce_scatter(s, g, w->in, w->out, w->n);
        else ring_reduce_scatter(s, g, w->in, w->out, w->n);
        break;
    case DIST_ALL_GATHER:
        if (direct) direct_all_gather(s, g, w->in, w->out, w->n);
        else ring_all_gather(s, g, w->in, w->out, w->n);
        break;
    case DIST_BROADCAST:
        if (direct) direct_broadcast(s, g, w->out, w->n, w->peer);
        else chain_broadcast(s, g, w->out, w->n, w->peer);
        return direct ? "direct" : "chain";
    case DIST_REDUCE:
        if (direct) direct_reduce(s, g, w->in, w->out, w->n, w->peer);
        else chain_reduce(s, g, w->in, w->out, w->n, w->peer);
        return direct ? "direct" : "chain";
    case DIST_SEND:
        p2p_send(s, g, w->in, w->n, w->peer);
        return "p2p";
    case DIST_RECV:
        p2p_recv(s, g, w->out, w->n, w->peer);
        return "p2p";
    case DIST_BARRIER:
        direct_barrier(s, g);
        return "dissemination";
    }
    return direct ? "direct" : "ring";
}

static void run_work(Dist *d, DistWork *w) {
    d->calls_started++;
    if (d->hang_at && d->calls_started == d->hang_at) {
        // The fault tests' stuck rank: it never takes part, so its peers must time out.
        fprintf(stderr, "rank %d: SHARDLAB_TEST_HANG: hanging in %s (call %lld)\n", d->rank, dist_coll_name(w->coll),
                (long long)d->calls_started);
        for (;;) pause();
    }
    uint64_t sent0 = d->shm.bytes_sent, recv0 = d->shm.bytes_recv;
    int64_t t0 = runlog_now_us();
    const char *algo = w->group->size == 1 ? run_alone(w) : run_shm(d, w);
    w->rec = (DistRecord){.coll = w->coll, .algo = algo, .tag = w->tag, .count = w->n, .t0_us = t0,
                          .t1_us = runlog_now_us(), .bytes_sent = d->shm.bytes_sent - sent0,
                          .bytes_recv = d->shm.bytes_recv - recv0};
    pthread_mutex_lock(&d->lock);
    d->stats.calls++;
    d->stats.bytes_sent += w->rec.bytes_sent;
    d->stats.bytes_recv += w->rec.bytes_recv;
    if (d->nrecords == d->cap_records) {
        d->cap_records = d->cap_records ? 2 * d->cap_records : 256;
        DistRecord *grown = realloc(d->records, d->cap_records * sizeof *grown);
        if (!grown) die(NULL, "rank %d: out of memory for collective records", d->rank);
        d->records = grown;
    }
    d->records[d->nrecords++] = w->rec;
    atomic_store(&w->done, 1);
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

size_t dist_drain_records(Dist *d, DistRecord *out, size_t max) {
    pthread_mutex_lock(&d->lock);
    size_t k = d->nrecords < max ? d->nrecords : max;
    memcpy(out, d->records, k * sizeof *out);
    memmove(d->records, d->records + k, (d->nrecords - k) * sizeof *out);
    d->nrecords -= k;
    pthread_mutex_unlock(&d->lock);
    return k;
}

// ---------------------------------------------------------------------------------------
// The communication thread: runs asynchronous calls one after the other, in call order.
// A synchronous call first waits for the queue to empty, so the order of collectives on
// every rank is the order of the calls.
// ---------------------------------------------------------------------------------------

static void *comm_thread(void *arg) {
    Dist *d = arg;
    pthread_mutex_lock(&d->lock);
    for (;;) {
        while (!d->queue_head && !d->stopping) pthread_cond_wait(&d->cond, &d->lock);
        if (!d->queue_head) break;
        DistWork *w = d->queue_head;  // stays at the head while it runs: the queue is busy
        pthread_mutex_unlock(&d->lock);
        run_work(d, w);
        pthread_mutex_lock(&d->lock);
        d->queue_head = w->next;
        if (!d->queue_head) d->queue_tail = NULL;
        pthread_cond_broadcast(&d->cond);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

static void drain_queue(Dist *d) {
    pthread_mutex_lock(&d->lock);
    while (d->queue_head) pthread_cond_wait(&d->cond, &d->lock);
    pthread_mutex_unlock(&d->lock);
}

static void submit(DistWork *w) {
    Dist *d = w->group->dist;
    atomic_store(&w->done, 0);
    w->next = NULL;
    pthread_mutex_lock(&d->lock);
    if (!d->thread_running) {
        if (pthread_create(&d->thread, NULL, comm_thread, d) != 0)
            die(NULL, "rank %d: cannot start the communication thread", d->rank);
        d->thread_running = 1;
    }
    if (d->queue_tail) d->queue_tail->next = w;
    else d->queue_head = w;
    d->queue_tail = w;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

void dist_wait(DistWork *w) {
    Dist *d = w->group->dist;
    pthread_mutex_lock(&d->lock);
    while (!atomic_load(&w->done)) pthread_cond_wait(&d->cond, &d->lock);
    pthread_mutex_unlock(&d->lock);
}

static void run_now(DistColl coll, DistGroup *g, const float *in, float *out, size_t n, int peer) {
    Dist *d = g->dist;
    if (peer < 0 || peer >= g->size)
        die("root and peer are ranks of the group", "rank %d: %s with rank %d in a group of %d", d->rank,
            dist_coll_name(coll), peer, g->size);
    if (d->thread_running) drain_queue(d);
    DistWork w = {.coll = coll, .group = g, .in = in, .out = out, .n = n, .peer = peer, .tag = -1};
    run_work(d, &w);
}

void dist_all_reduce(DistGroup *g, float *buf, size_t n) { run_now(DIST_ALL_REDUCE, g, buf, buf, n, 0); }
void dist_reduce_scatter(DistGroup *g, const float *in, float *out, size_t n) {
    run_now(DIST_REDUCE_SCATTER, g, in, out, n, 0);
}
void dist_all_gather(DistGroup *g, const float *in, float *out, size_t n) { run_now(DIST_ALL_GATHER, g, in, out, n, 0); }
void dist_broadcast(DistGroup *g, float *buf, size_t n, int root) { run_now(DIST_BROADCAST, g, buf, buf, n, root); }
void dist_reduce(DistGroup *g, const float *in, float *out, size_t n, int root) {
    run_now(DIST_REDUCE, g, in, out, n, root);
}
void dist_send(DistGroup *g, const float *buf, size_t n, int peer) {
    if (peer == g->rank) die("send to another rank", "rank %d: send to itself", g->dist->rank);
    run_now(DIST_SEND, g, buf, NULL, n, peer);
}
void dist_recv(DistGroup *g, float *buf, size_t n, int peer) {
    if (peer == g->rank) die("receive from another rank", "rank %d: receive from itself", g->dist->rank);
    run_now(DIST_RECV, g, NULL, buf, n, peer);
}
void dist_barrier(DistGroup *g) { run_now(DIST_BARRIER, g, NULL, NULL, 0, 0); }

static void start(DistColl coll, DistGroup *g, const float *in, float *out, size_t n, int tag, DistWork *w) {
    *w = (DistWork){.coll = coll, .group = g, .in = in, .out = out, .n = n, .tag = tag};
    submit(w);
}

void dist_all_reduce_start(DistGroup *g, float *buf, size_t n, int tag, DistWork *w) {
    start(DIST_ALL_REDUCE, g, buf, buf, n, tag, w);
}
void dist_reduce_scatter_start(DistGroup *g, const float *in, float *out, size_t n, int tag, DistWork *w) {
    start(DIST_REDUCE_SCATTER, g, in, out, n, tag, w);
}
void dist_all_gather_start(DistGroup *g, const float *in, float *out, size_t n, int tag, DistWork *w) {
    start(DIST_ALL_GATHER, g, in, out, n, tag, w);
}

void dist_run_dir(Dist *d, const char *dir, const char *lab, char *out, size_t n) {
    if (!dir || !*dir) dir = getenv("SHARDLAB_RUN_DIR");
    if (dir && *dir) {
        if ((size_t)snprintf(out, n, "%s", dir) >= n) die(NULL, "run directory path too long: '%s'", dir);
        return;
    }
    // Rank 0 names it; the bytes of the name travel as floats (a broadcast only copies bits).
    size_t nfloats = (n + sizeof(float) - 1) / sizeof(float);
    float *buf = calloc_check(nfloats, sizeof(float));
    if (d->rank == 0) {
        runlog_new_dir(out, n, lab);
        memcpy(buf, out, strlen(out) + 1);
    }
    dist_broadcast(&d->world_group, buf, nfloats, 0);
    memcpy(out, buf, n);
    out[n - 1] = 0;
    free(buf);
}
