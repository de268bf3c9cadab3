// context.cuh — what the CUDA backend's own files share: the per-process context, the
// checked wrappers, the kernels' launch shapes and warp reductions, and the entries of
// cuda_ops()'s table that each kernel file defines. Not part of gpu.h's contract: nothing
// outside labs/common/cuda/ includes it.
//
// One rank process drives one GPU, so there is exactly one CudaContext per process, owned by
// device.cu (cuda_open fills it, cuda_close empties it). The kernel files reach it through
// cuda_context(), which also makes the context's GPU the calling thread's current device.
#ifndef SHARDLAB_CUDA_CONTEXT_CUH
#define SHARDLAB_CUDA_CONTEXT_CUH

#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "common/harness/check.h"
#include "gpu.h"
}

// ---- cuBLAS, loaded by cuda_open (blas.cu says why) ---------------------------------------

// Every cuBLAS and cuBLASLt function the backend calls, with the library it lives in. The
// _v2 names are the symbols; cublas_v2.h's macros turn blas.cublasSgemm into blas.cublasSgemm_v2.
#define SHARDLAB_BLAS_FUNCTIONS(X)                                                                        \
    X(cublas_lib, cublasCreate_v2) X(cublas_lib, cublasDestroy_v2) X(cublas_lib, cublasSetStream_v2)      \
    X(cublas_lib, cublasSetWorkspace_v2) X(cublas_lib, cublasSetMathMode) X(cublas_lib, cublasGetStatusString) \
    X(cublas_lib, cublasSgemm_v2) X(cublas_lib, cublasSgemmStridedBatched)                               \
    X(lt_lib, cublasLtCreate) X(lt_lib, cublasLtDestroy) X(lt_lib, cublasLtMatmul)                        \
    X(lt_lib, cublasLtMatmulAlgoGetHeuristic) X(lt_lib, cublasLtMatmulDescCreate)                         \
    X(lt_lib, cublasLtMatmulDescDestroy) X(lt_lib, cublasLtMatmulDescSetAttribute)                        \
    X(lt_lib, cublasLtMatmulPreferenceCreate) X(lt_lib, cublasLtMatmulPreferenceDestroy)                  \
    X(lt_lib, cublasLtMatmulPreferenceSetAttribute) X(lt_lib, cublasLtMatrixLayoutCreate)                 \
    X(lt_lib, cublasLtMatrixLayoutDestroy)

typedef struct {
    int loaded;
    void *cublas_lib, *lt_lib;  // dlopen's handles
#define BLAS_MEMBER(lib, name) decltype(&::name) name;
    SHARDLAB_BLAS_FUNCTIONS(BLAS_MEMBER)
#undef BLAS_MEMBER
    // Overloaded in C++ (an inline wrapper takes the old cudaDataType compute type), so the
    // pointer names the library's own function by its compute type's.
    cublasStatus_t (*cublasGemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                   const void *, cudaDataType, int, const void *, cudaDataType, int, const void *,
                                   void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
} Blas;
extern Blas blas;  // filled by gpu.h's cuda_load_blas

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
           "cuBLAS error in %s: %s", what, blas.cublasGetStatusString(status));
}
#define cublasCheck(call) cublas_check_at((call), #call, __FILE__, __LINE__)

// ---- the context -------------------------------------------------------------------------

// One product's cuBLASLt set-up (lt.cu): what it is keyed by (all ints, no padding: compared
// whole), its descriptors, and the kernel the heuristic picked for them.
typedef struct {
    int m, n, k, lda, ldb, ldd, ta, tb, bf16_in, bf16_out, tf32;
    unsigned align[4];  // of A, B, D and the bias: the largest power of two (to 256) dividing each
} LtKey;
typedef struct {
    LtKey key;
    int usable;  // 0: cuBLASLt has no kernel for it (the Linear takes the other way)
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} LtPlan;
enum { LT_PLANS = 32 };  // a step has a few shapes a precision; kept are the last 32 met

typedef struct {
    int open;
    int ordinal;  // the GPU this process drives
    int tf32;     // cuBLAS may use TF32 tensor cores (not bitwise comparable with the CPU)
    int fp32_tc;  // fp32 flash attention as 3xTF32 on the tensor cores where they run it (1 by
                  // default; 0: the fp32 kernels on the ordinary cores, flash.cu's)
    // Every kernel, cuBLAS call and device-to-device copy of the compute side runs here, in
    // order, so no kernel needs to wait for another by hand.
    cudaStream_t stream;
    cublasHandle_t cublas;
    void *cublas_workspace;  // given to cuBLAS so its choice of kernel never depends on others
    size_t cublas_workspace_bytes;
    // cuBLASLt (lt.cu), for the Linear forward's bias added as its product is stored; on the
    // compute stream with cuBLAS's workspace (one stream: never two users at once).
    cublasLtHandle_t lt;
    LtPlan lt_plans[LT_PLANS];
    int lt_count, lt_next;  // plans made; the one a new shape replaces when all are taken
    int bias_epilogue;      // 1 by default; 0: the bias written across out first (cuda_set_bias_epilogue)
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
    // Pinned room for the partial sums cuda_sum_on_host() reads back (the loss, the gradient
    // norm: several times a step), so that each copy is one DMA, not a staged one.
    double *sum_host;
    size_t sum_capacity;  // doubles it holds
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

// ---- launch shapes and warp reductions (the kernels of ops.cu, attention.cu, tokens.cu, buffers.cu) ----

// THREADS per block for one thread per element; WARPS_PER_BLOCK warps of WARP lanes for the
// kernels that give one warp to each row.
enum { THREADS = 256, WARP = 32, WARPS_PER_BLOCK = 4 };
static const unsigned FULL_MASK = 0xffffffffu;

static inline unsigned blocks_for(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }
// Kernels that give one warp to each row.
static inline unsigned warp_blocks_for(size_t rows) { return blocks_for(rows, WARPS_PER_BLOCK); }
static const unsigned WARP_BLOCK_THREADS = WARPS_PER_BLOCK * WARP;
// The stream every launch is queued on (and the check that a GPU is open).
static inline cudaStream_t compute_stream(void) { return cuda_context()->stream; }

// Warp reductions. The butterfly (xor) pattern is fixed, and lanes i and i^k add the same two
// numbers (a + b == b + a exactly), so every lane ends with the same bits, run after run.
__device__ static inline float warp_sum(float x) {
    for (int offset = WARP / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(FULL_MASK, x, offset);
    return x;
}

__device__ static inline float warp_max(float x) {
    for (int offset = WARP / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, offset));
    return x;
}

// The global index of this thread's warp, for one-warp-per-row kernels.
__device__ static inline size_t warp_row(void) { return (size_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / WARP; }
__device__ static inline size_t thread_index(void) { return (size_t)blockIdx.x * blockDim.x + threadIdx.x; }

// ---- the entries of cuda_ops()'s table (ops.cu fills it), file by file, and what they share ----
// Each keeps its CPU twin's contract (ops.h); ops.cu's top says how the kernels are built.

// ops.cu: out[o] += sum over n of x[n, o], for an [N, cols] row-major x, by a tree whose shape
// depends only on the matrix's ("Column sums" there).
void cuda_column_sums(float *out, const float *x, int N, int cols);

// attention.cu: causal self-attention, naive (cuBLAS strided batches and the causal softmax).
void cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void cuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int C,
                             int NH, float *scratch);

// tokens.cu: the two ops that read token arrays (staged from host memory): the embeddings and
// the softmax cross-entropy.
void cuda_embedding_forward(float *out, const uint8_t *tokens, const float *wte, const float *wpe, int B, int T,
                            int C);
void cuda_embedding_backward(float *dwte, float *dwpe, const float *dout, const uint8_t *tokens, int B, int T,
                             int C);
double cuda_crossentropy_forward(float *probs_from_logits, const uint8_t *targets, int N, int V);
void cuda_crossentropy_backward(float *dlogits, const float *probs, const uint8_t *targets, int N, int V,
                                float scale);

// buffers.cu: the ops on flat buffers of n elements: the optimizer's elementwise work, zero
// and copy, mixed precision's bf16 conversions (ops.cu's Linear rounds its operands with
// cuda_to_bf16); and cuda_sum_on_host(), which copies n doubles from the device (after the
// queued work) and adds them in order on the host.
void cuda_adamw_update(const AdamW *opt, int64_t t, float *params, const float *grads, float *m, float *v, size_t n);
double cuda_sum_of_squares(const float *x, size_t n);
double cuda_sum_of_squares_buffers(int n, const float *const *x, const size_t *len, double *each);
double cuda_sum_of_squares_buffers_bf16(int n, const bf16 *const *x, const size_t *len, double *each);
void cuda_scale_floats(float *x, size_t n, float s);
void cuda_zero(float *x, size_t n);
void cuda_copy_floats(float *dst, const float *src, size_t n);
void cuda_to_bf16(bf16 *dst, const float *src, size_t n);
void cuda_from_bf16(float *dst, const bf16 *src, size_t n);
void cuda_add_bf16(bf16 *acc, const bf16 *x, size_t n);
void cuda_acc_bf16(bf16 *acc, const float *x, size_t n);
double cuda_sum_on_host(const double *dev, size_t n);

// lt.cu: D = op(A) op(B) + bias, bias[i] added to row i of the column-major m x n D (cuBLAS's
// view; the Linear's output channels), fp32 or bf16 operands, on the compute stream. D and
// the bias are fp32, or with bf16_out both bf16 (the sum taken in fp32 and rounded once).
// False where cuBLASLt has no kernel for it or cuda_set_bias_epilogue(0) is in force: nothing
// was queued, and the caller takes the other way. cuda_lt_release frees the kept plans.
bool cuda_gemm_bias(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                    const void *B, int ldb, void *D, int ldd, const void *bias, int bf16_in, int bf16_out);
void cuda_lt_release(CudaContext *c);

// ---- flash attention (flash.cu): ops.h's flash_attention_forward/backward on the GPU ----

// The widest head (C / NH channels) the flash kernels take: they keep a head's vectors in
// registers. Wider heads stop the run with a message saying so (use --attn naive).
#define CUDA_FLASH_MAX_HEAD 1024
int cuda_flash_head_size_ok(int hs);
void cuda_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int bf16_in);
void cuda_flash_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH, int bf16_in, float *scratch);
void cuda_flash_attention_backward_bf16(float *dqkv, const float *dout, const bf16 *qkv, const bf16 *out,
                                        const float *lse, int B, int T, int C, int NH, float *scratch);
void cuda_flash_attention_forward_bf16(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int C, int NH);

// The same algorithm on the tensor cores (flash_tc.cu), for heads padded to hsp = 16, 32, 64
// or 128 channels, its products' operands in one of three formats: bf16 (--mixed, ops.h's
// bf16_in), TF32 (--tf32) or fp32 as three TF32 products (3xTF32: fp32's accuracy, the
// default). flash.cu's entry points call them where cuda_flash_tc_usable() says this GPU runs
// them (if not, it says why, in why). D is the backward pass's [B,NH,T] workspace, scale
// 1/sqrt(C / NH).
typedef enum { CUDA_TC_BF16, CUDA_TC_TF32, CUDA_TC_TF32X3 } CudaTcFormat;
bool cuda_flash_tc_usable(const CudaContext *ctx, CudaTcFormat format, int hsp, char *why, size_t why_size);
void cuda_flash_tc_forward(CudaTcFormat format, int hsp, float *out, float *lse, const float *qkv, int B, int T, int C,
                           int NH, float scale, cudaStream_t s);
void cuda_flash_tc_backward(CudaTcFormat format, int hsp, float *dqkv, float *D, const float *dout, const float *qkv,
                            const float *out, const float *lse, int B, int T, int C, int NH, float scale,
                            cudaStream_t s);
// The bf16 forward from q, k, v kept as bf16 numbers into o kept so, and the bf16 backward
// from q, k, v and o kept so (--mixed: gpt.h).
void cuda_flash_tc_forward_bf16(int hsp, bf16 *out, float *lse, const bf16 *qkv, int B, int T, int C, int NH, float scale,
                                cudaStream_t s);
void cuda_flash_tc_backward_bf16(int hsp, float *dqkv, float *D, const float *dout, const bf16 *qkv, const bf16 *out,
                                 const float *lse, int B, int T, int C, int NH, float scale, cudaStream_t s);

#endif
