// attention.c — causal self-attention on the CPU, two ways: the naive kernels, which store the
// [T,T] softmax of every head, and FlashAttention's, which never do (ops.h's contract).
//
// Defines (ops.h): attention_forward(), attention_backward(), flash_attention_forward(),
//                  flash_attention_backward().
//
// The math of each backward is written next to its code; the GPU's kernels (cuda/attention.cu,
// cuda/flash.cu) follow it.
#include "ops.h"

#include "common/harness/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
//
// WITH bf16_in (--mixed), every product's two operands are rounded to bf16 first, as a GPU's
// tensor cores take them, and summed in fp32 (as linear_forward's bf16 operands):
//     s  = bf16(q) . bf16(k)          o  += bf16(p) bf16(v)      (p and l stay fp32)
//     dp = bf16(do) . bf16(v)         dv += bf16(p) bf16(do)
//     ds = bf16(p (dp - D)) * scale   dq += ds bf16(k),  dk += ds bf16(q)
// p is rounded as the forward pass has it, exp(s - m') against the running max, so where the
// key tiles fall moves the result by bf16 rounding: with bf16 operands the forward pass takes
// FLASH_KEYS_BF16 keys a tile, the GPU's (cuda/flash_tc.cu). D = do . o and everything else
// stays fp32. --mixed keeps q, k, v and o as bf16 numbers (gpt.h), and its backward pass reads
// them so (flash_attention_backward_bf16): the same operands, and D from the rounded o.
// ---------------------------------------------------------------------------------------

static inline int imin(int a, int b) { return a < b ? a : b; }

// A value entering a product between two of them (p, dS): as it is, or rounded to bf16.
static inline float operand(float x, int bf16_in) { return bf16_in ? bf16_round(x) : x; }

// One head's rows of q, k, v or do: row t at base + t * stride. In fp32 they are read where
// they lie (qkv, dout); with bf16 operands from a copy [T][hs] rounded once, when the head's
// work starts, rather than at every product (the GPU's kernels round each tile as they stage
// it into shared memory; these copies, like shared memory, are the kernel's own and not part
// of the memory tables).
typedef struct {
    const float *base;
    size_t stride;
} HeadRows;

// copy: NULL in fp32, else where the rounded rows go.
static HeadRows head_rows(const float *src, size_t stride, int b, int T, int hs, float *copy) {
    const float *first = src + (size_t)b * T * stride;  // row 0 of batch b; src points at the head
    if (!copy) return (HeadRows){first, stride};
    for (int t = 0; t < T; t++)
        for (int d = 0; d < hs; d++) copy[(size_t)t * hs + d] = bf16_round(first[(size_t)t * stride + d]);
    return (HeadRows){copy, (size_t)hs};
}

// The same rows from bf16 numbers (--mixed keeps q, k, v so: gpt.h), widened into copy.
static HeadRows head_rows_bf16(const bf16 *src, size_t stride, int b, int T, int hs, float *copy) {
    const bf16 *first = src + (size_t)b * T * stride;
    for (int t = 0; t < T; t++)
        for (int d = 0; d < hs; d++) copy[(size_t)t * hs + d] = bf16_to_float(first[(size_t)t * stride + d]);
    return (HeadRows){copy, (size_t)hs};
}

// Where the backward pass reads q, k, v and o: fp32 (f), or the bf16 numbers --mixed keeps
// (h: then the operands are those numbers, already rounded).
typedef struct {
    const float *f;
    const bf16 *h;
} Kept;

static HeadRows kept_rows(Kept x, size_t offset, size_t stride, int b, int T, int hs, int bf16_in, float *copy) {
    if (x.h) return head_rows_bf16(x.h + offset, stride, b, T, hs, copy);
    return head_rows(x.f + offset, stride, b, T, hs, bf16_in ? copy : NULL);
}

static inline float kept_at(Kept x, size_t i) { return x.h ? bf16_to_float(x.h[i]) : x.f[i]; }

static inline const float *row_of(HeadRows r, int t) { return r.base + (size_t)t * r.stride; }

// Row t of tile j holds keys j0..last(t): none when the whole row lies above the diagonal.
static inline int tile_row_last_key(int t, int j1) { return imin(j1 - 1, t); }

// Query row t's output accumulator: the row of out itself (fp32), or, when the output is kept
// in bf16 (out16), row t - i0 of the query tile's fp32 rows, rounded into out16 at the end.
static inline float *out_row(float *out, float *tile, int b, int t, int i0, int T, int C, int h, int hs) {
    return tile ? tile + (size_t)(t - i0) * hs : out + ((size_t)b * T + t) * C + (size_t)h * hs;
}

// The forward pass from q, k, v in fp32 or kept in bf16 (qkv), into out in fp32, or (out16)
// rounded to bf16: the same arithmetic, so the same bits as out in fp32 rounded after.
static void flash_forward(float *out, bf16 *out16, float *lse, Kept qkv, int B, int T, int C, int NH, int bf16_in) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    // Keys per tile: FLASH_TILE; with bf16 operands the GPU's tile, FLASH_KEYS_BF16, so that p
    // is rounded against the same running max on both (attention.c's note above).
    const int keys = bf16_in ? FLASH_KEYS_BF16 : FLASH_TILE;
    float p[FLASH_KEYS_BF16 > FLASH_TILE ? FLASH_KEYS_BF16 : FLASH_TILE];  // a row of the tile: s, then exp(s - m')
    float m[FLASH_TILE], l[FLASH_TILE];  // each row's running max and sum
    const size_t head = (size_t)T * hs;  // one head's rows: a copy's floats
    float *copies = bf16_in ? malloc_check(3 * head * sizeof(float)) : NULL;
    float *tile = out16 ? malloc_check((size_t)FLASH_TILE * hs * sizeof(float)) : NULL;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            HeadRows Q = kept_rows(qkv, (size_t)h * hs, 3 * (size_t)C, b, T, hs, bf16_in, copies);
            HeadRows K = kept_rows(qkv, C + (size_t)h * hs, 3 * (size_t)C, b, T, hs, bf16_in, copies ? copies + head : NULL);
            HeadRows V = kept_rows(qkv, 2 * (size_t)C + (size_t)h * hs, 3 * (size_t)C, b, T, hs, bf16_in,
                                   copies ? copies + 2 * head : NULL);
            for (int i0 = 0; i0 < T; i0 += FLASH_TILE) {
                int i1 = imin(i0 + FLASH_TILE, T);
                for (int t = i0; t < i1; t++) {
                    float *o = out_row(out, tile, b, t, i0, T, C, h, hs);
                    for (int d = 0; d < hs; d++) o[d] = 0.0f;
                    m[t - i0] = -INFINITY;
                    l[t - i0] = 0.0f;
                }
                // Key tiles left to right; those starting after the tile's last query are
                // entirely above the diagonal: skipped.
                for (int j0 = 0; j0 < i1; j0 += keys) {
                    int j1 = imin(j0 + keys, T);
                    for (int t = i0; t < i1; t++) {
                        int last = tile_row_last_key(t, j1);
                        if (last < j0) continue;
                        const float *q = row_of(Q, t);
                        float tile_max = -INFINITY;
                        for (int u = j0; u <= last; u++) {
                            const float *k = row_of(K, u);
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
                        float *o = out_row(out, tile, b, t, i0, T, C, h, hs);
                        for (int d = 0; d < hs; d++) o[d] *= rescale;
                        for (int u = j0; u <= last; u++) {
                            const float *v = row_of(V, u);
                            float pu = operand(p[u - j0], bf16_in);
                            for (int d = 0; d < hs; d++) o[d] += pu * v[d];
                        }
                    }
                }
                for (int t = i0; t < i1; t++) {
                    float *o = out_row(out, tile, b, t, i0, T, C, h, hs);
                    float inv = 1.0f / l[t - i0];
                    for (int d = 0; d < hs; d++) o[d] *= inv;
                    lse[((size_t)b * NH + h) * T + t] = m[t - i0] + logf(l[t - i0]);
                    if (out16) to_bf16(out16 + ((size_t)b * T + t) * C + (size_t)h * hs, o, (size_t)hs);
                }
            }
        }
    free(copies);
    free(tile);
}

void flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int bf16_in) {
    flash_forward(out, NULL, lse, (Kept){qkv, NULL}, B, T, C, NH, bf16_in);
}

void flash_attention_forward_bf16(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int C, int NH) {
    flash_forward(NULL, out, lse, (Kept){NULL, qkv}, B, T, C, NH, 1);
}

static void flash_backward(float *dqkv, const float *dout, Kept qkv, Kept out, const float *lse, int B, int T, int C,
                           int NH, int bf16_in, float *scratch) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    float *D = scratch;                              // [T]     do_t . o_t of one head
    float *P = D + T;                                // [FLASH_TILE, FLASH_TILE]
    float *dS = P + FLASH_TILE * FLASH_TILE;         // [FLASH_TILE, FLASH_TILE]
    float *dK = dS + FLASH_TILE * FLASH_TILE;        // [FLASH_TILE, hs] the key tile's dk
    float *dV = dK + (size_t)FLASH_TILE * hs;        // [FLASH_TILE, hs] and dv
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(float));  // dq accumulates across key tiles
    const size_t head = (size_t)T * hs;  // one head's rows: a copy's floats
    float *copies = bf16_in ? malloc_check(4 * head * sizeof(float)) : NULL;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *lse_bh = lse + ((size_t)b * NH + h) * T;
            HeadRows Q = kept_rows(qkv, (size_t)h * hs, 3 * (size_t)C, b, T, hs, bf16_in, copies);
            HeadRows K = kept_rows(qkv, C + (size_t)h * hs, 3 * (size_t)C, b, T, hs, bf16_in, copies + head);
            HeadRows V = kept_rows(qkv, 2 * (size_t)C + h * hs, 3 * (size_t)C, b, T, hs, bf16_in, copies + 2 * head);
            HeadRows DO = head_rows(dout + h * hs, (size_t)C, b, T, hs, bf16_in ? copies + 3 * head : NULL);
            for (int t = 0; t < T; t++) {
                const float *dot = dout + ((size_t)b * T + t) * C + h * hs;
                size_t o = ((size_t)b * T + t) * C + (size_t)h * hs;
                float d_t = 0.0f;
                for (int d = 0; d < hs; d++) d_t += dot[d] * kept_at(out, o + d);
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
                        const float *q = row_of(Q, t), *dot = row_of(DO, t);
                        float *p = P + (t - i0) * FLASH_TILE, *ds = dS + (t - i0) * FLASH_TILE;
                        for (int u = j0; u <= last; u++) {
                            const float *k = row_of(K, u), *v = row_of(V, u);
                            float s = 0.0f, dp = 0.0f;
                            for (int d = 0; d < hs; d++) {
                                s += q[d] * k[d];
                                dp += dot[d] * v[d];
                            }
                            p[u - j0] = expf(s * scale - lse_bh[t]);
                            ds[u - j0] = operand(p[u - j0] * (dp - D[t]), bf16_in) * scale;  // rounded before the scale
                        }
                    }
                    // dV_j += P^T dO_i, dK_j += dS^T Q_i, dQ_i += dS K_j.
                    for (int t = i0; t < i1; t++) {
                        int last = tile_row_last_key(t, j1);
                        const float *q = row_of(Q, t), *dot = row_of(DO, t);
                        float *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
                        const float *p = P + (t - i0) * FLASH_TILE, *ds = dS + (t - i0) * FLASH_TILE;
                        for (int u = j0; u <= last; u++) {
                            const float *k = row_of(K, u);
                            float *dk = dK + (size_t)(u - j0) * hs, *dv = dV + (size_t)(u - j0) * hs;
                            float pu = operand(p[u - j0], bf16_in);
                            for (int d = 0; d < hs; d++) {
                                dv[d] += pu * dot[d];
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
    free(copies);
}

void flash_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                              int B, int T, int C, int NH, int bf16_in, float *scratch) {
    flash_backward(dqkv, dout, (Kept){qkv, NULL}, (Kept){out, NULL}, lse, B, T, C, NH, bf16_in, scratch);
}

void flash_attention_backward_bf16(float *dqkv, const float *dout, const bf16 *qkv, const bf16 *out, const float *lse,
                                   int B, int T, int C, int NH, float *scratch) {
    flash_backward(dqkv, dout, (Kept){NULL, qkv}, (Kept){NULL, out}, lse, B, T, C, NH, 1, scratch);
}
