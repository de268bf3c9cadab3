// ops.c — see ops.h: its kernels but attention's (attention.c), and ops_cpu, the CPU's table.
// The math of each backward is written next to its code.
#include "ops.h"

#include "common/harness/check.h"
#include "gelu.h"
#include "moe.h"  // ops_cpu's moe_forward, moe_backward

#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------
// Matrix multiply
//
// C[M,N] += op(A)[M,K] * B[K,N]. The loop order is i-k-j: for one row i of C and one k,
// add A(i,k) times row k of B to row i of C. The j loop runs along contiguous memory of both
// B and C with no dependence between iterations, which is exactly what a vectorizing
// compiler wants. Blocking keeps the pieces in cache:
//
//   - MM_ROWS x MM_COLS: a tile of C held in a local accumulator (registers/L1) while k runs,
//     so each loaded row piece of B is used MM_ROWS times;
//   - MM_KBLOCK rows x MM_NBLOCK columns of B: the panel of B the tiles stream through,
//     small enough to stay in L2 while every row block of A passes over it.
//
// Each C element still receives its k terms in increasing k, so the result does not depend
// on the block sizes.
// ---------------------------------------------------------------------------------------

enum { MM_ROWS = 4, MM_COLS = 64, MM_KBLOCK = 256, MM_NBLOCK = 512 };

static inline float a_elem(const float *A, int i, int k, int M, int K, int a_trans) {
    return a_trans ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
}

// One full MM_ROWS x MM_COLS tile of C at (i, j), over k in [k0, k1).
static void matmul_tile(float *C, const float *A, const float *B, int M, int N, int K, int a_trans,
                        int i, int j, int k0, int k1) {
    float acc[MM_ROWS][MM_COLS];
    for (int r = 0; r < MM_ROWS; r++)
        for (int c = 0; c < MM_COLS; c++) acc[r][c] = C[(size_t)(i + r) * N + j + c];
    for (int k = k0; k < k1; k++) {
        const float *b = B + (size_t)k * N + j;
        float a[MM_ROWS];
        for (int r = 0; r < MM_ROWS; r++) a[r] = a_elem(A, i + r, k, M, K, a_trans);
        for (int r = 0; r < MM_ROWS; r++)
            for (int c = 0; c < MM_COLS; c++) acc[r][c] += a[r] * b[c];
    }
    for (int r = 0; r < MM_ROWS; r++)
        for (int c = 0; c < MM_COLS; c++) C[(size_t)(i + r) * N + j + c] = acc[r][c];
}

// A partial tile at the bottom or right edge: the same order of operations, plain loops.
static void matmul_edge(float *C, const float *A, const float *B, int M, int N, int K, int a_trans,
                        int i, int rows, int j, int cols, int k0, int k1) {
    for (int r = 0; r < rows; r++) {
        float *c = C + (size_t)(i + r) * N + j;
        for (int k = k0; k < k1; k++) {
            float a = a_elem(A, i + r, k, M, K, a_trans);
            const float *b = B + (size_t)k * N + j;
            for (int x = 0; x < cols; x++) c[x] += a * b[x];
        }
    }
}

void matmul_acc(float *C, const float *A, const float *B, int M, int N, int K, int a_trans) {
    for (int j0 = 0; j0 < N; j0 += MM_NBLOCK) {
        int j1 = j0 + MM_NBLOCK < N ? j0 + MM_NBLOCK : N;
        for (int k0 = 0; k0 < K; k0 += MM_KBLOCK) {
            int k1 = k0 + MM_KBLOCK < K ? k0 + MM_KBLOCK : K;
            for (int i = 0; i < M; i += MM_ROWS) {
                int rows = M - i < MM_ROWS ? M - i : MM_ROWS;
                for (int j = j0; j < j1; j += MM_COLS) {
                    int cols = j1 - j < MM_COLS ? j1 - j : MM_COLS;
                    if (rows == MM_ROWS && cols == MM_COLS)
                        matmul_tile(C, A, B, M, N, K, a_trans, i, j, k0, k1);
                    else
                        matmul_edge(C, A, B, M, N, K, a_trans, i, rows, j, cols, k0, k1);
                }
            }
        }
    }
}

void matmul_acc_naive(float *C, const float *A, const float *B, int M, int N, int K, int a_trans) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float sum = C[(size_t)i * N + j];
            for (int k = 0; k < K; k++) sum += a_elem(A, i, k, M, K, a_trans) * B[(size_t)k * N + j];
            C[(size_t)i * N + j] = sum;
        }
}

void transpose(float *dst, const float *src, int rows, int cols) {
    enum { TB = 32 };  // blocks, so both the reads and the writes stay in cache lines
    for (int r0 = 0; r0 < rows; r0 += TB)
        for (int c0 = 0; c0 < cols; c0 += TB)
            for (int r = r0; r < r0 + TB && r < rows; r++)
                for (int c = c0; c < c0 + TB && c < cols; c++)
                    dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

// ---------------------------------------------------------------------------------------
// Linear: y = x W^T + b
//   forward   y[N,OC] = x[N,IC] . W^T[IC,OC]
//   backward  dx[N,IC] = dy[N,OC] . W[OC,IC]
//             dW[OC,IC] += dy^T[OC,N] . x[N,IC]
//             db[OC] += sum over rows of dy
// ---------------------------------------------------------------------------------------

// The scratch's parts start at multiples of LINEAR_ALIGN floats (a GPU's bf16 copies want 16
// bytes), so each part is given LINEAR_ALIGN floats of slack.
enum { LINEAR_ALIGN = 8 };

size_t linear_scratch_floats(int N, int IC, int OC, int bf16_in) {
    size_t w = (size_t)IC * OC;
    if (!bf16_in) return w;  // the forward pass's W^T
    return (size_t)N * OC + (size_t)N * IC + w + 3 * LINEAR_ALIGN;  // backward: dout, inp, W
}

// The next part of a scratch buffer, n floats, at a multiple of LINEAR_ALIGN floats from its start.
static float *linear_part(float *scratch, size_t *used, size_t n) {
    float *p = scratch + *used;
    *used += (n + LINEAR_ALIGN - 1) / LINEAR_ALIGN * LINEAR_ALIGN;
    return p;
}

// dst[i] = bf16_round(src[i]): a bf16 operand, kept as fp32 for the CPU's loops.
static void round_bf16(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_round(src[i]);
}

// The input as the products take it, in the scratch: with bf16 operands, inp rounded, or
// inp16 widened (the same numbers); in fp32, inp as it is.
static const float *linear_input(float *scratch, size_t *used, const float *inp, const bf16 *inp16, int bf16_in,
                                 size_t n) {
    if (!bf16_in) return inp;
    float *x = linear_part(scratch, used, n);
    if (inp16) from_bf16(x, inp16, n);
    else round_bf16(x, inp, n);
    return x;
}

// linear_forward() and linear_forward_bf16(): the input in fp32 (inp) or as bf16 (inp16).
static void linear_forward_in(float *out, const float *inp, const bf16 *inp16, const float *weight, const float *bias,
                              int N, int IC, int OC, int bf16_in, float *scratch) {
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OC;
        if (bias) memcpy(o, bias, (size_t)OC * sizeof(float));
        else memset(o, 0, (size_t)OC * sizeof(float));
    }
    size_t used = 0;
    float *wt = linear_part(scratch, &used, (size_t)IC * OC);
    transpose(wt, weight, OC, IC);
    if (bf16_in) round_bf16(wt, wt, (size_t)IC * OC);
    inp = linear_input(scratch, &used, inp, inp16, bf16_in, (size_t)N * IC);
    matmul_acc(out, inp, wt, N, OC, IC, 0);
}

void linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                    int IC, int OC, int bf16_in, float *scratch) {
    linear_forward_in(out, inp, NULL, weight, bias, N, IC, OC, bf16_in, scratch);
}

void linear_forward_bf16(float *out, const bf16 *inp, const float *weight, const float *bias, int N, int IC, int OC,
                         float *scratch) {
    linear_forward_in(out, NULL, inp, weight, bias, N, IC, OC, 1, scratch);
}

void linear_forward_bf16_out(bf16 *out, const bf16 *inp, const float *weight, const float *bias, int N, int IC,
                             int OC, float *scratch) {
    size_t used = 0;
    float *wt = linear_part(scratch, &used, (size_t)IC * OC);
    transpose(wt, weight, OC, IC);
    round_bf16(wt, wt, (size_t)IC * OC);
    const float *x = linear_input(scratch, &used, NULL, inp, 1, (size_t)N * IC);
    float *sum = linear_part(scratch, &used, (size_t)N * OC);  // the backward's room for dout
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) sum[(size_t)n * OC + o] = bias ? bf16_round(bias[o]) : 0.0f;
    matmul_acc(sum, x, wt, N, OC, IC, 0);
    to_bf16(out, sum, (size_t)N * OC);
}

static void linear_backward_in(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const bf16 *inp16, const float *weight, int N, int IC, int OC, int bf16_in,
                               float *scratch) {
    const float *dout_f = dout;  // the bias gradient sums dout in fp32 either way
    if (bf16_in) {
        size_t used = 0;
        float *d = linear_part(scratch, &used, (size_t)N * OC);
        round_bf16(d, dout, (size_t)N * OC);
        inp = linear_input(scratch, &used, inp, inp16, 1, (size_t)N * IC);
        float *w = linear_part(scratch, &used, (size_t)OC * IC);
        round_bf16(w, weight, (size_t)OC * IC);
        dout = d, weight = w;
    }
    if (dinp) {
        memset(dinp, 0, (size_t)N * IC * sizeof(float));
        matmul_acc(dinp, dout, weight, N, IC, OC, 0);
    }
    matmul_acc(dweight, dout, inp, OC, IC, N, 1);
    if (dbias)
        for (int n = 0; n < N; n++) {
            const float *d = dout_f + (size_t)n * OC;
            for (int o = 0; o < OC; o++) dbias[o] += d[o];
        }
}

void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int N, int IC, int OC, int bf16_in, float *scratch) {
    linear_backward_in(dinp, dweight, dbias, dout, inp, NULL, weight, N, IC, OC, bf16_in, scratch);
}

void linear_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                          const float *weight, int N, int IC, int OC, float *scratch) {
    linear_backward_in(dinp, dweight, dbias, dout, NULL, inp, weight, N, IC, OC, 1, scratch);
}

// ---------------------------------------------------------------------------------------
// LayerNorm over the last dimension, eps 1e-5.
//   xhat = (x - mean) * rstd,  y = xhat * w + b
//   backward, with g = dy * w:
//     dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//     dw += dy * xhat,  db += dy
// ---------------------------------------------------------------------------------------

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C) {
    const float eps = 1e-5f;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m /= (float)C;
        float var = 0.0f;
        for (int i = 0; i < C; i++) var += (x[i] - m) * (x[i] - m);
        var /= (float)C;
        float s = 1.0f / sqrtf(var + eps);
        for (int i = 0; i < C; i++) y[i] = (x[i] - m) * s * w[i] + b[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

void layernorm_forward_bf16(bf16 *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                            int N, int C) {
    // A row at a time through layernorm_forward itself, then rounded: its bits by construction.
    float *row = malloc_check((size_t)C * sizeof *row);
    for (int n = 0; n < N; n++) {
        layernorm_forward(row, mean + n, rstd + n, inp + (size_t)n * C, w, b, 1, C);
        to_bf16(out + (size_t)n * C, row, (size_t)C);
    }
    free(row);
}

void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *dy = dout + (size_t)n * C;
        const float *x = inp + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float g_mean = 0.0f, gx_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float xhat = (x[i] - m) * s;
            float g = dy[i] * w[i];
            g_mean += g;
            gx_mean += g * xhat;
        }
        g_mean /= (float)C;
        gx_mean /= (float)C;
        for (int i = 0; i < C; i++) {
            float xhat = (x[i] - m) * s;
            float g = dy[i] * w[i];
            dw[i] += dy[i] * xhat;
            db[i] += dy[i];
            dx[i] += s * (g - g_mean - xhat * gx_mean);
        }
    }
}

// ---------------------------------------------------------------------------------------
// GELU (tanh form: gelu.h)
// ---------------------------------------------------------------------------------------

void gelu_forward(float *out, const float *inp, int n) {
    for (int i = 0; i < n; i++) out[i] = gelu_value(inp[i]);
}

void gelu_backward(float *dinp, const float *inp, const float *dout, int n) {
    for (int i = 0; i < n; i++) dinp[i] = gelu_slope(inp[i]) * dout[i];
}

void gelu_forward_bf16(bf16 *out, const bf16 *inp, int n) {
    for (int i = 0; i < n; i++) out[i] = bf16_from_float(gelu_value(bf16_to_float(inp[i])));
}

void gelu_backward_bf16(float *dinp, const bf16 *inp, const float *dout, int n) {
    for (int i = 0; i < n; i++) dinp[i] = gelu_slope(bf16_to_float(inp[i])) * dout[i];
}

void residual_add(float *out, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// ---------------------------------------------------------------------------------------
// Embeddings: token embedding plus learned position embedding.
// ---------------------------------------------------------------------------------------

void embedding_forward(float *out, const uint8_t *tokens, const float *wte, const float *wpe, int B,
                       int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *te = wte + (size_t)tokens[b * T + t] * C;
            const float *pe = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) o[i] = te[i] + pe[i];
        }
}

void embedding_backward(float *dwte, float *dwpe, const float *dout, const uint8_t *tokens, int B,
                        int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *dte = dwte + (size_t)tokens[b * T + t] * C;
            float *dpe = dwpe + (size_t)t * C;
            for (int i = 0; i < C; i++) {
                dte[i] += d[i];
                dpe[i] += d[i];
            }
        }
}

// ---------------------------------------------------------------------------------------
// Softmax cross-entropy. Row loss = logsumexp(z) - z[target]; its gradient with respect to
// the logits is softmax(z) - onehot(target).
// ---------------------------------------------------------------------------------------

double crossentropy_forward(float *logits, const uint8_t *targets, int N, int V) {
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * V;
        float maxz = z[0];
        for (int v = 1; v < V; v++)
            if (z[v] > maxz) maxz = z[v];
        float sum = 0.0f;
        float target_z = z[targets[n]];
        for (int v = 0; v < V; v++) {
            z[v] = expf(z[v] - maxz);
            sum += z[v];
        }
        float inv = 1.0f / sum;
        for (int v = 0; v < V; v++) z[v] *= inv;
        total += log((double)sum) + (double)maxz - (double)target_z;
    }
    return total;
}

void crossentropy_backward(float *dlogits, const float *probs, const uint8_t *targets, int N,
                           int V, float scale) {
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        for (int v = 0; v < V; v++) d[v] = p[v] * scale;
        d[targets[n]] -= scale;
    }
}

// ---------------------------------------------------------------------------------------
// Mixed precision: the per-element arithmetic is bf16.h's, shared with the GPU kernels.
// ---------------------------------------------------------------------------------------

void to_bf16(bf16 *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_float(src[i]);
}

void from_bf16(float *dst, const bf16 *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_float(src[i]);
}

void add_bf16(bf16 *acc, const bf16 *x, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] = bf16_add(acc[i], x[i]);
}

void acc_bf16(bf16 *acc, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] = bf16_add_float(acc[i], x[i]);
}

// ---------------------------------------------------------------------------------------
// The CPU's table
// ---------------------------------------------------------------------------------------

static void zero_floats(float *x, size_t n) { memset(x, 0, n * sizeof(float)); }
static void copy_floats(float *dst, const float *src, size_t n) { memmove(dst, src, n * sizeof(float)); }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

size_t ops_gpu_workspace_bytes(int B, int T, int C, int NH, int V, int flash) {
    (void)V;  // the head's logits need none: its Linear has no bias
    size_t BT = (size_t)B * T, slabs = (BT + OPS_GPU_SUM_SLAB - 1) / OPS_GPU_SUM_SLAB;
    size_t batch_slabs = ((size_t)B + OPS_GPU_SUM_SLAB - 1) / OPS_GPU_SUM_SLAB;
    size_t attention = (size_t)B * NH * T * (flash ? 1 : (size_t)T) * sizeof(float);
    size_t sums = max_size(max_size(slabs * 4 * (size_t)C, 2 * slabs * (size_t)C), batch_slabs * T * (size_t)C);
    return max_size(max_size(attention, sums * sizeof(float)), BT * sizeof(double));
}

const Ops ops_cpu = {
    .name = "cpu",
    .linear_forward = linear_forward,
    .linear_backward = linear_backward,
    .linear_forward_bf16 = linear_forward_bf16,
    .linear_backward_bf16 = linear_backward_bf16,
    .linear_forward_bf16_out = linear_forward_bf16_out,
    .layernorm_forward = layernorm_forward,
    .layernorm_forward_bf16 = layernorm_forward_bf16,
    .layernorm_backward = layernorm_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .flash_attention_forward = flash_attention_forward,
    .flash_attention_backward = flash_attention_backward,
    .flash_attention_forward_bf16 = flash_attention_forward_bf16,
    .flash_attention_backward_bf16 = flash_attention_backward_bf16,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .gelu_forward_bf16 = gelu_forward_bf16,
    .gelu_backward_bf16 = gelu_backward_bf16,
    .residual_add = residual_add,
    .embedding_forward = embedding_forward,
    .embedding_backward = embedding_backward,
    .crossentropy_forward = crossentropy_forward,
    .crossentropy_backward = crossentropy_backward,
    .adamw_update = adamw_update,
    .sum_of_squares = sum_of_squares,
    .sum_of_squares_buffers = sum_of_squares_buffers,
    .sum_of_squares_buffers_bf16 = sum_of_squares_buffers_bf16,
    .scale_floats = scale_floats,
    .zero = zero_floats,
    .copy = copy_floats,
    .to_bf16 = to_bf16,
    .from_bf16 = from_bf16,
    .add_bf16 = add_bf16,
    .acc_bf16 = acc_bf16,
    .moe_forward = moe_forward,
    .moe_backward = moe_backward,
};
