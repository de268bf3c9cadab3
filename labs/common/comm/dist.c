// dist.c — see dist.h: joining the run through its backend (dist_backend.h: dist_shm.c,
// dist_nccl.c), groups, asynchronous calls on a communication thread, and the bookkeeping of
// bytes and spans. Who the rank is, from its environment, is read in dist_env.c.
#include "dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cuda/gpu.h"
#include "common/harness/check.h"
#include "common/runfiles/runlog.h"
#include "dist_backend.h"

const char *dist_coll_name(DistColl c) {
    static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
                                  "all_to_all", "send",           "recv",       "barrier"};
    return names[c];
}

const char *dist_dtype_name(DistDtype t) { return t == DIST_BF16 ? "bf16" : "f32"; }

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

void dist_on_die(const char *msg, void *arg) {
    Dist *d = arg;
    char line[600], own[32];
    // Most messages already begin "rank N: "; the abort record names the rank once.
    snprintf(own, sizeof own, "rank %d: ", d->rank);
    if (strncmp(msg, own, strlen(own)) == 0) snprintf(line, sizeof line, "%s", msg);
    else snprintf(line, sizeof line, "%s%s", own, msg);
    dist_abort(d, line);
}

void dist_init(Dist *d, const char *lab, const Device *dev) {
    memset(d, 0, sizeof *d);
    DistEnv e = dist_env(lab);
    d->rank = e.rank, d->world = e.world, d->local_rank = e.local_rank, d->local_world = e.local_world;
    d->dev = dev ? dev : &device_cpu;
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

    // A GPU of its own: NCCL (a world of one too, so the GPU path is the same at N=1).
    // The CPU, or a GPU shared with other ranks (NCCL refuses two ranks on one GPU): shm.
    d->be = d->dev->kind != DEVICE_CUDA ? &dist_shm_backend
          : d->dev->shared              ? &dist_shm_staged_backend
                                        : &dist_nccl_backend;
    d->backend = d->be->name;
    d->algo = DIST_ALGO_AUTO;
    d->direct_max_bytes = 64 * 1024;
    int all[DIST_MAX_RANKS];
    for (int i = 0; i < d->world; i++) all[i] = i;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->cond, NULL);
    dist_group(d, &d->world_group, all, d->world);
    d->be->join(d, lab);
}

void dist_abort(Dist *d, const char *msg) {
    if (d->be) d->be->abort(d, msg);
}

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
    if (d->world > 1 || d->nccl) check_forget_die(dist_on_die, d);
    if (d->be) d->be->destroy(d);
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
    if (d->be && d->be->group) d->be->group(d, g);
}

// ---------------------------------------------------------------------------------------
// Running one call: pick the algorithm, time it, count its bytes
// ---------------------------------------------------------------------------------------

// Copies n floats (or words) wherever they are (host or GPU).
static void copy_floats(const Dist *d, float *dst, const float *src, size_t n) {
    if (dst == src || n == 0) return;
    if (d->dev->kind == DEVICE_CUDA) cuda_copy(dst, src, n * sizeof(float));
    else memmove(dst, src, n * sizeof(float));
}

// A group of one: nothing to exchange.
static const char *run_alone(Dist *d, DistWork *w) {
    switch (w->coll) {
    case DIST_REDUCE_SCATTER:
    case DIST_ALL_GATHER:
    case DIST_REDUCE:
        copy_floats(d, w->out, w->in, dist_work_words(w));
        break;
    case DIST_ALL_TO_ALL:
        copy_floats(d, w->out, w->in, w->send_counts[0]);
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

void dist_call_lengths(const DistWork *w, size_t *in_len, size_t *out_len) {
    size_t off, chunk, n = dist_work_words(w);
    dist_chunk(n, w->group->size, w->group->rank, &off, &chunk);
    *in_len = *out_len = 0;
    switch (w->coll) {
    case DIST_ALL_REDUCE: case DIST_BROADCAST: *in_len = *out_len = n; break;
    case DIST_REDUCE_SCATTER: *in_len = n, *out_len = chunk; break;
    case DIST_ALL_GATHER: *in_len = chunk, *out_len = n; break;
    case DIST_REDUCE: *in_len = n, *out_len = w->group->rank == w->peer ? n : 0; break;
    case DIST_SEND: *in_len = n; break;
    case DIST_RECV: *out_len = n; break;
    case DIST_BARRIER: break;
    case DIST_ALL_TO_ALL:
        for (int q = 0; q < w->group->size; q++) *in_len += w->send_counts[q], *out_len += w->recv_counts[q];
        break;
    }
}

// Counts a finished call and keeps its record for dist_drain_records. Call with d->lock held.
static void add_record(Dist *d, const DistRecord *rec) {
    d->stats.calls++;
    d->stats.bytes_sent += rec->bytes_sent;
    d->stats.bytes_recv += rec->bytes_recv;
    if (d->nrecords == d->cap_records) {
        d->cap_records = d->cap_records ? 2 * d->cap_records : 256;
        DistRecord *grown = realloc(d->records, d->cap_records * sizeof *grown);
        if (!grown) die(NULL, "rank %d: out of memory for collective records", d->rank);
        d->records = grown;
    }
    d->records[d->nrecords++] = *rec;
}

void dist_emulate_link(Dist *d, const Link *l, double scale) {
    d->link = l;
    d->link_scale = scale > 0 ? scale : 1;
}

static void sleep_until_us(int64_t until) {
    for (int64_t now = runlog_now_us(); now < until; now = runlog_now_us()) {
        struct timespec ts = {(time_t)((until - now) / 1000000), (long)((until - now) % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
}

// --link: the call, begun at t0 and done, lasts at least what the emulated link would take.
static void stretch_to_link(const Dist *d, const DistWork *w, uint64_t sent, int64_t t0) {
    double ms = link_call_ms(d->link, dist_coll_name(w->coll), w->group->size, (double)sent) * d->link_scale;
    sleep_until_us(t0 + (int64_t)llround(ms * 1000));
}

static void run_work(Dist *d, DistWork *w) {
    d->calls_started++;
    if (d->hang_at && d->calls_started == d->hang_at) {
        // The fault tests' stuck rank: it never takes part, so its peers must time out.
        fprintf(stderr, "rank %d: SHARDLAB_TEST_HANG: hanging in %s (call %lld)\n", d->rank, dist_coll_name(w->coll),
                (long long)d->calls_started);
        for (;;) pause();
    }
    uint64_t sent = 0, recv = 0;
    int64_t t0 = runlog_now_us();
    // The backend's algorithms; a group of one has nothing to exchange (NCCL runs it anyway,
    // so the GPU path is the same at N = 1).
    const char *algo = w->group->size > 1 || d->be->one_rank_groups ? d->be->run(d, w, &sent, &recv) : run_alone(d, w);
    if (d->link) stretch_to_link(d, w, sent, t0);
    w->rec = (DistRecord){.coll = w->coll, .algo = algo, .tag = w->tag, .dtype = w->dtype, .count = w->n,
                          .issued_us = w->issued_us, .t0_us = t0, .t1_us = runlog_now_us(),
                          .bytes_sent = sent, .bytes_recv = recv};
    pthread_mutex_lock(&d->lock);
    // Under the lock, as dist_wait sets it: whether the caller is waiting for it yet.
    if (w->waited_from_us) w->rec.waited_from_us = w->waited_from_us < w->rec.t1_us ? w->waited_from_us : w->rec.t1_us;
    add_record(d, &w->rec);
    // An asynchronous call leaves the queue BEFORE it is marked done: once done, its owner
    // may return from dist_wait and reuse or free it (a DistWork on the stack), so nobody may
    // read it after this.
    if (d->queue_head == w) {
        d->queue_head = w->next;
        if (!d->queue_head) d->queue_tail = NULL;
    }
    atomic_store(&w->done, 1);
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

size_t dist_drain_records(Dist *d, DistRecord *out, size_t max) {
    pthread_mutex_lock(&d->lock);
    size_t k = d->nrecords < max ? d->nrecords : max;
    if (k == 0) {  // records may still be NULL: no call has finished yet
        pthread_mutex_unlock(&d->lock);
        return 0;
    }
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
        run_work(d, w);  // takes w off the queue
        pthread_mutex_lock(&d->lock);
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
    w->issued_us = runlog_now_us();
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
    if (!atomic_load(&w->done)) w->waited_from_us = runlog_now_us();
    while (!atomic_load(&w->done)) pthread_cond_wait(&d->cond, &d->lock);
    pthread_mutex_unlock(&d->lock);
}

static void run_now(DistColl coll, DistGroup *g, DistDtype t, const void *in, void *out, size_t n, int peer) {
    Dist *d = g->dist;
    if (peer < 0 || peer >= g->size)
        die("root and peer are ranks of the group", "rank %d: %s with rank %d in a group of %d", d->rank,
            dist_coll_name(coll), peer, g->size);
    int64_t issued = runlog_now_us();
    if (d->thread_running) drain_queue(d);
    DistWork w = {.coll = coll, .group = g, .dtype = t, .in = in, .out = out, .n = n, .peer = peer, .tag = -1,
                  .issued_us = issued, .waited_from_us = issued};
    run_work(d, &w);
}

void dist_all_reduce(DistGroup *g, float *buf, size_t n) { run_now(DIST_ALL_REDUCE, g, DIST_F32, buf, buf, n, 0); }
void dist_reduce_scatter(DistGroup *g, const float *in, float *out, size_t n) {
    run_now(DIST_REDUCE_SCATTER, g, DIST_F32, in, out, n, 0);
}
void dist_all_gather(DistGroup *g, const float *in, float *out, size_t n) {
    run_now(DIST_ALL_GATHER, g, DIST_F32, in, out, n, 0);
}
void dist_broadcast(DistGroup *g, float *buf, size_t n, int root) {
    run_now(DIST_BROADCAST, g, DIST_F32, buf, buf, n, root);
}
void dist_reduce(DistGroup *g, const float *in, float *out, size_t n, int root) {
    run_now(DIST_REDUCE, g, DIST_F32, in, out, n, root);
}
void dist_send(DistGroup *g, const float *buf, size_t n, int peer) {
    if (peer == g->rank) die("send to another rank", "rank %d: send to itself", g->dist->rank);
    run_now(DIST_SEND, g, DIST_F32, buf, NULL, n, peer);
}
void dist_recv(DistGroup *g, float *buf, size_t n, int peer) {
    if (peer == g->rank) die("receive from another rank", "rank %d: receive from itself", g->dist->rank);
    run_now(DIST_RECV, g, DIST_F32, NULL, buf, n, peer);
}
void dist_barrier(DistGroup *g) { run_now(DIST_BARRIER, g, DIST_F32, NULL, NULL, 0, 0); }

void dist_all_to_allv(DistGroup *g, const float *in, const size_t *send_counts, float *out, const size_t *recv_counts) {
    Dist *d = g->dist;
    int64_t issued = runlog_now_us();
    size_t n = 0;
    for (int q = 0; q < g->size; q++) n += send_counts[q];
    if (recv_counts[g->rank] != send_counts[g->rank])
        die("this is a bug in shardlab: a rank's own block is as long both ways",
            "rank %d: all_to_all keeps %zu floats of its own but expects %zu", d->rank, send_counts[g->rank],
            recv_counts[g->rank]);
    if (d->thread_running) drain_queue(d);
    DistWork w = {.coll = DIST_ALL_TO_ALL, .group = g, .dtype = DIST_F32, .in = in, .out = out, .n = n, .tag = -1,
                  .send_counts = send_counts, .recv_counts = recv_counts, .issued_us = issued, .waited_from_us = issued};
    run_work(d, &w);
}

void dist_all_to_all(DistGroup *g, const float *in, float *out, size_t n) {
    int p = g->size;
    if (n % (size_t)p)
        die("this is a bug in shardlab: all_to_all takes p equal blocks (all_to_allv takes any)",
            "rank %d: all_to_all of %zu floats over %d ranks", g->dist->rank, n, p);
    size_t counts[DIST_MAX_RANKS];
    for (int q = 0; q < p; q++) counts[q] = n / (size_t)p;
    dist_all_to_allv(g, in, counts, out, counts);
}

// ---------------------------------------------------------------------------------------
// Batched point to point
// ---------------------------------------------------------------------------------------

// A batch the backends can take: at most DIST_P2P_MAX ops, each with another rank of the group.
static void check_p2p_batch(const DistGroup *g, const DistP2p *ops, int nops) {
    const Dist *d = g->dist;
    if (nops < 0 || nops > DIST_P2P_MAX)
        die("this is a bug in shardlab: split the batch", "rank %d: a batch of %d sends and receives (at most %d)",
            d->rank, nops, DIST_P2P_MAX);
    for (int i = 0; i < nops; i++)
        if (ops[i].peer < 0 || ops[i].peer >= g->size || ops[i].peer == g->rank)
            die("send to and receive from another rank of the group", "rank %d: p2p with group rank %d in a group of %d",
                d->rank, ops[i].peer, g->size);
}

// --link: a message leaves for its peer only when the emulated link would have delivered it,
// alpha + bytes / beta (times --link-scale) after it started, behind the earlier messages to
// the same rank (each direction between two ranks is one link, busy with one message at a
// time). Until then the batch moves everything else, and the stage computes; a call that must
// finish waits for the link. As with the collectives, the backend's own time counts towards
// the link's, so a link slower than shared memory is what the messages take.
static void p2p_over_link(Dist *d, DistGroup *g, DistP2p *ops, int nops, int until) {
    for (int i = 0; i < nops; i++) {
        if (!ops[i].send || ops[i].link_ready_us) continue;
        int64_t *busy = &d->link_busy_us[g->ranks[ops[i].peer]];
        double ms = link_call_ms(d->link, "send", 2, (double)ops[i].n * sizeof(float)) * d->link_scale;
        *busy = (*busy > ops[i].t0_us ? *busy : ops[i].t0_us) + (int64_t)llround(ms * 1000);
        ops[i].link_ready_us = *busy;
    }
    for (;;) {
        // The ops the link lets through now; the rest wait for their time.
        DistP2p now_ops[DIST_P2P_MAX];
        int idx[DIST_P2P_MAX], k = 0, held = 0, sub_until = -1;
        int64_t now = runlog_now_us(), next = INT64_MAX;
        for (int i = 0; i < nops; i++) {
            if (ops[i].send && ops[i].link_ready_us > now) {
                held++;
                if (ops[i].link_ready_us < next) next = ops[i].link_ready_us;
                continue;
            }
            if (i == until) sub_until = k;
            idx[k] = i, now_ops[k++] = ops[i];
        }
        // Nothing held: the backend's own call, as without a link (until mapped onto the ops passed).
        int last = !held || until < 0;
        int pass_until = !last ? -1 : until == nops ? k : sub_until;
        if (k) d->be->p2p(d, g, now_ops, k, pass_until);
        for (int j = 0; j < k; j++) ops[idx[j]].moved = now_ops[j].moved, ops[idx[j]].queued = now_ops[j].queued;
        int done = until < nops ? ops[until].moved == ops[until].n : 1;  // the op asked for, or all
        for (int i = 0; i < nops && until == nops; i++) done &= ops[i].moved == ops[i].n;
        if (last || done) return;
        int64_t wake = now + 200;  // the held messages' time, or a while for the others to move
        sleep_until_us(next < wake ? next : wake);
    }
}

void dist_p2p_progress(DistGroup *g, DistP2p *ops, int nops, int until) {
    Dist *d = g->dist;
    check_p2p_batch(g, ops, nops);
    if (until > nops) die("this is a bug in shardlab", "rank %d: p2p until op %d of %d", d->rank, until, nops);
    if (nops == 0) return;
    int64_t now = runlog_now_us(), called_us = now;
    size_t before[DIST_P2P_MAX];
    for (int i = 0; i < nops; i++) {
        if (!ops[i].issued_us) ops[i].issued_us = now;
        before[i] = ops[i].moved;
    }
    if (d->thread_running) drain_queue(d);
    now = runlog_now_us();
    for (int i = 0; i < nops; i++)
        if (!ops[i].t0_us) ops[i].t0_us = now;
    if (d->link) p2p_over_link(d, g, ops, nops, until);
    else d->be->p2p(d, g, ops, nops, until);
    int64_t t1 = runlog_now_us();
    pthread_mutex_lock(&d->lock);
    for (int i = 0; i < nops; i++) {
        if (before[i] == ops[i].n || ops[i].moved != ops[i].n) continue;  // finished earlier, or not yet
        uint64_t bytes = ops[i].n * sizeof(float);
        DistRecord rec = {.coll = ops[i].send ? DIST_SEND : DIST_RECV, .algo = "p2p", .tag = ops[i].tag,
                          .dtype = DIST_F32, .count = ops[i].n, .issued_us = ops[i].issued_us,
                          .t0_us = ops[i].t0_us, .t1_us = t1, .bytes_sent = ops[i].send ? bytes : 0,
                          .bytes_recv = ops[i].send ? 0 : bytes,
                          // A call that must finish waits from its start; one that moves what it can does not.
                          .waited_from_us = until >= 0 ? called_us : 0};
        add_record(d, &rec);
    }
    pthread_mutex_unlock(&d->lock);
}

void dist_p2p(DistGroup *g, const DistP2p *ops, int nops) {
    check_p2p_batch(g, ops, nops);
    DistP2p copy[DIST_P2P_MAX];
    for (int i = 0; i < nops; i++) {
        copy[i] = ops[i];
        copy[i].moved = 0, copy[i].issued_us = copy[i].t0_us = copy[i].link_ready_us = 0, copy[i].queued = 0;
    }
    dist_p2p_progress(g, copy, nops, nops);
}

// x as the float pair a collective carries: x's float, plus the float of what it missed.
static double as_float_pair(double x) {
    float hi = (float)x, lo = (float)(x - (double)hi);
    return (double)hi + (double)lo;
}

double dist_sum_over_ranks_local(const double *x, int n) {
    double sum = 0;
    for (int r = 0; r < n; r++) sum += as_float_pair(x[r]);
    return sum;
}

double dist_sum_over_ranks(DistGroup *g, double x) {
    float mine[2] = {(float)x, (float)(x - (double)(float)x)}, all[2 * DIST_MAX_RANKS];
    dist_all_gather(g, mine, all, 2 * (size_t)g->size);
    double sum = 0;
    for (int r = 0; r < g->size; r++) sum += (double)all[2 * r] + (double)all[2 * r + 1];
    return sum;
}

static void start(DistColl coll, DistGroup *g, DistDtype t, const void *in, void *out, size_t n, int tag,
                  DistWork *w) {
    *w = (DistWork){.coll = coll, .group = g, .dtype = t, .in = in, .out = out, .n = n, .tag = tag};
    submit(w);
}

void dist_all_reduce_start(DistGroup *g, float *buf, size_t n, int tag, DistWork *w) {
    start(DIST_ALL_REDUCE, g, DIST_F32, buf, buf, n, tag, w);
}
void dist_reduce_scatter_start(DistGroup *g, const float *in, float *out, size_t n, int tag, DistWork *w) {
    start(DIST_REDUCE_SCATTER, g, DIST_F32, in, out, n, tag, w);
}
void dist_all_gather_start(DistGroup *g, const float *in, float *out, size_t n, int tag, DistWork *w) {
    start(DIST_ALL_GATHER, g, DIST_F32, in, out, n, tag, w);
}

// ---------------------------------------------------------------------------------------
// bf16: the same calls on buffers of n bf16s, moved as n/2 words of two bf16s each. n must
// divide by 2p, so each rank's chunk is a whole number of words and chunks have equal length
// (NCCL wants that too); the caller pads. Dies otherwise, naming the call.
// ---------------------------------------------------------------------------------------

static void check_bf16_call(const DistGroup *g, const char *call, const bf16 *in, const bf16 *out, size_t n) {
    int p = g->size;
    if (n % (2 * (size_t)p) != 0)
        die("pad the bf16 buffer to a multiple of 2 * the group's size (ZeRO and FSDP pad their flat buffers)",
            "rank %d: %s: n = %zu bf16 elements is not divisible by 2 * p = %d (p = %d, the group's size)",
            g->dist->rank, call, n, 2 * p, p);
    // The algorithms treat the buffer as 4-byte words; a buffer that starts halfway into a
    // word would be read as misaligned floats.
    if ((uintptr_t)in % 4 != 0 || (uintptr_t)out % 4 != 0)
        die("start bf16 buffers on a 4-byte boundary (malloc and cuda_alloc do; keep chunk offsets even)",
            "rank %d: %s: buffer %p is not 4-byte aligned", g->dist->rank, call,
            (uintptr_t)in % 4 != 0 ? (const void *)in : (const void *)out);
}

void dist_reduce_scatter_bf16(DistGroup *g, const bf16 *in, bf16 *out, size_t n) {
    check_bf16_call(g, "dist_reduce_scatter_bf16", in, out, n);
    run_now(DIST_REDUCE_SCATTER, g, DIST_BF16, in, out, n, 0);
}
void dist_all_gather_bf16(DistGroup *g, const bf16 *in, bf16 *out, size_t n) {
    check_bf16_call(g, "dist_all_gather_bf16", in, out, n);
    run_now(DIST_ALL_GATHER, g, DIST_BF16, in, out, n, 0);
}
void dist_reduce_scatter_bf16_start(DistGroup *g, const bf16 *in, bf16 *out, size_t n, int tag, DistWork *w) {
    check_bf16_call(g, "dist_reduce_scatter_bf16_start", in, out, n);
    start(DIST_REDUCE_SCATTER, g, DIST_BF16, in, out, n, tag, w);
}
void dist_all_gather_bf16_start(DistGroup *g, const bf16 *in, bf16 *out, size_t n, int tag, DistWork *w) {
    check_bf16_call(g, "dist_all_gather_bf16_start", in, out, n);
    start(DIST_ALL_GATHER, g, DIST_BF16, in, out, n, tag, w);
}
