// flash_tc.cu — flash attention on the tensor cores, for --tf32: flash.cu's algorithm with the
// products of each tile as TF32 multiply-accumulates (ops.h's contract; the algorithm, its
// picture and the CPU version are in attention.c).
//
// Defines (context.cuh): cuda_flash_tc_usable(), cuda_flash_tc_forward(), cuda_flash_tc_backward().
//
// The products of each tile (S = Q K^T and O += P V forward; S, dP = dO V^T, dQ += dS K,
// dV += P^T dO and dK += dS^T Q backward) run on the tensor cores as 16 x 16 x 8 TF32
// multiply-accumulates (nvcuda::wmma: a warp multiplies a 16 x 8 by an 8 x 16 tile in one
// instruction); what lies between them (the online softmax, P, dS) is done by the warp's
// lanes on the tile, in shared memory:
//
//     block: 64 rows of one head (4 warps x 16)       shared memory, rows padded by 4 floats
//     warp w: rows 16w .. 16w+15                        its own side: Q (and dO), or K and V
//       S_w = Q_w K^T           16 x 64  tensor cores   the other side: a tile of 64 rows
//       P_w = softmax rows      lanes 2r, 2r+1: row r   S_w (and dP_w): 16 x 64 per warp
//       O_w = O_w corr + P_w V  16 x HSP tensor cores   O_w: 16 x HSP per warp (forward)
//
// The operands are rounded to TF32 (10 bits of mantissa) as they enter a product, which adds
// in fp32; the softmax, lse, D and the accumulators stay fp32. Like --tf32's other products
// the results then differ from the CPU's by more than rounding (test_cuda_ops bounds them).
// Heads up to 128 channels, where the GPU lends a block the shared memory
// (cuda_flash_tc_usable); the others use flash.cu's kernels.
#include <math.h>

#include <mma.h>

#include "context.cuh"

namespace {

// Blocks of rows_per_block rows over T rows (as flash.cu's).
unsigned row_blocks(int T, int rows_per_block) { return (unsigned)((T + rows_per_block - 1) / rows_per_block); }

namespace tc {

using namespace nvcuda;

const int WARPS = 4, THREADS = WARPS * 32;
const int ROWS = 16 * WARPS;  // the block's own rows
const int TILE = 64;          // rows of the other side per tile
const int SLD = TILE + 4;     // a warp's 16 x 64 score tile's row length (padded: fewer bank conflicts)

typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> FragBt;
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> FragC;

template <typename F>
__device__ void round_tf32(F &f) {
#pragma unroll
    for (int i = 0; i < f.num_elements; i++) f.x[i] = wmma::__float_to_tf32(f.x[i]);
}

// One step of the products below: c (16 x 16) += a's 16 x 8 slice at a (row length lda)
// times b's 8 x 16 slice at b (read as FragB, row-major, or FragBt, transposed; row length
// ldb), both rounded to TF32 first.
template <typename FragBLayout>
__device__ void mma_step(FragC &c, const float *a, int lda, const float *b, int ldb) {
    FragA fa;
    FragBLayout fb;
    wmma::load_matrix_sync(fa, a, lda);
    wmma::load_matrix_sync(fb, b, ldb);
    round_tf32(fa), round_tf32(fb);
    wmma::mma_sync(c, fa, fb, c);
}

// c (16 x 16) += a (16 x K, row-major, row length lda) times b^T, b given as 16 rows of K
// (row-major, row length ldb): the product with a tile's rows, as in Q K^T.
template <int K>
__device__ void mma_abt(FragC &c, const float *a, int lda, const float *b, int ldb) {
#pragma unroll
    for (int k = 0; k < K; k += 8) mma_step<FragBt>(c, a + k, lda, b + k, ldb);
}

// c (16 x 16) += a (16 x K, row-major) times b (K x 16, row-major, row length ldb): as in P V.
template <int K>
__device__ void mma_ab(FragC &c, const float *a, int lda, const float *b, int ldb) {
#pragma unroll
    for (int k = 0; k < K; k += 8) mma_step<FragB>(c, a + k, lda, b + (size_t)k * ldb, ldb);
}

// out (16 x 16, row length SLD) = a (16 x K) times b^T: one block of a warp's score tile.
template <int K>
__device__ void abt_block(float *out, const float *a, int lda, const float *b, int ldb) {
    FragC c;
    wmma::fill_fragment(c, 0.0f);
    mma_abt<K>(c, a, lda, b, ldb);
    wmma::store_matrix_sync(out, c, SLD, wmma::mem_row_major);
}

// tile[r][c] (row length LD) = the head's channel c of token u0 + r for r < n, from src as in
// flash.cu's stage_rows; 0 past hs and past T.
template <int HSP>
__device__ void stage(float *tile, int n, const float *src, size_t stride, int b, int u0, int T, int hs) {
    constexpr int LD = HSP + 4;
    for (int i = threadIdx.x; i < n * HSP; i += THREADS) {
        int r = i / HSP, c = i % HSP, u = u0 + r;
        tile[r * LD + c] = u < T && c < hs ? src[((size_t)b * T + u) * stride + c] : 0.0f;
    }
}

// Shared memory of each kernel, in floats (more than the static 48 KiB: set per kernel).
template <int HSP>
constexpr size_t forward_floats() { return (size_t)(ROWS + 2 * TILE + ROWS) * (HSP + 4) + WARPS * 16 * SLD; }
template <int HSP>
constexpr size_t backward_floats() { return (size_t)(2 * ROWS + 2 * TILE) * (HSP + 4) + 2 * WARPS * 16 * SLD + 2 * TILE; }

template <int HSP>
__global__ void __launch_bounds__(THREADS) forward_kernel(float *out, float *lse, const float *qkv, int T, int C,
                                                          int NH, float scale) {
    constexpr int LD = HSP + 4;
    extern __shared__ __align__(128) float smem[];
    float *q_tile = smem, *k_tile = q_tile + ROWS * LD, *v_tile = k_tile + TILE * LD, *o_all = v_tile + TILE * LD;
    float *s_all = o_all + ROWS * LD;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hs = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
    const int row0 = blockIdx.y * ROWS, last = min(T - 1, row0 + ROWS - 1), t = row0 + warp * 16 + r;
    float *q_w = q_tile + warp * 16 * LD, *o_w = o_all + warp * 16 * LD, *s_w = s_all + warp * 16 * SLD;
    float *s_row = s_w + r * SLD + half * 32, *o_row = o_w + r * LD;
    float m = -INFINITY, l = 0.0f;  // row t's running max and sum, kept by both its lanes

    stage<HSP>(q_tile, ROWS, qkv + (size_t)h * hs, 3 * (size_t)C, b, row0, T, hs);
    for (int i = lane; i < 16 * LD; i += 32) o_w[i] = 0.0f;
    for (int u0 = 0; u0 <= last; u0 += TILE) {
        __syncthreads();  // the block is done with the last tiles
        stage<HSP>(k_tile, TILE, qkv + C + (size_t)h * hs, 3 * (size_t)C, b, u0, T, hs);
        stage<HSP>(v_tile, TILE, qkv + 2 * C + (size_t)h * hs, 3 * (size_t)C, b, u0, T, hs);
        __syncthreads();
#pragma unroll 1
        for (int n = 0; n < TILE; n += 16) {  // S_w = Q_w K^T
            abt_block<HSP>(s_w + n, q_w, LD, k_tile + n * LD, LD);
        }
        __syncwarp();
        // Row t's scores in this tile (its lane's 32 of them), the online softmax, P in place.
        float tile_max = -INFINITY;
        for (int j = 0; j < 32; j++) {
            int u = u0 + half * 32 + j;
            float sc = u <= t && u < T ? s_row[j] * scale : -INFINITY;
            s_row[j] = sc;
            tile_max = fmaxf(tile_max, sc);
        }
        float m_new = fmaxf(m, fmaxf(tile_max, __shfl_xor_sync(FULL_MASK, tile_max, 1)));
        float correction = expf(m - m_new), sum = 0.0f;  // key 0 is in the first tile: m_new is finite
        for (int j = 0; j < 32; j++) {
            float p = expf(s_row[j] - m_new);
            s_row[j] = p;
            sum += p;
        }
        l = l * correction + sum + __shfl_xor_sync(FULL_MASK, sum, 1);
        m = m_new;
        for (int c = half; c < HSP; c += 2) o_row[c] *= correction;
        __syncwarp();
#pragma unroll
        for (int n = 0; n < HSP; n += 16) {  // O_w += P_w V
            FragC c;
            wmma::load_matrix_sync(c, o_w + n, LD, wmma::mem_row_major);
            mma_ab<TILE>(c, s_w, SLD, v_tile + n, LD);
            wmma::store_matrix_sync(o_w + n, c, LD, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (t >= T) return;
    float inv = 1.0f / l;
    for (int c = half; c < hs; c += 2) out[((size_t)b * T + t) * C + (size_t)h * hs + c] = o_row[c] * inv;
    if (half == 0) lse[(size_t)bh * T + t] = m + logf(l);
}

// Step 1, by query rows: D_t = do_t . o_t; dQ_w = scale sum over key tiles of dS_w K.
template <int HSP>
__global__ void __launch_bounds__(THREADS) backward_dq_kernel(float *dqkv, float *D, const float *dout,
                                                              const float *qkv, const float *out, const float *lse,
                                                              int T, int C, int NH, float scale) {
    constexpr int LD = HSP + 4;
    extern __shared__ __align__(128) float smem[];
    float *q_tile = smem, *do_tile = q_tile + ROWS * LD, *k_tile = do_tile + ROWS * LD, *v_tile = k_tile + TILE * LD;
    float *s_all = v_tile + TILE * LD, *dp_all = s_all + WARPS * 16 * SLD;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hs = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
    const int row0 = blockIdx.y * ROWS, last = min(T - 1, row0 + ROWS - 1), t = row0 + warp * 16 + r;
    float *q_w = q_tile + warp * 16 * LD, *do_w = do_tile + warp * 16 * LD;
    float *s_w = s_all + warp * 16 * SLD, *dp_w = dp_all + warp * 16 * SLD;
    float *s_row = s_w + r * SLD + half * 32, *dp_row = dp_w + r * SLD + half * 32;

    stage<HSP>(q_tile, ROWS, qkv + (size_t)h * hs, 3 * (size_t)C, b, row0, T, hs);
    stage<HSP>(do_tile, ROWS, dout + (size_t)h * hs, (size_t)C, b, row0, T, hs);
    float d = 0.0f;
    if (t < T)
        for (int c = half; c < hs; c += 2)
            d += dout[((size_t)b * T + t) * C + (size_t)h * hs + c] * out[((size_t)b * T + t) * C + (size_t)h * hs + c];
    const float Dt = d + __shfl_xor_sync(FULL_MASK, d, 1);
    const float lse_t = t < T ? lse[(size_t)bh * T + t] : 0.0f;
    if (t < T && half == 0) D[(size_t)bh * T + t] = Dt;

    FragC dq[HSP / 16];
#pragma unroll
    for (int i = 0; i < HSP / 16; i++) wmma::fill_fragment(dq[i], 0.0f);
    for (int u0 = 0; u0 <= last; u0 += TILE) {
        __syncthreads();
        stage<HSP>(k_tile, TILE, qkv + C + (size_t)h * hs, 3 * (size_t)C, b, u0, T, hs);
        stage<HSP>(v_tile, TILE, qkv + 2 * C + (size_t)h * hs, 3 * (size_t)C, b, u0, T, hs);
        __syncthreads();
#pragma unroll 1
        for (int n = 0; n < TILE; n += 16) {  // S_w = Q_w K^T, dP_w = dO_w V^T
            abt_block<HSP>(s_w + n, q_w, LD, k_tile + n * LD, LD);
            abt_block<HSP>(dp_w + n, do_w, LD, v_tile + n * LD, LD);
        }
        __syncwarp();
        for (int j = 0; j < 32; j++) {  // dS = P (dP - D), in place of S
            int u = u0 + half * 32 + j;
            float p = t < T && u <= t ? expf(s_row[j] * scale - lse_t) : 0.0f;
            s_row[j] = p * (dp_row[j] - Dt);
        }
        __syncwarp();
#pragma unroll
        for (int i = 0; i < HSP / 16; i++) mma_ab<TILE>(dq[i], s_w, SLD, k_tile + 16 * i, LD);  // dQ_w += dS_w K
    }
    // Through this warp's own rows of q_tile (no longer read) to the rows of dqkv.
#pragma unroll
    for (int i = 0; i < HSP / 16; i++) wmma::store_matrix_sync(q_w + 16 * i, dq[i], LD, wmma::mem_row_major);
    __syncwarp();
    if (t < T)
        for (int c = half; c < hs; c += 2) dqkv[((size_t)b * T + t) * 3 * C + (size_t)h * hs + c] = q_w[r * LD + c] * scale;
}

// Step 2, by key rows: dV_w = sum over query tiles of P^T dO, dK_w = scale sum of dS^T Q.
template <int HSP>
__global__ void __launch_bounds__(THREADS) backward_dkv_kernel(float *dqkv, const float *D, const float *dout,
                                                               const float *qkv, const float *lse, int T, int C,
                                                               int NH, float scale) {
    constexpr int LD = HSP + 4;
    extern __shared__ __align__(128) float smem[];
    float *k_tile = smem, *v_tile = k_tile + ROWS * LD, *q_tile = v_tile + ROWS * LD, *do_tile = q_tile + TILE * LD;
    float *st_all = do_tile + TILE * LD, *dpt_all = st_all + WARPS * 16 * SLD;
    float *lse_tile = dpt_all + WARPS * 16 * SLD, *D_tile = lse_tile + TILE;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hs = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
    const int row0 = blockIdx.y * ROWS, u = row0 + warp * 16 + r;  // the key of row r
    float *k_w = k_tile + warp * 16 * LD, *v_w = v_tile + warp * 16 * LD;
    float *st_w = st_all + warp * 16 * SLD, *dpt_w = dpt_all + warp * 16 * SLD;
    float *st_row = st_w + r * SLD + half * 32, *dpt_row = dpt_w + r * SLD + half * 32;

    stage<HSP>(k_tile, ROWS, qkv + C + (size_t)h * hs, 3 * (size_t)C, b, row0, T, hs);
    stage<HSP>(v_tile, ROWS, qkv + 2 * C + (size_t)h * hs, 3 * (size_t)C, b, row0, T, hs);
    FragC dk[HSP / 16], dv[HSP / 16];
#pragma unroll
    for (int i = 0; i < HSP / 16; i++) wmma::fill_fragment(dk[i], 0.0f), wmma::fill_fragment(dv[i], 0.0f);
    for (int t0 = row0; t0 < T; t0 += TILE) {  // queries before row0 see none of these keys
        __syncthreads();
        stage<HSP>(q_tile, TILE, qkv + (size_t)h * hs, 3 * (size_t)C, b, t0, T, hs);
        stage<HSP>(do_tile, TILE, dout + (size_t)h * hs, (size_t)C, b, t0, T, hs);
        for (int i = threadIdx.x; i < TILE; i += THREADS) {
            bool in = t0 + i < T;
            lse_tile[i] = in ? lse[(size_t)bh * T + t0 + i] : 0.0f;
            D_tile[i] = in ? D[(size_t)bh * T + t0 + i] : 0.0f;
        }
        __syncthreads();
#pragma unroll 1
        for (int n = 0; n < TILE; n += 16) {  // S^T_w = K_w Q^T, dP^T_w = V_w dO^T
            abt_block<HSP>(st_w + n, k_w, LD, q_tile + n * LD, LD);
            abt_block<HSP>(dpt_w + n, v_w, LD, do_tile + n * LD, LD);
        }
        __syncwarp();
        for (int j = 0; j < 32; j++) {  // P^T in place of S^T, dS^T in place of dP^T
            int i = half * 32 + j, t = t0 + i;
            float p = u < T && t < T && t >= u ? expf(st_row[j] * scale - lse_tile[i]) : 0.0f;
            st_row[j] = p;
            dpt_row[j] = p * (dpt_row[j] - D_tile[i]);
        }
        __syncwarp();
#pragma unroll
        for (int i = 0; i < HSP / 16; i++) {
            mma_ab<TILE>(dv[i], st_w, SLD, do_tile + 16 * i, LD);  // dV_w += P^T dO
            mma_ab<TILE>(dk[i], dpt_w, SLD, q_tile + 16 * i, LD);  // dK_w += dS^T Q
        }
    }
    // Through this warp's own rows of k_tile and v_tile to the rows of dqkv.
#pragma unroll
    for (int i = 0; i < HSP / 16; i++) {
        wmma::store_matrix_sync(k_w + 16 * i, dk[i], LD, wmma::mem_row_major);
        wmma::store_matrix_sync(v_w + 16 * i, dv[i], LD, wmma::mem_row_major);
    }
    __syncwarp();
    if (u >= T) return;
    float *dk_row = dqkv + ((size_t)b * T + u) * 3 * C + C + (size_t)h * hs;
    for (int c = half; c < hs; c += 2) dk_row[c] = k_w[r * LD + c] * scale, dk_row[C + c] = v_w[r * LD + c];
}

// Kernels that take more than 48 KiB of shared memory must say so, once.
template <typename K>
void allow_shared(K kernel, size_t bytes) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int HSP>
void forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, float scale, cudaStream_t s) {
    static bool ready = false;
    size_t bytes = forward_floats<HSP>() * sizeof(float);
    if (!ready) allow_shared(forward_kernel<HSP>, bytes), ready = true;
    dim3 grid((unsigned)(B * NH), row_blocks(T, ROWS));
    forward_kernel<HSP><<<grid, THREADS, bytes, s>>>(out, lse, qkv, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
}

template <int HSP>
void backward(float *dqkv, float *D, const float *dout, const float *qkv, const float *out, const float *lse, int B,
              int T, int C, int NH, float scale, cudaStream_t s) {
    static bool ready = false;
    size_t bytes = backward_floats<HSP>() * sizeof(float);
    if (!ready) allow_shared(backward_dq_kernel<HSP>, bytes), allow_shared(backward_dkv_kernel<HSP>, bytes), ready = true;
    dim3 grid((unsigned)(B * NH), row_blocks(T, ROWS));
    backward_dq_kernel<HSP><<<grid, THREADS, bytes, s>>>(dqkv, D, dout, qkv, out, lse, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
    backward_dkv_kernel<HSP><<<grid, THREADS, bytes, s>>>(dqkv, D, dout, qkv, lse, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
}

}  // namespace tc

}  // namespace

// Whether --tf32's kernels run for heads padded to hsp: up to 128 channels, and where the
// GPU lends a block the shared memory they take (an H100 228 KiB, an A100 164: not at 128).
bool cuda_flash_tc_usable(const CudaContext *ctx, int hsp) {
    size_t need = 0;
    switch (hsp) {
    case 16: need = tc::backward_floats<16>(); break;
    case 32: need = tc::backward_floats<32>(); break;
    case 64: need = tc::backward_floats<64>(); break;
    case 128: need = tc::backward_floats<128>(); break;
    default: return false;
    }
    static int optin = -1;  // read once: a process drives one GPU (context.cuh)
    if (optin < 0) cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->ordinal));
    return ctx->tf32 && need * sizeof(float) <= (size_t)optin;
}

void cuda_flash_tc_forward(int hsp, float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                           float scale, cudaStream_t s) {
    switch (hsp) {
    case 16: tc::forward<16>(out, lse, qkv, B, T, C, NH, scale, s); break;
    case 32: tc::forward<32>(out, lse, qkv, B, T, C, NH, scale, s); break;
    case 64: tc::forward<64>(out, lse, qkv, B, T, C, NH, scale, s); break;
    default: tc::forward<128>(out, lse, qkv, B, T, C, NH, scale, s); break;
    }
}

void cuda_flash_tc_backward(int hsp, float *dqkv, float *D, const float *dout, const float *qkv, const float *out,
                            const float *lse, int B, int T, int C, int NH, float scale, cudaStream_t s) {
    switch (hsp) {
    case 16: tc::backward<16>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    case 32: tc::backward<32>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    case 64: tc::backward<64>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    default: tc::backward<128>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    }
}
