// attention_ref.h — the exact attention that tests measure the kernels' rounding against:
// test_gpt.c the CPU's, test_flash_tc.cc the emulated tensor-core kernels' (C and C++ alike).
//
// Defines: attention_reference_as().
#ifndef SHARDLAB_TESTS_ATTENTION_REF_H
#define SHARDLAB_TESTS_ATTENTION_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/model/bf16.h"

// Causal attention in double precision, the definition written out: out, lse and, given dout,
// dqkv (the math of attention.c's comments, with the softmax backward summed over the whole row).
// rounded = 1: the roundings of flash's bf16 operands (attention.c) where they do not depend on
// the tiles: q, k, v and do rounded as the products read them, and in the backward pass the
// probabilities (for dv) and dS = P (dP - D) (before the scale); D = do . o from the fp32 do.
// The forward's P is not rounded here: the kernel rounds it against each tile's running max.
static double ref_in(float x, int rounded) { return rounded ? bf16_round(x) : x; }

static void attention_reference_as(double *out, double *lse, double *dqkv, const float *qkv, const float *dout,
                                   int Bn, int T, int C, int NH, int rounded) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *a = (double *)malloc(sizeof(double) * T), *da = (double *)malloc(sizeof(double) * T);
    memset(dqkv, 0, sizeof(double) * Bn * T * 3 * C);
    for (int b = 0; b < Bn; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double m = -INFINITY, sum = 0, dot_sum = 0;
                for (int u = 0; u <= t; u++) {
                    const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += ref_in(q[d], rounded) * ref_in(k[d], rounded);
                    a[u] = s * scale;
                    if (a[u] > m) m = a[u];
                }
                for (int u = 0; u <= t; u++) sum += exp(a[u] - m);
                lse[((size_t)b * NH + h) * T + t] = m + log(sum);
                double *o = out + ((size_t)b * T + t) * C + h * hs;
                const float *dot = dout + ((size_t)b * T + t) * C + h * hs;
                for (int d = 0; d < hs; d++) o[d] = 0;
                for (int u = 0; u <= t; u++) {
                    a[u] = exp(a[u] - m) / sum;
                    const float *v = qkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
                    double *dv = dqkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
                    double a_in = rounded ? bf16_round((float)a[u]) : a[u];
                    da[u] = 0;
                    for (int d = 0; d < hs; d++) {
                        o[d] += a[u] * ref_in(v[d], rounded);
                        da[u] += ref_in(dot[d], rounded) * ref_in(v[d], rounded);
                        dv[d] += a_in * ref_in(dot[d], rounded);
                    }
                    dot_sum += a[u] * da[u];
                }
                if (rounded) {  // D as the kernels take it: the fp32 do against o
                    dot_sum = 0;
                    for (int d = 0; d < hs; d++) dot_sum += (double)dot[d] * o[d];
                }
                double *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
                for (int u = 0; u <= t; u++) {
                    double ds = a[u] * (da[u] - dot_sum);
                    ds = (rounded ? bf16_round((float)ds) : ds) * scale;
                    const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    double *dk = dqkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    for (int d = 0; d < hs; d++) {
                        dq[d] += ds * ref_in(k[d], rounded);
                        dk[d] += ds * ref_in(q[d], rounded);
                    }
                }
            }
    free(a);
    free(da);
}

#endif
