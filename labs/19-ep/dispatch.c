// dispatch.c — see dispatch.h.
#include "dispatch.h"

#include <math.h>
#include <string.h>

#include "common/harness/check.h"
#include "common/runfiles/runlog.h"  // runlog_now_us()

void dispatcher_init(Dispatcher *d, DistGroup *group, const MoeConfig *m, int N, Mem *mem) {
    memset(d, 0, sizeof *d);
    d->group = group, d->N = N;
    d->stats_row = m->K * m->E + 2 * m->E;
    d->stage = mem_alloc_floats(mem, MEM_COMM, (size_t)moe_expert_rows(m, N) * m->C, "rows in flight");
    d->stats = mem_alloc_floats(mem, MEM_COMM, (size_t)group->size * d->stats_row, "every rank's counts");
}

void dispatcher_free(Dispatcher *d, Mem *mem) {
    mem_free(mem, d->stats);
    mem_free(mem, d->stage);
}

double dispatcher_bytes(const MoeConfig *m, int N) {
    return 4.0 * ((double)moe_expert_rows(m, N) * m->C + (double)m->ranks * (m->K * m->E + 2 * m->E));
}

int dispatch_serve(const MoeConfig *m, int n, int N, const int *counts, int *served) {
    /* BEGIN SOLUTION: the global capacity rule: of each expert's assignments, first choices first, rank 0's first */
    int K = m->K, E = m->E, cap = moe_capacity(m, n * N), dropped = 0;
    for (int e = 0; e < E; e++) {
        int taken = 0;  // of e's capacity, by the blocks before: (choice, rank) in that order
        for (int k = 0; k < K; k++)
            for (int s = 0; s < n; s++) {
                int i = (s * K + k) * E + e, room = cap - taken, c = counts[i];
                served[i] = c < room ? c : room;
                taken += served[i];
                dropped += c - served[i];
            }
    }
    return dropped;
    /* END SOLUTION */
}

// ---- the exchanges -----------------------------------------------------------------------

static void timed_all_to_allv(Dispatcher *d, const float *in, const int *send_rows, float *out, const int *recv_rows,
                              int C) {
    int n = d->group->size, me = d->group->rank;
    size_t send[DIST_MAX_RANKS], recv[DIST_MAX_RANKS];
    for (int q = 0; q < n; q++) {
        send[q] = (size_t)send_rows[q] * C, recv[q] = (size_t)recv_rows[q] * C;
        if (q != me) d->bytes_sent += 4 * send[q];  // its own block is a copy, not a message
    }
    int64_t t0 = runlog_now_us();
    dist_all_to_allv(d->group, in, send, out, recv);
    d->exchange_us += runlog_now_us() - t0;
}

// The rows each rank sends this one, from a->got.
static void rows_from(const MoeConfig *m, const MoeActs *a, int n, int *rows) {
    for (int s = 0; s < n; s++) {
        rows[s] = 0;
        for (int j = 0; j < moe_local_experts(m); j++) rows[s] += a->got[s][j];
    }
}

// What arrives is grouped by source rank, then expert; the experts want their rows together,
// from each source in turn. to_experts: stage (by source) -> rows (by expert); else back.
static void regroup(const MoeConfig *m, const MoeActs *a, int n, float *by_source, float *by_expert, int to_experts) {
    int El = moe_local_experts(m);
    size_t C = (size_t)m->C, at = 0;  // the rows' place in by_source
    int next[MOE_MAX_EXPERTS];        // where source s's rows for expert j go in by_expert
    for (int j = 0; j < El; j++) next[j] = a->start[j];
    for (int s = 0; s < n; s++)
        for (int j = 0; j < El; j++) {
            size_t len = (size_t)a->got[s][j] * C;
            float *src = by_source + at, *dst = by_expert + (size_t)next[j] * C;
            if (to_experts) memcpy(dst, src, len * sizeof(float));
            else memcpy(src, dst, len * sizeof(float));
            at += len, next[j] += a->got[s][j];
        }
}

// ---- forward -----------------------------------------------------------------------------

// 2. Count: every rank's counts [K][E] and probability sums (as two floats each, a value and
// its remainder: P_e to double precision), all-gathered. Then the statistics of the whole
// pass, the rule's served counts, and from them where every row goes.
static void count(Dispatcher *d, const MoeConfig *m, MoeActs *a, int *served) {
    int n = d->group->size, K = m->K, E = m->E, N = a->N, row = d->stats_row;
    float mine[MOE_MAX_EXPERTS * (MOE_MAX_EXPERTS + 2)];
    memset(mine, 0, (size_t)row * sizeof(float));
    for (int t = 0; t < N; t++)
        for (int k = 0; k < K; k++) mine[k * E + a->expert[t * K + k]] += 1;
    for (int e = 0; e < E; e++) {
        float hi = (float)a->prob_sum[e];
        mine[K * E + e] = hi, mine[K * E + E + e] = (float)(a->prob_sum[e] - hi);
    }
    int64_t t0 = runlog_now_us();
    dist_all_gather(d->group, mine, d->stats, (size_t)n * row);
    d->exchange_us += runlog_now_us() - t0;
    d->bytes_sent += 4 * (uint64_t)(n - 1) * row;  // the ring: every other rank's row passes on once

    int counts[MOE_MAX_RANKS * MOE_MAX_EXPERTS * MOE_MAX_EXPERTS];
    memset(a->routed, 0, sizeof a->routed);
    for (int e = 0; e < E; e++) a->prob_sum[e] = 0;
    for (int s = 0; s < n; s++) {
        const float *r = d->stats + (size_t)s * row;
        for (int i = 0; i < K * E; i++) counts[s * K * E + i] = (int)r[i], a->routed[i % E] += (int)r[i];
        for (int e = 0; e < E; e++) a->prob_sum[e] += (double)r[K * E + e] + (double)r[K * E + E + e];
    }
    a->ntokens = n * N;
    a->dropped = dispatch_serve(m, n, N, counts, served);

    // Rows each rank sends each of this rank's experts, and this rank's experts' rows by
    // expert (start: expert j's, from every rank in turn).
    int El = moe_local_experts(m), e0 = moe_first_expert(m);
    a->start[0] = 0;
    for (int j = 0; j < El; j++) {
        for (int s = 0; s < n; s++) {
            a->got[s][j] = 0;
            for (int k = 0; k < K; k++) a->got[s][j] += served[(s * K + k) * E + e0 + j];
        }
        a->start[j + 1] = a->start[j];
        for (int s = 0; s < n; s++) a->start[j + 1] += a->got[s][j];
    }
}

// 3. Dispatch, this rank's side: its served assignments' rows sorted by destination rank,
// then expert, then choice, then token (the serving order); a->row and a->row_token say
// which is where, a->sent how many go to each rank.
static void sort_rows(const MoeConfig *m, MoeActs *a, int n, const int *served_here, const float *x) {
    int N = a->N, K = m->K, E = m->E, El = moe_local_experts(m);
    // Where the rows of (expert e, choice k) start: experts in order are ranks in order.
    int first[MOE_MAX_EXPERTS][MOE_MAX_EXPERTS], next[MOE_MAX_EXPERTS][MOE_MAX_EXPERTS] = {{0}}, at = 0;
    for (int e = 0; e < E; e++)
        for (int k = 0; k < K; k++) first[e][k] = at, at += served_here[k * E + e];
    for (int q = 0; q < n; q++) {
        a->sent[q] = 0;
        for (int e = q * El; e < (q + 1) * El; e++)
            for (int k = 0; k < K; k++) a->sent[q] += served_here[k * E + e];
    }
    // The first served_here[k][e] of this rank's choice-k assignments to e, in token order,
    // are served: the rule's order (dispatch_serve) within this rank's block.
    for (int k = 0; k < K; k++)
        for (int t = 0; t < N; t++) {
            int i = t * K + k, e = a->expert[i], j = next[e][k]++;
            a->row[i] = j < served_here[k * E + e] ? first[e][k] + j : -1;
            if (a->row[i] >= 0) a->row_token[a->row[i]] = t;
        }
    size_t C = (size_t)m->C;
    for (int r = 0; r < at; r++) memcpy(a->xin + (size_t)r * C, x + (size_t)a->row_token[r] * C, C * sizeof(float));
}

void dispatch_forward(Dispatcher *d, const Ops *ops, const MoeConfig *m, const float *params, const float *x,
                      float *out, MoeActs *a, int bf16_in, float *scratch) {
    int n = d->group->size, me = d->group->rank, K = m->K, E = m->E;
    // 1. Route this rank's tokens.
    moe_route(ops, m, params, x, a, bf16_in, scratch);
    // 2. Count, over every rank: the pass's statistics, and what the capacity serves.
    int served[MOE_MAX_RANKS * MOE_MAX_EXPERTS * MOE_MAX_EXPERTS];
    count(d, m, a, served);
    // 3. Dispatch: rows sorted by destination, then the all-to-all; the experts' rows regrouped.
    sort_rows(m, a, n, served + (size_t)me * K * E, x);
    for (int q = 0; q < n; q++) d->rows_to[q] += a->sent[q];
    int recv_rows[DIST_MAX_RANKS];
    rows_from(m, a, n, recv_rows);
    timed_all_to_allv(d, a->xin, a->sent, d->stage, recv_rows, m->C);
    regroup(m, a, n, d->stage, a->ein, 1);
    // 4. The experts held here, on every rank's rows for them.
    moe_experts_forward(ops, m, params, a, bf16_in, scratch);
    // 5. Combine: the outputs back to their ranks (the splits swapped), then weighted.
    regroup(m, a, n, d->stage, a->eout, 0);
    timed_all_to_allv(d, d->stage, recv_rows, a->y, a->sent, m->C);
    moe_combine(m, a, out);
}

// ---- backward ----------------------------------------------------------------------------

void dispatch_backward(Dispatcher *d, const Ops *ops, const MoeConfig *m, const float *params, float *grads,
                       const float *x, const float *dout, const MoeActs *a, float aux_scale, float *dx, int bf16_in,
                       float *scratch) {
    int n = d->group->size;
    MoeGrads g = moe_grads_carve(m, a, scratch);
    // 5 backwards: each served row's gradient (the router's too, with the whole pass's aux).
    moe_combine_backward(m, a, dout, aux_scale, &g);
    // The rows' gradients go where the rows went (the dispatch's splits), regrouped by expert.
    int recv_rows[DIST_MAX_RANKS];
    rows_from(m, a, n, recv_rows);
    timed_all_to_allv(d, g.dy, a->sent, d->stage, recv_rows, m->C);
    regroup(m, a, n, d->stage, g.deout, 1);
    // 4 backwards: the experts' gradients stay here; they already sum every rank's tokens.
    moe_experts_backward(ops, m, params, grads, a, &g, bf16_in);
    // 3 backwards: the inputs' gradients come home as the outputs did (the combine's splits).
    regroup(m, a, n, d->stage, g.dein, 0);
    timed_all_to_allv(d, d->stage, recv_rows, g.dxin, a->sent, m->C);
    // 1 backwards: the router, and each token's gradient.
    moe_router_backward(ops, m, params, grads, x, a, &g, dx, bf16_in);
}
