// ring_attention.c — see ring_attention.h: the layouts, one block's forward and backward,
// and the ring that brings every block to every rank.
#include "ring_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/cuda/gpu.h"
#include "common/harness/check.h"
#include "common/model/bf16.h"
#include "common/runfiles/runlog.h"

// ---------------------------------------------------------------------------------------
// The layout: who holds which tokens
// ---------------------------------------------------------------------------------------

int ring_rank_chunks(const CpLayout *l, int r, int chunk[2]) {
    /* BEGIN SOLUTION: rank r's chunks: r of N, or r and 2N-1-r of 2N */
    chunk[0] = r;
    if (l->kind != CP_ZIGZAG) return 1;
    chunk[1] = 2 * l->N - 1 - r;  // its mirror: an early chunk and a late one
    return 2;
    /* END SOLUTION */
}

int ring_rank_positions(const CpLayout *l, int r, int *pos) {
    int chunk[2] = {0, 0}, n = ring_rank_chunks(l, r, chunk), k = 0;
    for (int i = 0; i < n; i++) {
        size_t off, len;
        dist_chunk((size_t)l->T, l->chunks, chunk[i], &off, &len);
        for (size_t t = 0; t < len && k < l->T; t++) pos[k++] = (int)(off + t);
    }
    return k;
}

// ---------------------------------------------------------------------------------------
// One block of keys and values
// ---------------------------------------------------------------------------------------

// How many of the block's keys query position p sees: positions increase, so the visible
// keys are a prefix of the block (pos(u) <= p).
static int visible_keys(const int *kpos, int Tk, int p) {
    int n = 0;
    while (n < Tk && kpos[n] <= p) n++;
    return n;
}

static float round_if(float x, int bf16_in) { return bf16_in ? bf16_round(x) : x; }

// A block's output for one query and head, ob (unnormalized: its softmax's sum is l) and
// its log-sum-exp lb, merged into the running o and *lse (-INFINITY before the first block).
static void merge_block(float *o, float *lse, const float *ob, float l, float lb, int hs) {
    /* BEGIN SOLUTION: merge the block's (ob / l, lb) into the running (o, lse), overflow-safe */
    if (*lse == -INFINITY) {  // the first block this query sees
        for (int i = 0; i < hs; i++) o[i] = ob[i] / l;
        *lse = lb;
        return;
    }
    // lse' = log(e^lse + e^lb), written as max + log1p(e^(min - max)): the exp of a
    // difference <= 0 never overflows.
    float hi = *lse > lb ? *lse : lb, lo = *lse > lb ? lb : *lse;
    float merged = hi + log1pf(expf(lo - hi));
    float w_old = expf(*lse - merged), w_new = expf(lb - merged) / l;
    for (int i = 0; i < hs; i++) o[i] = o[i] * w_old + ob[i] * w_new;
    *lse = merged;
    /* END SOLUTION */
}

void ring_block_forward(float *out, float *lse, const float *qkv, const int *qpos, int Tq, const float *kv,
                        const int *kpos, int Tk, int B, int C, int NH, int bf16_in, float *scores) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    float *ob = scores + Tk;  // the block's unnormalized output, hs floats
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < Tq; t++) {
                int nk = visible_keys(kpos, Tk, qpos[t]);
                if (nk == 0) continue;  // the whole block lies in this query's future
                const float *q = qkv + ((size_t)b * Tq + t) * 3 * C + h * hs;
                float m = -INFINITY;
                for (int u = 0; u < nk; u++) {
                    const float *k = kv + ((size_t)b * Tk + u) * 2 * C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    scores[u] = s * scale;
                    if (scores[u] > m) m = scores[u];
                }
                float l = 0.0f;
                for (int i = 0; i < hs; i++) ob[i] = 0.0f;
                for (int u = 0; u < nk; u++) {
                    float p = expf(scores[u] - m);
                    l += p;
                    p = round_if(p, bf16_in);
                    const float *v = kv + ((size_t)b * Tk + u) * 2 * C + C + h * hs;
                    for (int i = 0; i < hs; i++) ob[i] += p * v[i];
                }
                merge_block(out + ((size_t)b * Tq + t) * C + h * hs, lse + ((size_t)b * NH + h) * Tq + t, ob, l,
                            m + logf(l), hs);
            }
}

void ring_block_backward(float *dqkv, float *dkv, const float *dout, const float *D, const float *lse,
                         const float *qkv, const int *qpos, int Tq, const float *kv, const int *kpos, int Tk, int B,
                         int C, int NH, int bf16_in, float *scratch) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    float *dor = scratch;  // do as the products read it (rounded under bf16_in), hs floats
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < Tq; t++) {
                int nk = visible_keys(kpos, Tk, qpos[t]);
                if (nk == 0) continue;
                const float *q = qkv + ((size_t)b * Tq + t) * 3 * C + h * hs;
                const float *dO = dout + ((size_t)b * Tq + t) * C + h * hs;
                float *dq = dqkv + ((size_t)b * Tq + t) * 3 * C + h * hs;
                float Lt = lse[((size_t)b * NH + h) * Tq + t], Dt = D[((size_t)b * NH + h) * Tq + t];
                for (int i = 0; i < hs; i++) dor[i] = round_if(dO[i], bf16_in);
                for (int u = 0; u < nk; u++) {
                    const float *k = kv + ((size_t)b * Tk + u) * 2 * C + h * hs, *v = k + C;
                    float *dk = dkv + ((size_t)b * Tk + u) * 2 * C + h * hs, *dv = dk + C;
                    float s = 0.0f, dp = 0.0f;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    float p = expf(s * scale - Lt);  // the probability, from the final lse
                    float pr = round_if(p, bf16_in);
                    for (int i = 0; i < hs; i++) dv[i] += pr * dor[i];
                    for (int i = 0; i < hs; i++) dp += dor[i] * v[i];
                    float ds = round_if(p * (dp - Dt), bf16_in) * scale;
                    for (int i = 0; i < hs; i++) dq[i] += ds * k[i];
                    for (int i = 0; i < hs; i++) dk[i] += ds * q[i];
                }
            }
}

void ring_kv_pack(float *kv, const float *qkv, int B, int T, int C) {
    for (size_t n = 0; n < (size_t)B * T; n++) memcpy(kv + n * 2 * C, qkv + n * 3 * C + C, sizeof(float) * 2 * C);
}

static void kv_unpack(float *dqkv, const float *dkv, int B, int T, int C) {
    for (size_t n = 0; n < (size_t)B * T; n++) memcpy(dqkv + n * 3 * C + C, dkv + n * 2 * C, sizeof(float) * 2 * C);
}

static void do_dot_o(float *D, const float *dout, const float *out, int B, int T, int C, int NH) {
    int hs = C / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *d = dout + ((size_t)b * T + t) * C + h * hs, *o = out + ((size_t)b * T + t) * C + h * hs;
                float s = 0.0f;
                for (int i = 0; i < hs; i++) s += d[i] * o[i];
                D[((size_t)b * NH + h) * T + t] = s;
            }
}

static void fill(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}

static const RingKernels kernels_cpu = {ring_block_forward, ring_block_backward, ring_kv_pack, kv_unpack, do_dot_o,
                                        fill};
static const RingKernels kernels_cuda = {cuda_ring_block_forward, cuda_ring_block_backward, cuda_ring_kv_pack,
                                         cuda_ring_kv_unpack, cuda_ring_do_dot_o, cuda_ring_fill};

// ---------------------------------------------------------------------------------------
// The ring
// ---------------------------------------------------------------------------------------

void ring_attach_device(Ring *r, const Device *dev) {
    r->dev = dev;
    r->k = dev->kind == DEVICE_CUDA ? &kernels_cuda : &kernels_cpu;
    for (int q = 0; q < r->N; q++) {
        r->dev_pos[q] = r->pos[q];
        if (dev->kind != DEVICE_CUDA) continue;
        // The layout, for the kernels: a few kilobytes, outside mem's tensors (on the CPU the
        // same arrays are plain host memory, also outside them).
        size_t bytes = (size_t)(r->count[q] ? r->count[q] : 1) * sizeof(int);
        r->dev_pos[q] = device_alloc(dev, bytes);
        if (!r->dev_pos[q]) die("lower --batch or --seq", "cp: out of GPU memory for the layout's positions");
        device_from_host(dev, r->dev_pos[q], r->pos[q], (size_t)r->count[q] * sizeof(int));
    }
    r->marks = malloc_check(2 * (size_t)r->B * sizeof *r->marks);
    r->mark_us = malloc_check(2 * (size_t)r->B * sizeof *r->mark_us);
}

void ring_detach_device(Ring *r) {
    for (int q = 0; q < r->N; q++)
        if (r->dev_pos[q] != r->pos[q]) device_free(r->dev, r->dev_pos[q]);
    free(r->marks);
    free(r->mark_us);
    r->marks = NULL, r->mark_us = NULL;
}

void ring_init(Ring *r, DistGroup *group, const CpLayout *l, int kv_mode, int B, int C, int NH, int bf16_in,
               Mem *mem) {
    *r = (Ring){.group = group, .layout = *l, .kv_mode = kv_mode, .B = B, .C = C, .NH = NH, .rank = group->rank,
                .N = group->size, .bf16_in = bf16_in};
    for (int q = 0; q < r->N; q++) {
        r->pos[q] = calloc_check((size_t)l->T, sizeof(int));
        r->count[q] = ring_rank_positions(l, q, r->pos[q]);
        if (r->count[q] > r->maxc) r->maxc = r->count[q];
    }
    ring_attach_device(r, mem->dev ? mem->dev : &device_cpu);
    size_t half = cp_comm_floats(l, kv_mode, B, C) / 2;
    r->buf[0] = mem_alloc_floats(mem, MEM_COMM, half, "K/V blocks in flight");
    r->buf[1] = mem_alloc_floats(mem, MEM_COMM, half, "K/V blocks in flight");
}

void ring_alloc_workspace(Ring *r, Mem *mem) {
    r->D = mem_alloc_floats(mem, MEM_ACTS, cp_workspace_floats(&r->layout, r->B, r->C, r->NH), "ring attention workspace");
    r->scores = r->D + (size_t)r->B * r->NH * r->count[r->rank];
}

void ring_free_workspace(Ring *r, Mem *mem) {
    mem_free(mem, r->D);
    r->D = r->scores = NULL;
}

void ring_free(Ring *r, Mem *mem) {
    if (r->D) ring_free_workspace(r, mem);
    mem_free(mem, r->buf[1]);
    mem_free(mem, r->buf[0]);
    ring_detach_device(r);
    for (int q = 0; q < r->N; q++) free(r->pos[q]);
}

// The block each step uses: at step s rank r holds the keys of rank (r - s) mod N.
static int block_at(const Ring *r, int s) { return ((r->rank - s) % r->N + r->N) % r->N; }

// Floats of a block of `who`'s tokens, `per` floats a token.
static size_t block_floats(const Ring *r, int who, int per) { return (size_t)r->B * r->count[who] * per * r->C; }

// The time the device spent on the block's sequences, between their marks: on a GPU, once it
// has finished them (the host waits here, so that the wait for the transfer that follows is
// the part of it the compute did not hide).
static void count_attention(Ring *r) {
    device_mark_times(r->dev, r->marks, 2 * r->B, r->mark_us);
    for (int b = 0; b < r->B; b++) r->attention_us += r->mark_us[2 * b + 1] - r->mark_us[2 * b];
}

// One sequence at a time, so that between two of them the messages in flight move on
// (dist_p2p_progress with until -1 waits for nothing): the transfer overlaps the compute.
// On a GPU the kernels and the transfer run on streams of their own, side by side.
static void forward_block(Ring *r, float *out, float *lse, const float *qkv, const float *kv, int src,
                          DistP2p *ops, int nops) {
    int me = r->rank, Tq = r->count[me], Tk = r->count[src], C = r->C, NH = r->NH;
    for (int b = 0; b < r->B; b++) {
        r->marks[2 * b] = device_mark(r->dev);
        r->k->block_forward(out + (size_t)b * Tq * C, lse + (size_t)b * NH * Tq, qkv + (size_t)b * Tq * 3 * C,
                            r->dev_pos[me], Tq, kv + (size_t)b * Tk * 2 * C, r->dev_pos[src], Tk, 1, C, NH, r->bf16_in,
                            r->scores);
        r->marks[2 * b + 1] = device_mark(r->dev);
        if (nops) dist_p2p_progress(r->group, ops, nops, -1);
    }
    count_attention(r);
}

static void backward_block(Ring *r, float *dqkv, float *dkv, const float *dout, const float *lse, const float *qkv,
                           const float *kv, int src, DistP2p *ops, int nops) {
    int me = r->rank, Tq = r->count[me], Tk = r->count[src], C = r->C, NH = r->NH;
    for (int b = 0; b < r->B; b++) {
        r->marks[2 * b] = device_mark(r->dev);
        r->k->block_backward(dqkv + (size_t)b * Tq * 3 * C, dkv + (size_t)b * Tk * 2 * C, dout + (size_t)b * Tq * C,
                             r->D + (size_t)b * NH * Tq, lse + (size_t)b * NH * Tq, qkv + (size_t)b * Tq * 3 * C,
                             r->dev_pos[me], Tq, kv + (size_t)b * Tk * 2 * C, r->dev_pos[src], Tk, 1, C, NH,
                             r->bf16_in, r->scores);
        r->marks[2 * b + 1] = device_mark(r->dev);
        if (nops) dist_p2p_progress(r->group, ops, nops, -1);
    }
    count_attention(r);
}

// The rest of the step's transfers, the time spent waiting for them counted (what the
// compute did not hide), and each hand-over's time from its post (posted_us) to its end.
static void wait_for(Ring *r, DistP2p *ops, int nops, int64_t posted_us) {
    int64_t t0 = runlog_now_us();
    dist_p2p_progress(r->group, ops, nops, nops);
    int64_t t1 = runlog_now_us();
    r->wait_us += t1 - t0, r->transfer_us += t1 - posted_us;
}

static DistP2p p2p_op(int send, int peer, float *buf, size_t n, int tag) {
    return (DistP2p){.send = send, .peer = peer, .buf = buf, .n = n, .tag = tag};
}

// all-gather: every rank's K|V at the start of buf[0], rank q's at q * chunk, packed
// [B, count[q], 2C]. One all-gather of the padded chunks.
static size_t gather_kv(Ring *r, const float *qkv) {
    size_t chunk = (size_t)r->B * r->maxc * 2 * r->C;
    r->k->kv_pack(r->buf[0] + r->rank * chunk, qkv, r->B, r->count[r->rank], r->C);
    int64_t t0 = runlog_now_us();
    dist_all_gather(r->group, r->buf[0] + r->rank * chunk, r->buf[0], chunk * r->N);
    r->wait_us += runlog_now_us() - t0;
    r->bytes_sent += 4ull * (uint64_t)(r->N - 1) * chunk;
    return chunk;
}

void ring_attention_forward(Ring *r, float *out, float *lse, const float *qkv) {
    int me = r->rank, N = r->N, Tl = r->count[me];
    r->k->fill(out, (size_t)r->B * Tl * r->C, 0.0f);
    r->k->fill(lse, (size_t)r->B * r->NH * Tl, -INFINITY);
    if (r->kv_mode == CP_KV_ALL_GATHER) {
        size_t chunk = gather_kv(r, qkv);
        // The blocks in the ring's order, so that both modes merge them alike.
        for (int s = 0; s < N; s++) forward_block(r, out, lse, qkv, r->buf[0] + block_at(r, s) * chunk, block_at(r, s),
                                                  NULL, 0);
        return;
    }
    float *cur = r->buf[0], *nxt = r->buf[1];
    r->k->kv_pack(cur, qkv, r->B, Tl, r->C);
    for (int s = 0; s < N; s++) {
        int src = block_at(r, s);
        DistP2p ops[2];
        int nops = 0;
        int64_t posted = runlog_now_us();
        /* BEGIN SOLUTION: post this step's hand-over: the block held to the right, the next one from the left */
        if (s < N - 1) {  // posted before the compute: the block moves on while we attend to it
            ops[nops++] = p2p_op(1, (me + 1) % N, cur, block_floats(r, src, 2), s);
            ops[nops++] = p2p_op(0, (me + N - 1) % N, nxt, block_floats(r, block_at(r, s + 1), 2), s);
            dist_p2p_progress(r->group, ops, nops, -1);
        }
        /* END SOLUTION */
        forward_block(r, out, lse, qkv, cur, src, ops, nops);
        if (nops) {
            wait_for(r, ops, nops, posted);
            r->bytes_sent += 4 * ops[0].n;
            float *t = cur;
            cur = nxt, nxt = t;
        }
    }
}

void ring_attention_backward(Ring *r, float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse) {
    int me = r->rank, N = r->N, Tl = r->count[me], C = r->C;
    r->k->fill(dqkv, (size_t)r->B * Tl * 3 * C, 0.0f);
    r->k->do_dot_o(r->D, dout, out, r->B, Tl, C, r->NH);  // D [B,NH,Tl] = do . o per query and head
    if (r->kv_mode == CP_KV_ALL_GATHER) {
        // K and V gathered again (not kept from the forward pass: that would hold the whole
        // sequence's), every block's dK dV here, then summed onto their owners.
        size_t chunk = gather_kv(r, qkv);
        float *dkv = r->buf[1];
        r->k->fill(dkv, chunk * N, 0.0f);
        for (int s = 0; s < N; s++) {
            int src = block_at(r, s);
            backward_block(r, dqkv, dkv + src * chunk, dout, lse, qkv, r->buf[0] + src * chunk, src, NULL, 0);
        }
        int64_t t0 = runlog_now_us();
        dist_reduce_scatter(r->group, dkv, dkv + me * chunk, chunk * N);
        r->wait_us += runlog_now_us() - t0;
        r->bytes_sent += 4ull * (uint64_t)(N - 1) * chunk;
        r->k->kv_unpack(dqkv, dkv + me * chunk, r->B, Tl, C);  // its q columns the ring already wrote
        return;
    }
    // Each buffer holds a block's K|V, then its dK|dV: [B,Tk,2C] and [B,Tk,2C].
    float *cur = r->buf[0], *nxt = r->buf[1];
    r->k->kv_pack(cur, qkv, r->B, Tl, C);
    r->k->fill(cur + block_floats(r, me, 2), block_floats(r, me, 2), 0.0f);
    for (int s = 0; s < N; s++) {
        int src = block_at(r, s), from = block_at(r, s + 1);
        float *dkv = cur + block_floats(r, src, 2);
        DistP2p ops[4];
        int nops = 0;
        int64_t posted = runlog_now_us();
        // K and V do not change: they leave before the compute. dK and dV leave after it,
        // with this rank's share added; the last hop (s = N-1) takes them home.
        if (s < N - 1) {
            ops[nops++] = p2p_op(1, (me + 1) % N, cur, block_floats(r, src, 2), s);
            ops[nops++] = p2p_op(0, (me + N - 1) % N, nxt, block_floats(r, from, 2), s);
            dist_p2p_progress(r->group, ops, nops, -1);
        }
        backward_block(r, dqkv, dkv, dout, lse, qkv, cur, src, ops, nops);
        if (N == 1) break;
        ops[nops++] = p2p_op(1, (me + 1) % N, dkv, block_floats(r, src, 2), s);
        ops[nops++] = p2p_op(0, (me + N - 1) % N, nxt + block_floats(r, from, 2), block_floats(r, from, 2), s);
        wait_for(r, ops, nops, posted);
        for (int i = 0; i < nops; i++)
            if (ops[i].send) r->bytes_sent += 4 * ops[i].n;
        float *t = cur;
        cur = nxt, nxt = t;
    }
    // After N steps the block in cur is this rank's own, with every rank's share of dK dV.
    r->k->kv_unpack(dqkv, cur + block_floats(r, me, 2), r->B, Tl, C);
}

uint64_t ring_forward_bytes(const Ring *r) { return cp_ring_bytes(&r->layout, r->kv_mode, r->rank, r->B, r->C, 0); }

uint64_t ring_backward_bytes(const Ring *r) { return cp_ring_bytes(&r->layout, r->kv_mode, r->rank, r->B, r->C, 1); }
