// dist_nccl.c — the nccl backend (dist_backend.h): a GPU per rank, NCCL's collectives on a
// communication stream, each call waited for with the deadline; host buffers staged through
// the GPU.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cuda/gpu.h"
#include "common/harness/check.h"
#include "dist_backend.h"

// NCCL finds its peers through NCCL_COMM_ID=host:port (rank 0 listens there); torchrun's
// MASTER_ADDR and MASTER_PORT name it unless NCCL_COMM_ID is already set.
static void join_nccl(Dist *d, const char *lab) {
    if (!getenv("NCCL_COMM_ID") || !*getenv("NCCL_COMM_ID")) {
        const char *addr = getenv("MASTER_ADDR");
        char id[300];
        snprintf(id, sizeof id, "%s:%ld", addr && *addr ? addr : "127.0.0.1", dist_master_port());
        setenv("NCCL_COMM_ID", id, 1);
    }
    unsigned char uid[CUDA_NCCL_ID_BYTES];
    char err[512];
    if (cuda_nccl_unique_id(uid, err, sizeof err) != 0)
        die("check NCCL_COMM_ID (host:port of rank 0) or MASTER_ADDR/MASTER_PORT", "%s rank %d: %s", lab, d->rank, err);
    d->nccl = cuda_nccl_init(uid, d->world, d->rank, d->timeout_s, err, sizeof err);
    if (!d->nccl)
        die("every rank must start, with the same WORLD_SIZE and NCCL_COMM_ID; NCCL_DEBUG=WARN says more",
            "%s rank %d: NCCL could not make the communicator of %d ranks: %s", lab, d->rank, d->world, err);
    d->world_group.nccl = d->nccl;
    check_on_die(dist_on_die, d);
}

// A group's communicator: the world's, or one split from it. ncclCommSplit is a collective over
// the whole world: every rank builds its groups in the same order.
static void group_nccl(Dist *d, DistGroup *g) {
    if (!d->nccl) return;  // the world's group, before join_nccl made the communicator
    if (g->size == d->world) {
        g->nccl = d->nccl;
        return;
    }
    int color = g->ranks[0];
    for (int i = 1; i < g->size; i++) color = g->ranks[i] < color ? g->ranks[i] : color;
    char err[512];
    g->nccl = cuda_nccl_split(d->nccl, color, g->rank, d->timeout_s, err, sizeof err);
    if (!g->nccl)
        die("every rank must build its groups in the same order", "rank %d: ncclCommSplit for a group of %d: %s",
            d->rank, g->size, err);
}

// A device buffer of at least n floats, one of four (kept and grown between calls).
static float *stage_dev(Dist *d, int slot, size_t n) {
    if (d->stage_dev_n[slot] < n) {
        if (d->stage_dev[slot]) cuda_free(d->stage_dev[slot]);
        d->stage_dev[slot] = cuda_alloc(n * sizeof(float));
        if (!d->stage_dev[slot])
            die("lower --batch or --bucket-mb", "rank %d: out of GPU memory staging %zu floats for NCCL", d->rank, n);
        d->stage_dev_n[slot] = n;
    }
    return d->stage_dev[slot];
}

// Until every call queued on the group's communicator is done (or the deadline passes).
static void nccl_wait(Dist *d, DistWork *w) {
    char err[512];
    if (cuda_nccl_wait(w->group->nccl, d->timeout_s, err, sizeof err) != 0)
        die("a rank is stuck or failed; its log says why", "rank %d: %s: %s", d->rank, dist_coll_name(w->coll), err);
}

// n counts elements of the call's dtype.
static void nccl_call(Dist *d, DistWork *w, CudaNcclOp op, const void *in, void *out, size_t n, int peer) {
    char err[512];
    CudaNcclType type = w->dtype == DIST_BF16 ? CUDA_NCCL_BF16 : CUDA_NCCL_F32;
    if (cuda_nccl_call(w->group->nccl, op, type, in, out, n, peer, err, sizeof err) != 0)
        die("NCCL_DEBUG=WARN says more", "rank %d: %s: %s", d->rank, dist_coll_name(w->coll), err);
}

// The bytes a ring (or chain) moves for this call on this rank: NCCL does not report what it
// sent, so the record carries the algorithm's count, the same one the shm backend measures.
static void ring_bytes(const DistWork *w, uint64_t *sent, uint64_t *recv) {
    int p = w->group->size, r = w->group->rank;
    size_t off, mine, prev, next, n = w->n;
    dist_chunk(n, p, r, &off, &mine);
    dist_chunk(n, p, (r + p - 1) % p, &off, &prev);
    dist_chunk(n, p, (r + 1) % p, &off, &next);
    int q = (r - w->peer + p) % p;  // place in a chain from the root
    size_t s = 0, v = 0;
    switch (w->coll) {
    case DIST_ALL_REDUCE: s = (n - mine) + (n - next), v = (n - prev) + (n - mine); break;
    case DIST_REDUCE_SCATTER: s = n - mine, v = n - prev; break;
    case DIST_ALL_GATHER: s = n - next, v = n - mine; break;
    case DIST_BROADCAST: s = q < p - 1 ? n : 0, v = q > 0 ? n : 0; break;
    case DIST_REDUCE: s = q > 0 ? n : 0, v = q != 1 ? n : 0; break;
    case DIST_SEND: s = n; break;
    case DIST_RECV: v = n; break;
    case DIST_BARRIER: break;
    case DIST_ALL_TO_ALL:  // pairwise: every block but our own crosses once, each way
        s = n - w->send_counts[r];
        for (int x = 0; x < p; x++) v += x == r ? 0 : w->recv_counts[x];
        break;
    }
    size_t elem = w->dtype == DIST_BF16 ? sizeof(bf16) : sizeof(float);
    *sent = s * elem, *recv = v * elem;
}

// One GPU per rank: the call on NCCL's stream, then a wait with the deadline. Host buffers are
// staged through the GPU (lengths in words, as the shm path); uneven chunks (n not a multiple
// of the group's size, which NCCL's reduce-scatter and all-gather do not take) are padded to
// equal ones. bf16 calls always have even chunks, so only float calls are ever padded.
static const char *run_nccl(Dist *d, DistWork *w, uint64_t *sent, uint64_t *recv) {
    DistGroup *g = w->group;
    int p = g->size, r = g->rank;
    size_t in_len, out_len, n = w->n, m = (n + (size_t)p - 1) / (size_t)p;
    dist_call_lengths(w, &in_len, &out_len);
    const float *in = w->in;
    float *out = w->out;
    int out_host = out && out_len && !cuda_is_device_ptr(out);
    if (in && in_len && !cuda_is_device_ptr(in)) {
        float *s = stage_dev(d, 0, in_len);
        cuda_copy(s, in, in_len * sizeof(float));
        in = s;
    }
    if (out_host) out = w->in == w->out ? (float *)in : stage_dev(d, 1, out_len);
    if (!out && w->coll == DIST_REDUCE) out = stage_dev(d, 1, n);  // not the root: NCCL still wants a buffer
    size_t off, len;
    switch (w->coll) {
    case DIST_ALL_REDUCE: nccl_call(d, w, CUDA_NCCL_ALL_REDUCE, in, out, n, 0); break;
    case DIST_BROADCAST: nccl_call(d, w, CUDA_NCCL_BROADCAST, out, out, n, w->peer); break;
    case DIST_REDUCE: nccl_call(d, w, CUDA_NCCL_REDUCE, in, out, n, w->peer); break;
    case DIST_SEND: nccl_call(d, w, CUDA_NCCL_SEND, in, NULL, n, w->peer); break;
    case DIST_RECV: nccl_call(d, w, CUDA_NCCL_RECV, NULL, out, n, w->peer); break;
    case DIST_BARRIER: nccl_call(d, w, CUDA_NCCL_ALL_REDUCE, stage_dev(d, 2, 1), stage_dev(d, 2, 1), 1, 0); break;
    case DIST_ALL_TO_ALL: {
        // One group of a send and a receive per peer, as nccl-tests' alltoall: NCCL moves them
        // all at once; our own block is a copy.
        char err[512];
        size_t sa = 0, ra = 0, send_at[DIST_MAX_RANKS], recv_at[DIST_MAX_RANKS];
        for (int q = 0; q < p; q++) send_at[q] = sa, recv_at[q] = ra, sa += w->send_counts[q], ra += w->recv_counts[q];
        if (cuda_nccl_group_start(err, sizeof err) != 0) die("NCCL_DEBUG=WARN says more", "rank %d: all_to_all: %s", d->rank, err);
        for (int q = 0; q < p; q++) {
            if (q == r) continue;
            if (w->send_counts[q]) nccl_call(d, w, CUDA_NCCL_SEND, in + send_at[q], NULL, w->send_counts[q], q);
            if (w->recv_counts[q]) nccl_call(d, w, CUDA_NCCL_RECV, NULL, out + recv_at[q], w->recv_counts[q], q);
        }
        if (cuda_nccl_group_end(err, sizeof err) != 0) die("NCCL_DEBUG=WARN says more", "rank %d: all_to_all: %s", d->rank, err);
        if (w->send_counts[r]) cuda_copy(out + recv_at[r], in + send_at[r], w->send_counts[r] * sizeof(float));
        break;
    }
    case DIST_REDUCE_SCATTER:
        if (n % (size_t)p == 0) {
            nccl_call(d, w, CUDA_NCCL_REDUCE_SCATTER, in, out, n, 0);
            break;
        }
        {   // chunk c at c*m, zeros after it; reduce-scatter p*m floats; keep our chunk's part
            float *padded = stage_dev(d, 2, (size_t)p * m), *mine = stage_dev(d, 3, m);
            cuda_memset0(padded, (size_t)p * m * sizeof(float));
            for (int c = 0; c < p; c++) {
                dist_chunk(n, p, c, &off, &len);
                cuda_copy(padded + (size_t)c * m, in + off, len * sizeof(float));
            }
            nccl_call(d, w, CUDA_NCCL_REDUCE_SCATTER, padded, mine, (size_t)p * m, 0);
            nccl_wait(d, w);
            dist_chunk(n, p, r, &off, &len);
            cuda_copy(out, mine, len * sizeof(float));
        }
        break;
    case DIST_ALL_GATHER:
        if (n % (size_t)p == 0) {
            nccl_call(d, w, CUDA_NCCL_ALL_GATHER, in, out, n, 0);
            break;
        }
        {   // each rank's chunk padded to m floats; gather p*m; close the gaps
            float *mine = stage_dev(d, 3, m), *all = stage_dev(d, 2, (size_t)p * m);
            dist_chunk(n, p, r, &off, &len);
            cuda_memset0(mine, m * sizeof(float));
            cuda_copy(mine, in, len * sizeof(float));
            nccl_call(d, w, CUDA_NCCL_ALL_GATHER, mine, all, (size_t)p * m, 0);
            nccl_wait(d, w);
            for (int c = 0; c < p; c++) {
                dist_chunk(n, p, c, &off, &len);
                cuda_copy(out + off, all + (size_t)c * m, len * sizeof(float));
            }
        }
        break;
    }
    nccl_wait(d, w);
    if (out_host) cuda_copy(w->out, out, out_len * sizeof(float));
    if (p > 1) ring_bytes(w, sent, recv);
    return "nccl";
}

// NCCL: the ops not queued yet go on the communicator's stream as one group, so NCCL moves
// every send and receive of it together, after the compute stream's work so far (nccl.cu's
// event). until < 0 leaves them running there beside the kernels that follow (ring
// attention's hand-over under its block, a pipeline's activation under the next micro-batch);
// any other until waits for everything queued, and the compute stream then waits for it too.
// The stream runs each rank's groups in the order they were queued, as a blocking call would.
static void p2p_nccl(Dist *d, DistGroup *g, DistP2p *ops, int nops, int until) {
    char err[512];
    int fresh = 0;
    for (int i = 0; i < nops; i++) fresh += !ops[i].queued && ops[i].moved != ops[i].n;
    if (fresh) {
        if (cuda_nccl_group_start(err, sizeof err) != 0)
            die("NCCL_DEBUG=WARN says more", "rank %d: p2p: %s", d->rank, err);
        for (int i = 0; i < nops; i++) {
            if (ops[i].queued || ops[i].moved == ops[i].n) continue;
            if (!cuda_is_device_ptr(ops[i].buf))
                die("this is a bug in shardlab: batched sends and receives take GPU buffers on NCCL",
                    "rank %d: p2p: a host buffer in a batch", d->rank);
            DistWork w = {.coll = ops[i].send ? DIST_SEND : DIST_RECV, .group = g, .dtype = DIST_F32};
            if (ops[i].send) nccl_call(d, &w, CUDA_NCCL_SEND, ops[i].buf, NULL, ops[i].n, ops[i].peer);
            else nccl_call(d, &w, CUDA_NCCL_RECV, NULL, ops[i].buf, ops[i].n, ops[i].peer);
            ops[i].queued = 1;
        }
        if (cuda_nccl_group_end(err, sizeof err) != 0)
            die("NCCL_DEBUG=WARN says more", "rank %d: p2p: %s", d->rank, err);
    }
    if (until < 0) return;
    DistWork w = {.coll = DIST_SEND, .group = g};
    nccl_wait(d, &w);
    for (int i = 0; i < nops; i++)
        if (ops[i].queued) ops[i].moved = ops[i].n, ops[i].queued = 0;
}

// Peers' NCCL calls then fail instead of waiting.
static void abort_nccl(Dist *d, const char *msg) {
    (void)msg;
    if (d->nccl) cuda_nccl_abort(d->nccl);
}

static void destroy_nccl(Dist *d) {
    if (d->nccl) cuda_nccl_destroy(d->nccl);
    for (int i = 0; i < 4; i++)
        if (d->stage_dev[i]) cuda_free(d->stage_dev[i]);
}

const DistBackend dist_nccl_backend = {"nccl", 1, join_nccl, group_nccl, run_nccl, p2p_nccl, abort_nccl, destroy_nccl};
