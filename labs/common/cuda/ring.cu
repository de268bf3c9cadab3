// ring.cu — ring attention on the GPU: the launches of ring.cuh's kernels (the algorithm and
// the kernels are there; the CPU's version, which the lab's students write, is
// labs/18-cp/ring_attention.c).
//
// Defines (gpu.h): cuda_ring_block_forward(), cuda_ring_block_backward(), cuda_ring_kv_pack(),
//                  cuda_ring_kv_unpack(), cuda_ring_do_dot_o(), cuda_ring_fill().
//
// Everything is queued on the compute stream, so it runs after the kernels that wrote its
// inputs; the ring's sends and receives run on NCCL's stream beside it (nccl.cu orders the
// two where they share a buffer). The positions (qpos, kpos) are device arrays.
#include "context.cuh"
#include "ring.cuh"

// Grid-stride copies: enough blocks to fill the GPU, not one per element.
static unsigned copy_blocks(size_t n) {
    unsigned b = blocks_for(n, THREADS);
    return b < 4096 ? (b ? b : 1) : 4096;
}

extern "C" void cuda_ring_block_forward(float *out, float *lse, const float *qkv, const int *qpos, int Tq,
                                        const float *kv, const int *kpos, int Tk, int B, int C, int NH, int bf16_in,
                                        float *scores) {
    (void)scores;  // the CPU's row of scores; each lane keeps its own here
    if (Tq == 0 || Tk == 0 || B == 0) return;
    const size_t bytes = ring::forward_floats(C / NH) * sizeof(float);
    ring::block_forward_kernel<<<dim3((unsigned)Tq, (unsigned)(B * NH)), ring::LANES, bytes, compute_stream()>>>(
        out, lse, qkv, qpos, Tq, kv, kpos, Tk, C, NH, bf16_in);
    cudaCheck(cudaGetLastError());
}

extern "C" void cuda_ring_block_backward(float *dqkv, float *dkv, const float *dout, const float *D,
                                         const float *lse, const float *qkv, const int *qpos, int Tq, const float *kv,
                                         const int *kpos, int Tk, int B, int C, int NH, int bf16_in, float *scratch) {
    (void)scratch;
    if (Tq == 0 || Tk == 0 || B == 0) return;
    const int hs = C / NH;
    const unsigned heads = (unsigned)(B * NH);
    ring::block_backward_dq_kernel<<<dim3((unsigned)Tq, heads), ring::LANES, ring::dq_floats(hs) * sizeof(float),
                                     compute_stream()>>>(dqkv, dout, D, lse, qkv, qpos, Tq, kv, kpos, Tk, C, NH,
                                                         bf16_in);
    cudaCheck(cudaGetLastError());
    ring::block_backward_dkv_kernel<<<dim3((unsigned)Tk, heads), ring::LANES, ring::dkv_floats(hs) * sizeof(float),
                                      compute_stream()>>>(dkv, dout, D, lse, qkv, qpos, Tq, kv, kpos, Tk, C, NH,
                                                          bf16_in);
    cudaCheck(cudaGetLastError());
}

extern "C" void cuda_ring_kv_pack(float *kv, const float *qkv, int B, int T, int C) {
    const size_t n = (size_t)B * T;
    if (n == 0) return;
    ring::kv_pack_kernel<<<copy_blocks(n * 2 * C), THREADS, 0, compute_stream()>>>(kv, qkv, n, C);
    cudaCheck(cudaGetLastError());
}

extern "C" void cuda_ring_kv_unpack(float *dqkv, const float *dkv, int B, int T, int C) {
    const size_t n = (size_t)B * T;
    if (n == 0) return;
    ring::kv_unpack_kernel<<<copy_blocks(n * 2 * C), THREADS, 0, compute_stream()>>>(dqkv, dkv, n, C);
    cudaCheck(cudaGetLastError());
}

extern "C" void cuda_ring_do_dot_o(float *D, const float *dout, const float *out, int B, int T, int C, int NH) {
    const size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    ring::do_dot_o_kernel<<<copy_blocks(rows), THREADS, 0, compute_stream()>>>(D, dout, out, B, T, C, NH);
    cudaCheck(cudaGetLastError());
}

extern "C" void cuda_ring_fill(float *x, size_t n, float v) {
    if (n == 0) return;
    ring::fill_kernel<<<copy_blocks(n), THREADS, 0, compute_stream()>>>(x, n, v);
    cudaCheck(cudaGetLastError());
}
