// ops.c — see ops.h. The math of each backward is written next to its code.
#include "ops.h"

#include <math.h>
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

void linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                    int IC, int OC, int bf16_in, float *scratch) {
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OC;
        if (bias) memcpy(o, bias, (size_t)OC * sizeof(float));
        else memset(o, 0, (size_t)OC * sizeof(float));
    }
    size_t used = 0;
    float *wt = linear_part(scratch, &used, (size_t)IC * OC);
    transpose(wt, weight, OC, IC);
    if (bf16_in) {
        float *x = linear_part(scratch, &used, (size_t)N * IC);
        round_bf16(wt, wt, (size_t)IC * OC);
        round_bf16(x, inp, (size_t)N * IC);
        inp = x;
    }
    matmul_acc(out, inp, wt, N, OC, IC, 0);
}

void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int N, int IC, int OC, int bf16_in, float *scratch) {
    const float *dout_f = dout;  // the bias gradient sums dout in fp32 either way
    if (bf16_in) {
        size_t used = 0;
        float *d = linear_part(scratch, &used, (size_t)N * OC);
        float *x = linear_part(scratch, &used, (size_t)N * IC);
        float *w = linear_part(scratch, &used, (size_t)OC * IC);
        round_bf16(d, dout, (size_t)N * OC);
        round_bf16(x, inp, (size_t)N * IC);
        round_bf16(w, weight, (size_t)OC * IC);
        dout = d, inp = x, weight = w;
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
// Causal self-attention, per batch b and head h (hs = C / NH, scale = 1/sqrt(hs)):
//   s[t,u] = q_t . k_u * scale          for u <= t (a token sees only the past)
//   a[t,:] = softmax(s[t, 0..t])
//   o_t    = sum_u a[t,u] v_u
// backward, given do_t:
//   da[t,u] = do_t . v_u                dv_u += a[t,u] do_t
//   ds[t,u] = a[t,u] (da[t,u] - sum_w a[t,w] da[t,w])        (softmax backward)
//   dq_t += scale sum_u ds[t,u] k_u     dk_u += scale ds[t,u] q_t
// ---------------------------------------------------------------------------------------

void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxs = -INFINITY;
                for (int u = 0; u <= t; u++) {
                    const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    s *= scale;
                    a[u] = s;
                    if (s > maxs) maxs = s;
                }
                float sum = 0.0f;
                for (int u = 0; u <= t; u++) {
                    a[u] = expf(a[u] - maxs);
                    sum += a[u];
                }
                float inv = 1.0f / sum;
                for (int u = 0; u <= t; u++) a[u] *= inv;
                for (int u = t + 1; u < T; u++) a[u] = 0.0f;

                float *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int u = 0; u <= t; u++) {
                    const float *v = qkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += a[u] * v[i];
                }
            }
}

void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                        int T, int C, int NH, float *scratch) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    float *da = scratch, *ds = scratch + T;
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *dot = dout + ((size_t)b * T + t) * C + h * hs;
                float dot_sum = 0.0f;  // sum_w a[t,w] da[t,w]
                for (int u = 0; u <= t; u++) {
                    const float *v = qkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
                    float *dv = dqkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
                    float d = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        d += dot[i] * v[i];
                        dv[i] += a[u] * dot[i];
                    }
                    da[u] = d;
                    dot_sum += a[u] * d;
                }
                for (int u = 0; u <= t; u++) ds[u] = a[u] * (da[u] - dot_sum) * scale;
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
                for (int u = 0; u <= t; u++) {
                    const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    float *dk = dqkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += ds[u] * k[i];
                        dk[i] += ds[u] * q[i];
                    }
                }
            }
}

// ---------------------------------------------------------------------------------------
// The same attention by FlashAttention's algorithm (Dao et al. 2022, FlashAttention-2's loop
// order): the [T,T] matrices s and a are never stored. Per batch b and head h, the queries
// and the keys are cut into tiles of FLASH_TILE rows (the last one shorter), and the work is
// done one (query tile i, key tile j) block at a time, a block small enough to sit in cache
// (on a GPU: in shared memory, which is what makes the algorithm IO-aware):
//
//                        key tiles j (u) ->
//                    K0        K1        K2        K3
//                +---------+---------+---------+---------+
//           Q0   |\        |         |         |         |
//                |  \  S00 |  skip   |  skip   |  skip   |      \   the diagonal u = t: a
//                |    \    |         |         |         |          query sees keys u <= t
//  query         +---------+---------+---------+---------+
//  tiles i   Q1  |         |\        |         |         |      skip: every u > t, all
//   (t)          |   S10   |  \  S11 |  skip   |  skip   |          masked, never computed
//    |           |         |    \    |         |         |
//    v           +---------+---------+---------+---------+      S11: a diagonal tile, the
//            Q2  |   S20   |   S21   |\  S22   |  skip   |          entries above the
//                +---------+---------+---------+---------+          diagonal left out
//            Q3  |   S30   |   S31   |   S32   |\  S33   |
//                +---------+---------+---------+---------+
//
// FORWARD, for query tile i, sweeping its key tiles j = 0..i left to right. Each row t keeps
// a running max m, a running sum l and an unnormalized output o; for each tile:
//     s_u   = q_t . k_u * scale                  (u in the tile, u <= t)
//     m'    = max(m, max_u s_u)
//     l     = l * exp(m - m') + sum_u exp(s_u - m')        (the online softmax: rescale
//     o     = o * exp(m - m') + sum_u exp(s_u - m') v_u     what was summed to the new max)
//     m     = m'
// and after the last tile o_t = o / l, lse_t = m + log l. That equals softmax(s) v: every
// term was scaled by exp(s_u - m_final) / l in the end, whatever max it was first taken at.
//
// What crosses from the forward pass to the backward pass:
//
//     saved        out  [B,T,C]   (the block saves it anyway: it is atty, c_proj's input)
//                  lse  [B,NH,T]  one float per row: NH floats per token
//     recomputed   s and a = exp(s - lse) tile by tile, from q and k (the qkv activation)
//     never held   att  [B,NH,T,T], which the naive kernel saves: NH*T floats per token
//
// BACKWARD, for key tile j, sweeping its query tiles i = j..last top to bottom, with dK_j and
// dV_j accumulated in scratch and written once at the end (dq_t accumulates in dqkv across
// key tiles). First, per row, D_t = do_t . o_t, which equals sum_u a[t,u] da[t,u] (the
// softmax backward's row sum: o_t = sum_u a[t,u] v_u and da[t,u] = do_t . v_u), so it needs
// no row of a. Then per tile:
//     P[t,u]  = exp(s[t,u] - lse_t)              recomputed, = a[t,u]
//     dv_u   += P[t,u] do_t                      (dV_j += P^T dO_i)
//     dP[t,u] = do_t . v_u
//     dS[t,u] = P[t,u] (dP[t,u] - D_t) * scale
//     dq_t   += dS[t,u] k_u                      (dQ_i += dS K_j)
//     dk_u   += dS[t,u] q_t                      (dK_j += dS^T Q_i)
// Every sum runs in a fixed order, so the kernels are deterministic. Equal to the naive
// kernels up to fp32 rounding (the sums are grouped differently): tests/test_gpt.c.
// ---------------------------------------------------------------------------------------

static inline int imin(int a, int b) { return a < b ? a : b; }

// Row t of tile j holds keys j0..last(t): none when the whole row lies above the diagonal.
static inline int tile_row_last_key(int t, int j1) { return imin(j1 - 1, t); }

void flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    float p[FLASH_TILE];            // one row of the tile: scores, then exp(s - m')
    float m[FLASH_TILE], l[FLASH_TILE];  // each row's running max and sum
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i0 = 0; i0 < T; i0 += FLASH_TILE) {
                int i1 = imin(i0 + FLASH_TILE, T);
                for (int t = i0; t < i1; t++) {
                    float *o = out + ((size_t)b * T + t) * C + h * hs;
                    for (int d = 0; d < hs; d++) o[d] = 0.0f;
                    m[t - i0] = -INFINITY;
                    l[t - i0] = 0.0f;
                }
                // Key tiles left to right; those starting after the tile's last query are
                // entirely above the diagonal: skipped.
                for (int j0 = 0; j0 < i1; j0 += FLASH_TILE) {
                    int j1 = imin(j0 + FLASH_TILE, T);
                    for (int t = i0; t < i1; t++) {
                        int last = tile_row_last_key(t, j1);
                        if (last < j0) continue;
                        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                        float tile_max = -INFINITY;
                        for (int u = j0; u <= last; u++) {
                            const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                            float s = 0.0f;
                            for (int d = 0; d < hs; d++) s += q[d] * k[d];
                            s *= scale;
                            p[u - j0] = s;
                            if (s > tile_max) tile_max = s;
                        }
                        float m_new = m[t - i0] > tile_max ? m[t - i0] : tile_max;
                        float rescale = expf(m[t - i0] - m_new);  // 0 on the first tile (m = -inf)
                        float tile_sum = 0.0f;
                        for (int u = j0; u <= last; u++) {
                            p[u - j0] = expf(p[u - j0] - m_new);
                            tile_sum += p[u - j0];
                        }
                        l[t - i0] = l[t - i0] * rescale + tile_sum;
                        m[t - i0] = m_new;
                        float *o = out + ((size_t)b * T + t) * C + h * hs;
                        for (int d = 0; d < hs; d++) o[d] *= rescale;
                        for (int u = j0; u <= last; u++) {
                            const float *v = qkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
                            for (int d = 0; d < hs; d++) o[d] += p[u - j0] * v[d];
                        }
                    }
                }
                for (int t = i0; t < i1; t++) {
                    float *o = out + ((size_t)b * T + t) * C + h * hs;
                    float inv = 1.0f / l[t - i0];
                    for (int d = 0; d < hs; d++) o[d] *= inv;
                    lse[((size_t)b * NH + h) * T + t] = m[t - i0] + logf(l[t - i0]);
                }
            }
}

void flash_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int B, int T, int C, int NH, float *scratch) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    float *D = scratch;                              // [T]     do_t . o_t of one head
    float *P = D + T;                                // [FLASH_TILE, FLASH_TILE]
    float *dS = P + FLASH_TILE * FLASH_TILE;         // [FLASH_TILE, FLASH_TILE]
    float *dK = dS + FLASH_TILE * FLASH_TILE;        // [FLASH_TILE, hs] the key tile's dk
    float *dV = dK + (size_t)FLASH_TILE * hs;        // [FLASH_TILE, hs] and dv
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(float));  // dq accumulates across key tiles
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *lse_bh = lse + ((size_t)b * NH + h) * T;
            for (int t = 0; t < T; t++) {
                const float *dot = dout + ((size_t)b * T + t) * C + h * hs;
                const float *o = out + ((size_t)b * T + t) * C + h * hs;
                float d_t = 0.0f;
                for (int d = 0; d < hs; d++) d_t += dot[d] * o[d];
                D[t] = d_t;
            }
            for (int j0 = 0; j0 < T; j0 += FLASH_TILE) {
                int j1 = imin(j0 + FLASH_TILE, T);
                memset(dK, 0, (size_t)FLASH_TILE * hs * sizeof(float));
                memset(dV, 0, (size_t)FLASH_TILE * hs * sizeof(float));
                // Query tiles from the diagonal down: the ones above (i1 <= j0) are skipped.
                for (int i0 = j0; i0 < T; i0 += FLASH_TILE) {
                    int i1 = imin(i0 + FLASH_TILE, T);
                    // P and dS of the tile, row by row (row t holds keys j0..last(t)).
                    for (int t = i0; t < i1; t++) {
                        int last = tile_row_last_key(t, j1);
                        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                        const float *dot = dout + ((size_t)b * T + t) * C + h * hs;
                        float *p = P + (t - i0) * FLASH_TILE, *ds = dS + (t - i0) * FLASH_TILE;
                        for (int u = j0; u <= last; u++) {
                            const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                            const float *v = qkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
                            float s = 0.0f, dp = 0.0f;
                            for (int d = 0; d < hs; d++) {
                                s += q[d] * k[d];
                                dp += dot[d] * v[d];
                            }
                            p[u - j0] = expf(s * scale - lse_bh[t]);
                            ds[u - j0] = p[u - j0] * (dp - D[t]) * scale;
                        }
                    }
                    // dV_j += P^T dO_i, dK_j += dS^T Q_i, dQ_i += dS K_j.
                    for (int t = i0; t < i1; t++) {
                        int last = tile_row_last_key(t, j1);
                        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                        const float *dot = dout + ((size_t)b * T + t) * C + h * hs;
                        float *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
                        const float *p = P + (t - i0) * FLASH_TILE, *ds = dS + (t - i0) * FLASH_TILE;
                        for (int u = j0; u <= last; u++) {
                            const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                            float *dk = dK + (size_t)(u - j0) * hs, *dv = dV + (size_t)(u - j0) * hs;
                            for (int d = 0; d < hs; d++) {
                                dv[d] += p[u - j0] * dot[d];
                                dk[d] += ds[u - j0] * q[d];
                                dq[d] += ds[u - j0] * k[d];
                            }
                        }
                    }
                }
                for (int u = j0; u < j1; u++) {  // the key tile's dk and dv, written once
                    float *dst = dqkv + ((size_t)b * T + u) * 3 * C + h * hs;
                    memcpy(dst + C, dK + (size_t)(u - j0) * hs, (size_t)hs * sizeof(float));
                    memcpy(dst + 2 * C, dV + (size_t)(u - j0) * hs, (size_t)hs * sizeof(float));
                }
            }
        }
}

// ---------------------------------------------------------------------------------------
// GELU (tanh form), with u = sqrt(2/pi) (x + 0.044715 x^3):
//   y  = 0.5 x (1 + tanh u)
//   y' = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// ---------------------------------------------------------------------------------------

#define GELU_K 0.7978845608028654f  // sqrt(2/pi)

void gelu_forward(float *out, const float *inp, int n) {
    for (int i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

void gelu_backward(float *dinp, const float *inp, const float *dout, int n) {
    for (int i = 0; i < n; i++) {
        float x = inp[i];
        float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = grad * dout[i];
    }
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
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .flash_attention_forward = flash_attention_forward,
    .flash_attention_backward = flash_attention_backward,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .residual_add = residual_add,
    .embedding_forward = embedding_forward,
    .embedding_backward = embedding_backward,
    .crossentropy_forward = crossentropy_forward,
    .crossentropy_backward = crossentropy_backward,
    .adamw_update = adamw_update,
    .sum_of_squares = sum_of_squares,
    .scale_floats = scale_floats,
    .zero = zero_floats,
    .copy = copy_floats,
    .to_bf16 = to_bf16,
    .from_bf16 = from_bf16,
    .add_bf16 = add_bf16,
    .acc_bf16 = acc_bf16,
};
