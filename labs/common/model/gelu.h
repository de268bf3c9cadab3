// gelu.h — GELU in its tanh form and its slope, one definition for the CPU's kernels (ops.c)
// and the GPU's (cuda/ops.cu, where nvcc compiles them for the device too), as bf16.h is:
//
//     u     = sqrt(2/pi) (x + 0.044715 x^3)
//     y     = 0.5 x (1 + tanh u)
//     dy/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//
#ifndef SHARDLAB_GELU_H
#define SHARDLAB_GELU_H

#include <math.h>

#ifdef __CUDACC__
#define GELU_FN __host__ __device__ static inline
#else
#define GELU_FN static inline
#endif

#define GELU_K 0.7978845608028654f  // sqrt(2/pi)

GELU_FN float gelu_value(float x) { return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x))); }

GELU_FN float gelu_slope(float x) {
    float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}

#endif
