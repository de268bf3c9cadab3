// flash.cu — flash attention on the GPU: the kernels behind cuda_ops()'s
// flash_attention_forward and flash_attention_backward (ops.h's contract; the algorithm, its
// picture and the CPU version are in attention.c). On GPUs with tensor cores for TF32 and bf16
// (compute capability 8.0 on), heads of up to 128 channels go to flash_tc.cu's kernels instead:
// bf16 with --mixed (bf16_in), TF32 with --tf32, and fp32 as three TF32 products each (3xTF32,
// as accurate as fp32's: flash_tc.cuh). These kernels take the rest: the heads past 128, the
// older GPUs, and fp32 when a test or benchmark asks for them (cuda_set_fp32_tc(0)).
//
// Defines (context.cuh): cuda_flash_attention_forward(), cuda_flash_attention_backward(),
//                        cuda_flash_attention_forward_bf16(), cuda_flash_attention_backward_bf16(),
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

#include "context.cuh"

namespace {

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

// The padded head size for hs: the smallest of 16, 32, ..., 1024 that holds it; 0 above.
int padded_head_size(int hs) {
    for (int hsp = 16; hsp <= CUDA_FLASH_MAX_HEAD; hsp *= 2)
        if (hs <= hsp) return hsp;
    return 0;
}

// Which kernels a pass takes: with bf16 operands (--mixed) the tensor cores' bf16 ones, or the
// run stops here saying why this GPU cannot; with --tf32 the TF32 ones, and in fp32 the 3xTF32
// ones (as accurate as fp32's, and several times the speed of the fp32 cores), where the GPU
// runs them; else the fp32 kernels below (older GPUs, heads over 128 channels). 1 for the
// tensor cores, in *format.
int use_tensor_cores(const CudaContext *ctx, int hs, int bf16_in, CudaTcFormat *format) {
    char why[200];
    if (bf16_in) {
        *format = CUDA_TC_BF16;
        if (!cuda_flash_tc_usable(ctx, CUDA_TC_BF16, padded_head_size(hs), why, sizeof why))
            die("use --attn naive (fp32 attention) with --mixed, or more heads (--heads)",
                "--mixed with --attn flash on CUDA: %s (heads of %d channels)", why, hs);
        return 1;
    }
    *format = ctx->tf32 ? CUDA_TC_TF32 : CUDA_TC_TF32X3;
    return (ctx->tf32 || ctx->fp32_tc) && cuda_flash_tc_usable(ctx, *format, padded_head_size(hs), why, sizeof why);
}

void check_head_size(int hs) {
    if (!padded_head_size(hs))
        die("use --attn naive, or more heads (--heads) so that --dim / --heads is at most 1024",
            "--attn flash on CUDA holds a head's vectors in registers, for heads of up to %d channels; this model's "
            "heads have %d",
            CUDA_FLASH_MAX_HEAD, hs);
}

// The bf16 entries' set-up, from the numbers --mixed keeps: the head checked, the tensor cores'
// bf16 kernels made sure of (or the run stops saying why); their padded head size, and the scale.
int bf16_head(int C, int NH, float *scale) {
    int hs = C / NH;
    check_head_size(hs);
    CudaTcFormat format;
    use_tensor_cores(cuda_context(), hs, 1, &format);
    *scale = 1.0f / sqrtf((float)hs);  // as attention.c computes it
    return padded_head_size(hs);
}

}  // namespace

int cuda_flash_head_size_ok(int hs) { return padded_head_size(hs) != 0; }

void cuda_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int bf16_in) {
    if ((size_t)B * NH * T == 0) return;
    int hs = C / NH;
    check_head_size(hs);
    float scale = 1.0f / sqrtf((float)hs);  // as attention.c computes it
    CudaContext *ctx = cuda_context();
    cudaStream_t s = ctx->stream;
    CudaTcFormat format;
    if (use_tensor_cores(ctx, hs, bf16_in, &format)) {  // flash_tc.cu
        cuda_flash_tc_forward(format, padded_head_size(hs), out, lse, qkv, B, T, C, NH, scale, s);
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

void cuda_flash_attention_forward_bf16(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int C, int NH) {
    if ((size_t)B * NH * T == 0) return;
    float scale;
    int hsp = bf16_head(C, NH, &scale);
    cuda_flash_tc_forward_bf16(hsp, out, lse, qkv, B, T, C, NH, scale, compute_stream());
}

void cuda_flash_attention_backward_bf16(float *dqkv, const float *dout, const bf16 *qkv, const bf16 *out,
                                        const float *lse, int B, int T, int C, int NH, float *scratch) {
    (void)scratch;
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    float scale;
    int hsp = bf16_head(C, NH, &scale);
    float *D = (float *)cuda_workspace(rows * sizeof(float));
    cuda_flash_tc_backward_bf16(hsp, dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, compute_stream());
}

void cuda_flash_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH, int bf16_in, float *scratch) {
    (void)scratch;  // the CPU's tiles; the GPU's D lives in the context's workspace
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    int hs = C / NH;
    check_head_size(hs);
    float scale = 1.0f / sqrtf((float)hs);
    float *D = (float *)cuda_workspace(rows * sizeof(float));
    CudaContext *ctx = cuda_context();
    cudaStream_t s = ctx->stream;
    CudaTcFormat format;
    if (use_tensor_cores(ctx, hs, bf16_in, &format)) {  // flash_tc.cu
        cuda_flash_tc_backward(format, padded_head_size(hs), dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s);
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
