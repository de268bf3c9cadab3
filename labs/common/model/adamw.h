// adamw.h — the AdamW optimizer over flat buffers, and global-norm gradient clipping.
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

#include "bf16.h"

typedef struct {
    float lr;
    float beta1, beta2, eps;  // labs/DESIGN.md, The model: 0.9, 0.95, 1e-8
    float weight_decay;       // decoupled, applied to every parameter
} AdamW;

// One step (t >= 1) over n elements.
void adamw_update(const AdamW *opt, int64_t t, float *params, const float *grads, float *m, float *v,
                  size_t n);

// The learning-rate schedule every lab shares, a pure function of the step (so every rank,
// the single-rank reference and a resumed run compute the same rate):
//
//   lr |      ____
//      |     /    `-.__                      cosine: linear warmup over the first W steps,
//      |    /          `--.__                then half a cosine from lr down to lr_min at
//      |   /                 `--.___         step S (the last step); constant: the warmup,
//      |  /                         `--.___  then lr to the end.
//      | /                                 lr_min
//      +---------------------------------------- step
//        1    W                            S
//
//   warmup (step <= W):   lr * step / W
//   cosine (W < step):    lr_min + (lr - lr_min) (1 + cos(pi (step - W) / (S - W))) / 2
// Why: Adam's first steps divide by a second moment estimated from a handful of gradients,
// so a full learning rate from step 1 overshoots (the loss spikes); warming up lets the
// estimate settle first. Decaying the rate at the end lets the weights settle into a minimum
// instead of bouncing around it, which is also what keeps two runs that differ only in the
// order of fp32 additions (N ranks against one) close at any length.
typedef enum { LR_COSINE, LR_CONSTANT } LrShape;
typedef struct {
    LrShape shape;
    double lr, lr_min;
    int64_t warmup, steps;  // W and S above
} LrSchedule;
// The learning rate of step `step` (1-based); past S it stays at the schedule's end value.
double lr_schedule_at(const LrSchedule *s, int64_t step);

// sum of x[i]^2 in double: the squared global gradient norm is the sum of this over every
// buffer (and, later, over every rank's shard).
double sum_of_squares(const float *x, size_t n);
// The same over n buffers: each buffer's sum_of_squares, added in buffer order (so it equals
// the loop over them), and, unless each is NULL, each buffer's in each[i]. A GPU takes them in
// one read of its partial sums instead of n.
double sum_of_squares_buffers(int n, const float *const *x, const size_t *len, double *each);
// The same over buffers of bf16s, each element widened (exactly) first: the bits of
// from_bf16() into floats, then sum_of_squares_buffers(), without the floats.
double sum_of_squares_buffers_bf16(int n, const bf16 *const *x, const size_t *len, double *each);
void scale_floats(float *x, size_t n, float s);

#endif
