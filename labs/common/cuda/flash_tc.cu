// flash_tc.cu — flash attention on the tensor cores, bf16 (--mixed), TF32 (--tf32) and fp32 as
// 3xTF32 (the default): the launches of flash_tc.cuh's kernels (the algorithm, its layout on
// the tensor cores and the kernels are there), and which GPUs run them.
//
// Defines (context.cuh): cuda_flash_tc_usable(), cuda_flash_tc_forward(), cuda_flash_tc_backward(),
//                        cuda_flash_tc_forward_bf16(), cuda_flash_tc_backward_bf16().
#include <stdio.h>

#include <cuda_bf16.h>

#include "context.cuh"
#include "flash_tc.cuh"

namespace tc {  // flash_tc.cuh's, and the launches

// ---- launches ----

// Kernels that take more than 48 KiB of shared memory must say so, once.
template <typename K>
void allow_shared(K kernel, size_t bytes) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// x: the head (b, h); y: the run of 64 rows (so the blocks that start together share their
// row runs, across heads, as flash.cu's).
dim3 grid(int B, int T, int NH) { return dim3((unsigned)(B * NH), (unsigned)((T + ROWS - 1) / ROWS)); }

// qkv: In = float, or bf16; out: Out = float, or bf16 (the numbers --mixed keeps).
template <typename F, int HSP, typename In, typename Out>
void forward(Out *out, float *lse, const In *qkv, int B, int T, int C, int NH, float scale, cudaStream_t s) {
    static bool ready = false;
    const size_t bytes = forward_bytes<F, HSP>();
    if (!ready) allow_shared(forward_kernel<F, HSP, In, Out>, bytes), ready = true;
    forward_kernel<F, HSP, In, Out><<<grid(B, T, NH), THREADS, bytes, s>>>(out, lse, qkv, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
}

// qkv and out: In = float, or bf16 (the numbers --mixed keeps).
template <typename F, int HSP, typename In>
void backward(float *dqkv, float *D, const float *dout, const In *qkv, const In *out, const float *lse, int B, int T,
              int C, int NH, float scale, cudaStream_t s) {
    static bool ready = false;
    const size_t dq = dq_bytes<F, HSP>(), dkv = dkv_bytes<F, HSP>();
    if (!ready)
        allow_shared(backward_dq_kernel<F, HSP, In>, dq), allow_shared(backward_dkv_kernel<F, HSP, In>, dkv), ready = true;
    // Step 1 writes every dq and D; step 2, after it on the same stream, reads D and writes
    // every dk and dv.
    backward_dq_kernel<F, HSP, In><<<grid(B, T, NH), THREADS, dq, s>>>(dqkv, D, dout, qkv, out, lse, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
    backward_dkv_kernel<F, HSP, In><<<grid(B, T, NH), THREADS, dkv, s>>>(dqkv, D, dout, qkv, lse, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
}

// The largest kernel's shared memory for heads padded to hsp; 0 for a width not instantiated.
template <typename F>
size_t most_shared(int hsp) {
    switch (hsp) {
    case 16: return dkv_bytes<F, 16>();
    case 32: return dkv_bytes<F, 32>();
    case 64: return dkv_bytes<F, 64>();
    case 128: return dkv_bytes<F, 128>();
    default: return 0;
    }
}

template <typename F, typename In, typename Out>
void forward_for(int hsp, Out *out, float *lse, const In *qkv, int B, int T, int C, int NH, float scale,
                 cudaStream_t s) {
    switch (hsp) {
    case 16: forward<F, 16>(out, lse, qkv, B, T, C, NH, scale, s); break;
    case 32: forward<F, 32>(out, lse, qkv, B, T, C, NH, scale, s); break;
    case 64: forward<F, 64>(out, lse, qkv, B, T, C, NH, scale, s); break;
    default: forward<F, 128>(out, lse, qkv, B, T, C, NH, scale, s); break;
    }
}

template <typename F, typename In>
void backward_for(int hsp, float *dqkv, float *D, const float *dout, const In *qkv, const In *out, const float *lse,
                  int B, int T, int C, int NH, float scale, cudaStream_t s) {
    switch (hsp) {
    case 16: backward<F, 16>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    case 32: backward<F, 32>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    case 64: backward<F, 64>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    default: backward<F, 128>(dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s); break;
    }
}

}  // namespace tc

bool cuda_flash_tc_usable(const CudaContext *ctx, CudaTcFormat format, int hsp, char *why, size_t why_size) {
    size_t need = format == CUDA_TC_BF16 ? tc::most_shared<tc::Bf16>(hsp)
                  : format == CUDA_TC_TF32 ? tc::most_shared<tc::Tf32>(hsp)
                                           : tc::most_shared<tc::Tf32x3>(hsp);
    if (!need) {
        snprintf(why, why_size, "the tensor cores' kernels take heads of up to 128 channels, and these have more");
        return false;
    }
    // Read once: a process drives one GPU (context.cuh).
    static int major = -1, optin = -1;
    if (major < 0) cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx->ordinal));
    if (optin < 0) cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->ordinal));
    if (major < 8) {
        snprintf(why, why_size, "the tensor cores' bf16 and TF32 products need compute capability 8.0 or later; "
                 "this GPU has %d.x", major);
        return false;
    }
    if (need > (size_t)optin) {
        snprintf(why, why_size, "the tensor cores' kernels need %zu bytes of shared memory a block for heads of %d "
                 "channels; this GPU lends %d", need, hsp, optin);
        return false;
    }
    return true;
}

void cuda_flash_tc_forward(CudaTcFormat format, int hsp, float *out, float *lse, const float *qkv, int B, int T, int C,
                           int NH, float scale, cudaStream_t s) {
    if (format == CUDA_TC_BF16) tc::forward_for<tc::Bf16>(hsp, out, lse, qkv, B, T, C, NH, scale, s);
    else if (format == CUDA_TC_TF32) tc::forward_for<tc::Tf32>(hsp, out, lse, qkv, B, T, C, NH, scale, s);
    else tc::forward_for<tc::Tf32x3>(hsp, out, lse, qkv, B, T, C, NH, scale, s);
}

void cuda_flash_tc_backward(CudaTcFormat format, int hsp, float *dqkv, float *D, const float *dout, const float *qkv,
                            const float *out, const float *lse, int B, int T, int C, int NH, float scale,
                            cudaStream_t s) {
    if (format == CUDA_TC_BF16) tc::backward_for<tc::Bf16>(hsp, dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s);
    else if (format == CUDA_TC_TF32) tc::backward_for<tc::Tf32>(hsp, dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s);
    else tc::backward_for<tc::Tf32x3>(hsp, dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s);
}

void cuda_flash_tc_forward_bf16(int hsp, bf16 *out, float *lse, const bf16 *qkv, int B, int T, int C, int NH, float scale,
                                cudaStream_t s) {
    tc::forward_for<tc::Bf16>(hsp, out, lse, qkv, B, T, C, NH, scale, s);
}

void cuda_flash_tc_backward_bf16(int hsp, float *dqkv, float *D, const float *dout, const bf16 *qkv, const bf16 *out,
                                 const float *lse, int B, int T, int C, int NH, float scale, cudaStream_t s) {
    tc::backward_for<tc::Bf16>(hsp, dqkv, D, dout, qkv, out, lse, B, T, C, NH, scale, s);
}
