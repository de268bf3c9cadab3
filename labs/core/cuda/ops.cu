// ops.cu — the kernels of ops.h on the GPU: cuda_ops(), a table with the same entries and the
// same meaning as ops_cpu, on device pointers (token arrays stay in host memory).
//
// Defines (gpu.h): cuda_ops().
//
// Each function below keeps its CPU twin's contract exactly: the same arguments, the same
// overwrite-or-accumulate rule, the same formula (written out in ops.c), so gpt.c runs
// unchanged on either table. Three rules shape the kernels:
//
//   - Determinism. Replicas are compared by hashing parameters, so the same inputs must give
//     the same bits on every run. There is no floating-point atomicAdd: every sum is done by
//     one thread in a fixed order, or by a warp or block reduction whose tree is fixed. A
//     gradient that collects contributions from many tokens (a bias, a LayerNorm weight, an
//     embedding row, flash attention's dk and dv) is GATHERED by the thread that owns the output
//     element, never scattered into it by the threads that own the inputs.
//   - Same order as the CPU where it is free. The token embedding's gradient adds the rows
//     in the CPU's order, so it gives the CPU's bits. Sums over all B*T rows (the bias
//     gradients, LayerNorm's parameter gradients, the position embedding's) are not free in
//     that order: one thread walking 8192 rows leaves the GPU idle, so they use a two-pass
//     tree of partial sums whose shape depends only on the matrix's (see "Column sums").
//     There, as elsewhere (cuBLAS, warp reductions, the GPU's expf/tanhf), results differ
//     from the CPU by rounding only; tests/gpu/test_cuda_ops.c states by how much.
//   - One stream. Everything is queued on the context's compute stream; a function that
//     returns a value (a loss, a sum of squares) waits for it.
//
// Matrix products go to cuBLAS, which is column-major. A row-major [R, C] matrix is, to
// cuBLAS, its transpose: a column-major [C, R] matrix with leading dimension C. So a
// row-major product Y = A B is computed as the column-major product Y^T = B^T A^T, with no
// copies: each call below is written out with that reading.
#include <math.h>
#include <stdlib.h>

#include "context.cuh"

extern "C" {
#include "gpu.h"
}

enum { THREADS = 256, WARP = 32, WARPS_PER_BLOCK = 4 };
static const unsigned FULL_MASK = 0xffffffffu;

static unsigned blocks_for(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }
// Kernels that give one warp to each row.
static unsigned warp_blocks_for(size_t rows) { return blocks_for(rows, WARPS_PER_BLOCK); }
static const unsigned WARP_BLOCK_THREADS = WARPS_PER_BLOCK * WARP;
// The stream every launch below is queued on (and the check that a GPU is open).
static cudaStream_t compute_stream(void) { return cuda_context()->stream; }

// ---------------------------------------------------------------------------------------
// Warp reductions. The butterfly (xor) pattern is fixed, and lanes i and i^k add the same two
// numbers (a + b == b + a exactly), so every lane ends with the same bits, run after run.
// ---------------------------------------------------------------------------------------

__device__ static float warp_sum(float x) {
    for (int offset = WARP / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(FULL_MASK, x, offset);
    return x;
}

__device__ static float warp_max(float x) {
    for (int offset = WARP / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, offset));
    return x;
}

// The global index of this thread's warp, for one-warp-per-row kernels.
__device__ static size_t warp_row(void) { return (size_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / WARP; }
__device__ static size_t thread_index(void) { return (size_t)blockIdx.x * blockDim.x + threadIdx.x; }

// ---------------------------------------------------------------------------------------
// Column sums: out[o] += sum over n of x[n, o], for a bias gradient (dout's columns), the
// position embedding's gradient (the batch's rows) and LayerNorm's parameter gradients. Two
// passes, with a tree that depends only on the shape, so the bits never depend on timing:
//
//            columns o:  strip 0 (32)   strip 1 (32)  ...
//     rows   slab 0    [ block (0,0) ] [ block (1,0) ]      each block: 32 columns x 8 row
//     n      slab 1    [ block (0,1) ] [ block (1,1) ]      lanes; lane (x, y) adds rows
//            ...                                            y, y+8, ... of its slab, in order
//                             |               |
//     partials[slab][o]: the block's 8 row lanes added y = 0..7 in order
//                             |
//     pass 2: out[o] += partials[0][o] + partials[1][o] + ...   (one thread per column,
//                                                                slabs in order)
// A warp reads 32 neighbouring floats of one row (128 bytes, coalesced), and the grid has
// (columns / 32) x (rows / 256) blocks, so a [8192, 768] gradient keeps 768 blocks busy where
// one thread per column gave 768 threads. The order differs from the CPU's n = 0, 1, 2, ...:
// the result equals the CPU's up to rounding (a sum of 8192 terms regrouped in partial sums
// of at most 32, which is, if anything, more accurate).
// ---------------------------------------------------------------------------------------

enum { SUM_STRIP = 32, SUM_ROW_LANES = 8, SUM_SLAB = OPS_GPU_SUM_SLAB };  // (ops.h: the workspace's formula)

// Slabs run along the grid's y, which holds at most 65535 blocks: 16.7M rows.
static unsigned sum_slabs(int N) {
    unsigned slabs = (unsigned)((N + SUM_SLAB - 1) / SUM_SLAB);
    if (slabs > 65535) die("lower --batch or --seq", "column sums over %d rows: more than 65535 slabs of %d", N, SUM_SLAB);
    return slabs;
}
static unsigned sum_strips(int cols) { return (unsigned)((cols + SUM_STRIP - 1) / SUM_STRIP); }
static const dim3 SUM_BLOCK(SUM_STRIP, SUM_ROW_LANES);

// Adds the 8 row lanes' values of column threadIdx.x in a fixed order; the block's row-lane 0
// gets the total. Every thread of the block must call it.
__device__ static float sum_row_lanes(float x, float (*shared)[SUM_STRIP]) {
    shared[threadIdx.y][threadIdx.x] = x;
    __syncthreads();
    float total = 0.0f;
    if (threadIdx.y == 0)
        for (int y = 0; y < SUM_ROW_LANES; y++) total += shared[y][threadIdx.x];
    __syncthreads();  // the buffer may be used again at once
    return total;
}

// Pass 1: partials[slab, o] = sum over the slab's rows of x[n, o].
__global__ static void column_partials_kernel(float *partials, const float *x, int N, int cols) {
    __shared__ float lanes[SUM_ROW_LANES][SUM_STRIP];
    int o = blockIdx.x * SUM_STRIP + threadIdx.x;
    int first = blockIdx.y * SUM_SLAB, last = min(first + SUM_SLAB, N);
    float sum = 0.0f;
    if (o < cols)
        for (int n = first + threadIdx.y; n < last; n += SUM_ROW_LANES) sum += x[(size_t)n * cols + o];
    sum = sum_row_lanes(sum, lanes);
    if (threadIdx.y == 0 && o < cols) partials[(size_t)blockIdx.y * cols + o] = sum;
}

// Pass 2: out[o] += the slabs' partials, slab 0 first.
__global__ static void add_partials_kernel(float *out, const float *partials, int slabs, int cols) {
    int o = (int)thread_index();
    if (o >= cols) return;
    float sum = 0.0f;
    for (int s = 0; s < slabs; s++) sum += partials[(size_t)s * cols + o];
    out[o] += sum;
}

// The workspace the column sums of an [N, cols] matrix use (one float per slab and column).
static size_t column_sums_bytes(int N, int cols) { return (size_t)sum_slabs(N) * cols * sizeof(float); }

// out[o] += sum over n of x[n, o], for an [N, cols] row-major x.
static void column_sums(float *out, const float *x, int N, int cols) {
    if (N <= 0 || cols <= 0) return;
    float *partials = (float *)cuda_workspace(column_sums_bytes(N, cols));
    dim3 grid(sum_strips(cols), sum_slabs(N));
    column_partials_kernel<<<grid, SUM_BLOCK, 0, compute_stream()>>>(partials, x, N, cols);
    cudaCheck(cudaGetLastError());
    add_partials_kernel<<<blocks_for((size_t)cols, THREADS), THREADS, 0, compute_stream()>>>(out, partials,
                                                                                             (int)sum_slabs(N), cols);
    cudaCheck(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------
// Linear: y = x W^T + b (see ops.c for the math)
// ---------------------------------------------------------------------------------------

// out[n, o] = bias[o]: the CPU's starting value, before the products are added.
__global__ static void broadcast_rows_kernel(float *out, const float *bias, int N, int OC) {
    size_t i = thread_index();
    if (i < (size_t)N * OC) out[i] = bias[i % OC];
}

// bf16 operands (--mixed, ops.h): each operand is rounded into a bf16 copy in the Linear's
// scratch (with bf16.h's bits, as the CPU rounds), then cublasGemmEx multiplies the copies on
// the tensor cores, accumulating in fp32 into the fp32 result (CUBLAS_COMPUTE_32F). The
// copies sit where ops.c's linear_scratch_floats() puts the CPU's fp32 ones, each part at a
// multiple of 16 bytes of the scratch (a bf16 copy takes half of its part).
static const size_t LINEAR_ALIGN_FLOATS = 8;  // ops.c's LINEAR_ALIGN

static bf16 *bf16_part(float *scratch, size_t *used, size_t n) {
    bf16 *p = (bf16 *)(scratch + *used);
    *used += (n + LINEAR_ALIGN_FLOATS - 1) / LINEAR_ALIGN_FLOATS * LINEAR_ALIGN_FLOATS;
    return p;
}

static void cuda_to_bf16(bf16 *dst, const float *src, size_t n);

static bf16 *bf16_copy(float *scratch, size_t *used, const float *src, size_t n) {
    bf16 *p = bf16_part(scratch, used, n);
    cuda_to_bf16(p, src, n);
    return p;
}

// C = alpha op(A) op(B) + beta C, cuBLAS's column-major view, with A and B bf16 or fp32 and C fp32.
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                 const void *B, int ldb, float beta, float *C, int ldc, int bf16_in) {
    CudaContext *c = cuda_context();
    const float one = 1.0f;
    if (!bf16_in) {
        cublasCheck(cublasSgemm(c->cublas, ta, tb, m, n, k, &one, (const float *)A, lda, (const float *)B, ldb, &beta,
                                C, ldc));
        return;
    }
    cublasCheck(cublasGemmEx(c->cublas, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C,
                             CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static void cuda_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int IC,
                                int OC, int bf16_in, float *scratch) {
    CudaContext *c = cuda_context();
    if (N == 0 || OC == 0) return;
    if (bias) {
        broadcast_rows_kernel<<<blocks_for((size_t)N * OC, THREADS), THREADS, 0, c->stream>>>(out, bias, N, OC);
        cudaCheck(cudaGetLastError());
    }
    const void *w = weight, *x = inp;  // fp32: cuBLAS reads W transposed in place, no scratch
    if (bf16_in) {
        size_t used = 0;
        w = bf16_copy(scratch, &used, weight, (size_t)OC * IC);
        x = bf16_copy(scratch, &used, inp, (size_t)N * IC);
    }
    // Row-major out[N,OC] = inp[N,IC] W^T, read by cuBLAS as out^T[OC,N] = W[OC,IC] inp^T[IC,N]:
    // W is stored as column-major W^T[IC,OC] (ld IC), so op T gives W; inp is stored as
    // column-major inp^T[IC,N] (ld IC), op N. beta = 1 adds to the bias, beta = 0 ignores out.
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w, IC, x, IC, bias ? 1.0f : 0.0f, out, OC, bf16_in);
}

static void cuda_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *weight, int N, int IC, int OC, int bf16_in, float *scratch) {
    const void *d = dout, *x = inp, *w = weight;
    if (bf16_in) {
        size_t used = 0;
        d = bf16_copy(scratch, &used, dout, (size_t)N * OC);
        x = bf16_copy(scratch, &used, inp, (size_t)N * IC);
        w = bf16_copy(scratch, &used, weight, (size_t)OC * IC);
    }
    // Row-major dinp[N,IC] = dout[N,OC] W[OC,IC], read as dinp^T[IC,N] = W^T[IC,OC] dout^T[OC,N]:
    // both are stored exactly so (ld IC and ld OC), op N twice. beta = 0: overwritten.
    if (dinp) gemm(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w, IC, d, OC, 0.0f, dinp, IC, bf16_in);
    // Row-major dW[OC,IC] += dout^T[OC,N] inp[N,IC], read as dW^T[IC,OC] += inp^T[IC,N] dout[N,OC]:
    // inp is stored as inp^T (ld IC), op N; dout is stored as dout^T[OC,N] (ld OC), op T gives
    // dout. beta = 1: accumulated. (K = N = 0 leaves dW as it is, as on the CPU.)
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, x, IC, d, OC, 1.0f, dweight, IC, bf16_in);
    if (dbias) column_sums(dbias, dout, N, OC);  // of the fp32 dout, as on the CPU
}

// ---------------------------------------------------------------------------------------
// LayerNorm, eps 1e-5 (as ops.c). One warp per row for the row statistics; the column sums'
// two passes (above) for the parameter gradients, which sum over rows.
// ---------------------------------------------------------------------------------------

static const float LAYERNORM_EPS = 1e-5f;

__global__ static void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                                const float *w, const float *b, int N, int C) {
    size_t n = warp_row();
    if (n >= (size_t)N) return;  // the whole warp leaves together
    int lane = threadIdx.x % WARP;
    const float *x = inp + n * C;
    float *y = out + n * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += WARP) sum += x[i];
    float m = warp_sum(sum) / (float)C;
    float sq = 0.0f;  // two passes, as ops.c: the variance of x - mean, not E[x^2] - mean^2
    for (int i = lane; i < C; i += WARP) sq += (x[i] - m) * (x[i] - m);
    float var = warp_sum(sq) / (float)C;
    float s = 1.0f / sqrtf(var + LAYERNORM_EPS);
    for (int i = lane; i < C; i += WARP) y[i] = (x[i] - m) * s * w[i] + b[i];
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = s;
    }
}

// Pass 1 of dw[i] += sum_n dy[n,i] xhat[n,i] and db[i] += sum_n dy[n,i]: the column sums'
// tree (above), two at once. partials holds the slabs' dw sums, then the slabs' db sums.
__global__ static void layernorm_param_partials_kernel(float *partials, const float *dout, const float *inp,
                                                       const float *mean, const float *rstd, int N, int C) {
    __shared__ float lanes[SUM_ROW_LANES][SUM_STRIP];
    int i = blockIdx.x * SUM_STRIP + threadIdx.x;
    int first = blockIdx.y * SUM_SLAB, last = min(first + SUM_SLAB, N);
    float dw = 0.0f, db = 0.0f;
    if (i < C)
        for (int n = first + threadIdx.y; n < last; n += SUM_ROW_LANES) {
            float dy = dout[(size_t)n * C + i];
            float xhat = (inp[(size_t)n * C + i] - mean[n]) * rstd[n];
            dw += dy * xhat;
            db += dy;
        }
    dw = sum_row_lanes(dw, lanes);
    db = sum_row_lanes(db, lanes);
    if (threadIdx.y == 0 && i < C) {
        size_t slabs = gridDim.y;
        partials[(size_t)blockIdx.y * C + i] = dw;
        partials[(slabs + blockIdx.y) * C + i] = db;
    }
}

// dinp[n,i] += rstd (g - mean(g) - xhat mean(g xhat)), g = dy w. One warp per row.
__global__ static void layernorm_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                             const float *mean, const float *rstd, int N, int C) {
    size_t n = warp_row();
    if (n >= (size_t)N) return;
    int lane = threadIdx.x % WARP;
    const float *dy = dout + n * C, *x = inp + n * C;
    float *dx = dinp + n * C;
    float m = mean[n], s = rstd[n];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int i = lane; i < C; i += WARP) {
        float xhat = (x[i] - m) * s;
        float g = dy[i] * w[i];
        g_sum += g;
        gx_sum += g * xhat;
    }
    float g_mean = warp_sum(g_sum) / (float)C;
    float gx_mean = warp_sum(gx_sum) / (float)C;
    for (int i = lane; i < C; i += WARP) {
        float xhat = (x[i] - m) * s;
        float g = dy[i] * w[i];
        dx[i] += s * (g - g_mean - xhat * gx_mean);
    }
}

static void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                   const float *b, int N, int C) {
    if (N == 0) return;
    layernorm_forward_kernel<<<warp_blocks_for((size_t)N), WARP_BLOCK_THREADS, 0, compute_stream()>>>(
        out, mean, rstd, inp, w, b, N, C);
    cudaCheck(cudaGetLastError());
}

static void cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                    const float *w, const float *mean, const float *rstd, int N, int C) {
    if (N == 0 || C == 0) return;
    // Parameter gradients first: they read dout, which the CPU version also allows to be
    // the same buffer as dinp (it reads dy[i] before it adds to dx[i]).
    unsigned slabs = sum_slabs(N);
    float *partials = (float *)cuda_workspace(2 * column_sums_bytes(N, C));
    layernorm_param_partials_kernel<<<dim3(sum_strips(C), slabs), SUM_BLOCK, 0, compute_stream()>>>(
        partials, dout, inp, mean, rstd, N, C);
    cudaCheck(cudaGetLastError());
    add_partials_kernel<<<blocks_for((size_t)C, THREADS), THREADS, 0, compute_stream()>>>(dw, partials, (int)slabs, C);
    cudaCheck(cudaGetLastError());
    add_partials_kernel<<<blocks_for((size_t)C, THREADS), THREADS, 0, compute_stream()>>>(
        db, partials + (size_t)slabs * C, (int)slabs, C);
    cudaCheck(cudaGetLastError());
    layernorm_dinp_kernel<<<warp_blocks_for((size_t)N), WARP_BLOCK_THREADS, 0, compute_stream()>>>(dinp, dout, inp, w,
                                                                                                   mean, rstd, N, C);
    cudaCheck(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------
// Causal self-attention, naive (math in ops.c): the [T,T] matrices of every head are
// written out, so the work is three kinds of matrix product and a softmax per row. The
// products go to cuBLAS, a batch of the NH heads of one sequence per call; the softmax and
// its backward are one warp per row (b,h,t), reading and writing along the row.
//
// qkv is [B,T,3C]; head h of token (b,t) has its q, k, v at columns h*hs, C + h*hs, 2C + h*hs
// of row b*T + t. So head h's Q is a [T,hs] matrix with row stride 3C starting at column h*hs,
// and the next head's starts hs floats further: cuBLAS's strided batch, stride hs, over NH
// heads (one call per sequence b, whose heads start T*3C floats after the previous one's).
// Read as column-major (see the top), Q_h is [hs,T] with leading dimension 3C; att's block
// for (b,h) is [T,T], row t holding the probabilities of query t over keys u.
//
//   forward    S   = scale Q K^T            (the full [T,T]; the softmax masks u > t)
//              A   = softmax of each row over u <= t, 0 above the diagonal     -> att
//              O   = A V                     -> out, head h at columns h*hs
//   backward   dA  = dO V^T                  (into dS, the workspace)
//              dS  = A (dA - rowsum(A dA)) scale, 0 above the diagonal
//              dQ  = dS K,  dK = dS^T Q,  dV = A^T dO      (each overwritten in dqkv)
//
// The products above the diagonal are computed and thrown away (A and dS are 0 there): twice
// the work of the causal half, at cuBLAS's speed, and no serial loop over the sequence per
// thread. cuBLAS's sums run in another order than the CPU's loops: rounding only.
// ---------------------------------------------------------------------------------------

// One cuBLAS call per sequence: Y_h = alpha op(A_h) op(B_h) for the NH heads, column-major
// (m, n, k and the leading dimensions as cuBLAS reads them), overwriting Y.
static void head_products(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                          const float *A, int lda, long long stride_a, size_t seq_a, const float *Bm, int ldb,
                          long long stride_b, size_t seq_b, float *Y, int ldy, long long stride_y, size_t seq_y,
                          int B, int NH) {
    CudaContext *c = cuda_context();
    const float zero = 0.0f;
    for (int b = 0; b < B; b++)
        cublasCheck(cublasSgemmStridedBatched(c->cublas, ta, tb, m, n, k, &alpha, A + b * seq_a, lda, stride_a,
                                              Bm + b * seq_b, ldb, stride_b, &zero, Y + b * seq_y, ldy, stride_y, NH));
}

// Row (b,h,t) of att holds the scaled scores; each becomes its softmax over u <= t, 0 above.
__global__ static void causal_softmax_kernel(float *att, int T, size_t rows) {
    size_t row = warp_row();  // ((b * NH + h) * T + t)
    if (row >= rows) return;
    int lane = threadIdx.x % WARP, t = (int)(row % T);
    float *a = att + row * T;
    float maxs = -INFINITY;
    for (int u = lane; u <= t; u += WARP) maxs = fmaxf(maxs, a[u]);
    maxs = warp_max(maxs);  // u = 0 always exists, so this is finite
    float sum = 0.0f;
    for (int u = lane; u <= t; u += WARP) sum += expf(a[u] - maxs);
    float inv = 1.0f / warp_sum(sum);
    for (int u = lane; u < T; u += WARP) a[u] = u <= t ? expf(a[u] - maxs) * inv : 0.0f;
}

// Row (b,h,t) of dS holds da[t,u] = do_t . v_u; it becomes ds = a (da - sum_w a[t,w] da[t,w])
// scale for u <= t, 0 above.
__global__ static void causal_softmax_backward_kernel(float *dS, const float *att, int T, size_t rows, float scale) {
    size_t row = warp_row();
    if (row >= rows) return;
    int lane = threadIdx.x % WARP, t = (int)(row % T);
    const float *a = att + row * T;
    float *ds = dS + row * T;
    float dot = 0.0f;
    for (int u = lane; u <= t; u += WARP) dot += a[u] * ds[u];
    dot = warp_sum(dot);
    for (int u = lane; u < T; u += WARP) ds[u] = u <= t ? a[u] * (ds[u] - dot) * scale : 0.0f;
}

static void cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    int hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);  // as ops.c computes it
    size_t seq = (size_t)T * 3 * C, tt = (size_t)T * T;
    const float *q = qkv, *k = qkv + C, *v = qkv + 2 * C;
    // S^T[u,t] = k_u . q_t: column-major S^T is row-major S, att's layout. K op T, Q op N.
    head_products(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k, ld, hs, seq, q, ld, hs, seq, att, T, (long long)tt,
                  tt * NH, B, NH);
    causal_softmax_kernel<<<warp_blocks_for(rows), WARP_BLOCK_THREADS, 0, compute_stream()>>>(att, T, rows);
    cudaCheck(cudaGetLastError());
    // O^T[i,t] = sum_u v_u[i] A[t,u]: V op N ([hs,T], ld 3C), A read as column-major A^T (ld T).
    head_products(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, ld, hs, seq, att, T, (long long)tt, tt * NH, out, C, hs,
                  (size_t)T * C, B, NH);
}

static void cuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T,
                                    int C, int NH, float *scratch) {
    (void)scratch;  // the CPU's 2*T floats; the GPU's dS lives in the pass's workspace
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    int hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    size_t seq = (size_t)T * 3 * C, tt = (size_t)T * T, dseq = (size_t)T * C;
    float *dS = (float *)cuda_workspace(rows * T * sizeof(float));
    const float *q = qkv, *k = qkv + C, *v = qkv + 2 * C;
    float *dq = dqkv, *dk = dqkv + C, *dv = dqkv + 2 * C;
    // dA^T[u,t] = v_u . do_t: V op T, dO op N ([hs,T], ld C).
    head_products(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, ld, hs, seq, dout, C, hs, dseq, dS, T, (long long)tt,
                  tt * NH, B, NH);
    causal_softmax_backward_kernel<<<warp_blocks_for(rows), WARP_BLOCK_THREADS, 0, compute_stream()>>>(dS, att, T, rows,
                                                                                                      scale);
    cudaCheck(cudaGetLastError());
    // dQ^T[i,t] = sum_u k_u[i] dS[t,u]: K op N, dS read as column-major dS^T (ld T), op N.
    head_products(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, k, ld, hs, seq, dS, T, (long long)tt, tt * NH, dq, ld, hs,
                  seq, B, NH);
    // dK^T[i,u] = sum_t q_t[i] dS[t,u]: Q op N, dS^T transposed back (op T).
    head_products(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q, ld, hs, seq, dS, T, (long long)tt, tt * NH, dk, ld, hs,
                  seq, B, NH);
    // dV^T[i,u] = sum_t do_t[i] A[t,u]: dO op N, A^T transposed back (op T).
    head_products(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dout, C, hs, dseq, att, T, (long long)tt, tt * NH, dv, ld,
                  hs, seq, B, NH);
}

// ---------------------------------------------------------------------------------------
// Elementwise: GELU (tanh form, as ops.c), residual add. No pointer is __restrict__: dinp
// may be dout, out may be a or b, and each thread reads its element before writing it.
// ---------------------------------------------------------------------------------------

#define GELU_K 0.7978845608028654f  // sqrt(2/pi)

__global__ static void gelu_forward_kernel(float *out, const float *inp, int n) {
    size_t i = thread_index();
    if (i >= (size_t)n) return;
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
}

__global__ static void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, int n) {
    size_t i = thread_index();
    if (i >= (size_t)n) return;
    float x = inp[i];
    float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = grad * dout[i];
}

__global__ static void residual_add_kernel(float *out, const float *a, const float *b, int n) {
    size_t i = thread_index();
    if (i < (size_t)n) out[i] = a[i] + b[i];
}

static void cuda_gelu_forward(float *out, const float *inp, int n) {
    if (n <= 0) return;
    gelu_forward_kernel<<<blocks_for((size_t)n, THREADS), THREADS, 0, compute_stream()>>>(out, inp, n);
    cudaCheck(cudaGetLastError());
}

static void cuda_gelu_backward(float *dinp, const float *inp, const float *dout, int n) {
    if (n <= 0) return;
    gelu_backward_kernel<<<blocks_for((size_t)n, THREADS), THREADS, 0, compute_stream()>>>(dinp, inp, dout, n);
    cudaCheck(cudaGetLastError());
}

static void cuda_residual_add(float *out, const float *a, const float *b, int n) {
    if (n <= 0) return;
    residual_add_kernel<<<blocks_for((size_t)n, THREADS), THREADS, 0, compute_stream()>>>(out, a, b, n);
    cudaCheck(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------
// Embeddings. The backward is a gather: the thread owning dwte[v, c] scans the B*T tokens in
// order and adds the rows whose token is v, which is the order the CPU adds them in.
// ---------------------------------------------------------------------------------------

enum { TOKEN_VALUES = 256 };  // tokens are bytes, so the vocabulary holds at most 256 rows

// out[b,t,c] = wte[tokens[b,t], c] + wpe[t, c], one thread per output float.
__global__ static void embedding_forward_kernel(float *out, const uint8_t *tokens, const float *wte, const float *wpe,
                                                int B, int T, int C) {
    size_t i = thread_index();
    if (i >= (size_t)B * T * C) return;
    size_t n = i / C;
    int c = (int)(i % C), t = (int)(n % T);
    out[i] = wte[(size_t)tokens[n] * C + c] + wpe[(size_t)t * C + c];
}

// dwte[v, c] += dout[n, c] for every n with tokens[n] == v. Rows of tokens that do not occur
// are never touched, so a vocabulary smaller than 256 is never written past.
__global__ static void embedding_backward_wte_kernel(float *dwte, const float *dout, const uint8_t *tokens, int BT,
                                                     int C) {
    size_t i = thread_index();
    if (i >= (size_t)TOKEN_VALUES * C) return;
    int v = (int)(i / C), c = (int)(i % C);
    float *dst = dwte + (size_t)v * C + c;
    float acc = 0.0f;
    int seen = 0;
    for (int n = 0; n < BT; n++)
        if (tokens[n] == v) {
            if (!seen) {
                acc = *dst;  // the first occurrence starts from the gradient so far
                seen = 1;
            }
            acc += dout[(size_t)n * C + c];
        }
    if (seen) *dst = acc;
}

static void cuda_embedding_forward(float *out, const uint8_t *tokens, const float *wte, const float *wpe, int B,
                                   int T, int C) {
    size_t n = (size_t)B * T * C;
    if (n == 0) return;
    const uint8_t *tokens_dev = cuda_stage_tokens(tokens, (size_t)B * T);
    embedding_forward_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(out, tokens_dev, wte, wpe, B,
                                                                                       T, C);
    cudaCheck(cudaGetLastError());
}

static void cuda_embedding_backward(float *dwte, float *dwpe, const float *dout, const uint8_t *tokens, int B, int T,
                                    int C) {
    if ((size_t)B * T * C == 0) return;
    const uint8_t *tokens_dev = cuda_stage_tokens(tokens, (size_t)B * T);
    embedding_backward_wte_kernel<<<blocks_for((size_t)TOKEN_VALUES * C, THREADS), THREADS, 0, compute_stream()>>>(
        dwte, dout, tokens_dev, B * T, C);
    cudaCheck(cudaGetLastError());
    // dwpe[t, c] += sum over b of dout[b, t, c]: the column sums of dout seen as [B, T*C].
    column_sums(dwpe, dout, B, T * C);
}

// ---------------------------------------------------------------------------------------
// Softmax cross-entropy (math in ops.c). One warp per row; each row's loss is computed in
// double on the device and the host adds the rows in order, as crossentropy_forward does.
// ---------------------------------------------------------------------------------------

__global__ static void crossentropy_forward_kernel(float *logits, const uint8_t *targets, int N, int V,
                                                   double *row_loss) {
    size_t n = warp_row();
    if (n >= (size_t)N) return;
    int lane = threadIdx.x % WARP;
    float *z = logits + n * V;
    float target_z = z[targets[n]];
    float maxz = -INFINITY;
    for (int v = lane; v < V; v += WARP) maxz = fmaxf(maxz, z[v]);
    maxz = warp_max(maxz);
    __syncwarp();  // every lane has read target_z before any lane overwrites the row
    float sum = 0.0f;
    for (int v = lane; v < V; v += WARP) {
        float e = expf(z[v] - maxz);
        z[v] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    for (int v = lane; v < V; v += WARP) z[v] *= inv;
    if (lane == 0) row_loss[n] = log((double)sum) + (double)maxz - (double)target_z;
}

// dlogits[n, v] = probs[n, v] * scale, minus scale at the target.
__global__ static void crossentropy_backward_kernel(float *dlogits, const float *probs, const uint8_t *targets, int N,
                                                    int V, float scale) {
    size_t i = thread_index();
    if (i >= (size_t)N * V) return;
    size_t n = i / V;
    int v = (int)(i % V);
    float d = probs[i] * scale;
    if (v == targets[n]) d -= scale;
    dlogits[i] = d;
}

// Copy n doubles from the device (after the queued work) and add them in order on the host.
static double sum_on_host(const double *dev, size_t n) {
    CudaContext *c = cuda_context();
    double *host = (double *)malloc_check(n * sizeof(double));
    cudaCheck(cudaMemcpyAsync(host, dev, n * sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    cudaCheck(cudaStreamSynchronize(c->stream));
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += host[i];
    free(host);
    return total;
}

static double cuda_crossentropy_forward(float *probs_from_logits, const uint8_t *targets, int N, int V) {
    if (N <= 0) return 0.0;
    const uint8_t *targets_dev = cuda_stage_tokens(targets, (size_t)N);
    double *row_loss = (double *)cuda_workspace((size_t)N * sizeof(double));
    crossentropy_forward_kernel<<<warp_blocks_for((size_t)N), WARP_BLOCK_THREADS, 0, compute_stream()>>>(
        probs_from_logits, targets_dev, N, V, row_loss);
    cudaCheck(cudaGetLastError());
    return sum_on_host(row_loss, (size_t)N);
}

static void cuda_crossentropy_backward(float *dlogits, const float *probs, const uint8_t *targets, int N, int V,
                                       float scale) {
    size_t n = (size_t)N * V;
    if (n == 0) return;
    const uint8_t *targets_dev = cuda_stage_tokens(targets, (size_t)N);
    crossentropy_backward_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(dlogits, probs,
                                                                                           targets_dev, N, V, scale);
    cudaCheck(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------
// The optimizer's elementwise work (adamw.c)
// ---------------------------------------------------------------------------------------

// One AdamW step per element, the float formula of adamw.c; c1 and c2 are its bias
// corrections, computed on the host exactly as adamw.c computes them.
__global__ static void adamw_kernel(float *params, const float *grads, float *m, float *v, size_t n, AdamW opt,
                                    float c1, float c2) {
    size_t i = thread_index();
    if (i >= n) return;
    float b1 = opt.beta1, b2 = opt.beta2, g = grads[i];
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / c1, vhat = vi / c2;
    params[i] -= opt.lr * (mhat / (sqrtf(vhat) + opt.eps) + opt.weight_decay * params[i]);
}

// Fixed-size blocks of the input, each summed to one double partial by a fixed tree, so the
// result never depends on timing; the host adds the partials in block order.
enum { SUMSQ_THREADS = 256, SUMSQ_BLOCK_ELEMS = 8192 };

__global__ static void sum_of_squares_kernel(const float *x, size_t n, double *partials) {
    __shared__ double part[SUMSQ_THREADS];
    size_t start = (size_t)blockIdx.x * SUMSQ_BLOCK_ELEMS;
    size_t end = start + SUMSQ_BLOCK_ELEMS < n ? start + SUMSQ_BLOCK_ELEMS : n;
    double s = 0.0;
    for (size_t i = start + threadIdx.x; i < end; i += SUMSQ_THREADS) s += (double)x[i] * x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int stride = SUMSQ_THREADS / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = part[0];
}

__global__ static void scale_kernel(float *x, size_t n, float s) {
    size_t i = thread_index();
    if (i < n) x[i] *= s;
}

static void cuda_adamw_update(const AdamW *opt, int64_t t, float *params, const float *grads, float *m, float *v,
                              size_t n) {
    if (n == 0) return;
    float c1 = 1.0f - (float)pow(opt->beta1, (double)t);
    float c2 = 1.0f - (float)pow(opt->beta2, (double)t);
    adamw_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(params, grads, m, v, n, *opt, c1, c2);
    cudaCheck(cudaGetLastError());
}

static double cuda_sum_of_squares(const float *x, size_t n) {
    if (n == 0) return 0.0;
    size_t nblocks = (n + SUMSQ_BLOCK_ELEMS - 1) / SUMSQ_BLOCK_ELEMS;
    double *partials = (double *)cuda_workspace(nblocks * sizeof(double));
    sum_of_squares_kernel<<<(unsigned)nblocks, SUMSQ_THREADS, 0, compute_stream()>>>(x, n, partials);
    cudaCheck(cudaGetLastError());
    return sum_on_host(partials, nblocks);
}

static void cuda_scale_floats(float *x, size_t n, float s) {
    if (n == 0) return;
    scale_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(x, n, s);
    cudaCheck(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------
// Buffers, and the table
// ---------------------------------------------------------------------------------------

static void cuda_zero(float *x, size_t n) {
    if (n) cudaCheck(cudaMemsetAsync(x, 0, n * sizeof(float), compute_stream()));
}

static void cuda_copy_floats(float *dst, const float *src, size_t n) {
    if (n == 0 || dst == src) return;
    // The CPU's copy is a memmove; cudaMemcpy's result is undefined for overlapping ranges.
    if (dst < src + n && src < dst + n)
        die("copy between distinct, non-overlapping buffers (a bug in shardlab)",
            "Ops.copy on the GPU: the %zu floats at %p and %p overlap", n, (void *)dst, (const void *)src);
    cudaCheck(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, compute_stream()));
}

// ---------------------------------------------------------------------------------------
// Mixed precision. One thread per element, each calling bf16.h's functions, which nvcc
// compiles for the device: the same integer rounding (nearest, ties to even, NaNs kept quiet
// with their sign) as the CPU, so the bits match. cuda_bf16.h's __float2bfloat16 is not
// used: it rounds the same way but turns every NaN into one canonical NaN, losing the sign.
// The additions are plain fp32 adds (rounded to nearest; nothing to fuse, no fast-math).
// ---------------------------------------------------------------------------------------

__global__ static void to_bf16_kernel(bf16 *dst, const float *src, size_t n) {
    size_t i = thread_index();
    if (i < n) dst[i] = bf16_from_float(src[i]);
}

__global__ static void from_bf16_kernel(float *dst, const bf16 *src, size_t n) {
    size_t i = thread_index();
    if (i < n) dst[i] = bf16_to_float(src[i]);
}

__global__ static void add_bf16_kernel(bf16 *acc, const bf16 *x, size_t n) {
    size_t i = thread_index();
    if (i < n) acc[i] = bf16_add(acc[i], x[i]);
}

__global__ static void acc_bf16_kernel(bf16 *acc, const float *x, size_t n) {
    size_t i = thread_index();
    if (i < n) acc[i] = bf16_add_float(acc[i], x[i]);
}

static void cuda_to_bf16(bf16 *dst, const float *src, size_t n) {
    if (n == 0) return;
    to_bf16_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(dst, src, n);
    cudaCheck(cudaGetLastError());
}

static void cuda_from_bf16(float *dst, const bf16 *src, size_t n) {
    if (n == 0) return;
    from_bf16_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(dst, src, n);
    cudaCheck(cudaGetLastError());
}

static void cuda_add_bf16(bf16 *acc, const bf16 *x, size_t n) {
    if (n == 0) return;
    add_bf16_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(acc, x, n);
    cudaCheck(cudaGetLastError());
}

static void cuda_acc_bf16(bf16 *acc, const float *x, size_t n) {
    if (n == 0) return;
    acc_bf16_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(acc, x, n);
    cudaCheck(cudaGetLastError());
}

static const Ops cuda_table = {
    .name = "cuda",
    .linear_forward = cuda_linear_forward,
    .linear_backward = cuda_linear_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .flash_attention_forward = cuda_flash_attention_forward,
    .flash_attention_backward = cuda_flash_attention_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .residual_add = cuda_residual_add,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward = cuda_embedding_backward,
    .crossentropy_forward = cuda_crossentropy_forward,
    .crossentropy_backward = cuda_crossentropy_backward,
    .adamw_update = cuda_adamw_update,
    .sum_of_squares = cuda_sum_of_squares,
    .scale_floats = cuda_scale_floats,
    .zero = cuda_zero,
    .copy = cuda_copy_floats,
    .to_bf16 = cuda_to_bf16,
    .from_bf16 = cuda_from_bf16,
    .add_bf16 = cuda_add_bf16,
    .acc_bf16 = cuda_acc_bf16,
    .use_workspace = cuda_use_workspace,
};

extern "C" const Ops *cuda_ops(void) { return &cuda_table; }
