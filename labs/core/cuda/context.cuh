// context.cuh — what the CUDA backend's own files share: the per-process context and the
// checked wrappers. Not part of gpu.h's contract: nothing outside labs/core/cuda/ includes it.
//
// Defines: cudaCheck(), cublasCheck(), CudaContext, cuda_context(), cuda_stage_tokens(),
//          cuda_workspace(), cuda_use_workspace(), CUDA_FLASH_MAX_HEAD,
//          cuda_flash_attention_forward(), cuda_flash_attention_backward(), cuda_flash_head_size_ok().
//
// One rank process drives one GPU, so there is exactly one CudaContext per process, owned by
// device.cu (cuda_open fills it, cuda_close empties it). ops.cu reaches it through
// cuda_context(), which also makes the context's GPU the calling thread's current device.
#ifndef SHARDLAB_CUDA_CONTEXT_CUH
#define SHARDLAB_CUDA_CONTEXT_CUH

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "check.h"
#include "gpu.h"
}

// ---- checked wrappers (llm.c's style, as nccl.cu's: a function taking __FILE__/__LINE__) ----

static inline void cuda_check_at(cudaError_t err, const char *what, const char *file, int line) {
    if (err == cudaSuccess) return;
    const char *hint = err == cudaErrorMemoryAllocation
        ? "the GPU is out of memory: try a smaller batch or model, or fewer ranks sharing this GPU"
        : "kernels report their faults late: rerun with CUDA_LAUNCH_BLOCKING=1 to stop at the failing "
          "one; nvidia-smi shows whether the GPU is healthy";
    die_at(file, line, hint, "CUDA error in %s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}
#define cudaCheck(call) cuda_check_at((call), #call, __FILE__, __LINE__)

static inline void cublas_check_at(cublasStatus_t status, const char *what, const char *file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    die_at(file, line, "check the matrix sizes passed to cuBLAS; CUBLAS_LOGINFO_DBG=1 logs every call",
           "cuBLAS error in %s: %s", what, cublasGetStatusString(status));
}
#define cublasCheck(call) cublas_check_at((call), #call, __FILE__, __LINE__)

// ---- the context -------------------------------------------------------------------------

typedef struct {
    int open;
    int ordinal;  // the GPU this process drives
    int tf32;     // cuBLAS may use TF32 tensor cores (not bitwise comparable with the CPU)
    // Every kernel, cuBLAS call and device-to-device copy of the compute side runs here, in
    // order, so no kernel needs to wait for another by hand.
    cudaStream_t stream;
    cublasHandle_t cublas;
    void *cublas_workspace;  // given to cuBLAS so its choice of kernel never depends on others
    // Token arrays stay in host memory (gpu.h); a kernel that reads them gets a device copy.
    uint8_t *tokens_host;       // pinned, so the upload is a real asynchronous copy
    uint8_t *tokens_dev;        // the device copy the kernels read
    size_t tokens_capacity;     // bytes of each
    cudaEvent_t tokens_copied;  // recorded after the last upload: tokens_host is free again
    // Kernel workspace (attention backward's dS, per-row losses, partial sums). During a
    // pass it is part of the pass's workspace (gpt.c hands it over with cuda_use_workspace,
    // sized by ops_gpu_workspace_bytes), so it is counted in "acts" with it. Outside a pass
    // (the optimizer's sum of squares) the context's own small workspace serves: allocated
    // at cuda_open and, like cuBLAS's, outside mem.c's categories (it shows only in the
    // device's own figure, cuda_mem_info). It grows only when a kernel asks for more than
    // was planned, which is reported once.
    void *planned;
    size_t planned_bytes;
    void *workspace;
    size_t workspace_bytes;
    int workspace_grown;  // the report was made
    // Marks for timing without waiting (gpu.h: cuda_mark): a ring of events, created as
    // first used, and the anchor that cuda_mark_times reads them against.
    cudaEvent_t marks[CUDA_MARKS];
    int next_mark;
    cudaEvent_t anchor;
    // The param_hash's chunk hashes (hash.cu): on the device, and pinned for the copy back.
    uint64_t *hash_dev, *hash_host;
    size_t hash_capacity;  // hashes each holds
} CudaContext;

// The open context, with its GPU made the calling thread's current device (a thread other
// than the one that ran cuda_open starts on device 0). Dies if cuda_open has not run.
CudaContext *cuda_context(void);
// Copy n host bytes of tokens to the device; returns the device copy, valid for kernels queued
// on the compute stream until the next call.
const uint8_t *cuda_stage_tokens(const uint8_t *tokens, size_t n);
// At least `bytes` of device workspace, valid for kernels queued on the compute stream until
// the next call: the pass's (cuda_use_workspace) when it is large enough, else the context's
// own, grown if need be (which waits for the stream first, so no queued kernel loses it, and
// is reported on stderr the first time: a need the plan did not foresee).
void *cuda_workspace(size_t bytes);
// Ops.use_workspace: the pass's workspace from now on (NULL, 0: none).
void cuda_use_workspace(void *p, size_t bytes);

// ---- flash attention (flash.cu): ops.h's flash_attention_forward/backward on the GPU ----

// The widest head (C / NH channels) the flash kernels take: they keep a head's vectors in
// registers. Wider heads stop the run with a message saying so (use --attn naive).
#define CUDA_FLASH_MAX_HEAD 1024
int cuda_flash_head_size_ok(int hs);
void cuda_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
void cuda_flash_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH, float *scratch);

#endif
