// flash.cu — flash attention on the GPU: the kernels behind cuda_ops()'s
// flash_attention_forward and flash_attention_backward (ops.h's contract; the algorithm, its
// picture and the CPU version are in ops.c).
//
// Defines (context.cuh): cuda_flash_attention_forward(), cuda_flash_attention_backward(),
//                        cuda_flash_head_size_ok().
//
// How the algorithm maps onto the GPU. One block takes one head (b, h) and a run of R rows
// of its T x T score matrix: query rows for the forward pass and for dq, key rows (columns)
// for dk and dv. Each row belongs to G neighbouring lanes of a warp, "a group":
//
//     block (b, h, rows r0 .. r0+R-1)           shared memory: a tile of BC rows of the
//     +----------+----------+-----             other side (keys and values, or queries,
//     | group 0  | group 1  |  ...             do, lse and D), loaded by the whole block,
//     | row r0   | row r0+1 |                  then read by every group (a broadcast)
//     | G lanes  | G lanes  |
//     +----------+----------+-----             registers: the group's own row vectors
//                                              (q and o; or q, do and dq; or k, v, dk, dv)
//
// A row's head vectors never leave registers: lane g of a group holds the channels
// c = 4 (j G + g) .. 4 (j G + g) + 3 for j = 0, 1, ..., so the G lanes of a group read G
// consecutive 16-byte words of a shared-memory row at once (no bank conflicts), and a dot
// product is each lane's partial sum plus a butterfly over the group's G lanes. The head
// size hs is rounded up to HSP, one of 16, 32, ..., 1024, with zeros in the channels past hs;
// G grows with HSP so that a lane never holds more than 64 (forward) or 32 (backward)
// channels of each vector.
//
// The causal mask and the ragged ends are handled by VALUE, not by control flow: every group
// of a block walks the same keys (up to the block's last row), and a key a row must not see
// gets a score of -inf (forward) or a probability of 0 (backward). So all lanes of a warp
// always reach the same shuffles, and a row past T computes harmlessly on zeros and writes
// nothing.
//
// Determinism: every sum runs in a fixed order (keys or queries in increasing order, lanes'
// partial sums by a fixed butterfly), and the backward pass is two kernels that each gather
// what they own, dq by query rows, dk and dv by key rows, with no atomics: the same inputs
// give the same bits on every run. Both kernels recompute P = exp(S - lse) from the same
// products in the same order, so they agree on it bit for bit.
#include <math.h>

#include <mma.h>

#include "context.cuh"

namespace {

const unsigned FULL_MASK = 0xffffffffu;
const int BLOCK = 128;  // threads per block

// Lanes per row: a lane holds at most 64 channels of a vector in the forward pass (q and o:
// 128 registers) and 32 in the backward passes (up to four vectors: k, v, dk and dv).
__host__ __device__ constexpr int forward_group(int hsp) { return hsp <= 64 ? 1 : hsp / 64; }
__host__ __device__ constexpr int backward_group(int hsp) { return hsp <= 32 ? 1 : hsp / 32; }
// Rows of the other side staged per tile: two tiles of BC x HSP floats fill 32 KiB at most.
__host__ __device__ constexpr int tile_rows(int hsp) { return 4096 / hsp < 64 ? 4096 / hsp : 64; }
// Keys per step of the online softmax (a tile is walked in chunks of this many).
__host__ __device__ constexpr int chunk_keys(int hsp) { return tile_rows(hsp) < 16 ? tile_rows(hsp) : 16; }

__device__ float4 zero4() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
__device__ void axpy4(float4 &y, float a, float4 x) {
    y.x += a * x.x, y.y += a * x.y, y.z += a * x.z, y.w += a * x.w;
}
__device__ void scale4(float4 &y, float a) { y.x *= a, y.y *= a, y.z *= a, y.w *= a; }

// The sum over a group's G lanes (consecutive, starting at a multiple of G, so xor by less
// than G stays inside the group); every lane of the group gets the same bits.
template <int G>
__device__ float group_sum(float x) {
#pragma unroll
    for (int offset = G / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(FULL_MASK, x, offset);
    return x;
}

// Lane g's share of a head vector: x[j] = channels 4 (j G + g) .. +3 of src (0 past hs, and
// all 0 when src is NULL: a row past T).
template <int HSP, int G>
__device__ void load_row(float4 (&x)[HSP / (4 * G)], const float *src, int hs, int g) {
#pragma unroll
    for (int j = 0; j < HSP / (4 * G); j++) {
        int c = 4 * (j * G + g);
        x[j].x = src && c + 0 < hs ? src[c + 0] : 0.0f;
        x[j].y = src && c + 1 < hs ? src[c + 1] : 0.0f;
        x[j].z = src && c + 2 < hs ? src[c + 2] : 0.0f;
        x[j].w = src && c + 3 < hs ? src[c + 3] : 0.0f;
    }
}

// dst's channels below hs = a * x.
template <int HSP, int G>
__device__ void store_row(float *dst, const float4 (&x)[HSP / (4 * G)], float a, int hs, int g) {
#pragma unroll
    for (int j = 0; j < HSP / (4 * G); j++) {
        int c = 4 * (j * G + g);
        if (c + 0 < hs) dst[c + 0] = a * x[j].x;
        if (c + 1 < hs) dst[c + 1] = a * x[j].y;
        if (c + 2 < hs) dst[c + 2] = a * x[j].z;
        if (c + 3 < hs) dst[c + 3] = a * x[j].w;
    }
}

// x . row for a row of a shared tile (HSP floats, 16-byte aligned), summed over the group.
template <int HSP, int G>
__device__ float dot_row(const float4 (&x)[HSP / (4 * G)], const float *row, int g) {
    const float4 *r4 = reinterpret_cast<const float4 *>(row);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < HSP / (4 * G); j++) s += dot4(x[j], r4[j * G + g]);
    return group_sum<G>(s);
}

// y += a * row
template <int HSP, int G>
__device__ void axpy_row(float4 (&y)[HSP / (4 * G)], float a, const float *row, int g) {
    const float4 *r4 = reinterpret_cast<const float4 *>(row);
#pragma unroll
    for (int j = 0; j < HSP / (4 * G); j++) axpy4(y[j], a, r4[j * G + g]);
}

// tile[r][c] = the head's channel c of token u0 + r, read from src (row u of batch b starts
// at src + (b T + u) stride); 0 past hs and past T. The whole block loads it, consecutive
// threads reading consecutive floats of a row.
template <int HSP, int BC>
__device__ void stage_rows(float *tile, const float *src, size_t stride, int b, int u0, int T, int hs) {
    for (int i = threadIdx.x; i < BC * HSP; i += BLOCK) {
        int r = i / HSP, c = i % HSP, u = u0 + r;
        tile[i] = u < T && c < hs ? src[((size_t)b * T + u) * stride + c] : 0.0f;
    }
}

// Where the head's q (part 0), k (1) or v (2) of token t starts in qkv [B,T,3C].
__device__ const float *qkv_row(const float *qkv, int b, int t, int T, int C, int part, int h, int hs) {
    return qkv + ((size_t)b * T + t) * 3 * C + (size_t)part * C + (size_t)h * hs;
}

// ---- forward: o_t = softmax(s[t, 0..t]) V, one pass over the keys with an online softmax ----

template <int HSP, int G>
__global__ void __launch_bounds__(BLOCK) flash_forward_kernel(float *out, float *lse, const float *qkv, int T, int C,
                                                              int NH, float scale) {
    constexpr int F4 = HSP / (4 * G), ROWS = BLOCK / G, BC = tile_rows(HSP), KC = chunk_keys(HSP);
    __shared__ __align__(16) float k_tile[BC * HSP];
    __shared__ __align__(16) float v_tile[BC * HSP];
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hs = C / NH, g = threadIdx.x % G;
    const int row0 = blockIdx.y * ROWS, t = row0 + threadIdx.x / G;
    const int last = min(T - 1, row0 + ROWS - 1);  // the block's last row: no row of it sees a later key

    float4 q[F4], o[F4];
    load_row<HSP, G>(q, t < T ? qkv_row(qkv, b, t, T, C, 0, h, hs) : nullptr, hs, g);
#pragma unroll
    for (int j = 0; j < F4; j++) o[j] = zero4();
    float m = -INFINITY, l = 0.0f;  // the running max of the scores and sum of exp(s - m)

    for (int u0 = 0; u0 <= last; u0 += BC) {
        stage_rows<HSP, BC>(k_tile, qkv + C + (size_t)h * hs, 3 * (size_t)C, b, u0, T, hs);
        stage_rows<HSP, BC>(v_tile, qkv + 2 * C + (size_t)h * hs, 3 * (size_t)C, b, u0, T, hs);
        __syncthreads();
        for (int c0 = 0; c0 < BC && u0 + c0 <= last; c0 += KC) {
            // The chunk's scores (-inf where the row must not look), then one rescale of o.
            float s[KC], m_new = m;
#pragma unroll
            for (int k = 0; k < KC; k++) {
                int u = u0 + c0 + k;
                float dot = dot_row<HSP, G>(q, k_tile + (c0 + k) * HSP, g);
                s[k] = u <= t && u < T ? dot * scale : -INFINITY;
                m_new = fmaxf(m_new, s[k]);
            }
            // Key 0 is in every row's first chunk, so m_new is finite from the first chunk on.
            float correction = expf(m - m_new);  // exp(-inf) = 0 on the first chunk
            l *= correction;
#pragma unroll
            for (int j = 0; j < F4; j++) scale4(o[j], correction);
#pragma unroll
            for (int k = 0; k < KC; k++) {
                float p = expf(s[k] - m_new);  // 0 for a masked key
                l += p;
                axpy_row<HSP, G>(o, p, v_tile + (c0 + k) * HSP, g);
            }
            m = m_new;
        }
        __syncthreads();  // every group is done with the tiles before they are overwritten
    }
    if (t >= T) return;
    store_row<HSP, G>(out + ((size_t)b * T + t) * C + (size_t)h * hs, o, 1.0f / l, hs, g);
    if (g == 0) lse[(size_t)bh * T + t] = m + logf(l);
}

// ---- backward, step 1, by query rows: D_t = do_t . o_t, and dq_t = scale sum_u ds[t,u] k_u ----
// with p = exp(s - lse_t), dp = do_t . v_u, ds = p (dp - D_t). D is saved for step 2.

template <int HSP, int G>
__global__ void __launch_bounds__(BLOCK) flash_backward_dq_kernel(float *dqkv, float *D, const float *dout,
                                                                  const float *qkv, const float *out,
                                                                  const float *lse, int T, int C, int NH,
                                                                  float scale) {
    constexpr int F4 = HSP / (4 * G), ROWS = BLOCK / G, BC = tile_rows(HSP);
    __shared__ __align__(16) float k_tile[BC * HSP];
    __shared__ __align__(16) float v_tile[BC * HSP];
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hs = C / NH, g = threadIdx.x % G;
    const int row0 = blockIdx.y * ROWS, t = row0 + threadIdx.x / G;
    const int last = min(T - 1, row0 + ROWS - 1);
    const bool valid = t < T;

    float4 q[F4], dO[F4], dq[F4];
    load_row<HSP, G>(q, valid ? qkv_row(qkv, b, t, T, C, 0, h, hs) : nullptr, hs, g);
    load_row<HSP, G>(dO, valid ? dout + ((size_t)b * T + t) * C + (size_t)h * hs : nullptr, hs, g);
    // D_t = do_t . o_t, with o_t read a word at a time (dq's registers hold it meanwhile).
    load_row<HSP, G>(dq, valid ? out + ((size_t)b * T + t) * C + (size_t)h * hs : nullptr, hs, g);
    float d = 0.0f;
#pragma unroll
    for (int j = 0; j < F4; j++) d += dot4(dO[j], dq[j]), dq[j] = zero4();
    const float Dt = group_sum<G>(d);
    const float lse_t = valid ? lse[(size_t)bh * T + t] : 0.0f;
    if (valid && g == 0) D[(size_t)bh * T + t] = Dt;

    for (int u0 = 0; u0 <= last; u0 += BC) {
        stage_rows<HSP, BC>(k_tile, qkv + C + (size_t)h * hs, 3 * (size_t)C, b, u0, T, hs);
        stage_rows<HSP, BC>(v_tile, qkv + 2 * C + (size_t)h * hs, 3 * (size_t)C, b, u0, T, hs);
        __syncthreads();
        for (int r = 0; r < BC && u0 + r <= last; r++) {
            int u = u0 + r;
            float s = dot_row<HSP, G>(q, k_tile + r * HSP, g) * scale;
            float dp = dot_row<HSP, G>(dO, v_tile + r * HSP, g);
            float p = valid && u <= t ? expf(s - lse_t) : 0.0f;
            axpy_row<HSP, G>(dq, p * (dp - Dt), k_tile + r * HSP, g);
        }
        __syncthreads();
    }
    if (valid) store_row<HSP, G>(dqkv + ((size_t)b * T + t) * 3 * C + (size_t)h * hs, dq, scale, hs, g);
}

// ---- backward, step 2, by key rows: dv_u = sum_t p[t,u] do_t, dk_u = scale sum_t ds[t,u] q_t ----
// over the queries t >= u, in increasing order, from the tiles of q, do, lse and D.

template <int HSP, int G>
__global__ void __launch_bounds__(BLOCK) flash_backward_dkv_kernel(float *dqkv, const float *D, const float *dout,
                                                                   const float *qkv, const float *lse, int T, int C,
                                                                   int NH, float scale) {
    constexpr int F4 = HSP / (4 * G), ROWS = BLOCK / G, BC = tile_rows(HSP);
    __shared__ __align__(16) float q_tile[BC * HSP];
    __shared__ __align__(16) float do_tile[BC * HSP];
    __shared__ float lse_tile[BC], D_tile[BC];
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hs = C / NH, g = threadIdx.x % G;
    const int row0 = blockIdx.y * ROWS, u = row0 + threadIdx.x / G;  // this group's key
    const bool valid = u < T;

    float4 k[F4], v[F4], dk[F4], dv[F4];
    load_row<HSP, G>(k, valid ? qkv_row(qkv, b, u, T, C, 1, h, hs) : nullptr, hs, g);
    load_row<HSP, G>(v, valid ? qkv_row(qkv, b, u, T, C, 2, h, hs) : nullptr, hs, g);
#pragma unroll
    for (int j = 0; j < F4; j++) dk[j] = zero4(), dv[j] = zero4();

    // Queries before row0 see none of this block's keys.
    for (int t0 = row0; t0 < T; t0 += BC) {
        stage_rows<HSP, BC>(q_tile, qkv + (size_t)h * hs, 3 * (size_t)C, b, t0, T, hs);
        stage_rows<HSP, BC>(do_tile, dout + (size_t)h * hs, (size_t)C, b, t0, T, hs);
        for (int r = threadIdx.x; r < BC; r += BLOCK) {
            bool in = t0 + r < T;
            lse_tile[r] = in ? lse[(size_t)bh * T + t0 + r] : 0.0f;
            D_tile[r] = in ? D[(size_t)bh * T + t0 + r] : 0.0f;
        }
        __syncthreads();
        for (int r = 0; r < BC && t0 + r < T; r++) {
            int t = t0 + r;
            float s = dot_row<HSP, G>(k, q_tile + r * HSP, g) * scale;
            float dp = dot_row<HSP, G>(v, do_tile + r * HSP, g);
            float p = valid && t >= u ? expf(s - lse_tile[r]) : 0.0f;
            axpy_row<HSP, G>(dv, p, do_tile + r * HSP, g);
            axpy_row<HSP, G>(dk, p * (dp - D_tile[r]), q_tile + r * HSP, g);
        }
        __syncthreads();
    }
    if (!valid) return;
    float *dk_row = dqkv + ((size_t)b * T + u) * 3 * C + C + (size_t)h * hs;
    store_row<HSP, G>(dk_row, dk, scale, hs, g);
    store_row<HSP, G>(dk_row + C, dv, 1.0f, hs, g);
}

// ---- launches, one instance per padded head size ----

unsigned row_blocks(int T, int rows_per_block) { return (unsigned)((T + rows_per_block - 1) / rows_per_block); }

template <int HSP>
void forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, float scale, cudaStream_t s) {
    constexpr int G = forward_group(HSP);
    dim3 grid((unsigned)(B * NH), row_blocks(T, BLOCK / G));
    flash_forward_kernel<HSP, G><<<grid, BLOCK, 0, s>>>(out, lse, qkv, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
}

template <int HSP>
void backward(float *dqkv, float *D, const float *dout, const float *qkv, const float *out, const float *lse, int B,
              int T, int C, int NH, float scale, cudaStream_t s) {
    constexpr int G = backward_group(HSP);
    dim3 grid((unsigned)(B * NH), row_blocks(T, BLOCK / G));
    // Step 1 writes every dq and D; step 2, queued after it on the same stream, reads D and
    // writes every dk and dv: together all of dqkv is overwritten, as on the CPU.
    flash_backward_dq_kernel<HSP, G><<<grid, BLOCK, 0, s>>>(dqkv, D, dout, qkv, out, lse, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
    flash_backward_dkv_kernel<HSP, G><<<grid, BLOCK, 0, s>>>(dqkv, D, dout, qkv, lse, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
}

// ---- with --tf32: the same algorithm on the tensor cores ------------------------------------
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
// Heads up to 128 channels, where the GPU lends a block the shared memory (tc::usable); the
// others use the kernels above.

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

// c (16 x 16) += a (16 x K, row-major, row length lda) times b^T, b given as 16 rows of K
// (row-major, row length ldb): the product with a tile's rows, as in Q K^T.
template <int K>
__device__ void mma_abt(FragC &c, const float *a, int lda, const float *b, int ldb) {
#pragma unroll
    for (int k = 0; k < K; k += 8) {
        FragA fa;
        FragBt fb;
        wmma::load_matrix_sync(fa, a + k, lda);
        wmma::load_matrix_sync(fb, b + k, ldb);
        round_tf32(fa), round_tf32(fb);
        wmma::mma_sync(c, fa, fb, c);
    }
}

// c (16 x 16) += a (16 x K, row-major) times b (K x 16, row-major, row length ldb): as in P V.
template <int K>
__device__ void mma_ab(FragC &c, const float *a, int lda, const float *b, int ldb) {
#pragma unroll
    for (int k = 0; k < K; k += 8) {
        FragA fa;
        FragB fb;
        wmma::load_matrix_sync(fa, a + k, lda);
        wmma::load_matrix_sync(fb, b + (size_t)k * ldb, ldb);
        round_tf32(fa), round_tf32(fb);
        wmma::mma_sync(c, fa, fb, c);
    }
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
// stage_rows above; 0 past hs and past T.
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

// Whether --tf32's kernels run for heads padded to hsp: up to 128 channels, and where the
// GPU lends a block the shared memory they take (an H100 228 KiB, an A100 164: not at 128).
bool usable(const CudaContext *ctx, int hsp) {
    size_t need = 0;
    switch (hsp) {
    case 16: need = backward_floats<16>(); break;
    case 32: need = backward_floats<32>(); break;
    case 64: need = backward_floats<64>(); break;
    case 128: need = backward_floats<128>(); break;
    default: return false;
    }
    static int optin = -1;  // read once: a process drives one GPU (context.cuh)
    if (optin < 0) cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->ordinal));
    return ctx->tf32 && need * sizeof(float) <= (size_t)optin;
}

}  // namespace tc

// The padded head size for hs: the smallest of 16, 32, ..., 1024 that holds it; 0 above.
int padded_head_size(int hs) {
    for (int hsp = 16; hsp <= CUDA_FLASH_MAX_HEAD; hsp *= 2)
        if (hs <= hsp) return hsp;
    return 0;
}

void check_head_size(int hs) {
    if (!padded_head_size(hs))
        die("use --attn naive, or more heads (--heads) so that --dim / --heads is at most 1024",
            "--attn flash on CUDA holds a head's vectors in registers, for heads of up to %d channels; this model's "
            "heads have %d",
            CUDA_FLASH_MAX_HEAD, hs);
}

}  // namespace

int cuda_flash_head_size_ok(int hs) { return padded_head_size(hs) != 0; }

void cuda_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
    if ((size_t)B * NH * T == 0) return;
    int hs = C / NH;
    check_head_size(hs);
    float scale = 1.0f / sqrtf((float)hs);  // as ops.c computes it
    CudaContext *ctx = cuda_context();
    cudaStream_t s = ctx->stream;
    if (tc::usable(ctx, padded_head_size(hs))) {  // --tf32: the tensor cores
        switch (padded_head_size(hs)) {
        case 16: tc::forward<16>(out, lse, qkv, B, T, C, NH, scale, s); break;
        case 32: tc::forward<32>(out, lse, qkv, B, T, C, NH, scale, s); break;
        case 64: tc::forward<64>(out, lse, qkv, B, T, C, NH, scale, s); break;
        default: tc::forward<128>(out, lse, qkv, B, T, C, NH, scale, s); break;
        }
        return;
    }
    switch (padded_head_size(hs)) {
    case 16: forward<16>(out, lse, qkv, B, T, C, NH, scale, s); break;
    case 32: forward<32>(out, lse, qkv, B, T, C, NH, scale, s); break;
    case 64: forward<64>(out, lse, qkv, B, T, C, NH, scale, s); break;
    case 128: forward<128>(out, lse, qkv, B, T, C, NH, scale, s); break;
    case 256: forward<256>(out, lse, qkv, B, T, C, NH, scale, s); break;
    case 512: forward<512>(out, lse, qkv, B, T, C, NH, scale, s); break;
    default: forward<1024>(out, lse, qkv, B, T, C, NH, scale, s); break;
    }
}

void cuda_flash_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH, float *scratch) {
    (void)scratch;  // the CPU's tiles; the GPU's D lives in the context's workspace
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    int hs = C / NH;
    check_head_size(hs);
    float scale = 1.0f / sqrtf((float)hs);
    float *D = (float *)cuda_workspace(rows * sizeof(float));
    CudaContext *ctx = cuda_context();
    cudaStream_t s = ctx->stream;
    if (tc::usable(ctx, padded_head_size(hs))) {  // --tf32: the tensor cores
        switch (padded_head_size(hs)) {
        case 16: tc::backward<16>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
        case 32: tc::backward<32>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
        case 64: tc::backward<64>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
        default: tc::backward<128>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
        }
        return;
    }
    switch (padded_head_size(hs)) {
    case 16: backward<16>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    case 32: backward<32>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    case 64: backward<64>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    case 128: backward<128>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    case 256: backward<256>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    case 512: backward<512>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    default: backward<1024>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    }
}
