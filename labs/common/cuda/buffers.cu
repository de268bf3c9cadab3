// buffers.cu — the ops on flat buffers of n elements, on the GPU: the optimizer's elementwise
// work (adamw.c's AdamW step, sum of squares and scale), zero and copy, and mixed precision's
// bf16 conversions (ops.h's contract).
//
// Defines (context.cuh): cuda_adamw_update(), cuda_sum_of_squares(), cuda_sum_of_squares_buffers(),
//                        cuda_sum_of_squares_buffers_bf16(), cuda_scale_floats(), cuda_zero(), cuda_copy_floats(),
//                        cuda_to_bf16(), cuda_from_bf16(),
//                        cuda_add_bf16(), cuda_acc_bf16(), cuda_sum_on_host().
//
// The rules every kernel keeps (determinism, one stream) are at the top of ops.cu.
#include <math.h>
#include <stdlib.h>

#include "context.cuh"

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

// x of floats or of bf16s (each widened, exactly: the floats' sums of the widened copy).
__device__ static inline float widened(float x) { return x; }
__device__ static inline float widened(bf16 x) { return bf16_to_float(x); }

template <typename T>
__global__ static void sum_of_squares_kernel(const T *x, size_t n, double *partials) {
    __shared__ double part[SUMSQ_THREADS];
    size_t start = (size_t)blockIdx.x * SUMSQ_BLOCK_ELEMS;
    size_t end = start + SUMSQ_BLOCK_ELEMS < n ? start + SUMSQ_BLOCK_ELEMS : n;
    double s = 0.0;
    for (size_t i = start + threadIdx.x; i < end; i += SUMSQ_THREADS) {
        float v = widened(x[i]);
        s += (double)v * v;
    }
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

void cuda_adamw_update(const AdamW *opt, int64_t t, float *params, const float *grads, float *m, float *v, size_t n) {
    if (n == 0) return;
    float c1 = 1.0f - (float)pow(opt->beta1, (double)t);
    float c2 = 1.0f - (float)pow(opt->beta2, (double)t);
    adamw_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(params, grads, m, v, n, *opt, c1, c2);
    cudaCheck(cudaGetLastError());
}

// Copy n doubles from the device (after the queued work) into the context's pinned room
// (grown, never shrunk: after the first step it is big enough); returns it, filled.
static const double *read_doubles(const double *dev, size_t n) {
    CudaContext *c = cuda_context();
    if (n > c->sum_capacity) {
        if (c->sum_host) cudaCheck(cudaFreeHost(c->sum_host));  // no copy into it is queued
        cudaCheck(cudaMallocHost(&c->sum_host, n * sizeof(double)));
        c->sum_capacity = n;
    }
    cudaCheck(cudaMemcpyAsync(c->sum_host, dev, n * sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    cudaCheck(cudaStreamSynchronize(c->stream));
    return c->sum_host;
}

// n doubles from the device, added in order on the host.
double cuda_sum_on_host(const double *dev, size_t n) {
    const double *host = read_doubles(dev, n);
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += host[i];
    return total;
}

static size_t sumsq_blocks(size_t n) { return (n + SUMSQ_BLOCK_ELEMS - 1) / SUMSQ_BLOCK_ELEMS; }

// Queue buffer x's partial sums into partials (sumsq_blocks(n) of them).
template <typename T>
static void queue_sum_of_squares(const T *x, size_t n, double *partials) {
    if (n == 0) return;
    sum_of_squares_kernel<T><<<(unsigned)sumsq_blocks(n), SUMSQ_THREADS, 0, compute_stream()>>>(x, n, partials);
    cudaCheck(cudaGetLastError());
}

double cuda_sum_of_squares(const float *x, size_t n) {
    if (n == 0) return 0.0;
    double *partials = (double *)cuda_workspace(sumsq_blocks(n) * sizeof(double));
    queue_sum_of_squares(x, n, partials);
    return cuda_sum_on_host(partials, sumsq_blocks(n));
}

// Partial sums a read takes at most: 1 MiB of them (the context's own workspace), the
// buffers of a billion parameters; more buffers take more reads.
enum { SUMSQ_READ_BLOCKS = (1 << 20) / sizeof(double) };

// The buffers' kernels queued one after another into one run of partials, read back at once
// (one wait, where a sum_of_squares per buffer waits once each); each buffer's partials added
// from 0 in order, and the buffers' sums in buffer order: cuda_sum_of_squares's bits, looped.
template <typename T>
static double sum_of_squares_buffers(int n, const T *const *x, const size_t *len, double *each) {
    double total = 0.0;
    for (int first = 0, last; first < n; first = last) {
        size_t blocks = sumsq_blocks(len[first]);
        for (last = first + 1; last < n && blocks + sumsq_blocks(len[last]) <= SUMSQ_READ_BLOCKS; last++)
            blocks += sumsq_blocks(len[last]);
        if (blocks == 0) {  // empty buffers: each sums to 0
            for (int i = first; each && i < last; i++) each[i] = 0.0;
            continue;
        }
        double *partials = (double *)cuda_workspace(blocks * sizeof(double));
        size_t at = 0;
        for (int i = first; i < last; i++) {
            queue_sum_of_squares(x[i], len[i], partials + at);
            at += sumsq_blocks(len[i]);
        }
        const double *host = read_doubles(partials, blocks);
        at = 0;
        for (int i = first; i < last; i++) {
            double s = 0.0;
            for (size_t k = 0; k < sumsq_blocks(len[i]); k++) s += host[at + k];
            if (each) each[i] = s;
            total += s, at += sumsq_blocks(len[i]);
        }
    }
    return total;
}

double cuda_sum_of_squares_buffers(int n, const float *const *x, const size_t *len, double *each) {
    return sum_of_squares_buffers(n, x, len, each);
}

double cuda_sum_of_squares_buffers_bf16(int n, const bf16 *const *x, const size_t *len, double *each) {
    return sum_of_squares_buffers(n, x, len, each);
}

void cuda_scale_floats(float *x, size_t n, float s) {
    if (n == 0) return;
    scale_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(x, n, s);
    cudaCheck(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------
// Buffers
// ---------------------------------------------------------------------------------------

void cuda_zero(float *x, size_t n) {
    if (n) cudaCheck(cudaMemsetAsync(x, 0, n * sizeof(float), compute_stream()));
}

void cuda_copy_floats(float *dst, const float *src, size_t n) {
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

// The launch of each kernel above: n elements, one thread each, on the compute stream.
template <typename Dst, typename Src>
static void launch_per_element(void (*kernel)(Dst *, const Src *, size_t), Dst *dst, const Src *src, size_t n) {
    if (n == 0) return;
    kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(dst, src, n);
    cudaCheck(cudaGetLastError());
}

void cuda_to_bf16(bf16 *dst, const float *src, size_t n) { launch_per_element(to_bf16_kernel, dst, src, n); }
void cuda_from_bf16(float *dst, const bf16 *src, size_t n) { launch_per_element(from_bf16_kernel, dst, src, n); }
void cuda_add_bf16(bf16 *acc, const bf16 *x, size_t n) { launch_per_element(add_bf16_kernel, acc, x, n); }
void cuda_acc_bf16(bf16 *acc, const float *x, size_t n) { launch_per_element(acc_bf16_kernel, acc, x, n); }
