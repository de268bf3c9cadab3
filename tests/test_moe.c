// test_moe.c — the mixture-of-experts layer (common/model/moe.h) against a reference written
// here in double precision, and its backward pass against central finite differences.
//
// Checked:
//   1. the forward pass, dropless and with capacity, at several shapes (K = 1, 2, E; experts
//      wider and narrower than C): the routing (each token's experts and weights), the
//      dispatch (which assignments capacity drops, by rank of choice then token), the output,
//      the aux loss; all against the reference, which computes each token alone;
//   2. the capacity rule on a router that sends every token to expert 0 first: the first
//      ceil(c N K / E) first choices served in token order, the rest dropped and counted,
//      a dropped token's output only its other experts';
//   3. the backward pass: the loss sum(out . R) + aux_scale aux, its gradient at the input and
//      at every parameter tensor (router, each expert's four) along random directions, against
//      (L(p + eps u) - L(p - eps u)) / (2 eps) of the reference, dropless and with capacity.
//      A coordinate whose step changes the routing is skipped (the loss is not smooth there);
//      the directions are random, so that is rare, and the test says how many it skipped.
//   4. the bad shapes: --topk above --moe, 0 experts, a negative capacity: a reason each.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/model/moe.h"
#include "common/model/ops.h"
#include "common/model/rng.h"
#include "test.h"

// ---- the reference ---------------------------------------------------------------------------

static double gelu_d(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

typedef struct {
    int expert[64][8];     // [token][k]
    double weight[64][8];
    int served[64][8];     // 1 served, 0 dropped
    int routed[MOE_MAX_EXPERTS];
    double prob_sum[MOE_MAX_EXPERTS];
} Routing;

// out [N, C] in double and the routing, from double parameters; returns the aux loss.
static double reference(const MoeConfig *m, const double *p, const double *x, int N, double *out, Routing *rt) {
    int C = m->C, E = m->E, K = m->K, H = m->H;
    memset(rt, 0, sizeof *rt);
    double probs[64][MOE_MAX_EXPERTS];
    for (int t = 0; t < N; t++) {
        double l[MOE_MAX_EXPERTS], mx = -1e300, s = 0;
        for (int e = 0; e < E; e++) {
            l[e] = 0;
            for (int c = 0; c < C; c++) l[e] += p[e * C + c] * x[t * C + c];
            mx = fmax(mx, l[e]);
        }
        for (int e = 0; e < E; e++) s += (probs[t][e] = exp(l[e] - mx));
        for (int e = 0; e < E; e++) probs[t][e] /= s, rt->prob_sum[e] += probs[t][e];
        // top K by sorting a copy (a tie: the lower index first)
        int order[MOE_MAX_EXPERTS];
        for (int e = 0; e < E; e++) order[e] = e;
        for (int i = 1; i < E; i++)
            for (int j = i; j > 0 && probs[t][order[j]] > probs[t][order[j - 1]]; j--) {
                int tmp = order[j];
                order[j] = order[j - 1], order[j - 1] = tmp;
            }
        double sum = 0;
        for (int k = 0; k < K; k++) rt->expert[t][k] = order[k], sum += probs[t][order[k]];
        for (int k = 0; k < K; k++) rt->weight[t][k] = probs[t][order[k]] / sum, rt->routed[order[k]]++;
    }
    int cap = m->capacity == 0 ? N : (int)fmin(N, ceil(m->capacity * N * K / E)), used[MOE_MAX_EXPERTS] = {0};
    for (int k = 0; k < K; k++)
        for (int t = 0; t < N; t++) rt->served[t][k] = used[rt->expert[t][k]]++ < cap;
    // The stacked layout of moe.h: router [E,C], fc_w [E,H,C], fc_b [E,H], proj_w [E,C,H], proj_b [E,C].
    size_t HC = (size_t)H * C;
    const double *fc_w0 = p + (size_t)E * C, *fc_b0 = fc_w0 + E * HC, *pw0 = fc_b0 + (size_t)E * H, *pb0 = pw0 + E * HC;
    for (int t = 0; t < N; t++) {
        for (int c = 0; c < C; c++) out[t * C + c] = 0;
        for (int k = 0; k < K; k++) {
            if (!rt->served[t][k]) continue;
            int e = rt->expert[t][k];
            const double *w = fc_w0 + e * HC, *fc_b = fc_b0 + (size_t)e * H, *pw = pw0 + e * HC, *pb = pb0 + (size_t)e * C;
            double g[256];
            for (int h = 0; h < H; h++) {
                double a = fc_b[h];
                for (int c = 0; c < C; c++) a += w[h * C + c] * x[t * C + c];
                g[h] = gelu_d(a);
            }
            for (int c = 0; c < C; c++) {
                double y = pb[c];
                for (int h = 0; h < H; h++) y += pw[c * H + h] * g[h];
                out[t * C + c] += rt->weight[t][k] * y;
            }
        }
    }
    double aux = 0;
    for (int e = 0; e < E; e++) aux += (double)rt->routed[e] / ((double)N * K) * (rt->prob_sum[e] / N);
    return E * aux;
}

static int same_routing(const Routing *a, const Routing *b, int N, int K) {
    for (int t = 0; t < N; t++)
        for (int k = 0; k < K; k++)
            if (a->expert[t][k] != b->expert[t][k] || a->served[t][k] != b->served[t][k]) return 0;
    return 1;
}

// ---- the setups ---------------------------------------------------------------------------------

typedef struct {
    MoeConfig m;
    int N;
    float *p, *x;  // parameters, input
} Setup;

static Setup setup(int C, int E, int K, int H, double capacity, int N, uint64_t seed) {
    Setup s = {{.C = C, .E = E, .K = K, .H = H, .capacity = capacity}, N, NULL, NULL};
    size_t np = moe_params_floats(&s.m);
    s.p = malloc(np * sizeof(float)), s.x = malloc((size_t)N * C * sizeof(float));
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < np; i++) s.p[i] = (float)(0.5 * rng_normal(&r));
    for (size_t i = 0; i < (size_t)N * C; i++) s.x[i] = (float)rng_normal(&r);
    return s;
}

static double *widen(const float *f, size_t n) {
    double *d = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    return d;
}

// ---- 1. forward against the reference ------------------------------------------------------------

static void check_forward(int C, int E, int K, int H, double capacity, int N) {
    Setup s = setup(C, E, K, H, capacity, N, 11 + (uint64_t)(E * 7 + K * 3 + H));
    MoeActs a;
    moe_acts_alloc(&a, &s.m, N);
    float *out = malloc((size_t)N * C * sizeof(float)), *scratch = malloc(moe_scratch_floats(&s.m, N, 0) * sizeof(float));
    moe_forward(&ops_cpu, &s.m, s.p, s.x, out, &a, 0, scratch);
    double *pd = widen(s.p, moe_params_floats(&s.m)), *xd = widen(s.x, (size_t)N * C), *want = malloc((size_t)N * C * sizeof(double));
    Routing rt;
    double aux = reference(&s.m, pd, xd, N, want, &rt);
    int route_ok = 1, dropped = 0;
    double worst = 0;
    for (int t = 0; t < N; t++)
        for (int k = 0; k < K; k++) {
            route_ok &= a.expert[t * K + k] == rt.expert[t][k] && fabs(a.weight[t * K + k] - rt.weight[t][k]) < 1e-6 &&
                        (a.row[t * K + k] >= 0) == rt.served[t][k];
            dropped += !rt.served[t][k];
        }
    for (int i = 0; i < N * C; i++) worst = fmax(worst, fabs(out[i] - want[i]) / (1 + fabs(want[i])));
    double got_aux = moe_aux_loss(&s.m, a.routed, a.prob_sum, N);
    EXPECT(route_ok && a.dropped == dropped && worst < 2e-5 && fabs(got_aux - aux) < 1e-6,
           "forward N=%d C=%d E=%d K=%d H=%d capacity %g: routing, %d dropped (reference %d), output within %.1e "
           "(2e-5), aux %.6f (reference %.6f)", N, C, E, K, H, capacity, a.dropped, dropped, worst, got_aux, aux);
    // Every row belongs to its expert and its token, in serving order.
    int rows_ok = a.start[0] == 0 && a.start[E] == N * K - a.dropped;
    for (int t = 0; t < N; t++)
        for (int k = 0; k < K; k++) {
            int r = a.row[t * K + k], e = a.expert[t * K + k];
            if (r >= 0) rows_ok &= a.row_token[r] == t && r >= a.start[e] && r < a.start[e + 1];
        }
    EXPECT(rows_ok, "forward N=%d E=%d K=%d capacity %g: each served assignment has a row among its expert's, "
           "holding its token", N, E, K, capacity);
    moe_acts_free(&a);
    free(out), free(scratch), free(pd), free(xd), free(want), free(s.p), free(s.x);
}

// ---- 2. the capacity rule ------------------------------------------------------------------------

static void check_capacity_rule(void) {
    // Every token likes expert 0 best, expert 1 second: the router's row 0 follows the input's
    // first channel, which is large and positive, row 1 half of it.
    int C = 4, E = 4, K = 2, H = 6, N = 10;
    Setup s = setup(C, E, K, H, 1.0, N, 5);
    for (int c = 0; c < E * C; c++) s.p[c] = 0;
    s.p[0 * C + 0] = 2, s.p[1 * C + 0] = 1;
    for (int t = 0; t < N; t++) s.x[t * C + 0] = 3 + 0.1f * t;
    MoeActs a;
    moe_acts_alloc(&a, &s.m, N);
    float *out = malloc((size_t)N * C * sizeof(float)), *scratch = malloc(moe_scratch_floats(&s.m, N, 0) * sizeof(float));
    moe_forward(&ops_cpu, &s.m, s.p, s.x, out, &a, 0, scratch);
    int cap = moe_capacity(&s.m, N);  // ceil(1.0 * 10 * 2 / 4) = 5
    int ok = cap == 5 && a.dropped == 2 * (N - cap);
    for (int t = 0; t < N; t++) ok &= (a.row[t * K] >= 0) == (t < cap) && (a.row[t * K + 1] >= 0) == (t < cap);
    EXPECT(ok, "capacity 1.0, N=10, E=4, K=2: capacity %d a expert; tokens 0-4 served by experts 0 and 1, tokens 5-9 "
           "dropped by both (%d dropped)", cap, a.dropped);
    // A token dropped by every expert adds nothing: its output is 0 (the residual carries it).
    double rest = 0;
    for (int c = 0; c < C; c++) rest += fabs(out[(N - 1) * C + c]);
    EXPECT(rest == 0, "a token every expert dropped: the layer's output is 0 (sum |out| = %g)", rest);
    moe_acts_free(&a);
    free(out), free(scratch), free(s.p), free(s.x);
}

// ---- 3. the backward pass against finite differences ------------------------------------------

static double loss_ref(const MoeConfig *m, const double *p, const double *x, int N, const double *R, double aux_scale,
                       Routing *rt) {
    double *out = malloc((size_t)N * m->C * sizeof(double)), aux = reference(m, p, x, N, out, rt), L = 0;
    for (int i = 0; i < N * m->C; i++) L += out[i] * R[i];
    free(out);
    return L + aux_scale * aux;
}

// A tensor of the finite differences: its values in the reference, its analytic gradient.
typedef struct {
    const char *what;
    double *v;
    const float *g;
    size_t n;
} Tensor;

static void check_backward(int C, int E, int K, int H, double capacity, int N) {
    Setup s = setup(C, E, K, H, capacity, N, 101 + (uint64_t)(E + K + H));
    size_t np = moe_params_floats(&s.m), nx = (size_t)N * C;
    Rng rng;
    rng_seed(&rng, 7);
    double *R = malloc(nx * sizeof(double));
    float *Rf = malloc(nx * sizeof(float));
    for (size_t i = 0; i < nx; i++) Rf[i] = (float)rng_normal(&rng), R[i] = Rf[i];
    const float aux_scale = 0.7f;
    MoeActs a;
    moe_acts_alloc(&a, &s.m, N);
    float *out = malloc(nx * sizeof(float)), *dx = malloc(nx * sizeof(float)), *grads = calloc(np, sizeof(float));
    float *scratch = malloc(moe_scratch_floats(&s.m, N, 0) * sizeof(float));
    moe_forward(&ops_cpu, &s.m, s.p, s.x, out, &a, 0, scratch);
    moe_backward(&ops_cpu, &s.m, s.p, grads, s.x, Rf, &a, aux_scale, dx, 0, scratch);
    double *pd = widen(s.p, np), *xd = widen(s.x, nx);
    Routing base;
    loss_ref(&s.m, pd, xd, N, R, aux_scale, &base);
    // The tensors: the input, the router, and each expert's four.
    Tensor ts[2 + 4 * MOE_MAX_EXPERTS];
    int nt = 0;
    ts[nt++] = (Tensor){"input", xd, dx, nx};
    ts[nt++] = (Tensor){"router", pd, grads, moe_router_floats(&s.m)};
    static const char *names[4] = {"fc_w", "fc_b", "proj_w", "proj_b"};
    for (int e = 0; e < E; e++) {
        MoeExpertView v = moe_expert_view(&s.m, s.p, e), g = moe_expert_view(&s.m, grads, e);
        float *pv[4] = {v.fc_w, v.fc_b, v.proj_w, v.proj_b};
        const float *gv[4] = {g.fc_w, g.fc_b, g.proj_w, g.proj_b};
        size_t len[4] = {(size_t)H * C, (size_t)H, (size_t)C * H, (size_t)C};
        for (int j = 0; j < 4; j++) ts[nt++] = (Tensor){names[j], pd + (pv[j] - s.p), gv[j], len[j]};
    }
    const double eps = 1e-4;
    int bad = 0, skipped = 0, checked = 0;
    char first[200] = "";
    for (int i = 0; i < nt; i++)
        for (int dir = 0; dir < 2; dir++) {
            // A random direction u over the tensor: <grad, u> against the central difference.
            double *u = malloc(ts[i].n * sizeof(double)), analytic = 0;
            for (size_t j = 0; j < ts[i].n; j++) u[j] = rng_normal(&rng), analytic += u[j] * ts[i].g[j];
            Routing r1, r2;
            for (size_t j = 0; j < ts[i].n; j++) ts[i].v[j] += eps * u[j];
            double lp = loss_ref(&s.m, pd, xd, N, R, aux_scale, &r1);
            for (size_t j = 0; j < ts[i].n; j++) ts[i].v[j] -= 2 * eps * u[j];
            double lm = loss_ref(&s.m, pd, xd, N, R, aux_scale, &r2);
            for (size_t j = 0; j < ts[i].n; j++) ts[i].v[j] += eps * u[j];
            free(u);
            if (!same_routing(&r1, &base, N, K) || !same_routing(&r2, &base, N, K)) {
                skipped++;
                continue;
            }
            double numeric = (lp - lm) / (2 * eps);
            checked++;
            if (fabs(numeric - analytic) > 2e-3 * fmax(fabs(numeric), fabs(analytic)) + 2e-4) {
                if (!bad++)
                    snprintf(first, sizeof first, "%s (tensor %d): analytic %.6g, numeric %.6g", ts[i].what, i, analytic,
                             numeric);
            }
        }
    EXPECT(bad == 0 && checked >= nt, "backward N=%d C=%d E=%d K=%d H=%d capacity %g: %d directions equal to the "
           "central difference (%d skipped: the step changed the routing) %s", N, C, E, K, H, capacity, checked, skipped,
           first);
    moe_acts_free(&a);
    free(R), free(Rf), free(out), free(dx), free(grads), free(scratch), free(pd), free(xd), free(s.p), free(s.x);
}

// ---- 4. bad shapes -------------------------------------------------------------------------------

static void check_refusals(void) {
    MoeConfig ok = {.C = 8, .E = 4, .K = 2, .H = 32}, k_big = ok, none = ok, neg = ok;
    k_big.K = 5, none.E = 0, neg.capacity = -1;
    EXPECT(!*moe_config_check(&ok), "E=4 K=2: a valid shape");
    EXPECT(strstr(moe_config_check(&k_big), "--topk 5: from 1 to the 4 experts"), "--topk 5 with 4 experts: %s",
           moe_config_check(&k_big));
    EXPECT(strstr(moe_config_check(&none), "--moe 0: from 1 to 64 experts"), "--moe 0: %s", moe_config_check(&none));
    EXPECT(strstr(moe_config_check(&neg), "--capacity -1: 0 (dropless) or a factor above 0"), "--capacity -1: %s",
           moe_config_check(&neg));
}

int main(void) {
    check_refusals();
    check_forward(8, 4, 2, 12, 0, 13);
    check_forward(8, 4, 1, 12, 0, 13);
    check_forward(6, 3, 3, 4, 0, 9);     // K = E: every expert, no choice
    check_forward(8, 8, 2, 5, 1.0, 17);  // capacity: some dropped
    check_forward(8, 4, 2, 12, 0.5, 13);
    check_capacity_rule();
    check_backward(6, 4, 2, 10, 0, 7);
    check_backward(6, 4, 1, 10, 0, 7);
    check_backward(5, 3, 3, 4, 0, 6);
    check_backward(6, 4, 2, 10, 0.75, 9);
    return test_done();
}
