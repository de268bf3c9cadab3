// attention.cu — causal self-attention on the GPU, naive: the kernels behind cuda_ops()'s
// attention_forward and attention_backward (ops.h's contract; the math and the CPU version are
// in attention.c). Flash attention is flash.cu's.
//
// Defines (context.cuh): cuda_attention_forward(), cuda_attention_backward().
//
// The products go to cuBLAS as strided batches over the heads; the causal softmax and its
// backward are kernels here. The rules every kernel keeps (determinism, one stream) and how a
// row-major matrix reads to column-major cuBLAS are at the top of ops.cu.
#include <math.h>

#include "context.cuh"

// ---------------------------------------------------------------------------------------
// Causal self-attention, naive (math in attention.c): the [T,T] matrices of every head are
// written out, so the work is three kinds of matrix product and a softmax per row. The
// products go to cuBLAS, a batch of the NH heads of one sequence per call; the softmax and
// its backward are one warp per row (b,h,t), reading and writing along the row.
//
// qkv is [B,T,3C]; head h of token (b,t) has its q, k, v at columns h*hs, C + h*hs, 2C + h*hs
// of row b*T + t. So head h's Q is a [T,hs] matrix with row stride 3C starting at column h*hs,
// and the next head's starts hs floats further: cuBLAS's strided batch, stride hs, over NH
// heads (one call per sequence b, whose heads start T*3C floats after the previous one's).
// Read as column-major (ops.cu's top), Q_h is [hs,T] with leading dimension 3C; att's block
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
        cublasCheck(blas.cublasSgemmStridedBatched(c->cublas, ta, tb, m, n, k, &alpha, A + b * seq_a, lda, stride_a,
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

void cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    int hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);  // as attention.c computes it
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

void cuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int C,
                             int NH, float *scratch) {
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
