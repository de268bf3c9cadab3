// ops.cu — the kernels of ops.h on the GPU: cuda_ops(), a table with the same entries and the
// same meaning as ops_cpu, on device pointers (token arrays stay in host memory). Here: the
// column sums, Linear, LayerNorm, GELU and the residual add, and the table; the other entries
// are attention.cu's (naive attention), flash.cu's (flash attention), tokens.cu's (embeddings,
// cross-entropy) and buffers.cu's (the optimizer's, zero and copy, bf16 conversions).
//
// Defines (gpu.h): cuda_ops(). (context.cuh): cuda_column_sums().
//
// Each function below keeps its CPU twin's contract exactly: the same arguments, the same
// overwrite-or-accumulate rule, the same formula (written out in ops.c and attention.c), so
// gpt.c runs unchanged on either table. Three rules shape the kernels of every file:
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
// Matrix products go to cuBLAS (the Linear forward's with its bias to cuBLASLt: lt.cu), which
// is column-major. A row-major [R, C] matrix is, to cuBLAS, its transpose: a column-major
// [C, R] matrix with leading dimension C. So a
// row-major product Y = A B is computed as the column-major product Y^T = B^T A^T, with no
// copies: each call (here and in attention.cu) is written out with that reading.
#include <math.h>

#include "common/model/gelu.h"
#include "context.cuh"

extern "C" {
#include "gpu.h"
}

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

// Pass 1: partials[slab, o] = sum over the slab's rows of x[n, o]. Every x[n, o] is read
// once, by one thread; where copy is given, that thread also writes it rounded to bf16 into
// copy[n, o] (to_bf16's bits), so that a --mixed Linear backward gets its bias gradient and
// the bf16 copy of dout its products need from one read of dout.
__global__ static void column_partials_kernel(float *partials, const float *x, bf16 *copy, int N, int cols) {
    __shared__ float lanes[SUM_ROW_LANES][SUM_STRIP];
    int o = blockIdx.x * SUM_STRIP + threadIdx.x;
    int first = blockIdx.y * SUM_SLAB, last = min(first + SUM_SLAB, N);
    float sum = 0.0f;
    if (o < cols)
        for (int n = first + threadIdx.y; n < last; n += SUM_ROW_LANES) {
            float v = x[(size_t)n * cols + o];
            sum += v;
            if (copy) copy[(size_t)n * cols + o] = bf16_from_float(v);
        }
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

// out[o] += sum over n of x[n, o], for an [N, cols] row-major x; and, where copy is given,
// copy = x rounded to bf16 (column_partials_kernel).
static void column_sums_copy(float *out, const float *x, bf16 *copy, int N, int cols) {
    if (N <= 0 || cols <= 0) return;
    float *partials = (float *)cuda_workspace(column_sums_bytes(N, cols));
    dim3 grid(sum_strips(cols), sum_slabs(N));
    column_partials_kernel<<<grid, SUM_BLOCK, 0, compute_stream()>>>(partials, x, copy, N, cols);
    cudaCheck(cudaGetLastError());
    add_partials_kernel<<<blocks_for((size_t)cols, THREADS), THREADS, 0, compute_stream()>>>(out, partials,
                                                                                             (int)sum_slabs(N), cols);
    cudaCheck(cudaGetLastError());
}

void cuda_column_sums(float *out, const float *x, int N, int cols) { column_sums_copy(out, x, NULL, N, cols); }

// ---------------------------------------------------------------------------------------
// Linear: y = x W^T + b (see ops.c for the math)
// ---------------------------------------------------------------------------------------

// out[n, o] = bias[o]: the CPU's starting value, before the products are added (where
// cuBLASLt's bias epilogue cannot add it: lt.cu).
template <typename T>
__global__ static void broadcast_rows_kernel(T *out, const T *bias, int N, int OC) {
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

static bf16 *bf16_copy(float *scratch, size_t *used, const float *src, size_t n) {
    bf16 *p = bf16_part(scratch, used, n);
    cuda_to_bf16(p, src, n);
    return p;
}

// C = alpha op(A) op(B) + beta C, cuBLAS's column-major view, with A and B bf16 or fp32 and C
// fp32, or with bf16 A and B, bf16 C (bf16_out: the fp32 sum rounded once as it is stored).
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                 const void *B, int ldb, float beta, void *C, int ldc, int bf16_in, int bf16_out) {
    CudaContext *c = cuda_context();
    const float one = 1.0f;
    if (!bf16_in) {
        cublasCheck(blas.cublasSgemm(c->cublas, ta, tb, m, n, k, &one, (const float *)A, lda, (const float *)B, ldb, &beta,
                                (float *)C, ldc));
        return;
    }
    cublasCheck(blas.cublasGemmEx(c->cublas, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C,
                             bf16_out ? CUDA_R_16BF : CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The forward pass with the input in fp32 (inp) or given as bf16 (inp16, linear_forward_bf16:
// multiplied as it is, no copy), into fp32 out or, with bf16_out (linear_forward_bf16_out), bf16
// out, whose bias is then a bf16 copy and whose fp32 sum is rounded once as it is stored.
static void linear_forward_in(void *out, const float *inp, const bf16 *inp16, const float *weight, const float *bias,
                              int N, int IC, int OC, int bf16_in, int bf16_out, float *scratch) {
    CudaContext *c = cuda_context();
    if (N == 0 || OC == 0) return;
    const void *w = weight, *x = inp, *b = bias;  // fp32: cuBLAS reads W transposed in place, no scratch
    size_t used = 0;
    if (bf16_in) {
        w = bf16_copy(scratch, &used, weight, (size_t)OC * IC);
        x = inp16 ? (const void *)inp16 : bf16_copy(scratch, &used, inp, (size_t)N * IC);
    }
    if (bias && bf16_out) b = bf16_copy(scratch, &used, bias, (size_t)OC);
    // Row-major out[N,OC] = inp[N,IC] W^T, read by cuBLAS as out^T[OC,N] = W[OC,IC] inp^T[IC,N]:
    // W is stored as column-major W^T[IC,OC] (ld IC), so op T gives W; inp is stored as
    // column-major inp^T[IC,N] (ld IC), op N. The bias, one value per row of out^T, is added
    // as the product is stored (lt.cu); where cuBLASLt cannot, it is written across out first
    // and the product added to it (beta = 1; beta = 0 without a bias ignores out).
    if (b && cuda_gemm_bias(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w, IC, x, IC, out, OC, b, bf16_in, bf16_out)) return;
    if (b) {
        unsigned blocks = blocks_for((size_t)N * OC, THREADS);
        if (bf16_out) broadcast_rows_kernel<<<blocks, THREADS, 0, c->stream>>>((bf16 *)out, (const bf16 *)b, N, OC);
        else broadcast_rows_kernel<<<blocks, THREADS, 0, c->stream>>>((float *)out, (const float *)b, N, OC);
        cudaCheck(cudaGetLastError());
    }
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w, IC, x, IC, b ? 1.0f : 0.0f, out, OC, bf16_in, bf16_out);
}

static void cuda_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int IC,
                                int OC, int bf16_in, float *scratch) {
    linear_forward_in(out, inp, NULL, weight, bias, N, IC, OC, bf16_in, 0, scratch);
}

static void cuda_linear_forward_bf16(float *out, const bf16 *inp, const float *weight, const float *bias, int N,
                                     int IC, int OC, float *scratch) {
    linear_forward_in(out, NULL, inp, weight, bias, N, IC, OC, 1, 0, scratch);
}

static void cuda_linear_forward_bf16_out(bf16 *out, const bf16 *inp, const float *weight, const float *bias, int N,
                                         int IC, int OC, float *scratch) {
    linear_forward_in(out, NULL, inp, weight, bias, N, IC, OC, 1, 1, scratch);
}

static void linear_backward_in(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const bf16 *inp16, const float *weight, int N, int IC, int OC, int bf16_in,
                               float *scratch) {
    const void *d = dout, *x = inp, *w = weight;
    if (bf16_in) {
        // dout's bf16 copy made by the bias gradient's column sums as they read dout (of the
        // fp32 dout, as on the CPU): one read of dout for both, where each read it once.
        size_t used = 0;
        bf16 *d16 = bf16_part(scratch, &used, (size_t)N * OC);
        if (dbias) column_sums_copy(dbias, dout, d16, N, OC);
        else cuda_to_bf16(d16, dout, (size_t)N * OC);
        d = d16;
        x = inp16 ? (const void *)inp16 : bf16_copy(scratch, &used, inp, (size_t)N * IC);
        w = bf16_copy(scratch, &used, weight, (size_t)OC * IC);
    }
    // Row-major dinp[N,IC] = dout[N,OC] W[OC,IC], read as dinp^T[IC,N] = W^T[IC,OC] dout^T[OC,N]:
    // both are stored exactly so (ld IC and ld OC), op N twice. beta = 0: overwritten.
    if (dinp) gemm(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w, IC, d, OC, 0.0f, dinp, IC, bf16_in, 0);
    // Row-major dW[OC,IC] += dout^T[OC,N] inp[N,IC], read as dW^T[IC,OC] += inp^T[IC,N] dout[N,OC]:
    // inp is stored as inp^T (ld IC), op N; dout is stored as dout^T[OC,N] (ld OC), op T gives
    // dout. beta = 1: accumulated. (K = N = 0 leaves dW as it is, as on the CPU.)
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, x, IC, d, OC, 1.0f, dweight, IC, bf16_in, 0);
    if (dbias && !bf16_in) cuda_column_sums(dbias, dout, N, OC);  // (bf16: above)
}

static void cuda_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *weight, int N, int IC, int OC, int bf16_in, float *scratch) {
    linear_backward_in(dinp, dweight, dbias, dout, inp, NULL, weight, N, IC, OC, bf16_in, scratch);
}

static void cuda_linear_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                                      const float *weight, int N, int IC, int OC, float *scratch) {
    linear_backward_in(dinp, dweight, dbias, dout, NULL, inp, weight, N, IC, OC, 1, scratch);
}

// ---------------------------------------------------------------------------------------
// LayerNorm, eps 1e-5 (as ops.c). One warp per row for the row statistics; the column sums'
// two passes (above) for the parameter gradients, which sum over rows.
// ---------------------------------------------------------------------------------------

static const float LAYERNORM_EPS = 1e-5f;

// Out: float, or bf16 (layernorm_forward_bf16: the same fp32 value, rounded as to_bf16 rounds).
__device__ static inline void store_out(float *p, float v) { *p = v; }
__device__ static inline void store_out(bf16 *p, float v) { *p = bf16_from_float(v); }

template <typename Out>
__global__ static void layernorm_forward_kernel(Out *out, float *mean, float *rstd, const float *inp, const float *w,
                                                const float *b, int N, int C) {
    size_t n = warp_row();
    if (n >= (size_t)N) return;  // the whole warp leaves together
    int lane = threadIdx.x % WARP;
    const float *x = inp + n * C;
    Out *y = out + n * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += WARP) sum += x[i];
    float m = warp_sum(sum) / (float)C;
    float sq = 0.0f;  // two passes, as ops.c: the variance of x - mean, not E[x^2] - mean^2
    for (int i = lane; i < C; i += WARP) sq += (x[i] - m) * (x[i] - m);
    float var = warp_sum(sq) / (float)C;
    float s = 1.0f / sqrtf(var + LAYERNORM_EPS);
    for (int i = lane; i < C; i += WARP) store_out(&y[i], (x[i] - m) * s * w[i] + b[i]);
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

template <typename Out>
static void layernorm_forward_as(Out *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                                 int N, int C) {
    if (N == 0) return;
    layernorm_forward_kernel<Out><<<warp_blocks_for((size_t)N), WARP_BLOCK_THREADS, 0, compute_stream()>>>(
        out, mean, rstd, inp, w, b, N, C);
    cudaCheck(cudaGetLastError());
}

static void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                   const float *b, int N, int C) {
    layernorm_forward_as(out, mean, rstd, inp, w, b, N, C);
}

static void cuda_layernorm_forward_bf16(bf16 *out, float *mean, float *rstd, const float *inp, const float *w,
                                        const float *b, int N, int C) {
    layernorm_forward_as(out, mean, rstd, inp, w, b, N, C);
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
// Elementwise: GELU (tanh form, gelu.h: the CPU's), residual add. No pointer is __restrict__: dinp
// may be dout, out may be a or b, and each thread reads its element before writing it.
// ---------------------------------------------------------------------------------------

__global__ static void gelu_forward_kernel(float *out, const float *inp, int n) {
    size_t i = thread_index();
    if (i < (size_t)n) out[i] = gelu_value(inp[i]);
}

__global__ static void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, int n) {
    size_t i = thread_index();
    if (i < (size_t)n) dinp[i] = gelu_slope(inp[i]) * dout[i];
}

__global__ static void gelu_forward_bf16_kernel(bf16 *out, const bf16 *inp, int n) {
    size_t i = thread_index();
    if (i < (size_t)n) out[i] = bf16_from_float(gelu_value(bf16_to_float(inp[i])));
}

__global__ static void gelu_backward_bf16_kernel(float *dinp, const bf16 *inp, const float *dout, int n) {
    size_t i = thread_index();
    if (i < (size_t)n) dinp[i] = gelu_slope(bf16_to_float(inp[i])) * dout[i];
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

static void cuda_gelu_forward_bf16(bf16 *out, const bf16 *inp, int n) {
    if (n <= 0) return;
    gelu_forward_bf16_kernel<<<blocks_for((size_t)n, THREADS), THREADS, 0, compute_stream()>>>(out, inp, n);
    cudaCheck(cudaGetLastError());
}

static void cuda_gelu_backward_bf16(float *dinp, const bf16 *inp, const float *dout, int n) {
    if (n <= 0) return;
    gelu_backward_bf16_kernel<<<blocks_for((size_t)n, THREADS), THREADS, 0, compute_stream()>>>(dinp, inp, dout, n);
    cudaCheck(cudaGetLastError());
}

static void cuda_residual_add(float *out, const float *a, const float *b, int n) {
    if (n <= 0) return;
    residual_add_kernel<<<blocks_for((size_t)n, THREADS), THREADS, 0, compute_stream()>>>(out, a, b, n);
    cudaCheck(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------

static const Ops cuda_table = {
    .name = "cuda",
    .linear_forward = cuda_linear_forward,
    .linear_backward = cuda_linear_backward,
    .linear_forward_bf16 = cuda_linear_forward_bf16,
    .linear_backward_bf16 = cuda_linear_backward_bf16,
    .linear_forward_bf16_out = cuda_linear_forward_bf16_out,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_forward_bf16 = cuda_layernorm_forward_bf16,
    .layernorm_backward = cuda_layernorm_backward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .flash_attention_forward = cuda_flash_attention_forward,
    .flash_attention_backward = cuda_flash_attention_backward,
    .flash_attention_forward_bf16 = cuda_flash_attention_forward_bf16,
    .flash_attention_backward_bf16 = cuda_flash_attention_backward_bf16,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .gelu_forward_bf16 = cuda_gelu_forward_bf16,
    .gelu_backward_bf16 = cuda_gelu_backward_bf16,
    .residual_add = cuda_residual_add,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward = cuda_embedding_backward,
    .crossentropy_forward = cuda_crossentropy_forward,
    .crossentropy_backward = cuda_crossentropy_backward,
    .adamw_update = cuda_adamw_update,
    .sum_of_squares = cuda_sum_of_squares,
    .sum_of_squares_buffers = cuda_sum_of_squares_buffers,
    .sum_of_squares_buffers_bf16 = cuda_sum_of_squares_buffers_bf16,
    .scale_floats = cuda_scale_floats,
    .zero = cuda_zero,
    .copy = cuda_copy_floats,
    .to_bf16 = cuda_to_bf16,
    .from_bf16 = cuda_from_bf16,
    .add_bf16 = cuda_add_bf16,
    .acc_bf16 = cuda_acc_bf16,
    .use_workspace = cuda_use_workspace,
    // --moe runs on the CPU only (its router and dispatch are host loops): args.c refuses it here.
    .moe_forward = NULL,
    .moe_backward = NULL,
};

extern "C" const Ops *cuda_ops(void) { return &cuda_table; }
