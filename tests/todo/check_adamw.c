// check_adamw.c — the check of the AdamW region (labs/common/model/adamw.c): `make check TODO=adamw`.
//
// Five steps of adamw_update on a handful of elements (gradients of both signs, a zero one, a
// large one, weight decay on), each step's parameters and moments against AdamW computed here
// in double. At step 1 the bias corrections matter most: m / (1 - b1) is g and v / (1 - b2) is
// g^2, so a correct first step moves each parameter by about lr (times the sign of g) plus the
// decay. The gradients span 40 down to 1e-8: eps = 1e-8 only shows where sqrt(vhat) is that
// small, and eps inside the square root (sqrt(vhat + eps) >= 1e-4) moves such a parameter
// thousands of times too little, far more than the tolerance (at gradients of 0.01 and above
// the two differ by less than it). When the numbers are wrong, the check recomputes the step
// the usual wrong ways (no bias correction; weight decay added to the gradient, Adam's L2,
// instead of decoupled; eps inside the square root) and says which one the region's numbers
// match.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/model/adamw.h"
#include "todo.h"

#define N 7
#define STEPS 5

typedef enum { ADAMW, NO_BIAS_CORRECTION, L2_DECAY, NO_DECAY, EPS_IN_SQRT } Flavour;

static const char *const FLAVOUR_WORDS[] = {
    "AdamW",
    "the update without bias corrections (divide m by 1 - beta1^t and v by 1 - beta2^t before using them)",
    "Adam with L2 regularisation (weight decay added to the gradient, so it goes into m and v); AdamW's decay is "
    "decoupled: lr * wd * p, outside the adaptive ratio",
    "the update without weight decay (subtract lr * wd * p as well)",
    "eps inside the square root, mhat / sqrt(vhat + eps): AdamW adds eps to sqrt(vhat), outside it (with eps = 1e-8 "
    "inside, the denominator is never below 1e-4, and a parameter whose gradient is near zero barely moves)",
};

// One step of the flavour, in double, on one element.
static void step(Flavour f, const AdamW *o, int64_t t, double *p, double g, double *m, double *v) {
    double b1 = o->beta1, b2 = o->beta2;
    if (f == L2_DECAY) g += o->weight_decay * *p;
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    double mhat = *m, vhat = *v;
    if (f != NO_BIAS_CORRECTION) mhat /= 1 - pow(b1, (double)t), vhat /= 1 - pow(b2, (double)t);
    double decay = f == ADAMW || f == NO_BIAS_CORRECTION || f == EPS_IN_SQRT ? o->weight_decay * *p : 0;
    double denominator = f == EPS_IN_SQRT ? sqrt(vhat + o->eps) : sqrt(vhat) + o->eps;
    *p -= o->lr * (mhat / denominator + decay);
}

static const float P0[N] = {0.5f, -1.25f, 2.0f, 0.0f, -0.75f, 3.5f, 1.0f};

// Element i's gradient at step t: magnitudes from 40 down to 1e-8 (where eps = 1e-8 decides
// the step), both signs, one always zero; each changes sign and size from step to step.
static float grad_at(int t, int i) {
    static const float G[N] = {0.3f, -2e-6f, 0.0f, 1.5f, -5e-8f, 40.0f, 1e-8f};
    return G[i] * (t % 2 ? 1.0f : -0.5f) * (1.0f + 0.25f * (float)t);
}

// Which flavour the float state after step `t` matches, over every element (ADAMW if none).
static Flavour which_flavour(const AdamW *o, int t_max, const float *got) {
    for (int f = NO_BIAS_CORRECTION; f <= EPS_IN_SQRT; f++) {
        int all = 1;
        for (int i = 0; i < N && all; i++) {
            double p = P0[i], m = 0, v = 0;
            for (int t = 1; t <= t_max; t++) step((Flavour)f, o, t, &p, grad_at(t, i), &m, &v);
            all = todo_close(got[i], p, 1e-5);
        }
        if (all) return (Flavour)f;
    }
    return ADAMW;
}

static void check_adamw(void) {
    const AdamW o = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    float p[N], g[N], m[N] = {0}, v[N] = {0};
    double rp[N], rm[N] = {0}, rv[N] = {0};
    for (int i = 0; i < N; i++) p[i] = P0[i], rp[i] = P0[i];

    // n = 0 touches nothing.
    float untouched = 7.0f;
    adamw_update(&o, 1, &untouched, &untouched, &untouched, &untouched, 0);
    if (untouched != 7.0f) todo_fail("with n = 0 elements, the update changed memory it was not given (7 became %g)", untouched);

    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++) g[i] = grad_at(t, i);
        float g_before[N];
        memcpy(g_before, g, sizeof g);
        adamw_update(&o, t, p, g, m, v, N);
        if (memcmp(g_before, g, sizeof g))
            todo_fail("step %d: the update changed the gradients it was given (they are read-only: const float *grads)", t);
        for (int i = 0; i < N; i++) step(ADAMW, &o, t, &rp[i], g[i], &rm[i], &rv[i]);
        for (int i = 0; i < N; i++) {
            if (!todo_close(m[i], rm[i], 1e-5) || !todo_close(v[i], rv[i], 1e-5)) {
                todo_fail("step %d, element %d (gradient %g): the moments should be m = %.6g, v = %.6g; got m = %.6g, "
                          "v = %.6g\n"
                          "m = beta1 m + (1 - beta1) g and v = beta2 v + (1 - beta2) g^2, kept in m[] and v[] from one "
                          "step to the next (beta1 = %g, beta2 = %g)",
                          t, i, g[i], rm[i], rv[i], m[i], v[i], o.beta1, o.beta2);
            }
            if (!todo_close(p[i], rp[i], 1e-5)) {
                Flavour f = which_flavour(&o, t, p);
                char said[600] = "";
                if (f != ADAMW) snprintf(said, sizeof said, "\nthe parameters match %s", FLAVOUR_WORDS[f]);
                todo_fail("step %d, element %d (p was %g before the first step, gradient %g): the parameter should be "
                          "%.7g, got %.7g%s%s",
                          t, i, P0[i], g[i], rp[i], p[i], said,
                          t == 1 && f == ADAMW ? "\nat step 1, m / (1 - beta1) = g and v / (1 - beta2) = g^2: each "
                                                 "parameter moves by about lr (against g's sign) plus lr * wd * p"
                                               : "");
            }
        }
    }
}

int main(int argc, char **argv) {
    static const TodoCheck checks[] = {{"adamw", check_adamw}};
    return todo_main(argc, argv, checks, 1);
}
