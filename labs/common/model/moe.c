// moe.c — see moe.h.
#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"

const char *moe_config_check(const MoeConfig *m) {
    static char why[160];
    if (m->E < 1 || m->E > MOE_MAX_EXPERTS)
        return snprintf(why, sizeof why, "--moe %d: from 1 to %d experts", m->E, MOE_MAX_EXPERTS), why;
    if (m->K < 1 || m->K > m->E)
        return snprintf(why, sizeof why, "--topk %d: from 1 to the %d experts of --moe", m->K, m->E), why;
    if (m->H < 1 || m->C < 1) return snprintf(why, sizeof why, "--expert-dim %d: at least 1", m->H), why;
    if (!(m->capacity == 0 || (m->capacity > 0 && isfinite(m->capacity))))
        return snprintf(why, sizeof why, "--capacity %g: 0 (dropless) or a factor above 0, e.g. 1.25", m->capacity), why;
    return "";
}

int moe_local_experts(const MoeConfig *m) { return m->ranks > 0 ? m->E / m->ranks : m->E; }
int moe_first_expert(const MoeConfig *m) { return m->ranks > 0 ? m->rank * moe_local_experts(m) : 0; }

size_t moe_router_floats(const MoeConfig *m) { return (size_t)m->E * m->C; }
size_t moe_expert_floats(const MoeConfig *m) { return 2 * (size_t)m->H * m->C + (size_t)m->H + (size_t)m->C; }
size_t moe_params_floats(const MoeConfig *m) {
    return moe_router_floats(m) + (size_t)moe_local_experts(m) * moe_expert_floats(m);
}

MoeExpertView moe_expert_view(const MoeConfig *m, float *params, int e) {
    size_t El = (size_t)moe_local_experts(m), H = (size_t)m->H, C = (size_t)m->C, HC = H * C;
    int j = e - moe_first_expert(m);  // its place among the experts held
    if (j < 0 || j >= (int)El) die("this is a bug in shardlab", "expert %d is not held on this rank", e);
    float *fc_w = params + moe_router_floats(m), *fc_b = fc_w + El * HC, *proj_w = fc_b + El * H, *proj_b = proj_w + El * HC;
    return (MoeExpertView){.fc_w = fc_w + j * HC, .fc_b = fc_b + j * H, .proj_w = proj_w + j * HC, .proj_b = proj_b + j * C};
}

int moe_capacity(const MoeConfig *m, int N) {
    if (m->capacity == 0) return N;
    double cap = ceil(m->capacity * (double)N * m->K / m->E);
    return cap < N ? (int)cap : N;
}

int moe_expert_rows(const MoeConfig *m, int N) {
    if (m->ranks == 0) return N * m->K;
    int El = moe_local_experts(m), rows = m->ranks * N * (m->K < El ? m->K : El);
    if (m->capacity > 0) {
        int full = El * moe_capacity(m, m->ranks * N);
        rows = full < rows ? full : rows;
    }
    return rows;
}

// ---- activations ---------------------------------------------------------------------------

// The one-rank layer's experts' side is its tokens' side (moe.h): ein is xin, eout is y.
static int split(const MoeConfig *m) { return m->ranks > 0; }

size_t moe_acts_floats(const MoeConfig *m, int N) {
    size_t NK = (size_t)N * m->K, R = (size_t)moe_expert_rows(m, N);
    return (size_t)N * m->E + NK + 2 * NK * m->C + 2 * R * m->H + (split(m) ? 2 * R * m->C : 0);
}
size_t moe_acts_ints(const MoeConfig *m, int N) { return 3 * (size_t)N * m->K; }

size_t moe_acts_bytes(const MoeConfig *m, int N) { return 4 * moe_acts_floats(m, N) + 4 * moe_acts_ints(m, N); }

void moe_acts_carve(MoeActs *a, const MoeConfig *m, int N, float *f, int *n) {
    size_t NK = (size_t)N * m->K;
    memset(a, 0, sizeof *a);
    a->N = N, a->R = moe_expert_rows(m, N);
    a->probs = f, f += (size_t)N * m->E;
    a->weight = f, f += NK;
    a->xin = f, f += NK * m->C;
    a->h = f, f += (size_t)a->R * m->H;
    a->g = f, f += (size_t)a->R * m->H;
    a->y = f, f += NK * m->C;
    a->ein = a->xin, a->eout = a->y;
    if (split(m)) a->ein = f, f += (size_t)a->R * m->C, a->eout = f;
    a->expert = n, n += NK;
    a->row = n, n += NK;
    a->row_token = n;
}

void moe_acts_alloc(MoeActs *a, const MoeConfig *m, int N) {
    moe_acts_carve(a, m, N, calloc_check(moe_acts_floats(m, N) + 1, sizeof(float)),
                   calloc_check(moe_acts_ints(m, N) + 1, sizeof(int)));
}

void moe_acts_free(MoeActs *a) {
    free(a->probs);
    free(a->expert);
    memset(a, 0, sizeof *a);
}

size_t moe_scratch_floats(const MoeConfig *m, int N, int bf16_in) {
    size_t NK = (size_t)N * m->K, R = (size_t)moe_expert_rows(m, N);
    size_t lin = linear_scratch_floats((int)R, m->C, m->H, bf16_in);
    size_t s = linear_scratch_floats((int)R, m->H, m->C, bf16_in);
    if (s > lin) lin = s;
    s = linear_scratch_floats(N, m->C, m->E, bf16_in);
    if (s > lin) lin = s;
    return 2 * NK * (size_t)m->C + (split(m) ? 2 * R * m->C : 0) + R * (size_t)m->H + (size_t)N * m->E +
           (size_t)N * m->C + lin;
}

MoeGrads moe_grads_carve(const MoeConfig *m, const MoeActs *a, float *scratch) {
    size_t NK = (size_t)a->N * m->K, R = (size_t)a->R, C = (size_t)m->C;
    MoeGrads d;
    d.dy = scratch, d.dxin = d.dy + NK * C, d.dh = d.dxin + NK * C;
    d.deout = d.dy, d.dein = d.dxin;
    float *f = d.dh + R * m->H;
    if (split(m)) d.deout = f, d.dein = f + R * C, f += 2 * R * C;
    d.dlogits = f, d.dxr = d.dlogits + (size_t)a->N * m->E, d.lin = d.dxr + (size_t)a->N * C;
    return d;
}

// ---- forward -------------------------------------------------------------------------------

// Row t of p [N, E] = softmax(row t), in place.
static void softmax_rows(float *p, int N, int E) {
    for (int t = 0; t < N; t++) {
        float *r = p + (size_t)t * E, max = r[0];
        for (int e = 1; e < E; e++) max = r[e] > max ? r[e] : max;
        double sum = 0;
        for (int e = 0; e < E; e++) sum += (r[e] = expf(r[e] - max));
        for (int e = 0; e < E; e++) r[e] = (float)(r[e] / sum);
    }
}

// Token t's K best experts, best first (a tie: the lower index), and their weights.
static void top_k(const MoeConfig *m, const float *p, int *expert, float *weight) {
    double sum = 0;
    for (int k = 0; k < m->K; k++) {
        int best = -1;
        for (int e = 0; e < m->E; e++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= expert[j] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        expert[k] = best;
        sum += p[best];
    }
    for (int k = 0; k < m->K; k++) weight[k] = (float)(p[expert[k]] / sum);
}

// The dispatch: which assignments each expert serves (capacity by rank of choice, then token),
// and the rows they get, grouped by expert in serving order.
static void dispatch(const MoeConfig *m, MoeActs *a) {
    int N = a->N, K = m->K, E = m->E, cap = moe_capacity(m, N), served[MOE_MAX_EXPERTS] = {0};
    a->dropped = 0;
    for (int k = 0; k < K; k++)
        for (int t = 0; t < N; t++) {
            int e = a->expert[t * K + k];
            if (served[e] < cap) a->row[t * K + k] = served[e]++;  // its place among e's rows, for now
            else a->row[t * K + k] = -1, a->dropped++;
        }
    a->start[0] = 0;
    for (int e = 0; e < E; e++) a->start[e + 1] = a->start[e] + served[e];
    // Serving order within an expert is rank of choice, then token: rows numbered the same way.
    for (int k = 0; k < K; k++)
        for (int t = 0; t < N; t++) {
            int i = t * K + k;
            if (a->row[i] < 0) continue;
            a->row[i] += a->start[a->expert[i]];
            a->row_token[a->row[i]] = t;
        }
}

void moe_route(const Ops *ops, const MoeConfig *m, const float *params, const float *x, MoeActs *a, int bf16_in,
               float *scratch) {
    int N = a->N, K = m->K, E = m->E, C = m->C;
    ops->linear_forward(a->probs, x, params, NULL, N, C, E, bf16_in, scratch);
    softmax_rows(a->probs, N, E);
    for (int e = 0; e < E; e++) a->prob_sum[e] = 0;
    for (int t = 0; t < N; t++) {
        for (int e = 0; e < E; e++) a->prob_sum[e] += a->probs[(size_t)t * E + e];
        top_k(m, a->probs + (size_t)t * E, a->expert + (size_t)t * K, a->weight + (size_t)t * K);
    }
    memset(a->routed, 0, (size_t)E * sizeof(int));
    for (int i = 0; i < N * K; i++) a->routed[a->expert[i]]++;
    a->ntokens = N, a->dropped = 0;
}

void moe_experts_forward(const Ops *ops, const MoeConfig *m, const float *params, MoeActs *a, int bf16_in,
                         float *scratch) {
    int C = m->C, H = m->H, e0 = moe_first_expert(m);
    for (int j = 0; j < moe_local_experts(m); j++) {
        int r0 = a->start[j], n = a->start[j + 1] - r0;
        if (!n) continue;
        MoeExpertView v = moe_expert_view(m, (float *)params, e0 + j);
        ops->linear_forward(a->h + (size_t)r0 * H, a->ein + (size_t)r0 * C, v.fc_w, v.fc_b, n, C, H, bf16_in, scratch);
        ops->gelu_forward(a->g + (size_t)r0 * H, a->h + (size_t)r0 * H, n * H);
        ops->linear_forward(a->eout + (size_t)r0 * C, a->g + (size_t)r0 * H, v.proj_w, v.proj_b, n, H, C, bf16_in,
                            scratch);
    }
}

void moe_combine(const MoeConfig *m, const MoeActs *a, float *out) {
    int N = a->N, K = m->K, C = m->C;
    memset(out, 0, (size_t)N * C * sizeof(float));
    for (int t = 0; t < N; t++)
        for (int k = 0; k < K; k++) {
            int r = a->row[t * K + k];
            if (r < 0) continue;
            float w = a->weight[t * K + k], *o = out + (size_t)t * C;
            const float *y = a->y + (size_t)r * C;
            for (int c = 0; c < C; c++) o[c] += w * y[c];
        }
}

void moe_forward(const Ops *ops, const MoeConfig *m, const float *params, const float *x, float *out, MoeActs *a,
                 int bf16_in, float *scratch) {
    if (split(m)) die("this is a bug in shardlab", "moe_forward runs every expert on one rank; ranks %d", m->ranks);
    int C = m->C;
    // 1. Route: scores, probabilities, the top K and their weights.
    moe_route(ops, m, params, x, a, bf16_in, scratch);
    // 2. Dispatch: each served assignment's token into its expert's rows.
    dispatch(m, a);
    int rows = a->start[m->E];
    for (int r = 0; r < rows; r++) memcpy(a->xin + (size_t)r * C, x + (size_t)a->row_token[r] * C, (size_t)C * sizeof(float));
    // 3. Each expert on its rows: C -> H -> C.
    moe_experts_forward(ops, m, params, a, bf16_in, scratch);
    // 4. Combine: each token's served rows, weighted, in the order of its choices.
    moe_combine(m, a, out);
}

double moe_aux_loss(const MoeConfig *m, const int *routed, const double *prob_sum, int ntokens) {
    double aux = 0;
    for (int e = 0; e < m->E; e++)
        aux += (double)routed[e] / ((double)ntokens * m->K) * (prob_sum[e] / ntokens);
    return m->E * aux;
}

// ---- backward ------------------------------------------------------------------------------

void moe_combine_backward(const MoeConfig *m, const MoeActs *a, const float *dout, float aux_scale, MoeGrads *d) {
    int N = a->N, K = m->K, E = m->E, C = m->C, ntokens = a->ntokens;
    // A row's output gradient is its weight times the token's; the weight's gradient is the
    // token's gradient . the row's output (0 for a dropped one).
    float dweight[MOE_MAX_EXPERTS];
    for (int t = 0; t < N; t++) {
        const float *dt = dout + (size_t)t * C, *p = a->probs + (size_t)t * E;
        const int *ex = a->expert + (size_t)t * K;
        const float *w = a->weight + (size_t)t * K;
        double dot_w = 0, psum = 0;
        for (int k = 0; k < K; k++) {
            int r = a->row[t * K + k];
            double s = 0;
            if (r >= 0) {
                const float *y = a->y + (size_t)r * C;
                float *g = d->dy + (size_t)r * C;
                for (int c = 0; c < C; c++) g[c] = w[k] * dt[c], s += (double)dt[c] * y[c];
            }
            dweight[k] = (float)s;
            dot_w += s * w[k];
            psum += p[ex[k]];
        }
        // Through the renormalisation w_k = p[e_k] / S and the aux loss's P_e (mean of p[e]):
        // dp[e_k] = (dw_k - sum_j dw_j w_j) / S; dp[e] += aux_scale E f_e / ntokens.
        float *dl = d->dlogits + (size_t)t * E;
        for (int e = 0; e < E; e++) dl[e] = aux_scale * (float)((double)E * a->routed[e] / ((double)ntokens * K) / ntokens);
        for (int k = 0; k < K; k++) dl[ex[k]] += (float)((dweight[k] - dot_w) / psum);
        // Through the softmax: dlogit[e] = p[e] (dp[e] - sum_e' dp[e'] p[e']).
        double dot_p = 0;
        for (int e = 0; e < E; e++) dot_p += (double)dl[e] * p[e];
        for (int e = 0; e < E; e++) dl[e] = (float)(p[e] * (dl[e] - dot_p));
    }
}

void moe_experts_backward(const Ops *ops, const MoeConfig *m, const float *params, float *grads, const MoeActs *a,
                          MoeGrads *d, int bf16_in) {
    int C = m->C, H = m->H, e0 = moe_first_expert(m);
    for (int j = 0; j < moe_local_experts(m); j++) {
        int r0 = a->start[j], n = a->start[j + 1] - r0;
        if (!n) continue;
        MoeExpertView v = moe_expert_view(m, (float *)params, e0 + j), gv = moe_expert_view(m, grads, e0 + j);
        float *dh = d->dh + (size_t)r0 * H;
        ops->linear_backward(dh, gv.proj_w, gv.proj_b, d->deout + (size_t)r0 * C, a->g + (size_t)r0 * H, v.proj_w, n,
                             H, C, bf16_in, d->lin);
        ops->gelu_backward(dh, a->h + (size_t)r0 * H, dh, n * H);
        ops->linear_backward(d->dein + (size_t)r0 * C, gv.fc_w, gv.fc_b, dh, a->ein + (size_t)r0 * C, v.fc_w, n, C, H,
                             bf16_in, d->lin);
    }
}

void moe_router_backward(const Ops *ops, const MoeConfig *m, const float *params, float *grads, const float *x,
                         const MoeActs *a, MoeGrads *d, float *dx, int bf16_in) {
    int N = a->N, K = m->K, C = m->C;
    ops->linear_backward(d->dxr, grads, NULL, d->dlogits, x, params, N, C, m->E, bf16_in, d->lin);
    // dx: the router's part, then each served row's, in the order of the token's choices.
    memcpy(dx, d->dxr, (size_t)N * C * sizeof(float));
    for (int t = 0; t < N; t++)
        for (int k = 0; k < K; k++) {
            int r = a->row[t * K + k];
            if (r < 0) continue;
            float *o = dx + (size_t)t * C;
            const float *g = d->dxin + (size_t)r * C;
            for (int c = 0; c < C; c++) o[c] += g[c];
        }
}

void moe_backward(const Ops *ops, const MoeConfig *m, const float *params, float *grads, const float *x,
                  const float *dout, const MoeActs *a, float aux_scale, float *dx, int bf16_in, float *scratch) {
    MoeGrads d = moe_grads_carve(m, a, scratch);
    moe_combine_backward(m, a, dout, aux_scale, &d);     // 1. through the combine, the weights, the softmax
    moe_experts_backward(ops, m, params, grads, a, &d, bf16_in);  // 2. each expert on its rows
    moe_router_backward(ops, m, params, grads, x, a, &d, dx, bf16_in);  // 3. the router, and dx
}
