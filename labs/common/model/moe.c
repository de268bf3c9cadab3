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

size_t moe_router_floats(const MoeConfig *m) { return (size_t)m->E * m->C; }
size_t moe_expert_floats(const MoeConfig *m) { return 2 * (size_t)m->H * m->C + (size_t)m->H + (size_t)m->C; }
size_t moe_params_floats(const MoeConfig *m) { return moe_router_floats(m) + (size_t)m->E * moe_expert_floats(m); }

MoeExpertView moe_expert_view(const MoeConfig *m, float *params, int e) {
    size_t E = (size_t)m->E, H = (size_t)m->H, C = (size_t)m->C, HC = H * C;
    float *fc_w = params + moe_router_floats(m), *fc_b = fc_w + E * HC, *proj_w = fc_b + E * H, *proj_b = proj_w + E * HC;
    return (MoeExpertView){.fc_w = fc_w + e * HC, .fc_b = fc_b + e * H, .proj_w = proj_w + e * HC, .proj_b = proj_b + e * C};
}

int moe_capacity(const MoeConfig *m, int N) {
    if (m->capacity == 0) return N;
    double cap = ceil(m->capacity * (double)N * m->K / m->E);
    return cap < N ? (int)cap : N;
}

// ---- activations ---------------------------------------------------------------------------

size_t moe_acts_floats(const MoeConfig *m, int N) {
    size_t NK = (size_t)N * m->K;
    return (size_t)N * m->E + NK + NK * (2 * (size_t)m->C + 2 * (size_t)m->H);
}
size_t moe_acts_ints(const MoeConfig *m, int N) { return 3 * (size_t)N * m->K; }

size_t moe_acts_bytes(const MoeConfig *m, int N) { return 4 * moe_acts_floats(m, N) + 4 * moe_acts_ints(m, N); }

void moe_acts_carve(MoeActs *a, const MoeConfig *m, int N, float *f, int *n) {
    size_t NK = (size_t)N * m->K;
    memset(a, 0, sizeof *a);
    a->N = N;
    a->probs = f, f += (size_t)N * m->E;
    a->weight = f, f += NK;
    a->xin = f, f += NK * m->C;
    a->h = f, f += NK * m->H;
    a->g = f, f += NK * m->H;
    a->y = f;
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
    size_t NK = (size_t)N * m->K, lin = linear_scratch_floats((int)NK, m->C, m->H, bf16_in);
    size_t s = linear_scratch_floats((int)NK, m->H, m->C, bf16_in);
    if (s > lin) lin = s;
    s = linear_scratch_floats(N, m->C, m->E, bf16_in);
    if (s > lin) lin = s;
    return 2 * NK * (size_t)m->C + NK * (size_t)m->H + (size_t)N * m->E + (size_t)N * m->C + lin;
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
    memset(a->routed, 0, (size_t)E * sizeof(int));
    for (int i = 0; i < N * K; i++) a->routed[a->expert[i]]++;
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

void moe_forward(const Ops *ops, const MoeConfig *m, const float *params, const float *x, float *out, MoeActs *a,
                 int bf16_in, float *scratch) {
    int N = a->N, K = m->K, E = m->E, C = m->C, H = m->H;
    // 1. Route: scores, probabilities, the top K and their weights.
    ops->linear_forward(a->probs, x, params, NULL, N, C, E, bf16_in, scratch);
    softmax_rows(a->probs, N, E);
    for (int e = 0; e < E; e++) a->prob_sum[e] = 0;
    for (int t = 0; t < N; t++) {
        for (int e = 0; e < E; e++) a->prob_sum[e] += a->probs[(size_t)t * E + e];
        top_k(m, a->probs + (size_t)t * E, a->expert + (size_t)t * K, a->weight + (size_t)t * K);
    }
    // 2. Dispatch: each served assignment's token into its expert's rows.
    dispatch(m, a);
    int rows = a->start[E];
    for (int r = 0; r < rows; r++) memcpy(a->xin + (size_t)r * C, x + (size_t)a->row_token[r] * C, (size_t)C * sizeof(float));
    // 3. Each expert on its rows: C -> H -> C.
    for (int e = 0; e < E; e++) {
        int r0 = a->start[e], n = a->start[e + 1] - r0;
        if (!n) continue;
        MoeExpertView v = moe_expert_view(m, (float *)params, e);
        ops->linear_forward(a->h + (size_t)r0 * H, a->xin + (size_t)r0 * C, v.fc_w, v.fc_b, n, C, H, bf16_in, scratch);
        ops->gelu_forward(a->g + (size_t)r0 * H, a->h + (size_t)r0 * H, n * H);
        ops->linear_forward(a->y + (size_t)r0 * C, a->g + (size_t)r0 * H, v.proj_w, v.proj_b, n, H, C, bf16_in, scratch);
    }
    // 4. Combine: each token's served rows, weighted, in the order of its choices.
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

double moe_aux_loss(const MoeConfig *m, const int *routed, const double *prob_sum, int ntokens) {
    double aux = 0;
    for (int e = 0; e < m->E; e++)
        aux += (double)routed[e] / ((double)ntokens * m->K) * (prob_sum[e] / ntokens);
    return m->E * aux;
}

// ---- backward ------------------------------------------------------------------------------

void moe_backward(const Ops *ops, const MoeConfig *m, const float *params, float *grads, const float *x,
                  const float *dout, const MoeActs *a, float aux_scale, const int *routed, int ntokens, float *dx,
                  int bf16_in, float *scratch) {
    int N = a->N, K = m->K, E = m->E, C = m->C, H = m->H;
    size_t NK = (size_t)N * K;
    float *dy = scratch, *dxin = dy + NK * C, *dh = dxin + NK * C, *dlogits = dh + NK * H, *dxr = dlogits + (size_t)N * E,
          *lin = dxr + (size_t)N * C;
    // 1. Through the combine: a row's output gradient is its weight times the token's; the
    //    weight's gradient is the token's gradient . the row's output (0 for a dropped one).
    float dweight[MOE_MAX_EXPERTS];
    for (int t = 0; t < N; t++) {
        const float *d = dout + (size_t)t * C, *p = a->probs + (size_t)t * E;
        const int *ex = a->expert + (size_t)t * K;
        const float *w = a->weight + (size_t)t * K;
        double dot_w = 0, psum = 0;
        for (int k = 0; k < K; k++) {
            int r = a->row[t * K + k];
            double s = 0;
            if (r >= 0) {
                const float *y = a->y + (size_t)r * C;
                float *g = dy + (size_t)r * C;
                for (int c = 0; c < C; c++) g[c] = w[k] * d[c], s += (double)d[c] * y[c];
            }
            dweight[k] = (float)s;
            dot_w += s * w[k];
            psum += p[ex[k]];
        }
        // 2. Through the renormalisation w_k = p[e_k] / S and the aux loss's P_e (mean of p[e]):
        //    dp[e_k] = (dw_k - sum_j dw_j w_j) / S; dp[e] += aux_scale E f_e / ntokens.
        float *dl = dlogits + (size_t)t * E;
        for (int e = 0; e < E; e++) dl[e] = aux_scale * (float)((double)E * routed[e] / ((double)ntokens * K) / ntokens);
        for (int k = 0; k < K; k++) dl[ex[k]] += (float)((dweight[k] - dot_w) / psum);
        // 3. Through the softmax: dlogit[e] = p[e] (dp[e] - sum_e' dp[e'] p[e']).
        double dot_p = 0;
        for (int e = 0; e < E; e++) dot_p += (double)dl[e] * p[e];
        for (int e = 0; e < E; e++) dl[e] = (float)(p[e] * (dl[e] - dot_p));
    }
    // 4. Each expert backward on its rows.
    for (int e = 0; e < E; e++) {
        int r0 = a->start[e], n = a->start[e + 1] - r0;
        if (!n) continue;
        MoeExpertView v = moe_expert_view(m, (float *)params, e), gv = moe_expert_view(m, grads, e);
        ops->linear_backward(dh + (size_t)r0 * H, gv.proj_w, gv.proj_b, dy + (size_t)r0 * C, a->g + (size_t)r0 * H,
                             v.proj_w, n, H, C, bf16_in, lin);
        ops->gelu_backward(dh + (size_t)r0 * H, a->h + (size_t)r0 * H, dh + (size_t)r0 * H, n * H);
        ops->linear_backward(dxin + (size_t)r0 * C, gv.fc_w, gv.fc_b, dh + (size_t)r0 * H, a->xin + (size_t)r0 * C,
                             v.fc_w, n, C, H, bf16_in, lin);
    }
    // 5. The router's weight, and the input's gradient through it.
    ops->linear_backward(dxr, grads, NULL, dlogits, x, params, N, C, E, bf16_in, lin);
    // 6. dx: the router's part, then each served row's, in the order of the token's choices.
    memcpy(dx, dxr, (size_t)N * C * sizeof(float));
    for (int t = 0; t < N; t++)
        for (int k = 0; k < K; k++) {
            int r = a->row[t * K + k];
            if (r < 0) continue;
            float *o = dx + (size_t)t * C;
            const float *g = dxin + (size_t)r * C;
            for (int c = 0; c < C; c++) o[c] += g[c];
        }
}
