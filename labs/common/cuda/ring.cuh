// ring.cuh — ring attention's kernels (labs/18-cp/ring_attention.h): one block of keys and
// values against a rank's queries, forward and backward, and the small copies around them.
// ring.cu launches them; tests/gpu/test_ring_kernels.cc runs the very same kernels on the CPU
// through emulate.h and holds them to the lab's own ring_block_forward() and
// ring_block_backward().
//
// Before including it: for the emulation, emulate.h.
//
// The shape. A CUDA block is one warp, and it owns one row: a query and a head in the forward
// pass and in the backward's dQ, a key and a head in the backward's dK dV. The block keeps its
// row's vectors in shared memory, and its lanes take the other side 32 rows at a time:
//
//     forward, query t      lane j scores key u0 + j; then every lane adds the 32 keys' p v
//                           into the channels it owns (i = lane, lane + 32, ...)
//     backward dQ, query t  lane j: ds of key u0 + j;  every lane: dq += ds k, by channel
//     backward dK dV, key u lane j: p and ds of query t0 + j;  every lane: dv += p do,
//                           dk += ds q, by channel
//
// Why this way, and not flash.cu's tiles. The ring's blocks are short (T/N tokens), the
// kernels run once per block per ring step, and what they must show is that the ring is
// right on a GPU: each sum runs over its keys (or queries) in the order the CPU's loops take
// them, with the same roundings, so the GPU's numbers follow the CPU's to the last few bits.
// The two backward kernels write disjoint rows, so no atomics are needed and the result is
// the same every run. Scores are recomputed where needed instead of kept: nothing of size
// T x T exists. Speed: each row reads the whole block from memory (through L2), so the
// kernels are memory-bound; labs/GPU.md says what they have been measured at.
#ifndef SHARDLAB_RING_CUH
#define SHARDLAB_RING_CUH

#include <math.h>
#include <stddef.h>

#include "common/model/bf16.h"

// A kernel's dynamic shared memory (the emulation hands each block its own).
#ifdef SHARDLAB_EMULATE
#define RING_SHARED(name) float *name = reinterpret_cast<float *>(emu_shared())
#else
#define RING_SHARED(name) extern __shared__ float name[]
#endif

namespace ring {

const int LANES = 32;  // threads of a block: one warp

// The shared memory each kernel takes, in floats, for head size hs.
__host__ __device__ inline size_t forward_floats(int hs) { return 2 * (size_t)hs + LANES; }
__host__ __device__ inline size_t dq_floats(int hs) { return 3 * (size_t)hs + LANES; }
__host__ __device__ inline size_t dkv_floats(int hs) { return 4 * (size_t)hs + 2 * LANES; }

__device__ inline float round_if(float x, int bf16_in) { return bf16_in ? bf16_round(x) : x; }

// Of pos[0..n) (increasing), how many are <= p: the keys a query at position p sees.
__device__ inline int count_at_most(const int *pos, int n, int p) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (pos[mid] <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// How many are < p: the first query that sees a key at position p.
__device__ inline int count_below(const int *pos, int n, int p) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (pos[mid] < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// a . b, summed in channel order (the CPU's order).
__device__ inline float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

__device__ inline float warp_max(float x) {
    for (int offset = LANES / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

// The layout of the rows. qkv [B,Tq,3C]: q | k | v per token; kv [B,Tk,2C]: k | v; out [B,Tq,C];
// lse and D [B,NH,Tq]. Head h is channels h*hs .. h*hs+hs-1 of each part.

// Forward: grid (Tq, B*NH), LANES threads, forward_floats(hs) floats of shared memory. The
// block's (o_b, lse_b) merged into the running out and lse (0 and -INFINITY before the first).
__global__ void block_forward_kernel(float *out, float *lse, const float *qkv, const int *qpos, int Tq,
                                     const float *kv, const int *kpos, int Tk, int C, int NH, int bf16_in) {
    RING_SHARED(sh);
    const int hs = C / NH, t = (int)blockIdx.x, b = (int)blockIdx.y / NH, h = (int)blockIdx.y % NH;
    const int lane = (int)threadIdx.x;
    const int nk = count_at_most(kpos, Tk, qpos[t]);  // the visible keys: a prefix of the block
    if (nk == 0) return;  // the whole block lies in this query's future (the same for every lane)
    const float scale = 1.0f / sqrtf((float)hs);
    float *q = sh, *ob = sh + hs, *p = sh + 2 * hs;
    const float *qg = qkv + ((size_t)b * Tq + t) * 3 * C + h * hs;
    const float *key = kv + (size_t)b * Tk * 2 * C + h * hs;  // key u at key + u 2C, its value C on
    for (int i = lane; i < hs; i += LANES) q[i] = qg[i], ob[i] = 0.0f;
    __syncthreads();
    // 1. The block's largest score, every lane taking every 32nd key.
    float m = -INFINITY;
    for (int u = lane; u < nk; u += LANES) m = fmaxf(m, dot(q, key + (size_t)u * 2 * C, hs) * scale);
    m = warp_max(m);
    // 2. exp(s - m) of 32 keys at a time, then their p v into each lane's channels, key by key.
    float l = 0.0f;  // every lane sums the same numbers in the same order: the same l
    for (int u0 = 0; u0 < nk; u0 += LANES) {
        const int n = nk - u0 < LANES ? nk - u0 : LANES;
        if (lane < n) p[lane] = expf(dot(q, key + (size_t)(u0 + lane) * 2 * C, hs) * scale - m);
        __syncthreads();
        for (int j = 0; j < n; j++) {
            l += p[j];
            const float pr = round_if(p[j], bf16_in);
            const float *v = key + (size_t)(u0 + j) * 2 * C + C;
            for (int i = lane; i < hs; i += LANES) ob[i] += pr * v[i];
        }
        __syncthreads();
    }
    // 3. The merge, overflow-safe: lse' = max + log1p(exp(min - max)).
    float *o = out + ((size_t)b * Tq + t) * C + h * hs, *L = lse + ((size_t)b * NH + h) * Tq + t;
    const float old = *L, lb = m + logf(l);
    __syncthreads();  // every lane has read the old lse before lane 0 writes the new one
    if (old == -INFINITY) {  // the first block this query sees
        for (int i = lane; i < hs; i += LANES) o[i] = ob[i] / l;
        if (lane == 0) *L = lb;
        return;
    }
    const float hi = fmaxf(old, lb), lo = fminf(old, lb), merged = hi + log1pf(expf(lo - hi));
    const float w_old = expf(old - merged), w_new = expf(lb - merged) / l;
    for (int i = lane; i < hs; i += LANES) o[i] = o[i] * w_old + ob[i] * w_new;
    if (lane == 0) *L = merged;
}

// Backward, the queries' share: grid (Tq, B*NH), LANES threads, dq_floats(hs) floats. dq
// ACCUMULATES into the q part of dqkv. lse and out are the final ones, D = do . o.
__global__ void block_backward_dq_kernel(float *dqkv, const float *dout, const float *D, const float *lse,
                                         const float *qkv, const int *qpos, int Tq, const float *kv, const int *kpos,
                                         int Tk, int C, int NH, int bf16_in) {
    RING_SHARED(sh);
    const int hs = C / NH, t = (int)blockIdx.x, b = (int)blockIdx.y / NH, h = (int)blockIdx.y % NH;
    const int lane = (int)threadIdx.x;
    const int nk = count_at_most(kpos, Tk, qpos[t]);
    if (nk == 0) return;
    const float scale = 1.0f / sqrtf((float)hs);
    float *q = sh, *dor = sh + hs, *dq = sh + 2 * hs, *ds = sh + 3 * hs;
    const size_t row = (size_t)b * Tq + t, head = ((size_t)b * NH + h) * Tq + t;
    const float Lt = lse[head], Dt = D[head];
    const float *key = kv + (size_t)b * Tk * 2 * C + h * hs;
    float *dqg = dqkv + row * 3 * C + h * hs;
    for (int i = lane; i < hs; i += LANES) {
        q[i] = qkv[row * 3 * C + h * hs + i];
        dor[i] = round_if(dout[row * C + h * hs + i], bf16_in);  // do as the products read it
        dq[i] = dqg[i];
    }
    __syncthreads();
    for (int u0 = 0; u0 < nk; u0 += LANES) {
        const int n = nk - u0 < LANES ? nk - u0 : LANES;
        if (lane < n) {
            const float *k = key + (size_t)(u0 + lane) * 2 * C, *v = k + C;
            const float pu = expf(dot(q, k, hs) * scale - Lt);  // the probability, from the final lse
            ds[lane] = round_if(pu * (dot(dor, v, hs) - Dt), bf16_in) * scale;
        }
        __syncthreads();
        for (int j = 0; j < n; j++) {
            const float *k = key + (size_t)(u0 + j) * 2 * C;
            for (int i = lane; i < hs; i += LANES) dq[i] += ds[j] * k[i];
        }
        __syncthreads();
    }
    for (int i = lane; i < hs; i += LANES) dqg[i] = dq[i];
}

// Backward, the keys' share: grid (Tk, B*NH), LANES threads, dkv_floats(hs) floats. dk and dv
// ACCUMULATE into dkv [B,Tk,2C]: the sums over the queries that see key u, in query order.
__global__ void block_backward_dkv_kernel(float *dkv, const float *dout, const float *D, const float *lse,
                                          const float *qkv, const int *qpos, int Tq, const float *kv,
                                          const int *kpos, int Tk, int C, int NH, int bf16_in) {
    RING_SHARED(sh);
    const int hs = C / NH, u = (int)blockIdx.x, b = (int)blockIdx.y / NH, h = (int)blockIdx.y % NH;
    const int lane = (int)threadIdx.x;
    const int first = count_below(qpos, Tq, kpos[u]);  // the queries from here on see this key
    if (first == Tq) return;
    const float scale = 1.0f / sqrtf((float)hs);
    float *k = sh, *v = sh + hs, *dk = sh + 2 * hs, *dv = sh + 3 * hs, *pr = sh + 4 * hs, *ds = pr + LANES;
    const size_t krow = (size_t)b * Tk + u;
    float *dkg = dkv + krow * 2 * C + h * hs, *dvg = dkg + C;
    for (int i = lane; i < hs; i += LANES) {
        k[i] = kv[krow * 2 * C + h * hs + i], v[i] = kv[krow * 2 * C + C + h * hs + i];
        dk[i] = dkg[i], dv[i] = dvg[i];
    }
    __syncthreads();
    for (int t0 = first; t0 < Tq; t0 += LANES) {
        const int n = Tq - t0 < LANES ? Tq - t0 : LANES;
        if (lane < n) {
            const size_t row = (size_t)b * Tq + t0 + lane, head = ((size_t)b * NH + h) * Tq + t0 + lane;
            const float *q = qkv + row * 3 * C + h * hs, *dO = dout + row * C + h * hs;
            const float pt = expf(dot(q, k, hs) * scale - lse[head]);
            float dp = 0.0f;
            for (int i = 0; i < hs; i++) dp += round_if(dO[i], bf16_in) * v[i];
            pr[lane] = round_if(pt, bf16_in);
            ds[lane] = round_if(pt * (dp - D[head]), bf16_in) * scale;
        }
        __syncthreads();
        for (int j = 0; j < n; j++) {
            const size_t row = (size_t)b * Tq + t0 + j;
            const float *q = qkv + row * 3 * C + h * hs, *dO = dout + row * C + h * hs;
            for (int i = lane; i < hs; i += LANES) {
                dv[i] += pr[j] * round_if(dO[i], bf16_in);
                dk[i] += ds[j] * q[i];
            }
        }
        __syncthreads();
    }
    for (int i = lane; i < hs; i += LANES) dkg[i] = dk[i], dvg[i] = dv[i];
}

// The copies around the blocks: a thread per element (grid-stride).

// kv [n,2C] <- the k | v columns of qkv [n,3C].
__global__ void kv_pack_kernel(float *kv, const float *qkv, size_t n, int C) {
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < n * 2 * C; x += (size_t)gridDim.x * blockDim.x)
        kv[x] = qkv[x / (2 * C) * 3 * C + C + x % (2 * C)];
}

// The k | v columns of dqkv [n,3C] <- dkv [n,2C].
__global__ void kv_unpack_kernel(float *dqkv, const float *dkv, size_t n, int C) {
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < n * 2 * C; x += (size_t)gridDim.x * blockDim.x)
        dqkv[x / (2 * C) * 3 * C + C + x % (2 * C)] = dkv[x];
}

// D [B,NH,T] = do . o per token and head, a thread each, channels in order.
__global__ void do_dot_o_kernel(float *D, const float *dout, const float *out, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const size_t rows = (size_t)B * NH * T;
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < rows; x += (size_t)gridDim.x * blockDim.x) {
        const size_t b = x / ((size_t)NH * T), h = x / T % NH, t = x % T, at = (b * T + t) * C + h * hs;
        D[x] = dot(dout + at, out + at, hs);
    }
}

// x[0..n) = v.
__global__ void fill_kernel(float *x, size_t n, float v) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = v;
}

}  // namespace ring

#endif
