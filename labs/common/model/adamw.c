// adamw.c — see adamw.h.
#include "adamw.h"

#include <math.h>

#include "common/harness/check.h"  // todo(), in the starter code (make starter)

// Step t of AdamW on n elements, the formulas of adamw.h element by element: the moments m
// and v move towards g and g^2, their bias corrections 1 - b1^t and 1 - b2^t undo their
// start at zero, and the weight decay is decoupled (wd p, outside the adaptive ratio).
void adamw_update(const AdamW *opt, int64_t t, float *params, const float *grads, float *m, float *v,
                  size_t n) {
    /* BEGIN SOLUTION: the AdamW update of n elements: moments, bias corrections, decoupled weight decay */
    float b1 = opt->beta1, b2 = opt->beta2;
    // Bias corrections: m and v start at zero, so early averages are scaled up.
    float c1 = 1.0f - (float)pow(b1, (double)t);
    float c2 = 1.0f - (float)pow(b2, (double)t);
    for (size_t i = 0; i < n; i++) {
        float g = grads[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        float mhat = m[i] / c1, vhat = v[i] / c2;
        params[i] -= opt->lr * (mhat / (sqrtf(vhat) + opt->eps) + opt->weight_decay * params[i]);
    }
    /* END SOLUTION */
}

double lr_schedule_at(const LrSchedule *s, int64_t step) {
    if (step < 1) step = 1;
    if (step <= s->warmup) return s->lr * (double)step / (double)s->warmup;
    if (s->shape == LR_CONSTANT || s->steps <= s->warmup) return s->lr;
    double progress = (double)(step - s->warmup) / (double)(s->steps - s->warmup);
    if (progress > 1) progress = 1;
    return s->lr_min + (s->lr - s->lr_min) * 0.5 * (1.0 + cos(M_PI * progress));
}

double sum_of_squares(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

double sum_of_squares_buffers(int n, const float *const *x, const size_t *len, double *each) {
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        double s = sum_of_squares(x[i], len[i]);
        if (each) each[i] = s;
        total += s;
    }
    return total;
}

double sum_of_squares_buffers_bf16(int n, const bf16 *const *x, const size_t *len, double *each) {
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (size_t k = 0; k < len[i]; k++) {
            float v = bf16_to_float(x[i][k]);
            s += (double)v * v;
        }
        if (each) each[i] = s;
        total += s;
    }
    return total;
}

void scale_floats(float *x, size_t n, float s) {
    for (size_t i = 0; i < n; i++) x[i] *= s;
}
