// test_adamw.c — the optimizer (labs/common/model/adamw.c) against the formula of adamw.h.
//
// What it proves:
//   - adamw_update computes AdamW (Loshchilov & Hutter, "Decoupled Weight Decay
//     Regularization") as adamw.h writes it, checked against an independent implementation
//     in double precision, step after step with gradients that change every step (signs,
//     magnitudes from 1e-6 to 10, exact zeros);
//   - updating a slice [a, b) of the buffers gives bit for bit the elements the whole-buffer
//     update gives: what ZeRO and FSDP rely on when each rank updates only its shard;
//   - weight decay is decoupled: it shrinks p by lr*wd*p and never enters m or v (Adam with
//     an L2 penalty would add wd*p to the gradient instead); with wd = 0 and a zero gradient
//     nothing moves; bias correction makes the first step lr * sign(g);
//   - sum_of_squares accumulates in double (the squared global norm) and scale_floats
//     scales every element (gradient clipping).
//
// Tolerances. fp32 carries 24 bits: one rounding is at most 2^-24 = 6e-8 relative. One AdamW
// step rounds about ten times, so against double we allow 1e-6 relative (about 16 roundings)
// to the size of the terms: |b1 m| + |(1-b1) g| for m (its terms can cancel, so relative to m
// itself would be meaningless near zero), v itself for v (positive terms), and
// |p| + lr |update| for p. Compared over a whole trajectory, roundings add up from step to
// step; there we allow t * 2.5e-7 relative to max(|p|, lr) after t steps, about four
// roundings per step (measured: about half of that). A wrong beta, a missing bias correction
// or eps in the wrong place is off by 1e-3 or more.
#include <stdlib.h>
#include <string.h>

#include "common/model/adamw.h"
#include "common/model/ops.h"
#include "common/model/rng.h"
#include "test.h"

enum { N = 4099, STEPS = 20 };  // N odd, so slices and vector loops have ragged ends

static const AdamW opt = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};

// The formula of adamw.h in double, written from the paper, not from adamw.c. The
// hyperparameters are the float values widened to double, so the test measures the fp32
// arithmetic of adamw_update, not the rounding of 0.9 to a float.
static void adamw_reference(const AdamW *o, int64_t t, double *p, const double *g, double *m, double *v,
                            size_t n) {
    double b1 = o->beta1, b2 = o->beta2, lr = o->lr, eps = o->eps, wd = o->weight_decay;
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        double mhat = m[i] / (1 - pow(b1, (double)t)), vhat = v[i] / (1 - pow(b2, (double)t));
        p[i] = p[i] - lr * (mhat / (sqrt(vhat) + eps) + wd * p[i]);
    }
}

// The gradient of step t: random sign, magnitude 10^U(-6, 1), every 97th exactly zero.
static void make_grads(float *g, size_t n, int64_t t) {
    Rng r;
    rng_seed(&r, 1000 + (uint64_t)t);
    for (size_t i = 0; i < n; i++) {
        double mag = pow(10.0, -6 + 7 * rng_uniform(&r));
        g[i] = (float)(rng_uniform(&r) < 0.5 ? -mag : mag);
        if (i % 97 == 0) g[i] = 0.0f;
    }
}

static void make_params(float *p, size_t n) {
    Rng r;
    rng_seed(&r, 7);
    for (size_t i = 0; i < n; i++) p[i] = (float)(2 * rng_uniform(&r) - 1);
}

static void test_against_reference(void) {
    static float p[N], g[N], m[N], v[N];
    static double P[N], G[N], M[N], V[N], m_terms[N], p_old[N];
    static double Pt[N], Mt[N], Vt[N];  // the double trajectory, never reset to the fp32 state
    make_params(p, N);
    for (size_t i = 0; i < N; i++) Pt[i] = p[i];
    double worst_m = 0, worst_v = 0, worst_p = 0, worst_traj = 0;  // error / allowed, over all steps
    for (int64_t t = 1; t <= STEPS; t++) {
        make_grads(g, N, t);
        // One step: the reference starts from exactly the state adamw_update starts from.
        for (size_t i = 0; i < N; i++) P[i] = p[i], G[i] = g[i], M[i] = m[i], V[i] = v[i];
        for (size_t i = 0; i < N; i++) {
            m_terms[i] = fabs(opt.beta1 * M[i]) + fabs((1 - (double)opt.beta1) * G[i]);
            p_old[i] = P[i];
        }
        adamw_update(&opt, t, p, g, m, v, N);
        adamw_reference(&opt, t, P, G, M, V, N);
        adamw_reference(&opt, t, Pt, G, Mt, Vt, N);
        for (size_t i = 0; i < N; i++) {
            worst_m = fmax(worst_m, fabs(m[i] - M[i]) / (1e-6 * m_terms[i] + 1e-300));
            worst_v = fmax(worst_v, fabs(v[i] - V[i]) / (1e-6 * V[i] + 1e-300));
            double step_size = fabs(P[i] - p_old[i]);  // lr |update|, including the decay
            worst_p = fmax(worst_p, fabs(p[i] - P[i]) / (1e-6 * (fabs(p_old[i]) + step_size)));
            worst_traj = fmax(worst_traj, fabs(p[i] - Pt[i]) / ((double)t * 2.5e-7 * fmax(fabs(Pt[i]), opt.lr)));
        }
    }
    // Each "worst" is the largest error as a fraction of what is allowed: <= 1 passes.
    EXPECT(worst_m <= 1, "m = b1 m + (1-b1) g matches double within 1e-6 of its terms' size, %d steps (worst %.3g of allowed)",
           STEPS, worst_m);
    EXPECT(worst_v <= 1, "v = b2 v + (1-b2) g^2 matches double within 1e-6 relative, %d steps (worst %.3g of allowed)",
           STEPS, worst_v);
    EXPECT(worst_p <= 1,
           "p -= lr (mhat / (sqrt(vhat) + eps) + wd p) matches double within 1e-6 of |p| + the step, %d steps (worst %.3g of allowed)",
           STEPS, worst_p);
    EXPECT(worst_traj <= 1,
           "a %d-step fp32 trajectory stays within t * 2.5e-7 of max(|p|, lr) from the double one (worst %.3g of allowed)",
           STEPS, worst_traj);
}

static void test_slices(void) {
    // Whole buffer vs three slices with ragged boundaries, over several steps.
    static float pw[N], mw[N], vw[N], ps[N], ms[N], vs[N], g[N];
    make_params(pw, N);
    memcpy(ps, pw, sizeof ps);
    const size_t cut[] = {0, 1001, 2050, N};  // [0,1001), [1001,2050), [2050,N)
    for (int64_t t = 1; t <= 5; t++) {
        make_grads(g, N, t);
        adamw_update(&opt, t, pw, g, mw, vw, N);
        for (int s = 0; s < 3; s++)
            adamw_update(&opt, t, ps + cut[s], g + cut[s], ms + cut[s], vs + cut[s], cut[s + 1] - cut[s]);
    }
    EXPECT(memcmp(pw, ps, sizeof pw) == 0 && memcmp(mw, ms, sizeof mw) == 0 && memcmp(vw, vs, sizeof vw) == 0,
           "updating slices [0,1001), [1001,2050), [2050,%d) for 5 steps gives the whole-buffer p, m, v bit for bit", N);
    // A slice by itself: elements outside it are not touched.
    static float p1[N], m1[N], v1[N];
    make_params(p1, N);
    memcpy(ps, p1, sizeof ps);
    make_grads(g, N, 1);
    adamw_update(&opt, 1, p1 + 100, g + 100, m1 + 100, v1 + 100, 50);
    int outside_same = memcmp(p1, ps, 100 * sizeof(float)) == 0 && memcmp(p1 + 150, ps + 150, (N - 150) * sizeof(float)) == 0;
    int inside_moved = memcmp(p1 + 100, ps + 100, 50 * sizeof(float)) != 0;
    EXPECT(outside_same && inside_moved, "updating the slice [100,150) changes it and nothing outside it");
}

static void test_weight_decay(void) {
    enum { n = 64 };
    float p0[n], g[n], zero[n] = {0};
    make_params(p0, n);
    AdamW no_wd = opt;
    no_wd.weight_decay = 0;

    // Zero gradient, no decay: nothing moves (m = v = 0 gives an update of exactly 0).
    float p[n], m[n] = {0}, v[n] = {0};
    memcpy(p, p0, sizeof p);
    adamw_update(&no_wd, 1, p, zero, m, v, n);
    EXPECT(memcmp(p, p0, sizeof p) == 0, "with wd = 0 and a zero gradient the parameters do not move");

    // Zero gradient, decay: p shrinks by the factor (1 - lr wd), whatever m and v say.
    memcpy(p, p0, sizeof p);
    adamw_update(&opt, 1, p, zero, m, v, n);
    double worst = 0;
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(p[i] - p0[i] * (1 - (double)opt.lr * opt.weight_decay)) / fabs(p0[i]));
    EXPECT(worst <= 1e-6, "with wd = %g and a zero gradient p becomes p (1 - lr wd) (worst rel. error %.2g <= 1e-6)",
           (double)opt.weight_decay, worst);

    // Nonzero gradient, with and without decay, from the same state: the moments see only
    // the gradient (bit for bit the same), and p differs by the decay term alone.
    for (int i = 0; i < n; i++) g[i] = (float)((i % 3 - 1) * 0.5 + 0.01 * i);
    float pa[n], ma[n] = {0}, va[n] = {0}, pb[n], mb[n] = {0}, vb[n] = {0};
    memcpy(pa, p0, sizeof pa);
    memcpy(pb, p0, sizeof pb);
    adamw_update(&no_wd, 1, pa, g, ma, va, n);
    adamw_update(&opt, 1, pb, g, mb, vb, n);
    // pb - pa should be -lr wd p0; each of pa, pb is rounded once to fp32 (half an ulp of
    // |p| < 1, at most 2^-25), so allow 2^-22 (|p0| + lr), four such roundings.
    worst = 0;
    for (int i = 0; i < n; i++) {
        double decay = -(double)opt.lr * opt.weight_decay * p0[i];
        worst = fmax(worst, fabs((double)(pb[i] - pa[i]) - decay) / (0x1p-22 * (fabs(p0[i]) + opt.lr)));
    }
    EXPECT(worst <= 1, "from the same state, decay changes the step by exactly -lr wd p (worst %.2g of allowed)", worst);
    for (int64_t t = 2; t <= 3; t++) {
        adamw_update(&no_wd, t, pa, g, ma, va, n);
        adamw_update(&opt, t, pb, g, mb, vb, n);
    }
    EXPECT(memcmp(ma, mb, sizeof ma) == 0 && memcmp(va, vb, sizeof va) == 0,
           "decoupled: after 3 steps m and v are bit for bit the same with and without weight decay");

    // Bias correction: on step 1 mhat = g and vhat = g^2, so the step is lr g / (|g| + eps),
    // i.e. lr * sign(g) for |g| >> eps, whatever the size of g.
    float gs[4] = {0.5f, -3.0f, 1e3f, -0.1f}, ps1[4] = {0}, m1[4] = {0}, v1[4] = {0};
    adamw_update(&no_wd, 1, ps1, gs, m1, v1, 4);
    worst = 0;
    for (int i = 0; i < 4; i++) worst = fmax(worst, fabs(ps1[i] + opt.lr * (gs[i] > 0 ? 1 : -1)) / opt.lr);
    EXPECT(worst <= 1e-6, "bias correction: step 1 moves each p by -lr sign(g) for g of 0.1 to 1000 (rel. error %.2g)", worst);
    // eps keeps a vanishing gradient from producing a full-size step: g = 1e-12 << eps moves
    // p by lr g / (g + eps), about 1e-4 lr.
    float tiny = 1e-12f, pt = 0, mt = 0, vt = 0;
    adamw_update(&no_wd, 1, &pt, &tiny, &mt, &vt, 1);
    EXPECT(pt < 0 && fabs(pt) < 1e-3 * opt.lr, "eps: a gradient of 1e-12 moves p by %.3g, far less than lr", (double)pt);
}

static void test_norm_helpers(void) {
    float x[] = {1, 2, 3, 4};
    EXPECT(sum_of_squares(x, 4) == 30.0, "sum_of_squares(1, 2, 3, 4) is exactly 30");
    EXPECT(sum_of_squares(x, 0) == 0.0, "sum_of_squares of nothing is 0");
    // Accumulated in double: 2^24 + 1000 * 1. A float sum stops growing at 2^24 (the next
    // float is 2^24 + 2, and 2^24 + 1 rounds back down), so it would return 2^24.
    enum { ONES = 1000 };
    float *big = malloc((ONES + 1) * sizeof *big);
    big[0] = 4096.0f;  // 4096^2 = 2^24
    for (int i = 1; i <= ONES; i++) big[i] = 1.0f;
    EXPECT(sum_of_squares(big, ONES + 1) == 16777216.0 + ONES, "sum_of_squares adds in double: 2^24 + 1000 ones is exact");
    free(big);
    // Squared in double too: (1e20)^2 = 1e40 overflows a float but not a double.
    float huge = 1e20f;
    double s = sum_of_squares(&huge, 1);
    EXPECT(isfinite(s) && fabs(s / 1e40 - 1) < 1e-6, "sum_of_squares squares in double: (1e20)^2 comes out finite (%.4g)", s);
    // Over several buffers (an empty one among them): each buffer's sum, added in order.
    const float *bufs[] = {x, x + 4, x + 1};
    const size_t lens[] = {4, 0, 3};
    double loop = 0.0;
    for (int i = 0; i < 3; i++) loop += sum_of_squares(bufs[i], lens[i]);
    double each[3] = {-1, -1, -1};
    double batched = sum_of_squares_buffers(3, bufs, lens, each);
    EXPECT(batched == 59.0 && memcmp(&batched, &loop, sizeof loop) == 0 &&
               ops_cpu.sum_of_squares_buffers(3, bufs, lens, NULL) == loop,
           "sum_of_squares_buffers is the loop of sum_of_squares over the buffers, bit for bit (%.17g)", batched);
    EXPECT(each[0] == sum_of_squares(bufs[0], 4) && each[1] == 0.0 && each[2] == sum_of_squares(bufs[2], 3),
           "and gives each buffer's sum, the empty one's 0 (%g, %g, %g)", each[0], each[1], each[2]);
    // Its bf16 twin: the bits of widening the bf16s to floats and summing those (an empty
    // buffer, the least subnormal, the largest finite bf16 and -0 among them; the inf last).
    // 1.5, -3, 2^-133, 3.39e38, 3.140625, -0, -0.25, inf:
    const bf16 h[] = {0x3FC0, 0xC040, 0x0001, 0x7F7F, 0x4049, 0x8000, 0xBE80, 0x7F80};
    float w[8];
    for (int i = 0; i < 8; i++) w[i] = bf16_to_float(h[i]);
    const bf16 *hbufs[] = {h, h + 4, h + 1, h + 4};
    const float *wbufs[] = {w, w + 4, w + 1, w + 4};
    const size_t hlens[] = {3, 0, 3, 3};
    double heach[4], weach[4];
    double hsum = ops_cpu.sum_of_squares_buffers_bf16(4, hbufs, hlens, heach);
    double wsum = sum_of_squares_buffers(4, wbufs, hlens, weach);
    EXPECT(memcmp(&hsum, &wsum, sizeof hsum) == 0 && memcmp(heach, weach, sizeof heach) == 0,
           "sum_of_squares_buffers_bf16 is sum_of_squares_buffers of the widened bf16s, bit for bit, and each "
           "buffer's too (%.17g vs %.17g)", hsum, wsum);
    const size_t inf_len[] = {8};
    EXPECT(isinf(sum_of_squares_buffers_bf16(1, hbufs, inf_len, NULL)),
           "sum_of_squares_buffers_bf16 widens an inf bf16 to inf (the norm of an overflowed gradient is inf)");

    // scale_floats multiplies every element, and only the n given.
    float y[5] = {1.5f, -2.0f, 0.0f, 3.25f, 99.0f};
    scale_floats(y, 4, 0.5f);
    EXPECT(y[0] == 0.75f && y[1] == -1.0f && y[2] == 0.0f && y[3] == 1.625f && y[4] == 99.0f,
           "scale_floats(0.5) halves the 4 elements given and leaves the 5th alone");
    scale_floats(y, 0, 0.0f);
    EXPECT(y[0] == 0.75f, "scale_floats of 0 elements changes nothing");
    // Clipping as the labs do it: scale by clip / norm and the norm becomes clip.
    float gr[N];
    make_grads(gr, N, 3);
    double norm = sqrt(sum_of_squares(gr, N)), clip = 1.0;
    scale_floats(gr, N, (float)(clip / norm));
    double after = sqrt(sum_of_squares(gr, N));
    EXPECT(fabs(after - clip) <= 1e-6, "clipping: scaling by clip/norm (norm %.4g) leaves a global norm of %.9f ~ 1",
           norm, after);
}

int main(void) {
    test_against_reference();
    test_slices();
    test_weight_decay();
    test_norm_helpers();
    return test_done();
}
