// adamw.h — the AdamW optimizer over flat buffers, and global-norm gradient clipping.
//
// Defines: AdamW, adamw_update(), sum_of_squares(), scale_floats().
//
// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization"), per element, at
// step t = 1, 2, ...:
//     m = b1 m + (1 - b1) g                 v = b2 v + (1 - b2) g^2
//     mhat = m / (1 - b1^t)                 vhat = v / (1 - b2^t)
//     p = p - lr (mhat / (sqrt(vhat) + eps) + wd p)
// The update of an element depends only on that element, so a rank holding a slice of
// p, g, m and v (ZeRO, FSDP) updates its slice exactly as the whole would be updated.
// State: m and v, 8 bytes per parameter in fp32 — the "optim" memory category.
#ifndef SHARDLAB_ADAMW_H
#define SHARDLAB_ADAMW_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    float lr;
    float beta1, beta2, eps;  // DESIGN.md: 0.9, 0.95, 1e-8
    float weight_decay;       // decoupled, applied to every parameter
} AdamW;

// One step (t >= 1) over n elements.
void adamw_update(const AdamW *opt, int64_t t, float *params, const float *grads, float *m, float *v,
                  size_t n);

// sum of x[i]^2 in double: the squared global gradient norm is the sum of this over every
// buffer (and, later, over every rank's shard).
double sum_of_squares(const float *x, size_t n);
void scale_floats(float *x, size_t n, float s);

#endif
